"""Readers that turn real request traces into the simulator's ``Workload``.

The evaluation is only as honest as its demand. These readers replay public
production traces (Azure LLM inference 2023, Alibaba GenTD26) and a plain rate
file, all on the simulator's one-second grid; ``load_trace`` also resolves the
synthetic generators of :mod:`gpuscale.sim.generators`, so the CLI takes one
name or path. A malformed file is rejected with its path, line and reason.

The trace files are public research data and are never copied into the
project: they are read from a directory given by ``--traces-dir`` or
``GPUSCALE_TRACES_DIR``, by default ``../shared/traces`` next to the checkout.
"""

import logging
import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from gpuscale.errors import config_error
from gpuscale.sim import demand, generators, shapes
from gpuscale.sim.serving import llm_work_seconds
from gpuscale.sim.workload import FloatArray, RequestProfile, Workload

logger = logging.getLogger(__name__)

TRACES_DIR_ENV = "GPUSCALE_TRACES_DIR"
MAX_TRACE_S = 31 * 86_400
"""The longest trace read (31 days): a workload holds one value per second."""
"""Environment variable naming the directory that holds the shared trace files."""

AZURE_FILES = {
    "azure-code": "azure_llm_2023_code.csv",
    "azure-conv": "azure_llm_2023_conv.csv",
}
"""Trace name to file of the Azure LLM inference trace 2023 (CC-BY 4.0)."""

UPSTREAM_FILES = {
    "azure_llm_2023_code.csv": "AzureLLMInferenceTrace_code.csv",
    "azure_llm_2023_conv.csv": "AzureLLMInferenceTrace_conv.csv",
    "gentd26_qps.csv.gz": "qps.csv",
    "gentd26_model_predict_ms.csv.gz": "model_predict_data_anon.csv",
    "gentd26_pod_gpu_duty_cycle.csv.gz": "pod_gpu_duty_cycle_anon.csv",
    "gentd26_queue_time_ms.csv.gz": "queue_rt_raw_anon.csv",
    "gentd26_base_model_load_ms.csv.gz": "base_model_update_latency_anon.csv",
    "gentd26_lora_request_trace.csv.gz": "lora_request_trace.csv",
}
"""Each shared file's name in its dataset (Azure/AzurePublicDataset ``data/``,
alibaba/clusterdata ``cluster-trace-v2026-GenAI/``, the archives unpacked), so a
directory of downloaded files works without renaming (``find_file``)."""


def file_names(name: str) -> tuple[str, ...]:
    """The names a trace file is looked for under: the shared name, it uncompressed, upstream's."""
    names = [name]
    if name.endswith(".gz"):
        names.append(name.removesuffix(".gz"))
    if name in UPSTREAM_FILES:
        names.append(UPSTREAM_FILES[name])
    return tuple(names)


def find_file(directory: Path, name: str) -> Path | None:
    """The first of ``file_names(name)`` that is a file in ``directory``, or None."""
    return next((directory / n for n in file_names(name) if (directory / n).is_file()), None)


GENTD26_QPS_FILE = "gentd26_qps.csv.gz"
"""Alibaba GenTD26 request-rate samples, about 57 s apart."""

GENTD26_DUTY_CYCLE_FILE = "gentd26_pod_gpu_duty_cycle.csv.gz"
"""Alibaba GenTD26 per-pod GPU duty cycle, percent; used for calibration."""

GENTD26_REQUEST_TYPE = "Generative Requests"
"""The QPS rows that belong to the GPU serving pool.

The other type, ``API Requests``, is sampled at the gateway (no container) and
counts a different request class; only generative requests reach the GPUs.
"""

GENTD26_PREDICT_FILE = "gentd26_model_predict_ms.csv.gz"
"""Alibaba GenTD26 per-request pure inference time, milliseconds: the service times."""

GENTD26_QUEUE_TIME_FILE = "gentd26_queue_time_ms.csv.gz"
"""Alibaba GenTD26 gateway queueing time, milliseconds; used for calibration."""

GENTD26_SERVICE_S = 39.0
"""Mean GPU service time of one GenTD26 (Stable Diffusion) request, seconds.

Derived from ``gentd26_model_predict_ms.csv.gz`` (6,254 samples of pure
inference time): mean 39.0 s, median 35.0 s, p90 74 s. The fluid model needs the
mean, since the work a second brings is its arrivals times the mean service time.
"""

TRACE_NAMES = (*AZURE_FILES, "gentd26", *generators.GENERATORS, f"{shapes.PREFIX}NAME")
"""Every name ``load_trace`` accepts besides a path to a rate file."""


@dataclass(frozen=True, slots=True)
class RateSeries:
    """A request rate sampled on a regular grid.

    Attributes:
        start_s: Time of the first sample, seconds (the trace's own clock).
        step_s: Seconds between samples; each value holds for one step.
        rps: Requests per second at each sample.
    """

    start_s: float
    step_s: float
    rps: FloatArray

    def per_second(self) -> FloatArray:
        """The rate held to a one-second grid.

        Returns:
            Requests per second for each second of the series.
        """
        duration = max(1, math.ceil(len(self.rps) * self.step_s))
        index = np.minimum((np.arange(duration) / self.step_s).astype(np.int64), len(self.rps) - 1)
        return np.asarray(self.rps[index], dtype=np.float64)


def resolve_traces_dir(explicit: Path | None = None) -> Path:
    """Where the shared trace files live.

    Args:
        explicit: A directory given on the command line; wins when set.

    Returns:
        The first of: ``explicit``, ``$GPUSCALE_TRACES_DIR``, ``./../shared/traces``,
        and ``../shared/traces`` next to this checkout.
    """
    if explicit is not None:
        return explicit
    env = os.environ.get(TRACES_DIR_ENV)
    if env:
        return Path(env)
    candidates = [
        Path.cwd() / ".." / "shared" / "traces",
        Path(__file__).resolve().parents[3] / ".." / "shared" / "traces",
    ]
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    return candidates[-1]


def _read_table(
    path: Path, columns: Sequence[str], *, optional: Sequence[str] = ()
) -> pd.DataFrame:
    """Read a CSV with a header as strings and check its columns.

    The returned frame has a ``_line`` column with each row's 1-based line in
    the file; blank lines are dropped.
    """
    if not path.is_file():
        raise config_error(str(path), "no such file", "check the path or --traces-dir")
    try:
        frame = pd.read_csv(
            path, dtype=str, keep_default_na=False, skip_blank_lines=False, compression="infer"
        )
    except pd.errors.ParserError as exc:
        detail = " ".join(str(exc).split())
        found = re.search(r"line (\d+)", detail)
        where = f"{path}:{found.group(1)}" if found else str(path)
        raise config_error(where, f"malformed CSV ({detail})", "fix that line") from exc
    except (UnicodeDecodeError, OSError, EOFError, pd.errors.EmptyDataError) as exc:
        raise config_error(f"{path}:1", f"cannot read the file ({exc})", "give a CSV file") from exc
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        wanted = ",".join(columns)
        if optional:
            wanted += f" (optional: {','.join(optional)})"
        raise config_error(
            f"{path}:1", f"header lacks column(s) {', '.join(missing)}", f"expected {wanted}"
        )
    frame = frame.fillna("")
    frame["_line"] = np.arange(len(frame)) + 2
    blank = (frame.drop(columns="_line") == "").all(axis=1)
    frame = frame[~blank]
    if frame.empty:
        raise config_error(f"{path}:2", "no data rows", "the trace needs at least one row")
    return frame


def _cell(path: Path, frame: pd.DataFrame, row: int, column: str) -> str:
    """``file:line:column`` of a cell, the column counted from 1 in the header."""
    return f"{path}:{int(frame['_line'].iloc[row])}:{list(frame.columns).index(column) + 1}"


def _check_span(path: Path, frame: pd.DataFrame, offsets: FloatArray, column: str) -> None:
    """Refuse a trace longer than ``MAX_TRACE_S``: it would be held second by second in memory."""
    past = np.flatnonzero(offsets > MAX_TRACE_S)
    if past.size:
        raise config_error(
            _cell(path, frame, int(past[0]), column),
            f"{column} lies more than {MAX_TRACE_S} s (31 days) after the first row's",
            "split the trace or check the unit (seconds)",
        )


def _numbers(
    path: Path, frame: pd.DataFrame, column: str, *, minimum: float | None = 0.0
) -> FloatArray:
    """A column as finite floats (of at least ``minimum`` unless None), or a ConfigError.

    The error names the first bad row; the bound is mentioned only when there is one.
    """
    values = pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(values)
    if minimum is not None:
        bad |= values < minimum
    if bad.any():
        first = int(np.argmax(bad))
        wanted = "a finite number" if minimum is None else f"a finite number >= {minimum:g}"
        raise config_error(
            _cell(path, frame, first, column), f"{column} is not {wanted}", "fix or remove the row"
        )
    return values


def read_azure_llm(
    path: Path, *, name: str = "azure", gpu_model: str = "H100"
) -> tuple[Workload, demand.RequestMarks]:
    """Read an Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``).

    Each request's GPU work comes from ``serving.llm_work_seconds`` (prefill and
    decode cost of its token counts); requests are binned by the second they
    arrive in, counted from the first request. The requests themselves are kept
    too, so that scaling (``demand.scale_demand``) draws whole requests rather
    than each second's mean request.

    Args:
        path: The CSV file.
        name: Workload name.
        gpu_model: Reference GPU the work is expressed on.

    Returns:
        The workload, one entry per second (``tokens`` has shape (seconds, 2):
        context and generated tokens arriving in each second), and each request's
        second, work and tokens in second order.

    Raises:
        ConfigError: The file is missing or malformed (with file, line and reason).
    """
    frame = _read_table(path, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
    stamps = pd.to_datetime(frame["TIMESTAMP"], format="ISO8601", errors="coerce")
    bad = stamps.isna().to_numpy()
    if bad.any():
        first = int(np.argmax(bad))
        raise config_error(
            _cell(path, frame, first, "TIMESTAMP"),
            "TIMESTAMP is not a date-time",
            "use YYYY-MM-DD HH:MM:SS[.fraction]",
        )
    context = _numbers(path, frame, "ContextTokens")
    generated = _numbers(path, frame, "GeneratedTokens")
    ns = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    offset_s = (ns - np.min(ns)) / 1e9
    _check_span(path, frame, offset_s, "TIMESTAMP")
    second = np.floor(offset_s).astype(np.int64)
    duration = int(np.max(second)) + 1
    work = llm_work_seconds(context, generated, gpu_model)
    arrivals = np.bincount(second, minlength=duration).astype(np.float64)
    work_s = np.asarray(np.bincount(second, weights=work, minlength=duration), dtype=np.float64)
    tokens = np.stack(
        [
            np.bincount(second, weights=context, minlength=duration),
            np.bincount(second, weights=generated, minlength=duration),
        ],
        axis=1,
    ).astype(np.float64)
    logger.info("read %s: %d requests over %d s", path, len(frame), duration)
    profile = RequestProfile.from_samples(work, context, generated)
    order = np.argsort(second, kind="stable")
    marks = demand.RequestMarks(
        second[order], work[order], np.stack([context, generated], axis=1)[order]
    )
    return Workload(name, arrivals, work_s, tokens, profile), marks


def read_gentd26_qps(path: Path) -> RateSeries:
    """Read GenTD26's QPS samples as the system's generative request rate.

    Rates are summed over containers per timestamp. The grid spans every
    timestamp in the file at its median spacing (57 s); a grid point without a
    generative sample is 0 requests/s, since containers report a rate only when
    they served something (no sample below 0.09 req/s exists in the file).

    Args:
        path: ``gentd26_qps.csv.gz``.

    Returns:
        The rate series on the trace's anonymised clock, requests per second.

    Raises:
        ConfigError: The file is missing or malformed.
    """
    frame = _read_table(path, ("timestamp_anon", "value", "container_ip", "request_type"))
    stamps = _numbers(path, frame, "timestamp_anon")
    values = _numbers(path, frame, "value")
    unique = np.unique(stamps)
    step = float(np.median(np.diff(unique))) if len(unique) > 1 else 60.0
    start = float(unique[0])
    slot = np.rint((stamps - start) / step).astype(np.int64)
    generative = (frame["request_type"] == GENTD26_REQUEST_TYPE).to_numpy()
    rps = np.bincount(slot[generative], weights=values[generative], minlength=int(np.max(slot)) + 1)
    logger.info("read %s: %d steps of %.0f s", path, len(rps), step)
    return RateSeries(start, step, rps.astype(np.float64))


def read_gentd26_service(path: Path) -> RequestProfile:
    """Read GenTD26's per-request inference times as a service-time profile.

    Args:
        path: ``gentd26_model_predict_ms.csv.gz`` (column ``value``, milliseconds).

    Returns:
        The shape of the service-time distribution (mean 1).

    Raises:
        ConfigError: The file is missing or malformed.
    """
    frame = _read_table(path, ("value",))
    return RequestProfile.from_samples(_numbers(path, frame, "value"))


def gentd26_workload(path: Path, *, service_s: float = GENTD26_SERVICE_S) -> Workload:
    """The GenTD26 generative request rate as a workload.

    Service times follow the measured ``model_predict_ms`` distribution when that
    file lies next to ``path`` (its shape, scaled to ``service_s``); otherwise they
    are exponential.

    Args:
        path: ``gentd26_qps.csv.gz``.
        service_s: GPU seconds per request (default: the trace's mean inference time).

    Returns:
        The workload, the 57 s rate held over each second.
    """
    arrivals = read_gentd26_qps(path).per_second()
    predict = find_file(path.parent, GENTD26_PREDICT_FILE)
    profile = None if predict is None else read_gentd26_service(predict)
    return Workload("gentd26", arrivals, arrivals * service_s, profile=profile)


def read_rate_file(path: Path, *, service_s: float, name: str | None = None) -> Workload:
    """Read a generic rate file: ``time_s,rps`` with an optional ``service_s`` column.

    Each row's rate holds until the next row's time; the last row holds for the
    median spacing of the rows (one second if there is a single row). Times
    count from the first row.

    Args:
        path: The CSV file.
        service_s: GPU seconds per request where the file has no ``service_s`` column.
        name: Workload name; the file's stem by default.

    Returns:
        The workload on the one-second grid.

    Raises:
        ConfigError: The file is missing or malformed (with file, line and reason).
    """
    frame = _read_table(path, ("time_s", "rps"), optional=("service_s",))
    times = _numbers(path, frame, "time_s", minimum=None)
    rps = _numbers(path, frame, "rps")
    service = _numbers(path, frame, "service_s") if "service_s" in frame.columns else None
    back = np.flatnonzero(np.diff(times) <= 0)
    if back.size:
        row = int(back[0]) + 1
        raise config_error(
            f"{path}:{int(frame['_line'].iloc[row])}",
            f"time_s {times[row]:g} is not after the previous row's {times[row - 1]:g}",
            "sort the rows by strictly increasing time_s",
        )
    step = float(np.median(np.diff(times))) if len(times) > 1 else 1.0
    offsets = times - times[0]
    ends = offsets.copy()
    ends[-1] += step  # the last row's rate holds for one step
    _check_span(path, frame, ends, "time_s")
    duration = max(1, math.ceil(offsets[-1] + step))
    row_of_second = np.searchsorted(offsets, np.arange(duration), side="right") - 1
    arrivals = rps[row_of_second]
    per_request = np.full_like(arrivals, service_s) if service is None else service[row_of_second]
    return Workload(name or path.stem, arrivals, arrivals * per_request)


def load_trace(
    spec: str,
    *,
    scale: float = 1.0,
    duration_s: int | None = None,
    seed: int = 0,
    traces_dir: Path | None = None,
    service_s: float | None = None,
) -> Workload:
    """Resolve a trace name or rate-file path into a scaled workload.

    Args:
        spec: ``azure-code``, ``azure-conv``, ``gentd26``, a generator name
            (``diurnal``, ``bursty``, ``flash-crowd``, ``ramp``), ``shape:NAME`` (one of
            ``sim.shapes``) or a rate file path.
        scale: Multiplies the request rate (and the work), to run a trace at fleet size;
            an Azure trace is redrawn as Poisson arrivals at that rate (``sim.demand``).
        duration_s: Keep the first this many seconds (generators: their length).
        seed: Seed of the generators' randomness and of that redraw.
        traces_dir: Directory of the shared trace files.
        service_s: GPU seconds per request for generators and rate files
            (default: each one's own default); GenTD26 uses its measured mean.

    Returns:
        The workload, already scaled and cut to ``duration_s``.

    Raises:
        ConfigError: Unknown name, bad scale or duration, or a malformed or missing file.
    """
    if not (math.isfinite(scale) and scale > 0):
        raise config_error(f"--scale {scale}", "must be a number > 0", "e.g. --scale 10")
    if duration_s is not None and duration_s <= 0:
        raise config_error(
            f"--duration {duration_s}", "must be > 0 seconds", "e.g. --duration 3600"
        )
    if service_s is not None and not (math.isfinite(service_s) and service_s > 0):
        raise config_error(
            f"--service-time {service_s}",
            "must be a number of seconds > 0",
            "e.g. --service-time 1",
        )
    if spec in generators.GENERATORS:
        kwargs = {} if service_s is None else {"service_s": service_s}
        return generators.generate(spec, duration_s=duration_s, scale=scale, seed=seed, **kwargs)
    if spec.startswith(shapes.PREFIX):
        kwargs = {} if service_s is None else {"service_s": service_s}
        return shapes.generate(spec, duration_s=duration_s, scale=scale, seed=seed, **kwargs)
    workload, marks = _read_named(spec, traces_dir, service_s)
    if duration_s is not None:
        if duration_s > workload.duration_s:
            raise config_error(
                f"--duration {duration_s}",
                f"trace {spec!r} lasts only {workload.duration_s} s",
                "give a shorter --duration",
            )
        workload = workload.window(0, duration_s)
        marks = None if marks is None else marks.head(duration_s)
    counts = spec in AZURE_FILES
    return demand.scale_demand(workload, scale, seed=seed, counts=counts, marks=marks)


def _read_named(
    spec: str, traces_dir: Path | None, service_s: float | None
) -> tuple[Workload, demand.RequestMarks | None]:
    if spec in AZURE_FILES or spec == "gentd26":
        directory = resolve_traces_dir(traces_dir)
        filename = AZURE_FILES.get(spec, GENTD26_QPS_FILE)
        path = find_file(directory, filename)
        if path is None:
            raise config_error(
                f"--trace {spec}",
                f"none of {', '.join(file_names(filename))} found in {directory}",
                f"set --traces-dir or {TRACES_DIR_ENV} to the directory holding it",
            )
        if spec == "gentd26":
            return gentd26_workload(path), None
        return read_azure_llm(path, name=spec)
    path = Path(spec)
    if path.is_dir():
        raise config_error(f"--trace {spec}", "is a directory", "give a time_s,rps CSV file")
    if not path.is_file():
        if _looks_like_path(spec):
            raise config_error(
                f"--trace {spec}", f"no such file: {path}", "check the path to the time_s,rps CSV"
            )
        names = ", ".join(TRACE_NAMES)
        raise config_error(
            f"--trace {spec}",
            "neither a trace name nor a file",
            f"use one of {names} or a path to a time_s,rps CSV",
        )
    return read_rate_file(path, service_s=service_s or generators.DEFAULT_SERVICE_S), None


def _looks_like_path(spec: str) -> bool:
    """Whether a ``--trace`` value was meant as a file (has a directory part or a CSV suffix)."""
    return "/" in spec or os.sep in spec or spec.lower().endswith((".csv", ".csv.gz"))
