"""The in-process rule evaluator against the real Prometheus, rule by rule, step by step.

One fleet history with injected faults (tests/support/rulehistory) is fed to the
in-process store and evaluated there with ``RuleEvaluator``, and the same
samples are given to ``promtool test rules``, which runs Prometheus 2.42's own
rule manager and query engine over them on the same evaluation grid. At every
evaluation step, every recording rule's series and every ``ALERTS`` and
``ALERTS_FOR_STATE`` series (so each alert's labels, pending/firing state and
activation time) must be the same in both, values within a relative 1e-9.

promtool reports what Prometheus computed only when a test fails, so each step
is asked with no expected samples and the reported ``got:`` values are read
back (Go prints them with ``strconv.FormatFloat(v, 'E', -1, 64)``, exact).
"""

import math
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.evaluate import RuleEvaluator
from gpuscale.alerts.model import alert_names
from gpuscale.alerts.render import render
from gpuscale.metrics.store import MetricStore
from gpuscale.telemetry.faults import parse_fault
from tests.support import promtool
from tests.support.promtool import promtool_values, series_text
from tests.support.rulehistory import History, amd_host, nvidia_host, vllm_counters

# The first test builds a two-hour fleet history and runs promtool over it: tens of
# seconds alone, more on a busy shared machine than the suite's 120 s default allows.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

STEP_S = 15.0  # scrape interval of the history
EVAL_S = 30.0  # rule evaluation interval, a multiple of the scrape interval
DURATION_S = 7200.0  # covers the z-score's 1 h window, its 10 min gap and a fault after
REL = 1e-9
QUERY = '{__name__=~"gpuscale:.+|ALERTS|ALERTS_FOR_STATE"}'

Key = tuple[tuple[str, str], ...]


def _history() -> History:
    h = History(STEP_S, int(DURATION_S // STEP_S) + 1)
    nvidia_host(
        h,
        "node-a",
        4,
        seed=11,
        faults=(
            parse_fault("gpu-lost@1200:gpu=2", "exporter"),
            parse_fault("xid@1800:code=13:gpu=0", "exporter"),
            parse_fault("row-remap@2400:gpu=3", "exporter"),
        ),
        pods={0: "llm-0", 1: "llm-1"},
    )
    nvidia_host(
        h,
        "node-b",
        4,
        seed=12,
        faults=(
            parse_fault("thermal@5100:gpu=1:rise_c=30:duration=1500", "exporter"),
            parse_fault("ecc-dbe@3000:gpu=2", "exporter"),
            parse_fault("xid@4000:code=62:gpu=3", "exporter"),
        ),
    )
    nvidia_host(h, "node-c", 2, seed=13, down=(3600.0, 4200.0), stale=(1000.0, 1500.0))
    amd_host(h, "node-m", hot_at_s=2000.0, ecc_at_s=4500.0)
    vllm_counters(h, outage=(3000.0, 4800.0), reset_at_s=1500.0)
    return h


def _in_process(h: History, groups) -> tuple[dict[float, dict[Key, float]], float]:
    store = MetricStore(retention_s=DURATION_S + 8 * 3600)
    evaluator = RuleEvaluator(groups, store)
    families = {
        name: ([dict(k) for k in rows], np.vstack(list(rows.values())))
        for name, rows in h.values.items()
    }
    out: dict[float, dict[Key, float]] = {}
    spent = 0.0
    for i in range(h.steps):
        t = i * STEP_S
        for name, (labels, matrix) in families.items():
            store.ingest(t, name, labels, matrix[:, i])
        if t % EVAL_S:
            continue
        started = time.perf_counter()
        result = evaluator.evaluate(t)
        spent += time.perf_counter() - started
        got: dict[Key, float] = {}
        for samples in result.records.values():
            got.update(samples)
        for alerts in result.alerts.values():
            for labels, state, active_at in alerts:
                named = dict(labels)
                got[tuple(sorted({**named, "__name__": "ALERTS", "alertstate": state}.items()))] = (
                    1.0
                )
                for_state = tuple(sorted({**named, "__name__": "ALERTS_FOR_STATE"}.items()))
                got[for_state] = float(math.floor(active_at))
        out[t] = got
    return out, spent


def _prometheus(h: History, groups, workdir: Path) -> dict[float, dict[Key, float]]:
    (workdir / "rules.yml").write_text(render(groups))
    series = [
        {"series": series_text(name, key), "values": promtool_values(values)}
        for name, rows in h.values.items()
        for key, values in rows.items()
    ]
    times = [i * EVAL_S for i in range(int(DURATION_S // EVAL_S) + 1)]
    results = promtool.evaluate(
        workdir, series, [QUERY], times, STEP_S, EVAL_S, ["rules.yml"], [g.name for g in groups]
    )
    out: dict[float, dict[Key, float]] = {}
    for (_, t), got in results.items():
        assert not isinstance(got, str), f"Prometheus failed at {t}: {got}"
        out[t] = got
    return out


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b or abs(a - b) <= REL * max(abs(a), abs(b))


@pytest.fixture(scope="module")
def both(tmp_path_factory) -> tuple[dict, dict, float, History]:
    groups = build_catalogue()
    h = _history()
    mine, spent = _in_process(h, groups)
    theirs = _prometheus(h, groups, tmp_path_factory.mktemp("promtool"))
    return mine, theirs, spent, h


def _differences(mine: dict, theirs: dict) -> list[tuple[float, dict, float | None, float | None]]:
    out = []
    for t in sorted(theirs):
        got, expected = mine.get(t, {}), theirs[t]
        for key in expected.keys() | got.keys():
            a, b = got.get(key), expected.get(key)
            if a is None or b is None or not _close(a, b):
                out.append((t, dict(key), a, b))
    return out


def test_every_record_and_alert_state_matches_prometheus_at_every_step(both):
    mine, theirs, spent, h = both
    mismatches = _differences(mine, theirs)
    assert not mismatches, f"{len(mismatches)} differences, first: {mismatches[:5]}"
    # A record whose value is NaN (a z-score over a flat history) is compared too; the
    # store then reads it as absent (NaN marks an absent series there), which the
    # catalogue only compares with thresholds, where NaN is false either way.
    nan_records = sum(math.isnan(v) for got in theirs.values() for v in got.values())
    print(
        f"\n{h.sample_count()} samples, {len(theirs)} steps, "
        f"{sum(len(v) for v in theirs.values())} result series compared, "
        f"{nan_records} of them NaN; in-process evaluation {spent:.2f} s"
    )


def test_the_comparison_sees_a_changed_value_a_missing_alert_and_a_changed_state(both):
    mine, theirs, _, _ = both
    t = max(t for t, got in mine.items() if any(dict(k)["__name__"] == "ALERTS" for k in got))
    changed = {step: dict(got) for step, got in mine.items()}
    record = next(k for k in changed[t] if dict(k)["__name__"].startswith("gpuscale:"))
    changed[t][record] *= 1 + 1e-7
    alert = next(k for k in changed[t] if dict(k)["__name__"] == "ALERTS")
    value = changed[t].pop(alert)
    state = "pending" if dict(alert)["alertstate"] == "firing" else "firing"
    changed[t][tuple(sorted({**dict(alert), "alertstate": state}.items()))] = value
    # The value, and the alert twice (missing in one state, extra in the other).
    assert len(_differences(changed, theirs)) == 3


def test_the_history_exercises_every_record_and_the_faults_alerts(both):
    mine, _, _, _ = both
    groups = build_catalogue()
    seen = defaultdict(set)
    for got in mine.values():
        for key in got:
            d = dict(key)
            seen[d["__name__"]].add(d.get("alertstate") or d.get("alertname", ""))
    records = {r.record for g in groups for r in g.rules if hasattr(r, "record")}
    assert records <= seen.keys(), f"records never written: {records - seen.keys()}"
    fired = {
        dict(k)["alertname"]
        for got in mine.values()
        for k in got
        if dict(k).get("alertstate") == "firing"
    }
    # Each of these has a fault (or an outage) injected above that it exists to catch.
    expected = {
        "GpuFellOffBus",
        "GpuXidError",
        "GpuEccDoubleBitError",
        "GpuRowRemapFailure",
        "GpuThermalThrottling",
        "GpuTemperatureHigh",
        "GpuExporterDown",
        "SloErrorBudgetBurn",
        "GpuMetricsStale",
        "GpuMemoryNearFull",
        "GpuIdleWhileAllocated",
    }
    assert expected <= fired, f"never fired: {expected - fired}; fired: {sorted(fired)}"
    assert fired <= set(alert_names(groups))
    print(f"\nfired: {sorted(fired)}; never: {sorted(set(alert_names(groups)) - fired)}")
