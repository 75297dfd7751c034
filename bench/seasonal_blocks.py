"""Where hybrid's cost above the oracle goes on the four-day LoRA log, block by block.

``bench_seasonal.py`` reads each variant's GPU-hours at the target attainment;
this script explains one seed's figure. It runs the hindsight oracle (at its
default setting) and ``hybrid`` with one forecast model at one ``per_replica``
multiple on the same rate file and seed, and compares them in the rate file's
15-minute blocks after the warm-up:

* the GPU-hours above the oracle's in each hour of the day (both scored days
  summed) and the requests each misses there;
* how much of the excess lies in the busier half of the blocks, and in the tenth
  of the blocks with the most;
* how many of hybrid's missed requests fall in blocks whose rate rose by more than
  ``RISE`` on the block before (a change no forecast of the rate from the history
  can see, and the reaction meets a cold start late), and the worst blocks.

Run (one seed, about a minute per run on one core):

    python bench/seasonal_blocks.py --seed 0 --model seasonal-naive --multiple 1.6667
"""

import argparse
import dataclasses
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
from bench_seasonal import BLOCK_S, WARMUP_S, rate_file, read_log

from gpuscale.evaluate.runner import EvaluationRequest, PreparedEvaluation, build_policy
from gpuscale.scaling import forecast
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import simulate
from gpuscale.sim.traces import resolve_traces_dir

RISE = 0.3
"""A block whose rate is this share above the block before's counts as a rise."""


def per_block(
    prepared: PreparedEvaluation, name: str, config: object, blocks: int
) -> tuple[np.ndarray, np.ndarray]:
    """One run's GPU-hours and missed requests in each rate block."""
    result = simulate(prepared.scenario, build_policy(name, config, prepared.required))
    tl = result.timeline
    t = np.asarray(tl.time_s, dtype=float)
    dt = np.diff(t, append=t[-1] + (t[-1] - t[-2]))
    gpus = tl.node_gpus if tl.node_gpus.size == t.size else tl.allocated_gpus
    block = np.minimum((t // BLOCK_S).astype(int), blocks - 1)
    hours = np.bincount(block, weights=gpus * dt, minlength=blocks) / 3600.0
    missed = np.bincount(block, weights=tl.completed - tl.within_slo, minlength=blocks)
    return hours, missed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=40.0)
    parser.add_argument("--node-provision", type=float, default=180.0, help="seconds")
    parser.add_argument("--model", default="auto", help=f"one of {', '.join(forecast.MODELS)}")
    parser.add_argument("--multiple", type=float, default=1.6667, help="of the fair per_replica")
    args = parser.parse_args()
    if args.model not in forecast.MODELS:
        parser.error(f"--model {args.model!r}: use one of {', '.join(forecast.MODELS)}")
    with tempfile.TemporaryDirectory() as tmp:
        path, _ = rate_file(read_log(resolve_traces_dir()), Path(tmp))
        rate = pd.read_csv(path).rps.to_numpy(dtype=float) * args.scale
        cluster = ClusterConfig(node_provision_s=args.node_provision)
        request = EvaluationRequest(
            str(path), ("hybrid", "oracle"), args.scale, seed=args.seed, cluster=cluster
        )
        prepared = request.prepare()
        hybrid = prepared.configs["hybrid"]
        hybrid = dataclasses.replace(
            hybrid,
            forecast=dataclasses.replace(hybrid.forecast, model=args.model),
            per_replica=args.multiple * hybrid.per_replica,
        )
        oracle_h, oracle_miss = per_block(prepared, "oracle", prepared.configs["oracle"], rate.size)
        hybrid_h, hybrid_miss = per_block(prepared, "hybrid", hybrid, rate.size)
    scored = np.arange(rate.size) * BLOCK_S >= WARMUP_S
    excess = hybrid_h - oracle_h
    print(
        f"seed {args.seed}, hybrid ({args.model}) at {args.multiple:g} x per_replica: "
        f"{hybrid_h[scored].sum():.1f} GPU-h, {hybrid_miss[scored].sum():.0f} missed; "
        f"oracle {oracle_h[scored].sum():.1f} GPU-h, {oracle_miss[scored].sum():.0f} missed"
    )
    hour = (np.arange(rate.size) * BLOCK_S % 86_400) // 3600
    print("hour  requests  oracle GPU-h  hybrid GPU-h  excess  hybrid missed  oracle missed")
    for h in range(24):
        s = scored & (hour == h)
        print(
            f"{h:4d} {rate[s].sum() * BLOCK_S:9.0f} {oracle_h[s].sum():13.1f} "
            f"{hybrid_h[s].sum():13.1f} {excess[s].sum():7.1f} {hybrid_miss[s].sum():14.0f} "
            f"{oracle_miss[s].sum():14.0f}"
        )
    busy = scored & (rate > np.median(rate[scored]))
    top = np.sort(excess[scored])[::-1][: scored.sum() // 10]
    print(
        f"excess {excess[scored].sum():.1f} GPU-h: {excess[busy].sum():.1f} in the busier half "
        f"of the blocks, {top.sum():.1f} in the tenth of the blocks with the most"
    )
    before = np.r_[rate[0], rate[:-1]]
    rise = np.divide(rate - before, before, out=np.zeros_like(rate), where=before > 0)
    rose = scored & (rise > RISE)
    print(
        f"{rose.sum()} of {scored.sum()} blocks rose by more than {RISE:.0%} on the block "
        f"before; they hold {hybrid_miss[rose].sum():.0f} of hybrid's "
        f"{hybrid_miss[scored].sum():.0f} missed requests"
    )
    print("worst blocks by hybrid's misses: day hh:mm, rate (rps), rise, missed, GPU-h vs oracle")
    for b in np.flatnonzero(scored)[np.argsort(-hybrid_miss[scored])][:8]:
        at = int(b) * BLOCK_S
        when = f"day {at // 86_400} {at % 86_400 // 3600:02d}:{at % 3600 // 60:02d}"
        print(
            f"  {when} {rate[b]:.2f} {rise[b]:+.0%} {hybrid_miss[b]:.0f} "
            f"{hybrid_h[b]:.1f} / {oracle_h[b]:.1f}"
        )


if __name__ == "__main__":
    main()
