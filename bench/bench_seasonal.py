"""The seasonal forecast against its fallback line, on days of real requests.

Every trace in the predictive and hybrid table (docs/results.md) is one to six
hours long, so the seasonal model (a day's season, fitted once two seasons
exist) never fits there and every decision uses the fallback line. GenTD26's LoRA request log
(``gentd26_lora_request_trace.csv.gz``) spans 23 days of a service whose users
arrive in the same hours each day: over the 23 days, under 0.2 % of the requests
come in each hour from 09 to 15 h (its clock), 2.4 % at 16 h, 8.7 and 10.4 % at 17
and 18 h, and 12 to 14 % in each hour from 21 to 00 h. This benchmark replays four
of its days, from 24 Nov 2024 00:00 (1,160 to 1,775 requests a day), as a rate
file: the requests counted in 15-minute blocks (the log holds about one request a
minute, so shorter blocks would take the count's Poisson noise for shape) at
``--scale`` times that rate, each request the log's mean exec time.
As for any rate file, service times vary as GenTD26's measured inference times (SCV
0.41) and the SLO is 4 x the mean service time.

``hybrid`` runs three times on each seed and knob value: as it is; with a season
of 30 days, so that its forecaster never holds two seasons and falls back to the
line throughout; and with a clairvoyant forecast, the rate file's own request
rate at ``now + horizon`` times the service time, with a Poisson band
(``clairvoyant``). The last is no policy anyone can run: it is what a perfect
forecast of the rate would buy the same policy, so the gap between it and the
first variant is the forecast's, and the gap between it and the hindsight oracle
is the rest of the policy's (its reaction, scale-in and whole nodes). The variant
``present`` (not run by default) is told the file's rate at ``now`` instead, with
the same band: a perfect reading of the present with no knowledge of the rate's
next change, what the best forecast from the load now could buy. The first
two days are the warm-up (not scored), so the first variant's scored decisions
all come after its first fit. Its seasonal model is the one the forecaster's
backtest chooses at each refit (``ForecastConfig.model`` ``auto``); the variants
``holt-winters``, ``seasonal-naive`` and ``quantile-regression`` (not run by
default) hold it to one model throughout, to show what each choice costs. Each
variant's cost at the target attainment is read off each seed's curve of
``per_replica`` (the knob, by default 1 to 2 x the fair value;
``evaluate.bracket.at_target``) and off the mean curve; ratios
between variants are taken seed by seed, and each variant's ratio to the oracle
against the oracle's figure in docs/results.md (``bench/results.json["hybrid"]``,
from ``gpuscale evaluate`` on the same rate file), when it is there.
Before the runs it prints how much the log's 15-minute counts change from one
block to the next against what Poisson noise alone would give (``block_changes``):
what no forecast of the rate can know. ``--node-provision``
sets the cluster's node provisioning time (180 s by default), which ``hybrid``'s
horizon adds while its always-up nodes are full. Run:

    python bench/bench_seasonal.py             # 10 seeds, 2 workers
    python bench/bench_seasonal.py --write     # and store it in bench/results.json
    M=0.5,0.625,0.75,0.875,1,1.125,1.25        # slow nodes need more headroom
    python bench/bench_seasonal.py --node-provision 900 --multiples $M --write
    python bench/bench_seasonal.py --rate-file out/gentd26_lora_4d.csv  # the rate file alone
    python bench/bench_seasonal.py --variants seasonal,line      # without the clairvoyant runs
    python bench/bench_seasonal.py --variants holt-winters,seasonal-naive,quantile-regression

``--write`` stores the figures as ``bench/results.json["seasonal"]["<provision s>"]``; a
variant not run keeps the figures stored before.
"""

import argparse
import dataclasses
import datetime
import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from bench_forecast_gap import (
    ORACLE_LINE,
    TABLE_HEAD,
    hybrid_run,
    oracle_at_target,
    ratio_text,
    run_sweep,
    seed_ratio,
    table_row,
    told_ahead,
)

from gpuscale.evaluate.runner import EvaluationRequest
from gpuscale.scaling import forecast
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.traces import resolve_traces_dir

ROOT = Path(__file__).resolve().parent
LOG_FILE = "gentd26_lora_request_trace.csv.gz"
START = pd.Timestamp("2024-11-24")
DAYS = 4
BLOCK_S = 900
RATE_FILE = "gentd26_lora_4d.csv"
WARMUP_S = 2 * 86_400.0
NEVER_S = 30 * 86_400.0
"""A season no four-day run holds twice: the forecaster keeps to its fallback line."""
MULTIPLES = (1.0, 1.1667, 1.3333, 1.5, 1.6667, 1.8333, 2.0)
"""``per_replica`` values swept by default, as multiples of the fair value."""
TARGET = 0.99
VARIANTS = (
    "seasonal",
    "holt-winters",
    "seasonal-naive",
    "quantile-regression",
    "line",
    "clairvoyant",
    "present",
)
"""``hybrid`` as it is (its seasonal model chosen by backtest), held to one seasonal
model, held to its fallback line, and told the rate ahead."""
DEFAULT_VARIANTS = ("seasonal", "line", "clairvoyant")
LABELS = {
    "seasonal": "seasonal (chosen by backtest)",
    "holt-winters": "Holt-Winters only",
    "seasonal-naive": "seasonal-naive only",
    "quantile-regression": "quantile regression only",
    "line": "fallback line only",
    "clairvoyant": "clairvoyant (the file's rate)",
    "present": "told the rate now",
}
STORED = {
    "seasonal": "seasonal",
    "holt-winters": "holt_winters",
    "seasonal-naive": "seasonal_naive",
    "quantile-regression": "quantile_regression",
    "line": "fallback",
    "clairvoyant": "clairvoyant",
    "present": "present",
}
"""Each variant's key in ``results.json`` (the line's was named before the third)."""
MIN_BLOCK_COUNT = 20
"""``block_changes`` counts the pairs of blocks averaging this many requests or more."""
DEFAULT_PROVISION_S = ClusterConfig().node_provision_s
"""The provisioning time of docs/results.md's runs, whose oracle figure applies."""


def read_log(traces_dir: Path) -> pd.DataFrame:
    """The LoRA request log, read once for both the rate file and the hourly shares."""
    return pd.read_csv(traces_dir / LOG_FILE, parse_dates=["gmt_create"])


def rate_file(log: pd.DataFrame, out: Path) -> tuple[Path, list[int]]:
    """Write the four days' 15-minute request rates as a ``time_s,rps,service_s`` file.

    Returns:
        The file, and the requests of each day.
    """
    end = START + pd.Timedelta(days=DAYS)
    days = log[(log.gmt_create >= START) & (log.gmt_create < end)]
    block = ((days.gmt_create - START).dt.total_seconds() // BLOCK_S).astype(int)
    counts = np.bincount(block, minlength=DAYS * 86_400 // BLOCK_S)
    service_s = float(log.exec_time_seconds.mean())
    frame = pd.DataFrame(
        {
            "time_s": np.arange(counts.size) * BLOCK_S,
            "rps": counts / BLOCK_S,
            "service_s": service_s,
        }
    )
    path = out / RATE_FILE
    frame.to_csv(path, index=False)
    per_day = counts.reshape(DAYS, -1).sum(axis=1)
    return path, [int(n) for n in per_day]


def clairvoyant(path: str, scale: float, ahead: bool = True) -> Callable[..., forecast.Forecast]:
    """A stand-in for ``forecast.forecast`` that knows the rate file's rate ahead.

    The demand at a time is the requests in service there on average: the file's
    rate for that block times ``scale`` times its service time (``told_ahead``).

    Args:
        path: The rate file.
        scale: Its rate multiplier.
        ahead: Told the rate at ``now + horizon``; False: at ``now`` (``present``).

    Returns:
        A function with ``forecast.forecast``'s signature.
    """
    frame = pd.read_csv(path)
    starts = frame.time_s.to_numpy(dtype=float)
    busy = frame.rps.to_numpy(dtype=float) * scale * frame.service_s.to_numpy(dtype=float)

    def busy_at(t: float) -> float:
        block = int(np.searchsorted(starts, t, side="right")) - 1
        return float(busy[min(max(block, 0), busy.size - 1)])

    return told_ahead(busy_at, ahead)


def run_variant(
    path: str,
    scale: float,
    provision_s: float,
    seed: int,
    multiple: float,
    variant: str,
    progress: Any = None,
) -> tuple[float, float | None]:
    """One hybrid run; its GPU-hours and attainment after the warm-up."""
    cluster = ClusterConfig(node_provision_s=provision_s)
    request = EvaluationRequest(path, ("hybrid",), scale, seed=seed, cluster=cluster)
    prepared = request.prepare()
    config = prepared.configs["hybrid"]
    if variant == "line":
        config = dataclasses.replace(
            config, forecast=dataclasses.replace(config.forecast, season_s=NEVER_S)
        )
    elif variant in ("holt-winters", "seasonal-naive", "quantile-regression"):
        config = dataclasses.replace(
            config, forecast=dataclasses.replace(config.forecast, model=variant)
        )
    config = dataclasses.replace(config, per_replica=multiple * config.per_replica)
    known = None
    if variant in ("clairvoyant", "present"):
        known = clairvoyant(path, scale, ahead=variant == "clairvoyant")
    return hybrid_run(prepared, config, seed, multiple, WARMUP_S, known)


def block_changes(log: pd.DataFrame, min_count: int) -> tuple[int, float, float]:
    """How much the log's 15-minute counts change between neighbouring blocks.

    For blocks ``b`` and ``b + 1`` drawn from one Poisson rate, the change has variance
    ``n_b + n_{b+1}``; a larger mean square change is the log's own movement, which a
    rate file keeps, at any ``--scale``, as the same share of the rate.

    Args:
        log: The whole request log.
        min_count: Only pairs whose mean count is at least this.

    Returns:
        (pairs, mean square change, mean of ``n_b + n_{b+1}``).
    """
    counts = log.set_index("gmt_create").resample(f"{BLOCK_S}s").size().to_numpy()
    change = np.diff(counts).astype(float)
    poisson = (counts[1:] + counts[:-1]).astype(float)
    pairs = poisson >= 2 * min_count
    return int(pairs.sum()), float(np.mean(change[pairs] ** 2)), float(np.mean(poisson[pairs]))


def hour_shares(log: pd.DataFrame) -> list[float]:
    """The share of the whole log's requests in each hour of the day (its clock), 0 to 23 h."""
    counts = np.bincount(log.gmt_create.dt.hour, minlength=24)
    return [float(c) for c in counts / counts.sum()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--scale", type=float, default=40.0)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--node-provision", type=float, default=180.0, help="seconds")
    parser.add_argument(
        "--multiples",
        default=",".join(f"{m:g}" for m in MULTIPLES),
        help="per_replica values, as multiples of the fair value, comma-separated",
    )
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help=f"comma-separated, of {', '.join(VARIANTS)}",
    )
    parser.add_argument("--write", action="store_true", help="store bench/results.json['seasonal']")
    parser.add_argument(
        "--hours-only", action="store_true", help="print the log's hourly shares and stop"
    )
    parser.add_argument(
        "--rate-file",
        type=Path,
        help="write the four days' rate file (for `gpuscale evaluate --trace`) here and stop",
    )
    args = parser.parse_args()
    log = read_log(resolve_traces_dir())
    if args.rate_file is not None:
        args.rate_file.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as tmp:
            written, per_day = rate_file(log, Path(tmp))
            shutil.move(written, args.rate_file)
        print(f"wrote {args.rate_file}: {DAYS} days from {START.date()}, {per_day} requests a day")
        return
    shares = ", ".join(f"{h:02d} h {100 * v:.2f} %" for h, v in enumerate(hour_shares(log)))
    print(f"requests by hour of day over the whole log: {shares}")
    if args.hours_only:
        return
    pairs, square, poisson = block_changes(log, MIN_BLOCK_COUNT)
    print(
        f"15-minute counts over the whole log, {pairs} neighbouring pairs averaging "
        f"{MIN_BLOCK_COUNT} or more: mean square change {square:.1f}, "
        f"{square / poisson:.2f} x the {poisson:.1f} of Poisson noise alone"
    )
    seeds = range(args.seeds)
    multiples = tuple(sorted(float(m) for m in args.multiples.split(",")))
    asked = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in asked if v not in VARIANTS]
    if unknown or not asked:
        parser.error(f"--variants {args.variants!r}: use some of {','.join(VARIANTS)}")
    variants = tuple(v for v in VARIANTS if v in asked)
    with tempfile.TemporaryDirectory() as tmp:
        path, per_day = rate_file(log, Path(tmp))
        keys = [(s, m, v) for s in seeds for m in multiples for v in variants]
        calls = [
            (f"{s}/{m:.2f}/{v}", (str(path), args.scale, args.node_provision, s, m, v))
            for s, m, v in keys
        ]
        found = run_sweep(run_variant, keys, calls, args.jobs, seeds, multiples)
    at_table = args.node_provision == DEFAULT_PROVISION_S  # the table's runs' nodes
    oracle = oracle_at_target(RATE_FILE, args.scale) if at_table else None
    print(
        f"GenTD26 LoRA log, {DAYS} days from {START.date()} ({per_day} requests a day), "
        f"x{args.scale:g},"
    )
    print(
        f"hybrid, {args.seeds} seeds, node provisioning {args.node_provision:g} s, "
        f"scored after {WARMUP_S / 86_400:g} days, target {TARGET}:"
    )
    print(TABLE_HEAD)
    for v, r in found.items():
        print(table_row(LABELS[v], r, oracle))
    if oracle:
        print(ORACLE_LINE.format(oracle=oracle, target=TARGET))
    for v, r in found.items():
        curve = ", ".join(
            f"{p['multiple']:g} x: {p['gpu_hours']:.1f} GPU-h, {p['slo_attainment']:.4f}"
            for p in r["curve"]
        )
        print(f"{v} mean curve: {curve}")
    ratios = {
        f"{a} / {b}": seed_ratio(found[a], found[b], seeds)
        for a, b in (("seasonal", "line"), ("seasonal", "clairvoyant"))
        if a in found and b in found
    }
    for name, ratio in ratios.items():
        if ratio is not None:
            print(ratio_text(name, ratio))
    if args.write:
        out = ROOT / "results.json"
        document = json.loads(out.read_text()) if out.exists() else {}
        entry = document.setdefault("seasonal", {}).setdefault(f"{args.node_provision:g}", {})
        entry.update(
            when=datetime.datetime.now(datetime.UTC).isoformat(timespec="minutes"),
            trace=f"{LOG_FILE}, {DAYS} days from {START.date()}, {BLOCK_S} s blocks",
            requests_per_day=per_day,
            scale=args.scale,
            node_provision_s=args.node_provision,
            seeds=args.seeds,
            warmup_s=WARMUP_S,
            target_attainment=TARGET,
            per_replica_multiples=list(multiples),
            block_changes={"pairs": pairs, "mean_square": square, "poisson": poisson},
        )
        for v, r in found.items():  # a variant not run keeps its earlier figures
            entry[STORED[v]] = r
        if "seasonal / line" in ratios:
            entry["ratio"] = ratios["seasonal / line"]
        if "seasonal / clairvoyant" in ratios:
            entry["ratio_clairvoyant"] = ratios["seasonal / clairvoyant"]
        entry["oracle_gpu_hours_at_target"] = oracle
        out.write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
