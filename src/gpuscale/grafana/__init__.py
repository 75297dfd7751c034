"""Grafana dashboards for gpuscale, built in code so their panels stay consistent.

``deploy/grafana/*.json`` is this package's output (``python -m gpuscale.grafana``);
a test checks the committed files equal a fresh build, and another runs every
panel's queries against a real Prometheus fed by the exporter and the controller.
"""

import json
from collections.abc import Callable
from pathlib import Path

from gpuscale.grafana.alerts import alerts
from gpuscale.grafana.autoscaler import autoscaler
from gpuscale.grafana.fleet import fleet
from gpuscale.grafana.model import JSON

DASHBOARDS: dict[str, Callable[[], JSON]] = {
    "gpuscale-fleet.json": fleet,
    "gpuscale-autoscaler.json": autoscaler,
    "gpuscale-alerts.json": alerts,
}
"""File name under deploy/grafana/ -> the function that builds it."""


def render(build: Callable[[], JSON]) -> str:
    """One dashboard as the text committed under deploy/grafana/.

    Returns:
        Indented JSON with a final newline, stable from build to build.
    """
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def write(directory: Path) -> list[Path]:
    """Write every dashboard into ``directory`` (made if missing).

    Returns:
        The files written.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, build in DASHBOARDS.items():
        path = directory / name
        path.write_text(render(build), encoding="utf-8")
        written.append(path)
    return written
