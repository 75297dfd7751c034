"""Top-level Typer application and error handling shared by every subcommand.

A user's mistake ends with one line and exit status 2, a runtime failure
(``GpuscaleError``) with one line and exit status 1; neither shows a traceback.
That holds for mistakes Click finds while parsing (a bad value, an unknown
option, a missing value) as much as for the ``ConfigError``s the commands raise:
``main`` turns Click's usage errors into the same ``where: problem; fix`` line,
naming the flag when the value came from the command line and the environment
variable when it came from there. A library of an optional extra that is not
installed ends the command the same way, naming the extra (``gpuscale.extras``).

Help is Click's plain layout (``rich_markup_mode=None``, ``gpuscale.cli.helpformat``):
it wraps help text but never cuts an option name, on any terminal width or through
a pipe, and shows a boolean flag as ``-k, --kubernetes``. Subcommands are imported
only when they run or show their help (``gpuscale.cli.commands``).
"""

import logging
import os
import shlex
import sys
from collections.abc import Sequence
from enum import StrEnum
from typing import Annotated, Any

import typer
from typer.main import get_command

from gpuscale.cli.commands import SUBCOMMANDS, LazyGroup, package_version
from gpuscale.cli.helpformat import plain_help
from gpuscale.cli.logs import configure_logging
from gpuscale.errors import ConfigError, GpuscaleError, config_error
from gpuscale.extras import missing_extra

app = typer.Typer(
    name="gpuscale",
    help="Monitor GPU fleets with dcgm-exporter-compatible telemetry and scale GPU workloads.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=LazyGroup,
    # -h as well as --help on every command; child contexts inherit the names.
    context_settings={"help_option_names": ["-h", "--help"]},
)

logger = logging.getLogger(__name__)

PROG = "gpuscale"
USAGE_EXIT = 2
"""Exit status of every usage and configuration error."""
RENAMED_ENV = {"GPUSCALE_SIM_FAULTS": ("GPUSCALE_EVALUATE_FAULTS", "evaluate")}
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
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            help="Show the version and exit.",
            callback=lambda value: _show_version(value),
        ),
    ] = False,
) -> None:
    """Monitor GPU fleets and scale GPU workloads from their telemetry."""
    configure_logging(log_level.value, "json" if log_format is LogFormatName.json else "text")
    _apply_renamed_env(ctx.invoked_subcommand)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"{PROG} version {package_version()}")
        raise typer.Exit


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
    return next((f"{PROG} {arg}" for arg in argv if arg in SUBCOMMANDS), PROG)


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


def _subcommand(command: Any, argv: Sequence[str]) -> Any:  # noqa: ANN401 - Typer's click
    """The (sub)command ``argv`` runs: the group's commands named by its leading words."""
    ctx = command.make_context(PROG, [], resilient_parsing=True)
    for word in argv:
        if word.startswith("-") or not hasattr(command, "get_command"):
            break
        found = command.get_command(ctx, word)
        if found is None:
            break
        command = found
    return command


def from_environment(message: str, command: Any, argv: Sequence[str]) -> str:  # noqa: ANN401
    """A ConfigError's message naming the environment variable a flag's value came from.

    Commands raise errors that start with the flag (``--fault 'x': ...``); when the
    command line did not give that flag, the value came from the option's
    environment variable, and the message says which (``GPUSCALE_EVALUATE_FAULTS='x':``).

    Returns:
        The message, rewritten where the value came from the environment.
    """
    flag = message.split(" ", 1)[0].rstrip(":")
    if not flag.startswith("--") or _given_value(argv, [flag]) is not None:
        return message
    target = _subcommand(command, argv)
    for param in getattr(target, "params", ()):
        if flag not in getattr(param, "opts", ()):
            continue
        names = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
        for name in names:
            if name and name in os.environ:
                return f"{name}={message[len(flag) :].lstrip()}"
    return message


def main(args: Sequence[str] | None = None) -> None:
    """Entry point of the ``gpuscale`` console script.

    Args:
        args: The command line after the program name (default: ``sys.argv[1:]``).
    """
    argv = list(sys.argv[1:] if args is None else args)
    command = get_command(app)
    plain_help(command)
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
            extra = (
                missing_extra(exc, _command_path(argv))
                if isinstance(exc, ModuleNotFoundError)
                else None
            )
            if extra is not None:
                raise extra from None
            raise
    except GpuscaleError as exc:
        text = str(exc)
        if isinstance(exc, ConfigError):
            text = from_environment(text, command, argv)
        typer.echo(f"{PROG}: error: {text}", err=True)
        sys.exit(exc.exit_code)
    if isinstance(code, int) and code:
        sys.exit(code)
