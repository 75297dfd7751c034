"""One way to write a duration on every command line: seconds, or a Prometheus duration.

``--duration 90``, ``--duration 90.5``, ``--duration 15s`` and ``--duration 1h30m``
mean what they say wherever gpuscale takes a time, so a user does not have to
remember which subcommand wants which form. The unit grammar is Prometheus's
(``y w d h m s ms``, each at most once, in that order, whole numbers), as in a
scrape config; a plain number is seconds. Options that dcgm-exporter defines in
milliseconds (``-c``, ``-x``) keep dcgm-exporter's meaning.
"""

import math
import re

import typer

_UNITS = (365 * 86_400.0, 7 * 86_400.0, 86_400.0, 3_600.0, 60.0, 1.0, 0.001)
_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
FORMS = "seconds (90, 0.5) or a duration such as 15s, 5m, 2h or 1h30m"
"""What every duration option accepts, for help texts and errors."""


def parse_seconds(text: str | float) -> float:
    """Seconds in ``text``: a non-negative number of seconds, or a Prometheus duration.

    Returns:
        Seconds.

    Raises:
        ValueError: Neither form, negative, or not finite.
    """
    if isinstance(text, int | float):
        value = float(text)
    else:
        stripped = text.strip()
        try:
            value = float(stripped)
        except ValueError:
            match = _DURATION.fullmatch(stripped)
            if not stripped or match is None or not any(match.groups()):
                raise ValueError(f"{text!r} is not {FORMS}") from None
            value = sum(int(n or 0) * unit for n, unit in zip(match.groups(), _UNITS, strict=True))
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{text!r} is not {FORMS}")
    return value


def seconds_option(text: str | float) -> float:
    """``parse_seconds`` as a Typer option parser: a bad value is a usage error naming the forms.

    Returns:
        Seconds.

    Raises:
        typer.BadParameter: Not a duration.
    """
    try:
        return parse_seconds(text)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None


def positive_seconds_option(text: str | float) -> float:
    """``seconds_option`` for intervals and timeouts, which must be longer than 0.

    Returns:
        Seconds.

    Raises:
        typer.BadParameter: Not a duration, or 0.
    """
    seconds = seconds_option(text)
    if seconds <= 0:
        raise typer.BadParameter(f"{text!r} must be longer than 0 s")
    return seconds


def whole_seconds_option(text: str | float) -> int:
    """``positive_seconds_option`` for options that count whole seconds (a run's length).

    Returns:
        Seconds.

    Raises:
        typer.BadParameter: Not a duration, 0, or not a whole number of seconds.
    """
    seconds = positive_seconds_option(text)
    if not seconds.is_integer():
        raise typer.BadParameter(f"{text!r} is not a whole number of seconds")
    return int(seconds)
