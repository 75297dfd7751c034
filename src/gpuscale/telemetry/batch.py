"""One pass over one device, shared by the vendor sources.

NVML and amdsmi sources sort every library error the same three ways (absent,
field failed, device lost); this holds the reads of one device in one sample
and records which fields failed and why, so a failure stays with its fields.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)


class DeviceLostError(Exception):
    """The device stopped answering (GPU is lost, unknown error, timeout).

    Args:
        message: Which call, and the library's words.
        code: The library's error code, when it has one.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class FieldError(Exception):
    """One library call failed; only the fields it feeds are affected."""


@dataclass(slots=True)
class FieldBatch:
    """The reads of one entity in one sample.

    Attributes:
        call: The source's chokepoint, ``call(fn_name, *args)``; answers None when unsupported.
        handle: The entity's library handle.
        values: Field name to value, in the catalogue's unit.
        failed: Fields whose call failed this time.
        reasons: What failed, for ``DeviceSample.error``.
    """

    call: Callable[..., Any]
    handle: object
    values: dict[str, float] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def get(self, fields: tuple[str, ...], fn: str, *args: object) -> Any:  # noqa: ANN401
        """Call ``fn(handle, *args)``; on a per-field failure record ``fields`` and answer None."""
        try:
            return self.call(fn, self.handle, *args)
        except FieldError as err:
            self.fail(fields, str(err))
            return None

    def fail(self, fields: tuple[str, ...], reason: str) -> None:
        """Record fields that failed; a failure that feeds no field is only logged."""
        if fields:
            self.failed.extend(fields)
            self.reasons.append(reason)
        else:
            logger.debug("%s", reason)

    def put(self, name: str, value: float | None) -> None:
        """Store a value unless it is absent."""
        if value is not None:
            self.values[name] = float(value)
