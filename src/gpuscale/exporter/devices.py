"""Which NVIDIA entities are exported: dcgm-exporter's ``-d/--devices`` option.

dcgm-exporter 4.x accepts ``f`` (the default), ``g[:RANGE]`` or ``i[:RANGE]``,
where RANGE is ``N``, ``N-M`` or a comma list of them:

- ``f``: per GPU, its MIG instances when it has any, else the GPU itself, so a
  ``sum`` over a node never counts a MIG GPU's memory twice;
- ``g``: whole GPUs (by index); ``i``: MIG GPU instances, numbered across the
  host in discovery order (GPU index, then instance id), as DCGM numbers its
  GPU-instance entities.

Listed indices must exist, as upstream requires; an ``i`` without MIG instances
is refused. ``-s``/``-p`` (NvSwitches, CPUs) take the same grammar.
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

from gpuscale.errors import ConfigError
from gpuscale.telemetry.base import GpuInfo

_SPEC = re.compile(r"^(?P<kind>[fgi])(?::(?P<range>.*))?$")
MAX_INDEX = 4095
"""The highest index a range may name: far above any host's GPUs or MIG instances
(8 GPUs x 7 instances), low enough that a typo cannot ask for millions of entries."""


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A parsed ``--devices`` value.

    Attributes:
        kind: ``f`` (flex), ``g`` (GPUs) or ``i`` (GPU instances).
        indices: The listed indices; None for all of that kind.
        text: The value as given, for messages.
    """

    kind: str
    indices: tuple[int, ...] | None
    text: str


def _indices(text: str, where: str) -> tuple[int, ...]:
    out: dict[int, None] = {}  # ordered, and repeated items cost nothing
    for part in text.split(","):
        bounds = part.strip().split("-")
        if len(bounds) > 2 or not all(b.strip().isascii() and b.strip().isdigit() for b in bounds):
            raise ConfigError(
                f"{where}: range item {part!r} must be <number> or <number>-<number>, e.g. g:0,2-3"
            )
        low, high = int(bounds[0]), int(bounds[-1])
        if high > MAX_INDEX:
            raise ConfigError(
                f"{where}: range item {part.strip()!r} goes past index {MAX_INDEX}; "
                "list indices of entities that exist, e.g. g:0-7"
            )
        out.update(dict.fromkeys(range(low, high + 1)))
    return tuple(out)


def parse_devices(text: str, where: str = "--devices") -> DeviceSpec:
    """Parse ``f``, ``g[:RANGE]`` or ``i[:RANGE]``.

    Raises:
        ConfigError: Anything else, naming ``where``.
    """
    match = _SPEC.match(text.strip())
    if match is None:
        raise ConfigError(
            f"{where} {text!r}: use f, g[:RANGE] or i[:RANGE] (e.g. g:0-3 or i:0,2), "
            "as dcgm-exporter 4.x accepts"
        )
    kind, rng = match["kind"], match["range"]
    if kind == "f" and rng is not None:
        raise ConfigError(f"{where} {text!r}: f takes no range; use g:RANGE or i:RANGE")
    return DeviceSpec(kind, None if rng is None else _indices(rng, f"{where} {text!r}"), text)


def select_entities(spec: DeviceSpec, entities: Sequence[GpuInfo]) -> frozenset[str]:
    """Keys of the NVIDIA entities ``spec`` exports among ``entities``.

    Raises:
        ConfigError: A listed index does not exist, or ``i`` on a host without MIG instances.
    """
    gpus = [e for e in entities if e.vendor == "nvidia" and e.mig_instance_id is None]
    migs = sorted(
        (e for e in entities if e.vendor == "nvidia" and e.mig_instance_id is not None),
        key=lambda e: (e.index, e.mig_instance_id or 0),
    )
    if spec.kind == "f":
        parents = {str(m.uuid) for m in migs}
        keep = [g for g in gpus if str(g.uuid) not in parents] + migs
        return frozenset(e.key for e in keep)
    if spec.kind == "g":
        by_index = {g.index: g for g in gpus}
        chosen = sorted(by_index) if spec.indices is None else spec.indices
        missing = [i for i in chosen if i not in by_index]
        if missing:
            raise ConfigError(
                f"--devices {spec.text!r}: no GPU {missing[0]} on this host "
                f"(GPUs: {sorted(by_index)}); list GPUs that exist"
            )
        return frozenset(by_index[i].key for i in chosen)
    if not migs:
        raise ConfigError(
            f"--devices {spec.text!r}: no MIG GPU instances on this host; "
            "i needs MIG mode, use f or g"
        )
    wanted = tuple(range(len(migs))) if spec.indices is None else spec.indices
    missing = [i for i in wanted if not 0 <= i < len(migs)]
    if missing:
        raise ConfigError(
            f"--devices {spec.text!r}: no GPU instance {missing[0]} on this host "
            f"(instances 0-{len(migs) - 1}); list instances that exist"
        )
    return frozenset(migs[i].key for i in wanted)
