"""Grafana's dashboard JSON model, as small builders, so every panel is made the same way.

Hand-edited dashboard JSON drifts: one panel forgets the data-source variable,
another repeats an id, a third hard-codes a label the others template. These
builders write each panel, target and template variable in one form, and lay
panels out on Grafana's 24-column grid, so the dashboards differ only in what
they show. The output imports into any Grafana 10 or later (``schemaVersion``
39) and picks its Prometheus through the ``datasource`` variable.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

SCHEMA_VERSION = 39
DATASOURCE_VAR = "datasource"
DATASOURCE: JSON = {"type": "prometheus", "uid": f"${{{DATASOURCE_VAR}}}"}
"""How every panel, target and query variable names its data source: the variable."""
GRID_COLUMNS = 24
BARS: JSON = {"drawStyle": "bars", "fillOpacity": 60}
"""Time-series drawing for counts per interval (events, decisions, holds)."""
STACKED_BARS: JSON = {**BARS, "stacking": {"mode": "normal"}}
HEATMAP_COLOURS: JSON = {"mode": "scheme", "scheme": "Oranges", "steps": 64, "reverse": False}


@dataclass(frozen=True, slots=True)
class Query:
    """One PromQL target of a panel.

    Attributes:
        expr: The PromQL, with Grafana's variables (``$target``, ``$__rate_interval``).
        legend: Grafana's legend format (``{{gpu}}``); empty for the series' labels.
        instant: Evaluate at the end of the range only (tables, stats of "now").
    """

    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True, slots=True)
class Panel:
    """A panel before layout.

    Attributes:
        title: Shown above the panel.
        kind: Grafana's panel type (``timeseries``, ``stat``, ``heatmap``, ``table``...).
        queries: Its targets, lettered A, B, ... in order.
        description: The panel's info tooltip: what it shows and where it comes from.
        unit: Grafana's unit id for the values (``percent``, ``watt``, ``celsius``...).
        width: Columns of the 24-column grid.
        height: Grid rows (30 px each).
        options: Panel-type options merged over the defaults of ``kind``.
        custom: ``fieldConfig.defaults.custom`` (draw style, stacking...).
    """

    title: str
    kind: str
    queries: tuple[Query, ...]
    description: str
    unit: str = "short"
    width: int = 12
    height: int = 8
    options: JSON = field(default_factory=dict)
    custom: JSON = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Row:
    """A collapsible row heading; panels after it belong to it."""

    title: str


@dataclass(frozen=True, slots=True)
class LabelVariable:
    """A template variable whose options are one label's values (Grafana's ``label_values``).

    Attributes:
        name: The variable's name, used as ``$name`` in queries.
        label: The label whose values are offered.
        selector: Series the values are taken from (a PromQL selector).
        title: Shown beside the drop-down.
        regex: Grafana's variable regex: a capture group keeps part of each value.
    """

    name: str
    label: str
    selector: str
    title: str
    regex: str = ""

    @property
    def query(self) -> str:
        """The ``label_values`` query Grafana runs for the options."""
        return f"label_values({self.selector}, {self.label})"


_DEFAULT_OPTIONS: dict[str, JSON] = {
    "timeseries": {
        "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    },
    "stat": {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "colorMode": "value",
        "graphMode": "area",
        "justifyMode": "auto",
        "orientation": "auto",
        "textMode": "auto",
    },
    "heatmap": {
        # The series are already one row per GPU: show them, do not bucket them again.
        "calculate": False,
        "cellGap": 1,
        "color": HEATMAP_COLOURS,
        # An idle GPU (0) is a cell too: hide nothing (Grafana hides <= 1e-9 by default).
        "filterValues": {"le": -1},
        "yAxis": {"axisPlacement": "left"},
        "rowsFrame": {"layout": "auto"},
        "legend": {"show": True},
        # "show" is Grafana 10's switch, "mode" Grafana 11's.
        "tooltip": {"show": True, "mode": "single", "yHistogram": False},
        "showValue": "never",
    },
    "table": {"showHeader": True, "cellHeight": "sm"},
    "bargauge": {
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
        "displayMode": "gradient",
        "orientation": "horizontal",
    },
}


def _target(query: Query, ref: str) -> JSON:
    return {
        "datasource": DATASOURCE,
        "expr": query.expr,
        "legendFormat": query.legend or "__auto",
        "range": not query.instant,
        "instant": query.instant,
        "format": "table" if query.instant else "time_series",
        "refId": ref,
    }


def _panel(panel: Panel, panel_id: int, x: int, y: int) -> JSON:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": [_target(q, chr(ord("A") + i)) for i, q in enumerate(panel.queries)],
        "fieldConfig": {
            "defaults": {"unit": panel.unit, "custom": dict(panel.custom)},
            "overrides": [],
        },
        "options": {**_DEFAULT_OPTIONS.get(panel.kind, {}), **panel.options},
    }


def _row(row: Row, panel_id: int, y: int) -> JSON:
    return {
        "id": panel_id,
        "type": "row",
        "title": row.title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": GRID_COLUMNS, "x": 0, "y": y},
        "panels": [],
    }


def layout(items: Sequence[Panel | Row]) -> list[JSON]:
    """Panels and rows on the grid, left to right, wrapping at 24 columns, ids from 1.

    Returns:
        The dashboard's ``panels`` list.
    """
    out: list[JSON] = []
    x = y = line_height = 0
    for panel_id, item in enumerate(items, start=1):
        if isinstance(item, Row):
            y += line_height
            out.append(_row(item, panel_id, y))
            x, y, line_height = 0, y + 1, 0
            continue
        if x + item.width > GRID_COLUMNS:
            x, y, line_height = 0, y + line_height, 0
        out.append(_panel(item, panel_id, x, y))
        x += item.width
        line_height = max(line_height, item.height)
    return out


def _datasource_variable() -> JSON:
    return {
        "name": DATASOURCE_VAR,
        "label": "Data source",
        "type": "datasource",
        "query": "prometheus",
        "current": {},
        "hide": 0,
        "includeAll": False,
        "multi": False,
        "options": [],
        "refresh": 1,
        "regex": "",
    }


def _label_variable(var: LabelVariable) -> JSON:
    return {
        "name": var.name,
        "label": var.title,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": var.query,
        "query": {"query": var.query, "refId": f"{var.name}-values"},
        "regex": var.regex,
        "current": {},
        "hide": 0,
        # Every value by default, so a dashboard shows the whole fleet when it opens.
        "includeAll": True,
        "allValue": ".*",
        "multi": True,
        "options": [],
        "refresh": 2,
        "sort": 1,
    }


def dashboard(
    uid: str,
    title: str,
    description: str,
    variables: Sequence[LabelVariable],
    items: Sequence[Panel | Row],
    *,
    tags: Sequence[str] = ("gpuscale",),
) -> JSON:
    """A whole dashboard in Grafana's JSON model.

    Args:
        uid: Stable id, so re-importing replaces the dashboard instead of copying it.
        title: The dashboard's name.
        description: Shown in Grafana's dashboard list.
        variables: Label variables, after the data-source variable, in order.
        items: Panels and rows, laid out in order.
        tags: Grafana tags.

    Returns:
        The JSON object Grafana imports.
    """
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": list(tags),
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "timezone": "browser",
        "refresh": "30s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [_datasource_variable(), *(_label_variable(v) for v in variables)]},
        "annotations": {"list": []},
        "links": [],
        "panels": layout(items),
    }
