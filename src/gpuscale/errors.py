"""Error hierarchy shared by every layer.

The split between permanent and transient errors drives behaviour: a
permanent error (bad config, missing driver) stops the command with a one-line
message, while a transient one (a device that did not answer this time) is
counted and retried on the next cycle.
"""


class GpuscaleError(Exception):
    """Root of every error gpuscale raises on purpose."""

    exit_code = 1


class PermanentError(GpuscaleError):
    """Retrying will not help; a person must change something."""


class TransientError(GpuscaleError):
    """The same call may succeed later.

    Args:
        message: What failed.
        delay: Suggested seconds before retrying.
    """

    def __init__(self, message: str, delay: float = 1.0) -> None:
        super().__init__(message)
        self.delay = delay


class ConfigError(PermanentError):
    """A user's input is wrong: a file, a flag or a key. Exit status 2."""

    exit_code = 2


class SourceUnavailableError(PermanentError):
    """A telemetry backend (NVML, amdsmi) cannot start on this machine. Exit status 1."""
