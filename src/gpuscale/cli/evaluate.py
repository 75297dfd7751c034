"""``gpuscale evaluate``: run scaling policies on one trace and compare them.

Every policy sees the same trace, scale, seeds and faults. Each policy's main
knob is swept over ``--knob-values`` values on ``--seeds`` seeds, and an
unlimited fleet gives the trace's ceiling; the runs go to local worker
processes or a Dask cluster (``--dask-scheduler``). The command prints a
comparison table (GPU-hours at the target attainment, means with 95 %
intervals) and writes ``results.json`` and a self-contained ``report.html``
with the curves and timelines. Option combinations are checked before any
simulation starts, and a mistake ends with one line and exit status 2.
"""

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gpuscale.durations import seconds_option, whole_seconds_option
from gpuscale.errors import config_error
from gpuscale.evaluate import policies as registry
from gpuscale.sim.queue_model import QUEUE_MODELS, QueueModel

if TYPE_CHECKING:
    from gpuscale.evaluate.sweep import SweepRequest
    from gpuscale.sim.coldstart import ColdStart

logger = logging.getLogger(__name__)

DEFAULT_JOBS = max(1, min(2, os.cpu_count() or 1))
INTERRUPTED_EXIT = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def _policies(values: list[str] | None) -> tuple[str, ...]:
    # An env var gives one string; split it like the command line would.
    return registry.choose([n for v in (values or []) for n in v.replace(",", " ").split()])


def _queue_model(value: str) -> "QueueModel":
    if value not in QUEUE_MODELS:
        raise config_error(
            f"--queue-model {value}",
            "is not a queue model",
            f"use one of {', '.join(QUEUE_MODELS)}",
        )
    return cast("QueueModel", value)


class _ConsoleLogHandler(logging.Handler):
    """Writes each record, formatted as before, through a rich console.

    While a progress display is live, anything written to the terminal behind
    its back garbles the bars; printed through its console, a line goes above them.
    """

    def __init__(self, console: Console, template: logging.Handler) -> None:
        super().__init__(template.level)
        self.console = console
        self.setFormatter(template.formatter)
        for f in template.filters:
            self.addFilter(f)

    def emit(self, record: logging.LogRecord) -> None:
        """Print the formatted record as one unstyled line."""
        try:
            text = self.format(record)
            self.console.print(text, markup=False, highlight=False, soft_wrap=True, emoji=False)
        except Exception:  # noqa: BLE001 - logging must never raise (logging.Handler's rule)
            self.handleError(record)


@contextlib.contextmanager
def _logs_through(console: Console) -> Iterator[None]:
    """Route the root logger's stream handlers through ``console`` for the duration."""
    root = logging.getLogger()
    saved = list(root.handlers)
    root.handlers[:] = [
        _ConsoleLogHandler(console, h)
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
        else h
        for h in saved
    ]
    try:
        yield
    finally:
        root.handlers[:] = saved


def evaluate(
    trace: Annotated[
        str,
        typer.Option(
            help="Trace name (azure-code, azure-conv, gentd26, diurnal, bursty, flash-crowd, "
            "ramp), a generated shape as shape:NAME (e.g. shape:flash-double-h6-w600; the "
            "family and its training/held-back split: docs/robustness.md) or a time_s,rps "
            "CSV file.",
            envvar="GPUSCALE_TRACE",
        ),
    ] = "diurnal",
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Policy to run ({', '.join(registry.names())}); repeatable "
            f"\\[default: {', '.join(registry.default_names())}].",
            envvar="GPUSCALE_POLICY",
            show_default=False,
        ),
    ] = None,
    scale: Annotated[
        float,
        typer.Option(
            help="Multiply the trace's request rate to reach fleet size.", envvar="GPUSCALE_SCALE"
        ),
    ] = 1.0,
    slo_latency: Annotated[
        float | None,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="End-to-end latency a request must meet, seconds "
            "\\[default: auto, from the trace's service time].",
            envvar="GPUSCALE_SLO_LATENCY",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="Seconds a request may wait before it is dropped \\[default: auto, 4 x SLO].",
            envvar="GPUSCALE_EVALUATE_TIMEOUT",
            show_default=False,
        ),
    ] = None,
    duration: Annotated[
        int | None,
        typer.Option(
            parser=whole_seconds_option,
            metavar="<duration>",
            help="Simulate only the first this many seconds "
            "\\[default: the whole trace; generators: a day for diurnal, else an hour].",
            envvar="GPUSCALE_EVALUATE_DURATION",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Seed shared by every run.", envvar="GPUSCALE_EVALUATE_SEED")
    ] = 0,
    queue_model: Annotated[
        str,
        typer.Option(
            help="Simulated queue: fluid, requests (one request at a time) or auto (requests "
            "where that is cheap or the fluid is off by more than 0.01; docs/serving-model.md).",
            envvar="GPUSCALE_QUEUE_MODEL",
        ),
    ] = "auto",
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault into every run: KIND@SECONDS[:replica=N][:key=value], e.g. "
            "gpu-lost@600, thermal@300:rise_c=35:duration=600, ecc-dbe@900:replica=0, "
            "straggler@120:factor=0.3:duration=600; repeatable, several separated by spaces "
            "in the environment variable \\[default: none].",
            # GPUSCALE_SIM_FAULTS: the old name, read (with a warning) for one release.
            envvar=["GPUSCALE_EVALUATE_FAULTS", "GPUSCALE_SIM_FAULTS"],
            show_default=False,
        ),
    ] = None,
    alerts: Annotated[
        bool,
        typer.Option(
            "--alerts/--no-alerts",
            help="Evaluate the alert catalogue in every run, as Prometheus would over the "
            "run's metrics: firing alerts reach the policies' health checks and the report "
            "gives each fault's time to detect and to mitigate (about ten times slower).",
            envvar="GPUSCALE_ALERTS",
        ),
    ] = False,
    remediate: Annotated[
        bool,
        typer.Option(
            "--remediate/--no-remediate",
            help="Delete pods whose GPU the series show broken, as a GPUScaler's "
            "remediate: true does live (the same decision step).",
            envvar="GPUSCALE_REMEDIATE",
        ),
    ] = False,
    placement: Annotated[
        bool,
        typer.Option(
            "--placement/--no-placement",
            help="Before each scale-in, mark the pods to go with pod-deletion-cost "
            "(unhealthy, loading, then those on the emptiest nodes), as a GPUScaler's "
            "placement: true does live; off leaves the choice to the ReplicaSet's order.",
            envvar="GPUSCALE_EVALUATE_PLACEMENT",
        ),
    ] = False,
    lost_gpu_pod: Annotated[
        str,
        typer.Option(
            help="What happens to the pod on a GPU that fell off the bus: replaced (at once, "
            "elsewhere) or stuck (Kubernetes' own behaviour: it stays, never Ready, until "
            "deleted).",
            envvar="GPUSCALE_LOST_GPU_POD",
        ),
    ] = "replaced",
    model: Annotated[
        str,
        typer.Option(
            help="Cold starts load this model's weights (e.g. llama-3-70b; the list is in "
            "docs/serving-model.md) at --storage's read bandwidth; empty: GenTD26's "
            "measured diffusion-model loads.",
            envvar="GPUSCALE_MODEL",
        ),
    ] = "",
    storage: Annotated[
        str,
        typer.Option(
            help="With --model: the node's storage the weights are read from (nvme, ebs-gp3, "
            "ebs-gp3-default).",
            envvar="GPUSCALE_STORAGE",
        ),
    ] = "nvme",
    out: Annotated[
        Path,
        typer.Option(help="Directory for results.json and report.html.", envvar="GPUSCALE_OUT"),
    ] = Path("out/evaluate"),
    jobs: Annotated[
        int,
        typer.Option(help="Runs in parallel (worker processes).", envvar="GPUSCALE_JOBS"),
    ] = DEFAULT_JOBS,
    traces_dir: Annotated[
        Path | None,
        typer.Option(
            help="Directory of the shared trace files \\[default: $GPUSCALE_TRACES_DIR or "
            "../shared/traces].",
            envvar="GPUSCALE_TRACES_DIR",
            show_default=False,
        ),
    ] = None,
    service_time: Annotated[
        float | None,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="GPU seconds per request for generators and rate files \\[default: 1.0].",
            envvar="GPUSCALE_SERVICE_TIME",
            show_default=False,
        ),
    ] = None,
    seeds: Annotated[
        int,
        typer.Option(
            help="Seeds each figure is the mean over (--seed and the ones after it); "
            "intervals are 95 %: Student t, and a bootstrap over seeds for attainment.",
            envvar="GPUSCALE_SEEDS",
        ),
    ] = 10,
    warmup: Annotated[
        float | None,
        typer.Option(
            parser=seconds_option,
            metavar="<duration>",
            help="Seconds at the start of each run that are not scored "
            "\\[default: 600, or a fifth of a run shorter than 3000 s].",
            envvar="GPUSCALE_WARMUP",
            show_default=False,
        ),
    ] = None,
    target_attainment: Annotated[
        float,
        typer.Option(
            help="SLO attainment (0-1) at which each policy's GPU-hours are read off its "
            "knob sweep.",
            envvar="GPUSCALE_TARGET_ATTAINMENT",
        ),
    ] = 0.99,
    knob_values: Annotated[
        int,
        typer.Option(
            help="Values of each policy's main knob to sweep, besides the fair one; "
            "0 runs the fair parameters only.",
            envvar="GPUSCALE_KNOB_VALUES",
        ),
    ] = 8,
    dask_scheduler: Annotated[
        str | None,
        typer.Option(
            help="Run on this Dask distributed scheduler (e.g. tcp://10.0.0.5:8786) instead "
            "of local worker processes; needs gpuscale[dask] \\[default: local].",
            envvar="GPUSCALE_DASK_SCHEDULER",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run scaling policies on the same trace and compare GPU-hours, SLO and latency."""
    from gpuscale.evaluate.runner import EvaluationRequest
    from gpuscale.evaluate.sweep import SweepRequest
    from gpuscale.sim.nodepool import ClusterConfig

    if jobs < 1:
        raise config_error(f"--jobs {jobs}", "must be 1 or more", "e.g. --jobs 2")
    if lost_gpu_pod not in ("replaced", "stuck"):
        raise config_error(f"--lost-gpu-pod {lost_gpu_pod}", "unknown", "use replaced or stuck")
    request = EvaluationRequest(
        trace=trace,
        policies=_policies(policy),
        scale=scale,
        slo_latency_s=slo_latency,
        timeout_s=timeout,
        duration_s=duration,
        seed=seed,
        faults=tuple(fault or ()),
        traces_dir=traces_dir,
        service_s=service_time,
        queue_model=_queue_model(queue_model),
        alerts=alerts,
        remediate=remediate,
        placement=placement,
        cluster=ClusterConfig(
            lost_gpu_pod="stuck" if lost_gpu_pod == "stuck" else "replaced",
            cold_start=_cold_start(model, storage),
        ),
    )
    sweep = SweepRequest(
        request,
        seeds=seeds,
        knob_values=knob_values,
        warmup_s=warmup,
        target_attainment=target_attainment,
    )
    try:
        _run(sweep, jobs, dask_scheduler, out)
    except KeyboardInterrupt:
        typer.echo(f"gpuscale: interrupted; no results written to {out}", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None


def _run(sweep: "SweepRequest", jobs: int, dask_scheduler: str | None, out: Path) -> None:
    """Plan, run with a live progress display, then write and print the results."""
    from gpuscale.evaluate.executor import open_runner
    from gpuscale.evaluate.report import (
        comparison_table,
        dash_notes,
        fault_table,
        step_table,
        table_rows,
        verdict,
        write_report,
    )
    from gpuscale.evaluate.scoring import evaluation_from_sweep
    from gpuscale.evaluate.sweep import keys_by_policy, policy_of, run_sweep

    plan = sweep.prepare()  # every ConfigError surfaces here, before any run
    specs = plan.specs()
    console = Console(stderr=True)
    # Local workers start before the progress display's thread does (see RunPool).
    with open_runner(jobs, len(specs), dask_scheduler) as runner:
        where = (
            f"Dask at {dask_scheduler}"
            if dask_scheduler
            else f"{min(jobs, len(specs))} local worker(s)"
        )
        console.print(
            f"{plan.base.trace}: {len(specs)} runs ({sweep.seeds} seeds x each policy's knob "
            f"values, and an unlimited fleet for the ceiling) on {where}; warm-up "
            f"{plan.warmup_s:g} s not scored; target attainment {sweep.target_attainment:g}",
            markup=False,
            highlight=False,
        )
        progress = _progress(console)
        with progress, _logs_through(console):
            overall = progress.add_task("all", total=len(specs), finished=0)
            tasks = {
                name: progress.add_task(name, total=count, finished=0)
                for name, count in keys_by_policy(specs).items()
            }
            done: dict[str, float] = {}
            finished: dict[TaskID, int] = dict.fromkeys([overall, *tasks.values()], 0)
            planned = {s.key for s in specs}

            def update(key: str, fraction: float) -> None:
                step = fraction - done.get(key, 0.0)
                ends = fraction >= 1.0 > done.get(key, 0.0)
                # A run past the plan (a knob value the sweep adds to bracket the
                # target) raises the totals, so no bar runs past its end.
                grows = key not in planned and key not in done
                done[key] = fraction
                for task in (overall, tasks[policy_of(key)]):
                    finished[task] += ends
                    total = next(t.total for t in progress.tasks if t.id == task) or 0.0
                    progress.update(
                        task,
                        advance=step,
                        finished=finished[task],
                        total=total + 1 if grows else total,
                    )

            runs = run_sweep(plan, runner, update)
    evaluation, results = evaluation_from_sweep(plan, runs)
    try:
        json_path, html_path = write_report(evaluation, results, out)
    except KeyboardInterrupt:
        typer.echo(f"gpuscale: interrupted while writing {out}; its files may be partial", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    table_console = Console()
    if not table_console.is_terminal:  # piped: don't squeeze the table to 80 columns
        table_console = Console(width=160)
    table_console.print(comparison_table(evaluation))
    for note in dash_notes(table_rows(evaluation)):
        typer.echo(note)
    for extra in (fault_table(evaluation), step_table(evaluation)):
        if extra is not None:
            table_console.print(extra)
    typer.echo(verdict(evaluation))
    typer.echo(f"wrote {json_path} and {html_path}")


def _progress(console: Console) -> Progress:
    """One overall bar and one per policy, each counting its finished runs."""
    return Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.fields[finished]:>5}/{task.total:.0f} runs"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def register(app: typer.Typer) -> None:
    """Add the ``evaluate`` command to ``app``."""
    app.command("evaluate")(evaluate)


def _cold_start(model: str, storage: str) -> "ColdStart":
    """The cold start ``--model`` and ``--storage`` name (GenTD26's without a model).

    Returns:
        The distribution.

    Raises:
        ConfigError: An unknown model or storage.
    """
    from gpuscale.sim.coldstart import MODELS, READ_BANDWIDTHS, ColdStart

    if not model:
        return ColdStart.from_gentd26()
    if model not in MODELS:
        raise config_error(f"--model {model}", "unknown", f"use one of {', '.join(MODELS)}")
    if storage not in READ_BANDWIDTHS:
        raise config_error(
            f"--storage {storage}", "unknown", f"use one of {', '.join(READ_BANDWIDTHS)}"
        )
    return ColdStart.from_model(MODELS[model], READ_BANDWIDTHS[storage])
