"""The dashboard builders: committed JSON is their output, and its panels are well formed.

Whether each query returns data is tests/integration/test_grafana_dashboards.py's job.
"""

import json
import re
from pathlib import Path

import pytest
import yaml

from gpuscale.control.server import ControllerMetrics
from gpuscale.grafana import DASHBOARDS, render, write
from gpuscale.grafana.__main__ import main
from gpuscale.grafana.model import GRID_COLUMNS, SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[3]
GRAFANA = ROOT / "deploy" / "grafana"
RULES = ROOT / "deploy" / "prometheus" / "gpuscale-rules.yml"


def _load(name: str) -> dict:
    return json.loads((GRAFANA / name).read_text())


@pytest.mark.parametrize("name", DASHBOARDS)
def test_committed_dashboard_is_a_fresh_build(name):
    assert (GRAFANA / name).read_text() == render(DASHBOARDS[name]), (
        "deploy/grafana is out of date: run python -m gpuscale.grafana"
    )


def test_deploy_grafana_holds_only_built_dashboards():
    assert sorted(p.name for p in GRAFANA.glob("*.json")) == sorted(DASHBOARDS)


@pytest.mark.parametrize("name", DASHBOARDS)
def test_every_panel_and_query_reads_the_datasource_variable(name):
    dashboard = _load(name)
    assert dashboard["schemaVersion"] == SCHEMA_VERSION
    first, *labels = dashboard["templating"]["list"]
    assert (first["name"], first["type"], first["query"]) == (
        "datasource",
        "datasource",
        "prometheus",
    )
    ours = {"type": "prometheus", "uid": "${datasource}"}
    assert all(v["datasource"] == ours for v in labels)
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert panels
    for panel in panels:
        assert panel["datasource"] == ours, panel["title"]
        assert panel["targets"], panel["title"]
        assert all(t["datasource"] == ours for t in panel["targets"]), panel["title"]
        assert panel["description"], panel["title"]


@pytest.mark.parametrize("name", DASHBOARDS)
def test_panels_have_unique_ids_and_do_not_overlap_on_the_grid(name):
    panels = _load(name)["panels"]
    assert [p["id"] for p in panels] == list(range(1, len(panels) + 1))
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= GRID_COLUMNS, panel["title"]
        mine = {
            (x, y)
            for x in range(pos["x"], pos["x"] + pos["w"])
            for y in range(pos["y"], pos["y"] + pos["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


def _series_names(metrics: ControllerMetrics) -> set[str]:
    """The series names a registry's families serve (a counter's _total, a histogram's parts)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    return {
        family.name + suffix
        for family in metrics.registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def test_autoscaler_dashboard_reads_only_series_the_controller_serves():
    text = (GRAFANA / "gpuscale-autoscaler.json").read_text()
    used = set(re.findall(r"gpuscale_autoscaler_\w+", text))
    served = _series_names(ControllerMetrics())
    assert used
    assert used <= served, used - served
    # The brief's panels: replicas, holds, remediations, leadership, sync time.
    for name in ("desired_replicas", "holds_total", "remediations_total", "leader"):
        assert f"gpuscale_autoscaler_{name}" in used


def test_alerts_dashboard_names_every_alert_of_the_deployed_rules():
    rules = yaml.safe_load(RULES.read_text())
    deployed = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    text = (GRAFANA / "gpuscale-alerts.json").read_text()
    [names] = set(re.findall(r'alertname=~\\"([^"\\]+)\\"', text))
    assert deployed <= set(names.split("|"))


def test_fleet_dashboard_decodes_every_clock_event_bit():
    fleet = _load("gpuscale-fleet.json")
    [panel] = [p for p in fleet["panels"] if p["title"] == "Clock-event reasons active"]
    expr = panel["targets"][0]["expr"]
    bits = [int(b) for b in re.findall(r"/ (\d+)\) % 2 == 1", expr)]
    assert bits == [1 << i for i in range(9)]  # DCGM's nine reason bits, 0x1 to 0x100


def test_module_writes_every_dashboard_and_refuses_extra_arguments(tmp_path, capsys):
    assert main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(DASHBOARDS)
    assert main(["a", "b"]) == 2
    assert "usage: python -m gpuscale.grafana" in capsys.readouterr().err
    assert [p.name for p in write(tmp_path / "new")] == list(DASHBOARDS)
