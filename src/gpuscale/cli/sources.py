"""Opening the telemetry source a command asked for, real GPUs unless the simulator is named.

``--source auto`` (the exporter's default) looks for real GPUs, NVML first and
then amdsmi, and refuses to start when it finds none: an exporter deployed as a
drop-in for dcgm-exporter on a node without GPUs (or without the driver) must
not feed alerts and autoscalers invented numbers. Simulated GPUs are served
only under ``--source sim``, and every exporter says which it serves
(``gpuscale_exporter_info{source=...}``).
"""

import logging
from dataclasses import dataclass
from pathlib import Path

from gpuscale.cli import amd_options as amd
from gpuscale.cli.exporter_options import SourceName
from gpuscale.errors import ConfigError, SourceUnavailableError
from gpuscale.telemetry.base import GpuSource

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SimFleet:
    """The simulated fleet ``--source sim`` serves.

    Attributes:
        gpus: How many GPUs.
        models: Comma-separated models, cycled over the GPUs.
        load: Load spec (``constant:0.7``, ``sine[...]``, ``trace:FILE``).
        seed: Seed of the fleet.
        faults: Fault specs (``KIND@SECONDS:gpu=N...``).
    """

    gpus: int = 8
    models: str = "H100"
    load: str = "sine"
    seed: int = 0
    faults: tuple[str, ...] = ()


def open_source(
    source: SourceName,
    fleet: SimFleet,
    hostname: str,
    amd_config: Path | None = None,
    slurm: bool = True,
) -> tuple[GpuSource, SourceName]:
    """Open the source ``--source`` names, with the options that apply to it.

    Args:
        source: ``auto``, ``nvml``, ``amd`` or ``sim``.
        fleet: What to simulate (sim only).
        hostname: The host label's value.
        amd_config: AMD device-metrics-exporter config.json, for AMD GPUs.
        slurm: Label AMD series with Slurm jobs.

    Returns:
        The open source and the backend it is (``auto`` resolved to ``nvml`` or ``amd``).

    Raises:
        ConfigError: An option is wrong or does not apply to the source.
        SourceUnavailableError: The named backend cannot start, or ``auto`` found no GPUs.
    """
    if source is SourceName.sim:
        return _open_sim(fleet, hostname, amd_config, slurm), source
    if source is SourceName.nvml:
        return _open_nvml(hostname, amd_config, slurm), source
    if source is SourceName.amd:
        return amd.open_amd(amd_config, slurm, hostname), source
    return _open_real(hostname, amd_config, slurm)


def _open_nvml(hostname: str, amd_config: Path | None, slurm: bool) -> GpuSource:
    from gpuscale.telemetry.nvml import NvmlSource

    amd.refuse_for_nvidia(amd_config, not slurm)
    return NvmlSource(hostname=hostname)


def _open_real(hostname: str, amd_config: Path | None, slurm: bool) -> tuple[GpuSource, SourceName]:
    """The first backend with GPUs: NVML, then amdsmi; none is a one-line error."""
    from gpuscale.telemetry.nvml import NvmlSource

    why: list[str] = []
    for name in (SourceName.nvml, SourceName.amd):
        try:
            found = (
                NvmlSource(hostname=hostname)
                if name is SourceName.nvml
                else amd.open_amd(amd_config, slurm, hostname)
            )
        except SourceUnavailableError as err:
            why.append(f"{name.value}: {err.reason}")
            continue
        if not found.devices():
            found.close()
            why.append(f"{name.value}: no GPUs")
            continue
        if name is SourceName.nvml:
            try:  # the AMD options are a mistake only once the GPUs turn out NVIDIA's
                amd.refuse_for_nvidia(amd_config, not slurm)
            except ConfigError:
                found.close()
                raise
        logger.info("--source auto: %d GPUs through %s", len(found.devices()), name.value)
        return found, name
    raise SourceUnavailableError(
        f"--source auto: no GPUs found ({'; '.join(why)}): run on a node with NVIDIA or AMD"
        " GPUs and their driver, or serve simulated GPUs with --source sim"
    )


def _open_sim(fleet: SimFleet, hostname: str, amd_config: Path | None, slurm: bool) -> GpuSource:
    """Simulated GPUs; AMD models are served under device-metrics-exporter's names."""
    from gpuscale.telemetry.faults import parse_fault
    from gpuscale.telemetry.loads import parse_load_spec
    from gpuscale.telemetry.physics import gpu_model
    from gpuscale.telemetry.sim import SimSource

    names = tuple(m.strip() for m in fleet.models.split(",") if m.strip())
    for name in names:
        gpu_model(name)  # validates before anything starts
    fault_specs = [parse_fault(f, "exporter") for f in fleet.faults]
    vendors = {gpu_model(name).vendor for name in names}
    if len(vendors) > 1:
        raise ConfigError(
            f"--gpu-models {fleet.models!r}: mixes NVIDIA and AMD models, which a node does not;"
            " simulate one vendor per exporter"
        )
    config = None
    if vendors == {"amd"}:
        config = amd.amd_config(amd_config, hostname, default=False)
    else:
        amd.refuse_for_nvidia(amd_config, not slurm)
    sim = SimSource(
        fleet.gpus,
        names,
        load=parse_load_spec(fleet.load, fleet.seed),
        seed=fleet.seed,
        faults=fault_specs,
        hostname=hostname,
    )
    return amd.open_amd_sim(sim, config, slurm) if vendors == {"amd"} else sim
