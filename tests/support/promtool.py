"""What Prometheus itself computes for expressions over given series, via ``promtool test rules``.

promtool runs Prometheus's own query engine and rule manager over series
written in its notation. It prints what it computed only when a test fails, so
each (expression, time) is asked with no expected samples and the ``got:``
samples (or the ``err:``) it reports are read back. Values are printed with
``strconv.FormatFloat(v, 'E', -1, 64)``, so they are exact.
"""

import json
import math
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
import yaml

Key = tuple[tuple[str, str], ...]

_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_SAMPLE = re.compile(r'\{((?:[^"}]|"(?:[^"\\]|\\.)*")*)\} (\S+?)(?:,|$)')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_HEAD = re.compile(r'^expr: ("(?:[^"\\]|\\.)*"), time: ([0-9a-z]+),?(?: err: (.*))?$')


def promtool_values(values: np.ndarray) -> str:
    """Series values in promtool's notation: numbers, ``stale`` where a series vanished, ``_``."""
    out, present = [], False
    for v in values.tolist():
        if math.isnan(v):
            out.append("stale" if present else "_")
            present = False
        else:
            out.append(repr(float(v)))
            present = True
    return " ".join(out)


def series_text(name: str, key: Key) -> str:
    """A series in promtool's notation (names with a colon go in ``__name__``)."""
    inner = ",".join(f'{k}="{v}"' for k, v in key)
    return f'{{__name__="{name}",{inner}}}' if ":" in name else f"{name}{{{inner}}}"


def _seconds(text: str) -> float:
    return sum(int(n) * _UNIT_S[u] for n, u in _DURATION.findall(text))


def evaluate(
    workdir: Path,
    series: Sequence[dict[str, str]],
    exprs: Sequence[str],
    times: Sequence[float],
    interval_s: float,
    eval_s: float = 60.0,
    rule_files: Sequence[str] = (),
    group_order: Sequence[str] = (),
) -> dict[tuple[str, float], dict[Key, float] | str]:
    """Each expression at each time as Prometheus evaluates it (after running the rules).

    Args:
        workdir: Where the test file goes (and the rule files are).
        series: ``{"series": ..., "values": ...}`` input series.
        exprs: Expressions to ask.
        times: Evaluation times, seconds from 0.
        interval_s: Spacing of the input values, seconds.
        eval_s: The rules' evaluation interval.
        rule_files: Rule files (relative to ``workdir``) evaluated first.
        group_order: Their groups' evaluation order.

    Returns:
        Per (expression, time): the samples by sorted labels, or the error text.
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    doc = {
        "rule_files": list(rule_files),
        "evaluation_interval": f"{int(eval_s)}s",
        "group_eval_order": list(group_order),
        "tests": [
            {
                "interval": f"{int(interval_s)}s",
                "input_series": list(series),
                "promql_expr_test": [
                    {"expr": e, "eval_time": f"{int(t)}s", "exp_samples": []}
                    for e in exprs
                    for t in times
                ],
            }
        ],
    }
    (workdir / "test.yml").write_text(yaml.safe_dump(doc, sort_keys=False, width=1 << 30))
    run = subprocess.run(
        [promtool, "test", "rules", "test.yml"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out: dict[tuple[str, float], dict[Key, float] | str] = {
        (e, t): {} for e in exprs for t in times
    }
    current: tuple[str, float] | None = None
    text = run.stdout + run.stderr
    for line in text.splitlines():
        stripped = line.strip()
        head = _HEAD.match(stripped)
        if head is not None:
            current = (json.loads(head.group(1)), _seconds(head.group(2)))
            if head.group(3) is not None:
                out[current] = head.group(3)
        elif stripped.startswith("got:") and current is not None:
            body = stripped[4:].strip()
            samples: dict[Key, float] = {}
            if body != "nil":
                for labels, value in _SAMPLE.findall(body):
                    pairs = (
                        (k, bytes(v, "utf-8").decode("unicode_escape"))
                        for k, v in _LABEL.findall(labels)
                    )
                    samples[tuple(sorted(pairs))] = float(value)
            out[current] = samples
        elif stripped.startswith("rule:"):
            pytest.fail(f"promtool failed to evaluate a rule: {stripped[:500]}")
    assert "FAILED" in text or run.returncode == 0, text[-2000:]
    return out
