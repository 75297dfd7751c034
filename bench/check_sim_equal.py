"""Check that simulator results are unchanged: record them once, compare after each change.

Runs every default policy, and predictive and hybrid, on a few scenarios (a 24 h
diurnal day on 100 GPUs, a bursty hour with GPU faults, azure-conv at small scale,
gentd26) and stores each ``RunResult`` (totals and timeline arrays). ``--compare``
reruns them and reports the largest relative difference per field; exact equality
is expected except where a vectorised sum changes the order of float additions
(tolerance ``--rtol``).

Run:

    python bench/check_sim_equal.py --record /tmp/sim_before.pkl
    python bench/check_sim_equal.py --compare /tmp/sim_before.pkl
"""

import argparse
import dataclasses
import math
import pickle
import sys
from pathlib import Path

import numpy as np

from gpuscale.evaluate.runner import POLICY_NAMES, EvaluationRequest, run_one

POLICIES = (*POLICY_NAMES, *(p for p in ("predictive", "hybrid") if p not in POLICY_NAMES))
"""The default policies and the two forecast-driven ones the defaults leave out."""

SCENARIOS: dict[str, dict[str, object]] = {
    "diurnal-24h-100gpu": {"trace": "diurnal", "scale": 5.5, "duration_s": 86_400},
    "bursty-faults": {
        "trace": "bursty",
        "scale": 3.0,
        "duration_s": 3_600,
        "seed": 2,
        "faults": ("gpu-lost@900:duration=600", "thermal@1200:duration=600", "straggler@300"),
    },
    "thermal-hot": {
        "trace": "flash-crowd",
        "scale": 4.0,
        "duration_s": 3_600,
        "seed": 1,
        "faults": ("thermal@600:rise_c=45:duration=1800", "ecc-dbe@1000"),
    },
    "azure-conv": {"trace": "azure-conv", "scale": 0.2, "duration_s": 3_000},
    "gentd26": {"trace": "gentd26", "scale": 1.0, "duration_s": 3_000},
}


def flatten(result: object) -> dict[str, object]:
    """A RunResult as {field: scalar or array}, the timeline's arrays included."""
    out: dict[str, object] = {}
    for f in dataclasses.fields(result):  # type: ignore[arg-type]
        v = getattr(result, f.name)
        if dataclasses.is_dataclass(v):
            for g in dataclasses.fields(v):
                out[f"{f.name}.{g.name}"] = np.asarray(getattr(v, g.name)).copy()
        elif isinstance(v, np.ndarray):
            out[f.name] = v.copy()
        else:
            out[f.name] = v
    return out


def run_all(only: set[str] | None) -> dict[tuple[str, str], dict[str, object]]:
    results = {}
    for name, kwargs in SCENARIOS.items():
        if only and name not in only:
            continue
        request = EvaluationRequest(policies=POLICIES, **kwargs)  # type: ignore[arg-type]
        prepared = request.prepare()
        for policy in POLICIES:
            results[(name, policy)] = flatten(run_one(prepared, policy, quiet=True))
            print(f"ran {name} {policy}", file=sys.stderr, flush=True)
    return results


def rel_diff(a: object, b: object) -> float:
    """Largest relative difference (NaNs equal where both NaN; inf on a shape change)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
        if x.shape != y.shape:
            return math.inf
        both_nan = np.isnan(x) & np.isnan(y)
        if (np.isnan(x) != np.isnan(y)).any():
            return math.inf
        d = np.abs(x - y) / np.maximum(np.maximum(np.abs(x), np.abs(y)), 1e-300)
        d[both_nan | (x == y)] = 0.0
        return float(d.max()) if d.size else 0.0
    nans = isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    if a == b or nans:
        return 0.0
    if isinstance(a, float | int) and isinstance(b, float | int):
        return abs(a - b) / max(abs(a), abs(b), 1e-300)
    return math.inf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", type=Path)
    group.add_argument("--compare", type=Path)
    parser.add_argument("--rtol", type=float, default=1e-9)
    parser.add_argument("--only", nargs="*", help="scenario names")
    args = parser.parse_args()
    only = set(args.only) if args.only else None
    now = run_all(only)
    if args.record:
        args.record.write_bytes(pickle.dumps(now))
        print(f"recorded {len(now)} runs in {args.record}")
        return
    before = pickle.loads(args.compare.read_bytes())  # noqa: S301 (our own file)
    worst, exact = 0.0, True
    added: set[str] = set()
    for key, fields in now.items():
        for fname, value in fields.items():
            if fname not in before[key]:  # a field the recorded version did not have
                added.add(fname)
                continue
            d = rel_diff(before[key][fname], value)
            if d > 0.0:
                exact = False
                print(f"{key[0]:<20}{key[1]:<8}{fname:<32}rel diff {d:.3g}")
            worst = max(worst, d)
    if added:
        print(f"not in the record (new fields, not compared): {', '.join(sorted(added))}")
    verdict = "IDENTICAL" if exact else ("EQUAL within rtol" if worst <= args.rtol else "DIFFERENT")
    print(f"{len(now)} runs compared; worst relative difference {worst:.3g}: {verdict}")
    sys.exit(0 if worst <= args.rtol else 1)


if __name__ == "__main__":
    main()
