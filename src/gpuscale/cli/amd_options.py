"""AMD device-metrics-exporter's options of ``gpuscale exporter``, and opening an AMD source.

AMD's exporter takes its settings from ``--amd-metrics-config`` (a ``config.json``,
``/etc/metrics/config.json`` by default) and a few flags; the ones that change
what the series carry are taken here with the same names and values:
``--amd-metrics-config`` (custom labels such as ``CLUSTER_NAME``, the field list,
the profiler; see ``telemetry/amd_config.py``) and ``--enable-slurm-scl`` (Slurm
job labels, on by default; ``--enable-slurm-scl=false`` as in Go). They apply to
``--source amd`` and to simulated AMD models (``--source sim --gpu-models MI300X``).
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuscale.errors import config_error
from gpuscale.telemetry.amd_config import DEFAULT_PATH, AmdConfig, load_amd_config
from gpuscale.telemetry.base import GpuSource
from gpuscale.telemetry.slurm import SlurmJob, SlurmJobs

if TYPE_CHECKING:
    from gpuscale.telemetry.sim import SimSource

AmdMetricsConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--amd-metrics-config",
        help="AMD device-metrics-exporter config.json: CustomLabels, Fields, ProfilerMetrics,"
        f" ProfilerConfig (AMD GPUs only; default: {DEFAULT_PATH} when it exists).",
        envvar="GPUSCALE_AMD_METRICS_CONFIG",
    ),
]
EnableSlurmSclOpt = Annotated[
    bool,
    typer.Option(
        "--enable-slurm-scl/--no-enable-slurm-scl",
        help="Label AMD series with the Slurm job holding each GPU (AMD's prolog files);"
        " --enable-slurm-scl=false turns it off, as in device-metrics-exporter.",
        envvar="GPUSCALE_ENABLE_SLURM_SCL",
    ),
]


class _NoJobs(SlurmJobs):
    """``--enable-slurm-scl=false``: no GPU is held by a Slurm job."""

    def by_gpu(self) -> dict[int, SlurmJob]:
        """No jobs."""
        return {}


def amd_config(path: Path | None, hostname: str, *, default: bool) -> AmdConfig | None:
    """The ``config.json`` to follow: the one named, else upstream's default path if asked.

    Args:
        path: ``--amd-metrics-config``.
        hostname: This node, for per-host ``ProfilerMetrics`` entries.
        default: Fall back to ``/etc/metrics/config.json`` when it exists (real AMD nodes).

    Returns:
        The parsed config, or None when there is none.

    Raises:
        ConfigError: The file is unreadable or asks for what gpuscale cannot do.
    """
    if path is None and default and DEFAULT_PATH.is_file():
        path = DEFAULT_PATH
    return None if path is None else load_amd_config(path, hostname)


def refuse_for_nvidia(config: Path | None, slurm_given: bool) -> None:
    """AMD options with NVIDIA GPUs are a mistake, said in one line.

    Raises:
        ConfigError: One of them was given.
    """
    if config is not None:
        raise config_error(
            f"--amd-metrics-config {config}", "applies to AMD GPUs only", "remove it"
        )
    if slurm_given:
        raise config_error(
            "--enable-slurm-scl",
            "applies to AMD GPUs only",
            "use --hpc-job-mapping-dir for NVIDIA GPUs",
        )


def open_amd_sim(sim: "SimSource", config: AmdConfig | None, slurm: bool) -> GpuSource:
    """Simulated AMD GPUs under device-metrics-exporter's names."""
    from gpuscale.telemetry.amd_sim import AmdSimSource

    return AmdSimSource(sim, config=config, slurm=None if slurm else _NoJobs())


def open_amd(config_path: Path | None, slurm: bool, hostname: str) -> GpuSource:
    """Real AMD GPUs through amdsmi, following ``config.json`` as upstream does.

    Raises:
        ConfigError: The config file is wrong.
        SourceUnavailableError: amdsmi cannot start here.
    """
    from gpuscale.telemetry.amd import AmdSource

    config = amd_config(config_path, hostname, default=True)
    return AmdSource(hostname=hostname, config=config, slurm=None if slurm else _NoJobs())
