"""``gpuscale evaluate``: run scaling policies on one trace and compare them.

Every policy sees the same trace, scale, seed and faults; the command prints a
comparison table and writes ``results.json`` and a self-contained
``report.html`` with timelines. Option combinations are checked before any
simulation starts, and a mistake ends with one line and exit status 2.
"""

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from gpuscale.errors import config_error
from gpuscale.evaluate import policies as registry

if TYPE_CHECKING:
    from gpuscale.evaluate.runner import EvaluationRequest

logger = logging.getLogger(__name__)

DEFAULT_JOBS = max(1, min(2, os.cpu_count() or 1))
INTERRUPTED_EXIT = 130
"""Exit status after Ctrl-C (128 + SIGINT), as shells report it."""


def _policies(values: list[str] | None) -> tuple[str, ...]:
    # An env var gives one string; split it like the command line would.
    return registry.choose([n for v in (values or []) for n in v.replace(",", " ").split()])


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
            "ramp) or a time_s,rps CSV file.",
            envvar="GPUSCALE_TRACE",
        ),
    ] = "diurnal",
    policy: Annotated[
        list[str] | None,
        typer.Option(
            help=f"Policy to run ({', '.join(registry.names())}); repeatable "
            "\\[default: all of them].",
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
            help="End-to-end latency a request must meet, seconds "
            "\\[default: auto, from the trace's service time].",
            envvar="GPUSCALE_SLO_LATENCY",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(
            help="Seconds a request may wait before it is dropped \\[default: auto, 4 x SLO].",
            envvar="GPUSCALE_TIMEOUT",
            show_default=False,
        ),
    ] = None,
    duration: Annotated[
        int | None,
        typer.Option(
            help="Simulate only the first this many seconds "
            "\\[default: the whole trace; generators: a day for diurnal, else an hour].",
            envvar="GPUSCALE_DURATION",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int, typer.Option(help="Seed shared by every run.", envvar="GPUSCALE_SEED")
    ] = 0,
    fault: Annotated[
        list[str] | None,
        typer.Option(
            help="Inject a fault into every run: KIND@SECONDS[:replica=N][:key=value], e.g. "
            "gpu-lost@600, thermal@300:rise_c=35:duration=600, ecc-dbe@900:replica=0, "
            "straggler@120:factor=0.3:duration=600; repeatable, several separated by spaces "
            "in the environment variable \\[default: none].",
            # GPUSCALE_SIM_FAULTS: the old name, read (with a warning) for one release.
            envvar=["GPUSCALE_FAULTS", "GPUSCALE_SIM_FAULTS"],
            show_default=False,
        ),
    ] = None,
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
            help="GPU seconds per request for generators and rate files \\[default: 1.0].",
            envvar="GPUSCALE_SERVICE_TIME",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Run scaling policies on the same trace and compare GPU-hours, SLO and latency."""
    from gpuscale.evaluate.runner import EvaluationRequest

    if jobs < 1:
        raise config_error(f"--jobs {jobs}", "must be 1 or more", "e.g. --jobs 2")
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
    )
    try:
        _run(request, jobs, out)
    except KeyboardInterrupt:
        typer.echo(f"gpuscale: interrupted; no results written to {out}", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None


def _run(request: "EvaluationRequest", jobs: int, out: Path) -> None:
    """Prepare, run with a live progress display, then write and print the results."""
    from gpuscale.evaluate.pool import RunPool
    from gpuscale.evaluate.report import comparison_table, write_report
    from gpuscale.evaluate.runner import run_evaluation

    prepared = request.prepare()  # every ConfigError surfaces here, before any run
    workers = min(jobs, len(prepared.policies))
    # Workers start before the progress display's thread does (see RunPool).
    pool: RunPool | None = RunPool(workers) if workers > 1 else None
    console = Console(stderr=True)
    progress = Progress(
        TextColumn("{task.description:<8}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with pool if pool is not None else contextlib.nullcontext(), progress, _logs_through(console):
        tasks: dict[str, TaskID] = {
            name: progress.add_task(name, total=1.0) for name in prepared.policies
        }

        def update(name: str, fraction: float) -> None:
            progress.update(tasks[name], completed=fraction)

        evaluation, results = run_evaluation(prepared, pool=pool, progress=update)
    try:
        json_path, html_path = write_report(evaluation, results, out)
    except KeyboardInterrupt:
        typer.echo(f"gpuscale: interrupted while writing {out}; its files may be partial", err=True)
        raise typer.Exit(INTERRUPTED_EXIT) from None
    table_console = Console()
    if not table_console.is_terminal:  # piped: don't squeeze the table to 80 columns
        table_console = Console(width=160)
    table_console.print(comparison_table(evaluation))
    typer.echo(f"wrote {json_path} and {html_path}")


def register(app: typer.Typer) -> None:
    """Add the ``evaluate`` command to ``app``."""
    app.command("evaluate")(evaluate)
