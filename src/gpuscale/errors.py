"""Error hierarchy shared by every layer.

The split between permanent and transient errors drives behaviour: a
permanent error (bad config, missing driver) stops the command with a one-line
message, while a transient one (a device that did not answer this time) is
counted and retried on the next cycle.
"""

from collections.abc import Mapping


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
    """A telemetry backend (NVML, amdsmi) cannot start on this machine. Exit status 1.

    Args:
        message: The whole line: what failed, why, and what to do.
        reason: Why alone, for a message that names several backends
            (default: ``message``).
    """

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason if reason is not None else message


def config_error(where: str, problem: str, fix: str) -> ConfigError:
    """Build the one-line error every user mistake gets: where, what is wrong, what to do.

    This is the only place a ConfigError message is shaped, so every input
    (flag, file line, config key) reads the same way.

    Args:
        where: The input and place, e.g. ``--gpus``, ``web.yml:4 tls_server_config.cert_file``
            or ``HpaConfig.tolerance=-1``.
        problem: What is wrong with it.
        fix: What the user should do instead.

    Returns:
        The error, to raise.
    """
    return ConfigError(_printable(f"{where}: {problem}; {fix}"))


def _printable(text: str) -> str:
    """``text`` with control characters escaped as Python writes them, so it stays one line.

    A key or file name taken from the input may hold anything; the message is
    still one line on a terminal and in a log.
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def require(ok: bool, where: str, problem: str, fix: str) -> None:
    """Raise ``config_error(where, problem, fix)`` unless ``ok``.

    Raises:
        ConfigError: When ``ok`` is false.
    """
    if not ok:
        raise config_error(where, problem, fix)


def check_ranges(owner: str, config: object, checks: Mapping[str, bool], fix: str) -> None:
    """Raise a one-line ConfigError for the first setting whose check failed.

    Args:
        owner: Prefix of the key in the message, e.g. ``cluster``.
        config: The object holding the settings (for their values).
        checks: Attribute name to whether its value is acceptable.
        fix: What the user should do instead.

    Raises:
        ConfigError: Naming ``owner.key=value`` and ``fix``.
    """
    for key, ok in checks.items():
        require(ok, f"{owner}.{key}={getattr(config, key)!r}", "out of range", fix)
