"""Top-level Typer application and error handling shared by every subcommand.

A user's mistake ends with one line and exit status 2, a runtime failure
(``GpuscaleError``) with one line and exit status 1; neither shows a traceback.
That holds for mistakes Click finds while parsing (a bad value, an unknown
option, a missing value) as much as for the ``ConfigError``s the commands raise:
``main`` turns Click's usage errors into the same ``where: problem; fix`` line,
naming the flag when the value came from the command line and the environment
variable when it came from there.

Help is Click's plain layout (``rich_markup_mode=None``): it wraps help text but
never cuts an option name, on any terminal width or through a pipe, and shows a
boolean flag as ``-k, --kubernetes``.
"""

import functools
import logging
import os
import shlex
import sys
import textwrap
from collections.abc import Callable, Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
from typer.main import get_command

from gpuscale.cli.logs import configure_logging
from gpuscale.errors import ConfigError, GpuscaleError, config_error

app = typer.Typer(
    name="gpuscale",
    help="Monitor GPU fleets with dcgm-exporter-compatible telemetry and scale GPU workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

logger = logging.getLogger(__name__)

PROG = "gpuscale"
USAGE_EXIT = 2
"""Exit status of every usage and configuration error."""
RENAMED_ENV = {"GPUSCALE_SIM_FAULTS": ("GPUSCALE_FAULTS", "evaluate")}
"""Deprecated environment variable to (its new name, the subcommand that reads it)."""


class LogLevel(StrEnum):
    """Log levels."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormatName(StrEnum):
    """Log output formats."""

    text = "text"
    json = "json"


@app.callback()
def _global_options(
    ctx: typer.Context,
    log_level: Annotated[
        LogLevel, typer.Option(help="Log verbosity.", envvar="GPUSCALE_LOG_LEVEL")
    ] = LogLevel.info,
    log_format: Annotated[
        LogFormatName, typer.Option(help="Log line format.", envvar="GPUSCALE_LOG_FORMAT")
    ] = LogFormatName.text,
) -> None:
    """Monitor GPU fleets and scale GPU workloads from their telemetry."""
    configure_logging(log_level.value, "json" if log_format is LogFormatName.json else "text")
    _apply_renamed_env(ctx.invoked_subcommand)


def _apply_renamed_env(subcommand: str | None) -> None:
    """Warn that a deprecated environment variable is in use.

    The option itself lists the old name after the new one as its envvars, so
    Click reads it, and a value under the new name wins; the environment is
    never changed here.
    """
    for old, (new, reader) in RENAMED_ENV.items():
        if subcommand == reader and old in os.environ and new not in os.environ:
            logger.warning(
                "%s is deprecated and stops working in the next release; set %s instead", old, new
            )


@functools.cache
def _register_subcommands() -> None:
    """Add every subcommand to ``app``, once per process."""
    from gpuscale.cli import autoscale, evaluate, exporter, fields, rules, up

    exporter.register(app)
    fields.register(app)
    evaluate.register(app)
    autoscale.register(app)
    rules.register(app)
    up.register(app)


def _wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Wrap paragraphs at spaces only: a hyphenated name or example stays whole."""
    lines: list[str] = []
    for paragraph in text.split("\n\n"):
        if lines:
            lines.append("")
        lines += textwrap.wrap(
            " ".join(paragraph.split()),
            max(width, 10),
            initial_indent=indent,
            subsequent_indent=indent,
            break_on_hyphens=False,
            break_long_words=False,
        )
    return lines


class _WrapAtSpaces:
    """Click's help layout, except that text never breaks at a hyphen.

    Click's wrapper breaks ``gpu-lost@600`` after ``gpu-``; this one keeps names,
    flags and examples whole. Mixed in before Click's ``HelpFormatter``.
    """

    width: int
    current_indent: int
    write: Callable[[str], None]

    def write_text(self, text: str) -> None:
        """Write ``text`` indented and wrapped, paragraphs kept."""
        lines = _wrap(text, self.width, " " * self.current_indent)
        self.write("\n".join(lines) + "\n")

    def write_dl(
        self, rows: Sequence[tuple[str, str]], col_max: int = 30, col_spacing: int = 2
    ) -> None:
        """Write option (or command) names and their help, as Click lays them out."""
        rows = list(rows)
        first_col = min(max((len(first) for first, _ in rows), default=0), col_max) + col_spacing
        pad = " " * (first_col + self.current_indent)
        for first, second in rows:
            self.write(" " * self.current_indent + first)
            if not second:
                self.write("\n")
                continue
            if len(first) <= first_col - col_spacing:
                self.write(" " * (first_col - len(first)))
            else:
                self.write("\n" + pad)
            lines = _wrap(second, self.width - first_col - 2) or [""]
            self.write(lines[0] + "\n")
            for line in lines[1:]:
                self.write((pad + line if line else "") + "\n")


def _plain_help(command: Any) -> None:  # noqa: ANN401 - a Click command of Typer's bundled click
    """Lay out help with ``_WrapAtSpaces`` and print rich's escaped bracket as ``[``."""
    context_class = command.context_class
    formatter = type("PlainFormatter", (_WrapAtSpaces, context_class.formatter_class), {})
    command.context_class = type("PlainContext", (context_class,), {"formatter_class": formatter})
    for param in command.params:
        if isinstance(param.help, str):
            param.help = param.help.replace("\\[", "[")
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


def _sentence(message: str) -> str:
    """Click's message as a clause: no ``Value error,`` prefix, lower-case, no full stop."""
    text = message.strip().removeprefix("Value error, ").rstrip(".")
    return text[:1].lower() + text[1:]


def _given_value(argv: Sequence[str], names: Sequence[str]) -> tuple[str, str | None] | None:
    """The last ``(flag, value)`` the command line gave for an option called ``names``."""
    found: tuple[str, str | None] | None = None
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        for name in names:
            if arg == name:
                found = (name, argv[i + 1] if i + 1 < len(argv) else None)
            elif name.startswith("--") and arg.startswith(name + "="):
                found = (name, arg[len(name) + 1 :])
            elif not name.startswith("--") and arg.startswith(name) and len(arg) > len(name):
                found = (name, arg[len(name) :])
    return found


def _where(exc: Exception, argv: Sequence[str]) -> str:
    """Name the input a usage error is about: ``--flag VALUE`` or ``ENV_VAR=VALUE``."""
    param, ctx = getattr(exc, "param", None), getattr(exc, "ctx", None)
    option = getattr(exc, "option_name", None)
    if param is None or ctx is None:
        return str(option) if option else str(getattr(ctx, "command_path", None) or PROG)
    names = [*getattr(param, "opts", []), *getattr(param, "secondary_opts", [])]
    flag = next((n for n in names if n.startswith("--")), names[0] if names else param.name)
    source = ctx.get_parameter_source(param.name)
    # Typer bundles its own click, so compare the enum by name, not by class.
    if source is not None and source.name == "ENVIRONMENT":
        envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
        var = next((v for v in envvars if v and v in os.environ), envvars[0])
        return f"{var}={shlex.quote(os.environ.get(var, ''))}"
    if source is not None and source.name == "COMMANDLINE":
        given = _given_value(argv, names)
        if given is not None and given[1] is not None:
            return f"{given[0]} {shlex.quote(given[1])}"
    return str(flag)


def _command_path(argv: Sequence[str]) -> str:
    """``gpuscale SUBCOMMAND`` for the first subcommand named in ``argv``, else ``gpuscale``."""
    names = {info.name for info in app.registered_commands}
    return next((f"{PROG} {arg}" for arg in argv if arg in names), PROG)


def usage_error(exc: Exception, argv: Sequence[str]) -> ConfigError:
    """Turn a Click usage error into the one-line ``ConfigError`` every mistake gets.

    Args:
        exc: The error Click raised while parsing (a bad value, an unknown option,
            a missing value, an unknown command).
        argv: The command line, to quote the value the user gave.

    Returns:
        ``config_error(where, problem, fix)``: ``where`` is ``--flag VALUE`` when the
        value came from the command line and ``ENV_VAR=VALUE`` when it came from
        the environment.
    """
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or _command_path(argv)
    fix = f"see '{path} --help'"
    message = str(getattr(exc, "message", "") or exc)
    option = getattr(exc, "option_name", None)
    if option:
        message = message.removeprefix(f"Option '{option}' ").removeprefix("No such option: ")
        message = "no such option" if message == option else message
        possibilities = getattr(exc, "possibilities", None)
        if possibilities:
            fix = f"did you mean {', '.join(sorted(possibilities))}? {fix}"
    elif getattr(exc, "param", None) is not None and not getattr(exc, "message", None):
        message = "is required"
    return config_error(_where(exc, argv), _sentence(message), fix)


def main(args: Sequence[str] | None = None) -> None:
    """Entry point of the ``gpuscale`` console script.

    Args:
        args: The command line after the program name (default: ``sys.argv[1:]``).
    """
    argv = list(sys.argv[1:] if args is None else args)
    _register_subcommands()
    command = get_command(app)
    _plain_help(command)
    try:
        try:
            code = command.main(argv, prog_name=PROG, standalone_mode=False)
        except typer.Abort:
            typer.echo(f"{PROG}: aborted", err=True)
            sys.exit(1)
        except Exception as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]  # Click prints the help
                sys.exit(USAGE_EXIT)
            if getattr(exc, "exit_code", None) == USAGE_EXIT and hasattr(exc, "ctx"):
                raise usage_error(exc, argv) from None
            raise
    except GpuscaleError as exc:
        typer.echo(f"{PROG}: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(code, int) and code:
        sys.exit(code)
