"""gpuscale's own Grafana dashboards (deploy/grafana) against a real Prometheus.

The chain is the production one: ``gpuscale exporter --source sim --kubernetes``
(8 simulated H100s, pod labels from a real gRPC pod-resources server over the
Kubernetes API double) and ``gpuscale autoscale`` (a real process against the
double) are scraped by a real Prometheus that loads deploy/prometheus's rules,
so the ``gpuscale:`` records and the catalogue's alerts exist. The exporter
serves upstream's default counters with every commented-out row enabled (the
dashboards' XID-count, clock-event, violation and ECC panels need them), and
faults make the error panels non-empty: XID 13 on GPU 0 (a warning alert),
a double-bit ECC error on GPU 1 (XID 48: a critical alert, and the controller
deletes the pod on it), a power cap on GPU 5 (clock-event reason ``power_cap``,
and GpuPowerCapped pending). The controller scales ``llm`` on utilisation,
holds ``batch/etl``, whose pods hold no GPU, for missing data, and fails on
``ghost``, whose Deployment does not exist, so every panel has a series.

Every query of every panel and every template variable is then run the way
Grafana runs it: ``$datasource`` is the Prometheus itself, ``$__rate_interval``
is Grafana's ``max($__interval + scrape interval, 4 * scrape interval)`` = 4 s
for the 1 s scrape, label variables take their "All" value ``.*``; each must
return data.
"""

import json
import re
import shutil
import time
from pathlib import Path

import httpx
import pytest

from gpuscale.grafana import DASHBOARDS
from tests.support.autoscale import (
    Autoscaler,
    DoubleKubelet,
    KubeletServer,
    exporter_at,
    wait_until,
)
from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import Prometheus, free_port

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
    pytest.mark.timeout(90),
]

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
RULES = ROOT / "deploy" / "prometheus" / "gpuscale-rules.yml"
COUNTERS = ROOT / "tests" / "data" / "dcgm-exporter" / "default-counters.csv"
SCRAPE_S = 1
# Grafana: $__rate_interval = max($__interval + scrape interval, 4 * scrape interval).
RATE_INTERVAL = f"{4 * SCRAPE_S}s"
INTERVAL = f"{2 * SCRAPE_S}s"
RANGE = "5m"
# Builtins (Grafana's $__interval, $__rate_interval, $__range); anything else is a
# label variable, whose "All" value is ".*".
BUILTINS = {"__rate_interval": RATE_INTERVAL, "__interval": INTERVAL, "__range": RANGE}

CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: dash, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: llm}
      minReplicas: 1
      maxReplicas: 4
      policy: {name: hpa, targetAverageValue: 50}
      metrics: {staleAfterSeconds: 10, stepSeconds: 1}
      remediate: true
    - scaleTargetRef: {name: etl, namespace: batch}
      minReplicas: 1
      maxReplicas: 2
      policy: {name: hpa, targetAverageValue: 50}
      metrics: {staleAfterSeconds: 10, stepSeconds: 1}
    - scaleTargetRef: {name: ghost}
      minReplicas: 1
      maxReplicas: 2
      policy: {name: static, replicas: 1}
"""
FAULTS = ("xid@0:code=13:gpu=0", "ecc-dbe@0:gpu=1", "power-cap@0:gpu=5")


def _all_counters(path: Path) -> Path:
    """Upstream's default counters with every commented-out DCGM row enabled, and the
    clock-event bitmask (a field upstream's files do not list)."""
    lines = []
    for raw in COUNTERS.read_text().splitlines():
        match = re.match(r"^\s*#\s*(DCGM_\w+\s*,.*)$", raw)
        lines.append(match[1] if match else raw)
    lines.append("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, gauge, Current clock throttle reasons.")
    path.write_text("\n".join(lines) + "\n")
    return path


def _reload(prom: Prometheus, targets: dict[str, str]) -> None:
    """Point ``prom`` at ``targets`` (job -> address) with the rules loaded, and reload."""
    jobs = "".join(
        f"  - job_name: {job}\n    scrape_timeout: 1s\n"
        f"    static_configs:\n      - targets: ['{address}']\n"
        for job, address in targets.items()
    )
    config = prom.process.log.parent / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {SCRAPE_S}s\n  evaluation_interval: {SCRAPE_S}s\n"
        f"rule_files: ['{RULES}']\nscrape_configs:\n{jobs}"
    )
    httpx.post(f"{prom.url}/-/reload", timeout=10).raise_for_status()


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """A Prometheus scraping the exporter and the controller; yields (prom, controller)."""
    tmp = tmp_path_factory.mktemp("grafana")
    stack = []
    try:
        api = KubeApiDouble().start()
        stack.append(api.stop)
        api.create_deployment("llm", replicas=2)
        api.create_deployment("etl", "batch", replicas=1)
        kubelet = KubeletServer(DoubleKubelet(api))  # llm's pods hold GPUs 0 and 1
        stack.append(kubelet.stop)
        port = free_port()
        args = ["--source", "sim", "--gpus", "8", "--load", "constant:0.7"]
        args += ["-f", str(_all_counters(tmp / "counters.csv")), "--collect-interval", "500"]
        args += ["--kubernetes", "--pod-resources-kubelet-socket", kubelet.socket]
        for fault in FAULTS:
            args += ["--fault", fault]
        exporter = exporter_at(tmp, port, *args)
        stack.append(exporter.stop)
        (tmp / "prom").mkdir()
        prom = Prometheus("prometheus", tmp / "prom", [])
        stack.append(prom.process.stop)
        config = tmp / "scaler.yaml"
        config.write_text(CONFIG)
        kubeconfig = api.write_kubeconfig(tmp / "kubeconfig")
        ctl = Autoscaler(
            tmp, config, kubeconfig, prom.url, "--sync-period", "1", "--no-leader-elect"
        )
        stack.append(ctl.stop)
        _reload(prom, {"gpu": f"127.0.0.1:{port}", "autoscaler": f"127.0.0.1:{ctl.port}"})
        yield prom, ctl
    finally:
        for stop in reversed(stack):
            stop()


def _grafana(text: str) -> str:
    """Substitute Grafana's variables as Grafana would with every label variable on All."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return BUILTINS.get(name, ".*")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, text)


def _queries(dashboard: dict) -> list[tuple[str, str]]:
    return [
        (panel["title"], _grafana(target["expr"]))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def _label_values(prom: Prometheus, query: str) -> list[str]:
    """Grafana's ``label_values(selector, label)`` over Prometheus' label API."""
    match = re.fullmatch(r"label_values\((.*),\s*(\w+)\s*\)", query)
    assert match is not None, query
    selector, label = match.groups()
    r = httpx.get(
        f"{prom.url}/api/v1/label/{label}/values", params={"match[]": selector}, timeout=5
    )
    r.raise_for_status()
    return r.json()["data"]


def _dashboards() -> dict[str, dict]:
    return {name: json.loads((GRAFANA / name).read_text()) for name in DASHBOARDS}


def _shows_data(prom: Prometheus, target: dict) -> bool:
    """Whether Grafana would draw something: an instant target's query at now, or a range
    target's query over the last minute at the scrape interval, returns a sample."""
    expr = _grafana(target["expr"])
    if target["instant"]:
        return bool(prom.query(expr))
    now = time.time()
    r = httpx.get(
        f"{prom.url}/api/v1/query_range",
        params={"query": expr, "start": now - 60, "end": now, "step": SCRAPE_S},
        timeout=10,
    )
    r.raise_for_status()
    return bool(r.json()["data"]["result"])


def test_every_panel_query_returns_data(fed):
    prom, _ = fed
    targets = {
        (name, panel["title"], target["refId"]): target
        for name, dashboard in _dashboards().items()
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    }
    assert len(targets) >= 40  # the three dashboards hold more than 40 targets
    # Data arrives over the first scrapes and rule evaluations, the remediation and the
    # alerts within a few syncs: ask again for what had none, for up to a minute.
    missing = set(targets)
    deadline = time.monotonic() + 60
    while missing and time.monotonic() < deadline:
        missing = {key for key in missing if not _shows_data(prom, targets[key])}
        if missing:
            time.sleep(1)
    assert not missing, sorted((k, _grafana(targets[k]["expr"])) for k in missing)


def test_every_template_variable_offers_values(fed):
    prom, _ = fed
    wait_until(lambda: prom.query('ALERTS{alertstate="firing"}'), 60)
    for name, dashboard in _dashboards().items():
        for var in dashboard["templating"]["list"]:
            if var["type"] == "datasource":
                assert var["query"] == "prometheus"
                continue
            values = _label_values(prom, _grafana(var["query"]["query"]))
            assert values, (name, var["name"])
            if var["regex"]:  # the namespace variable keeps what precedes the first slash
                # Grafana's form /pattern/flags, the pattern in JavaScript's syntax
                pattern = re.compile(re.fullmatch(r"/(.*)/\w*", var["regex"])[1])
                kept = {m[1] for v in values if (m := pattern.match(v))}
                assert kept == {"default", "batch"}


def test_panels_show_the_injected_faults_and_the_controller(fed):
    prom, ctl = fed
    wait_until(lambda: prom.query('ALERTS{alertname="GpuEccDoubleBitError"}'), 60)
    fleet = dict(_queries(_dashboards()["gpuscale-fleet.json"]))
    reasons = prom.query(fleet["Clock-event reasons active"])
    assert ("5", "power_cap") in {(r["metric"]["gpu"], r["metric"]["reason"]) for r in reasons}
    xids = prom.query(fleet["Last XID per GPU"])
    assert {(r["metric"]["gpu"], r["metric"]["err_code"]) for r in xids} == {
        ("0", "13"),
        ("1", "48"),
    }
    alerts = dict(_queries(_dashboards()["gpuscale-alerts.json"]))
    firing = {
        (r["metric"]["alertname"], r["metric"]["severity"], r["metric"].get("gpu"))
        for r in prom.query(alerts["Firing alerts"])
    }
    assert ("GpuEccDoubleBitError", "critical", "1") in firing

    # The ECC fault shows as a double-bit error, as XID 48 and as GpuEccDoubleBitError
    # firing: whichever the controller reads first is the evidence.
    def remediated() -> float:
        return sum(
            ctl.metric(
                "gpuscale_autoscaler_remediations_total",
                target="default/Deployment/llm",
                evidence=evidence,
            )
            or 0
            for evidence in ("dbe", "xid", "alert")
        )

    wait_until(remediated, 30)
    assert remediated() == 1  # one pod sat on the sick GPU; its replacement did not
    holds = ctl.metric(
        "gpuscale_autoscaler_holds_total", target="batch/Deployment/etl", reason="missing"
    )
    assert holds is not None
    assert holds >= 1
    # ghost names a Deployment that does not exist: each sync fails and is counted.
    failed = ctl.metric(
        "gpuscale_autoscaler_errors_total",
        target="default/Deployment/ghost",
        reason="kube_unavailable",
    )
    assert failed is not None
    assert failed >= 1
    others = 'gpuscale_autoscaler_errors_total{target!="default/Deployment/ghost"}'
    assert prom.query(others) == []
