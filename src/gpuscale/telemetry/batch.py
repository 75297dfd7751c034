"""One pass over one device, shared by the vendor sources.

NVML and amdsmi sources sort every library error the same three ways (absent,
field failed, device lost); this holds the reads of one device in one sample
and records which fields failed and why, so a failure stays with its fields.

Both failures are ``TransientError``s: each holds for this sample only. The
source counts it (``failed_fields``, ``up=False``) and asks the device again
on the next sample; nothing a person changes is needed for that retry. Where
a failure does stop the source (every device failing at start-up), the source
raises ``SourceUnavailableError`` instead, which is permanent.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuscale.errors import TransientError

logger = logging.getLogger(__name__)


class DeviceLostError(TransientError):
    """The device did not answer this time (GPU is lost, unknown error, timeout).

    Transient: the device reports ``up=False`` for this sample and is read again
    on the next one; a GPU that comes back is served again without a restart.

    Args:
        message: Which call, and the library's words.
        code: The library's error code, when it has one.
        delay: Seconds before asking again; the sampler's next collect does.
    """

    def __init__(self, message: str, code: int | None = None, delay: float = 1.0) -> None:
        super().__init__(message, delay)
        self.code = code


class FieldError(TransientError):
    """One library call failed; only the fields it feeds are affected.

    Transient: those fields are absent from this sample and named in
    ``failed_fields``; the call is made again on the next sample.
    """


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
