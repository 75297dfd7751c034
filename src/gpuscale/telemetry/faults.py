"""One fault grammar for every command that injects faults: ``KIND@SECONDS[:key=value]...``.

``gpuscale exporter --source sim`` breaks simulated GPUs on one host and
``gpuscale evaluate`` breaks replicas of a simulated deployment. Both describe the
same events (a GPU off the bus, a cooling failure, an ECC error), so both read the
same spelling, from ``--fault`` or the ``GPUSCALE_FAULTS`` environment variable,
through ``parse_fault``. This module sits in ``telemetry`` because that is the
lowest layer both the exporter and the simulator import.

Kinds and their keys (``target`` is ``gpu=N`` on the exporter, ``replica=N`` in the
simulator):

==================  =====================================  =========  =========
kind                keys                                   exporter   simulator
==================  =====================================  =========  =========
``gpu-lost``        target, ``duration`` (simulator only)  yes        yes
``xid``             ``code`` (required), target            yes        no
``thermal``         target, ``rise_c``, ``duration``       yes        yes
``ecc-dbe``         target                                 yes        yes
``row-remap``       target                                 yes        no
``straggler``       target, ``factor``, ``duration``       yes        yes
``power-cap``       target, ``limit_w``, ``duration``      yes        no
``memory-full``     target, ``share``, ``duration``        yes        no
``idle-allocated``  target, ``duration``                   yes        no
``stale``           target, ``duration``                   yes        no
``exporter-down``   ``duration`` (the whole host)          yes        no
==================  =====================================  =========  =========

The spellings of the previous release (``xid:79:gpu=3:at=60``, ``extra=``,
``extra_c=``) still parse, with a deprecation warning logged once per spelling.
"""

import logging
import math
from dataclasses import dataclass
from typing import Literal, cast, get_args

from gpuscale.errors import config_error, require

logger = logging.getLogger(__name__)

FaultKind = Literal[
    "gpu-lost",
    "xid",
    "thermal",
    "ecc-dbe",
    "row-remap",
    "straggler",
    "power-cap",
    "memory-full",
    "idle-allocated",
    "stale",
    "exporter-down",
    "metrics-down",
]
Injector = Literal["exporter", "simulator"]
KINDS: tuple[str, ...] = get_args(FaultKind)

DEFAULT_RISE_C = 35.0
"""Equilibrium temperature rise of a thermal fault, Celsius, when ``rise_c`` is not given.

At 35 C an H100, H200, A100 or V100 throttles from about half load (it needs
+34 to +36 C there) and every modelled GPU throttles at full load (+11 to +18 C).
The previous exporter default, 20 C, showed throttling only near full load, so a
fault on a GPU at the usual serving load changed nothing a user could see.
"""
DEFAULT_FACTOR = 0.5
"""Share of its speed a straggler keeps when ``factor`` is not given."""
DEFAULT_SHARE = 0.99
"""Share of the usable framebuffer a ``memory-full`` fault holds when ``share`` is not given:
a caching allocator that grabbed all it could, leaving the few hundred MiB it cannot use."""
DEFAULT_LIMIT_SHARE = 0.3
"""Power limit of a ``power-cap`` fault without ``limit_w``, as a share of the card's TDP:
about the lowest limit ``nvidia-smi -pl`` accepts (200 W on a 700 W H100, 100 W on a
400 W A100), where a power brake or a misconfigured limit leaves a card."""
HOST_KINDS = frozenset({"exporter-down", "metrics-down"})
"""Kinds that hit a whole host, not one GPU: they take no ``gpu=N``."""
XID_GPU_LOST = 79
"""The XID of a GPU that has fallen off the bus, which ``gpu-lost`` reports."""

_KIND_KEYS: dict[str, frozenset[str]] = {
    "gpu-lost": frozenset({"duration"}),
    "xid": frozenset({"code"}),
    "thermal": frozenset({"rise_c", "duration"}),
    "ecc-dbe": frozenset(),
    "row-remap": frozenset(),
    "straggler": frozenset({"factor", "duration"}),
    "power-cap": frozenset({"limit_w", "duration"}),
    "memory-full": frozenset({"share", "duration"}),
    "idle-allocated": frozenset({"duration"}),
    "stale": frozenset({"duration"}),
    "exporter-down": frozenset({"duration"}),
    "metrics-down": frozenset({"duration"}),
}
"""Keys each kind takes besides its target (``gpu`` or ``replica``)."""
_KEY_ORDER = ("code", "gpu", "replica", "duration", "factor", "rise_c", "limit_w", "share")
_ENDS_ON_EXPORTER = frozenset(
    {"thermal", "straggler", "power-cap", "memory-full", "idle-allocated", "stale", "exporter-down"}
)
"""Kinds the exporter can end after ``duration``; the rest leave a GPU broken for good."""
_INJECTS: dict[Injector, tuple[str, ...]] = {
    # the exporter's sim source injects every kind but the metric source's outage
    "exporter": tuple(k for k in KINDS if k != "metrics-down"),
    "simulator": ("gpu-lost", "thermal", "ecc-dbe", "straggler", "metrics-down"),
}
_TARGET: dict[Injector, str] = {"exporter": "gpu", "simulator": "replica"}
_COMMAND: dict[Injector, str] = {
    "exporter": "gpuscale exporter",
    "simulator": "the simulator (gpuscale evaluate)",
}
_FORMS: dict[Injector | None, str] = {
    "exporter": "gpu-lost@SECONDS:gpu=N, xid@SECONDS:code=N:gpu=N, "
    "thermal@SECONDS:gpu=N[:rise_c=C][:duration=SECONDS], ecc-dbe@SECONDS:gpu=N, "
    "row-remap@SECONDS:gpu=N, straggler@SECONDS:gpu=N[:factor=F][:duration=SECONDS], "
    "power-cap@SECONDS:gpu=N[:limit_w=W][:duration=SECONDS], "
    "memory-full@SECONDS:gpu=N[:share=S][:duration=SECONDS], "
    "idle-allocated@SECONDS:gpu=N[:duration=SECONDS], stale@SECONDS:gpu=N[:duration=SECONDS], "
    "exporter-down@SECONDS[:duration=SECONDS]",
    "simulator": "gpu-lost@SECONDS[:replica=N][:duration=SECONDS], "
    "thermal@SECONDS[:replica=N][:rise_c=C][:duration=SECONDS], "
    "ecc-dbe@SECONDS[:replica=N], straggler@SECONDS[:replica=N][:factor=F][:duration=SECONDS], "
    "metrics-down@SECONDS[:duration=SECONDS]",
    None: "KIND@SECONDS[:key=value]..., KIND one of " + ", ".join(KINDS),
}
_LEGACY_KINDS = ("xid", "ecc-dbe", "thermal", "row-remap")
_RENAMED = {"extra": "rise_c", "extra_c": "rise_c"}
_warned: set[str] = set()


def forms(injector: Injector | None = None) -> str:
    """The accepted fault spellings, for help texts and error messages.

    Returns:
        One line listing the forms ``injector`` accepts (every kind when None).
    """
    return _FORMS[injector]


def _fmt(value: float) -> str:
    """Shortest text that parses back to exactly ``value``."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault at one time, on the exporter's host or in a simulated deployment.

    Attributes:
        kind: ``gpu-lost`` (XID 79, the GPU falls off the bus), ``xid`` (any XID
            event), ``thermal`` (failed cooling), ``ecc-dbe`` (double-bit ECC error,
            XID 48), ``row-remap`` (row remap failure, XID 64), ``straggler`` (a GPU
            or replica slower than its peers), ``power-cap`` (power limit lowered or
            power brake), ``memory-full`` (framebuffer nearly all allocated),
            ``idle-allocated`` (a pod holds a GPU that does nothing), ``stale`` (the
            GPU's values stop updating while the exporter answers),
            ``exporter-down`` (the host's exporter stops answering) or, in the
            simulator only, ``metrics-down`` (the metric source, Prometheus, does not
            answer the autoscaler).
        at_s: Seconds from the start (of the exporter, or of the simulated run).
        gpu: GPU index on the exporter's host.
        replica: Which Ready replica the simulator hits (0 = oldest); None picks one
            with the run's seed.
        code: XID code of an ``xid`` fault.
        duration_s: Seconds the fault lasts (until the GPU is replaced for
            ``gpu-lost``); None for the rest of the run.
        factor: Share of its speed a straggler keeps, 0 to 1.
        rise_c: Equilibrium temperature rise of a thermal fault, Celsius.
        limit_w: Power limit of a ``power-cap`` fault, W; None: ``DEFAULT_LIMIT_SHARE``
            of the card's TDP.
        share: Share of the usable framebuffer a ``memory-full`` fault holds, 0 to 1.

    ``validate`` checks the values; ``parse_fault`` and both injectors call it.
    """

    kind: FaultKind
    at_s: float
    gpu: int | None = None
    replica: int | None = None
    code: int | None = None
    duration_s: float | None = None
    factor: float = DEFAULT_FACTOR
    rise_c: float = DEFAULT_RISE_C
    limit_w: float | None = None
    share: float = DEFAULT_SHARE

    def spec(self) -> str:
        """The fault in ``parse_fault`` syntax.

        Returns:
            A spec that parses back to an equal fault.
        """
        values: dict[str, float | None] = {
            "code": self.code,
            "gpu": self.gpu,
            "replica": self.replica,
            "duration": self.duration_s,
            "factor": None if self.factor == DEFAULT_FACTOR else self.factor,
            "rise_c": None if self.rise_c == DEFAULT_RISE_C else self.rise_c,
            "limit_w": self.limit_w,
            "share": None if self.share == DEFAULT_SHARE else self.share,
        }
        parts = [f"{self.kind}@{_fmt(float(self.at_s))}"]
        parts += [f"{k}={_fmt(float(v))}" for k in _KEY_ORDER if (v := values[k]) is not None]
        return ":".join(parts)


def _problem(fault: Fault) -> str | None:
    """What is wrong with ``fault``, or None."""
    if fault.kind not in KINDS:
        return f"unknown fault kind {fault.kind!r}"
    keys = _KIND_KEYS[fault.kind]
    checks = (
        (math.isfinite(fault.at_s) and fault.at_s >= 0, "the time must be seconds >= 0"),
        (fault.gpu is None or fault.gpu >= 0, "gpu must be an index >= 0"),
        (fault.replica is None or fault.replica >= 0, "replica must be an index >= 0"),
        ((fault.code is not None) == ("code" in keys), "code=N is for xid faults only"),
        (fault.code is None or fault.code >= 1, "code must be an XID number >= 1"),
        (fault.duration_s is None or "duration" in keys, f"{fault.kind} takes no duration"),
        (
            fault.duration_s is None or (math.isfinite(fault.duration_s) and fault.duration_s >= 0),
            "duration must be seconds >= 0",
        ),
        (fault.factor == DEFAULT_FACTOR or "factor" in keys, "factor is for straggler only"),
        (0.0 < fault.factor <= 1.0, "factor must be in (0, 1]"),
        (fault.rise_c == DEFAULT_RISE_C or "rise_c" in keys, "rise_c is for thermal only"),
        (math.isfinite(fault.rise_c) and fault.rise_c > 0, "rise_c must be Celsius > 0"),
        (fault.limit_w is None or "limit_w" in keys, "limit_w is for power-cap only"),
        (
            fault.limit_w is None or (math.isfinite(fault.limit_w) and fault.limit_w > 0),
            "limit_w must be watts > 0",
        ),
        (fault.share == DEFAULT_SHARE or "share" in keys, "share is for memory-full only"),
        (0.0 < fault.share <= 1.0, "share must be in (0, 1]"),
    )
    if fault.kind == "xid" and fault.code is None:
        return "xid needs code=N, the XID number (for XID 79 write gpu-lost)"
    return next((problem for ok, problem in checks if not ok), None)


def _number(spec: str, injector: Injector | None, key: str, text: str, *, whole: bool) -> float:
    """Read one number of a spec: finite, >= 0, and whole where ``whole``."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    where = f"--fault {spec!r}"
    fix = f"use {forms(injector)}"
    require(math.isfinite(value) and value >= 0, where, f"{key}={text!r} is not a number >= 0", fix)
    require(not whole or value.is_integer(), where, f"{key}={text} must be a whole number", fix)
    return value


def _deprecated(spelling: str, old: str, new: str) -> None:
    """Log, once per process and spelling, that ``old`` is to be written ``new``."""
    if spelling in _warned:
        return
    _warned.add(spelling)
    logger.warning(
        "fault spec %r uses the deprecated %s spelling, which stops working in the next "
        "release; write %r",
        old,
        spelling,
        new,
    )


def _keys(
    spec: str, injector: Injector | None, parts: list[str], allowed: frozenset[str]
) -> tuple[dict[str, float], list[str]]:
    """Read ``key=value`` parts into numbers, mapping ``extra``/``extra_c`` to ``rise_c``.

    Returns:
        The numbers by canonical key, and the deprecated keys used.
    """
    where, fix = f"--fault {spec!r}", f"use {forms(injector)}"
    values: dict[str, float] = {}
    renamed: list[str] = []
    for part in parts:
        key, eq, value = part.partition("=")
        canonical = _RENAMED.get(key, key)
        keys = ", ".join(k for k in (*_KEY_ORDER, "at") if k in allowed)
        require(bool(eq) and canonical in allowed, where, f"{part!r} is not one of {keys}", fix)
        require(canonical not in values, where, f"{canonical} is given twice", fix)
        whole = canonical in ("gpu", "replica", "code")
        values[canonical] = _number(spec, injector, key, value, whole=whole)
        if key != canonical:
            renamed.append(key)
    return values, renamed


def _legacy(spec: str, text: str, injector: Injector | None) -> Fault:
    """Parse the exporter's previous form ``KIND[:CODE]:gpu=N[:at=S][:extra=C]``."""
    kind, *parts = text.split(":")
    code = XID_GPU_LOST if kind == "xid" else None
    if kind == "xid" and parts and "=" not in parts[0]:
        code = int(_number(spec, injector, "code", parts.pop(0), whole=True))
    extra = frozenset({"rise_c"}) if kind == "thermal" else frozenset()
    values, _ = _keys(spec, injector, parts, frozenset({"gpu", "at"}) | extra)
    lost = kind == "xid" and code == XID_GPU_LOST
    fault = Fault(
        cast("FaultKind", "gpu-lost" if lost else kind),
        values.get("at", 0.0),
        gpu=int(values["gpu"]) if "gpu" in values else None,
        code=None if lost else code,
        rise_c=values.get("rise_c", DEFAULT_RISE_C),
    )
    validate(fault, injector, spec)
    _deprecated("KIND:gpu=N:at=SECONDS", spec, fault.spec())
    return fault


def parse_fault(spec: str, injector: Injector | None = None) -> Fault:
    """Parse a ``--fault`` spec such as ``gpu-lost@600:gpu=3`` or ``thermal@300:duration=600``.

    Args:
        spec: The spec as the user typed it.
        injector: The command that will inject it: its kinds and target key are
            enforced, and its forms are named in errors. None accepts every kind.

    Returns:
        The fault.

    Raises:
        ConfigError: The spec is malformed, or names a kind or key ``injector``
            cannot inject; the message names the spec and the accepted forms.
    """
    text = spec.strip()
    where, fix = f"--fault {spec!r}", f"use {forms(injector)}"
    kind, at_sign, rest = text.partition("@")
    if not at_sign:
        if text.split(":")[0] in _LEGACY_KINDS and ":" in text:
            return _legacy(spec, text, injector)
        raise config_error(where, "expected KIND@SECONDS", fix)
    require(kind in KINDS, where, f"unknown fault kind {kind!r}", fix)
    at_text, *parts = rest.split(":")
    at_s = _number(spec, injector, "at", at_text, whole=False)
    values, renamed = _keys(spec, injector, parts, _KIND_KEYS[kind] | {"gpu", "replica"})
    whole = {k: int(values[k]) if k in values else None for k in ("gpu", "replica", "code")}
    fault = Fault(
        cast("FaultKind", kind),
        at_s,
        gpu=whole["gpu"],
        replica=whole["replica"],
        code=whole["code"],
        duration_s=values.get("duration"),
        factor=values.get("factor", DEFAULT_FACTOR),
        rise_c=values.get("rise_c", DEFAULT_RISE_C),
        limit_w=values.get("limit_w"),
        share=values.get("share", DEFAULT_SHARE),
    )
    validate(fault, injector, spec)
    for key in renamed:
        _deprecated(f"{key}=", spec, fault.spec())
    return fault


def validate(fault: Fault, injector: Injector | None = None, spec: str | None = None) -> Fault:
    """Check ``fault``'s values and, given an injector, that it can inject the fault.

    Args:
        fault: The fault.
        injector: ``exporter`` or ``simulator``: checks its kinds, its target key
            (``gpu`` or ``replica``) and what it can end; None checks values only.
        spec: The spec as the user typed it, for the message (default: ``fault.spec()``).

    Returns:
        ``fault``, unchanged.

    Raises:
        ConfigError: One line naming the spec, what is wrong and the forms accepted.
    """
    where = f"--fault {spec if spec is not None else fault.spec()!r}"
    fix = f"use {forms(injector)}"
    problem = _problem(fault)
    if problem is not None:
        raise config_error(where, problem, fix)
    if injector is None:
        return fault
    require(
        fault.kind in _INJECTS[injector],
        where,
        f"{_COMMAND[injector]} cannot inject {fault.kind} faults",
        fix,
    )
    target, other = (
        _TARGET[injector],
        _TARGET["simulator" if injector == "exporter" else "exporter"],
    )
    given_other = fault.replica if injector == "exporter" else fault.gpu
    require(
        given_other is None,
        where,
        f"{other}=N does not apply to {_COMMAND[injector]}",
        f"name the target with {target}=N; {fix}",
    )
    if injector == "exporter":
        if fault.kind in HOST_KINDS:
            require(
                fault.gpu is None,
                where,
                f"{fault.kind} hits the whole host, not one GPU",
                f"drop gpu=; {fix}",
            )
        else:
            require(fault.gpu is not None, where, "gpu=N is required", fix)
        require(
            fault.duration_s is None or fault.kind in _ENDS_ON_EXPORTER,
            where,
            f"the exporter cannot end a {fault.kind} fault",
            f"drop duration=; {fix}",
        )
    elif fault.kind in HOST_KINDS:
        require(
            fault.replica is None,
            where,
            f"{fault.kind} hits the whole run, not one replica",
            f"drop replica=; {fix}",
        )
    return fault
