"""Subcommands imported only when they run, so ``gpuscale --help`` and the exporter stay light.

Each subcommand's module imports what its work needs: ``evaluate`` the simulator
and the scientific stack, ``autoscale`` the controller, ``exporter`` the HTTP
server. Importing them all for every command made the node's exporter load the
simulator's compiler. ``SUBCOMMANDS`` names each subcommand's module and the
summary ``gpuscale --help`` lists; ``LazyGroup`` imports the module when the
subcommand is looked up (to run it, or to show its own help). A module that needs
an extra that is not installed ends the command with one line naming the extra.
"""

import functools
import importlib
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from gpuscale.cli.helpformat import plain_help
from gpuscale.extras import missing_extra


@dataclass(frozen=True, slots=True)
class Subcommand:
    """Where a subcommand lives and what ``gpuscale --help`` says of it.

    Attributes:
        module: The module whose ``register(app)`` adds the subcommand.
        summary: Its help's first paragraph (a unit test checks the two agree).
    """

    module: str
    summary: str


SUBCOMMANDS = {
    "exporter": Subcommand(
        "gpuscale.cli.exporter",
        "Serve GPU telemetry on /metrics with dcgm-exporter's metric names and labels.",
    ),
    "fields": Subcommand(
        "gpuscale.cli.fields",
        "List every DCGM field gpuscale can export, with id, type, unit and default state.",
    ),
    "evaluate": Subcommand(
        "gpuscale.cli.evaluate",
        "Run scaling policies on the same trace and compare GPU-hours, SLO and latency.",
    ),
    "autoscale": Subcommand(
        "gpuscale.cli.autoscale",
        "Scale GPU workloads from Prometheus with the gpuscale policies, through /scale.",
    ),
    "keda-scaler": Subcommand(
        "gpuscale.cli.keda",
        "Serve KEDA's external scaler API, so ScaledObjects scale by gpuscale policies.",
    ),
    "up": Subcommand(
        "gpuscale.cli.up",
        "Run the exporter, evaluate the alert rules in process and serve their alerts.",
    ),
    "rules": Subcommand(
        "gpuscale.cli.rules",
        "Render the GPU alert catalogue for Prometheus, or backtest it on history.",
    ),
}
"""Subcommand name to its module and summary, in the order ``gpuscale --help`` lists them."""


def load_subcommand(name: str) -> Any:  # noqa: ANN401 - a Click command of Typer's bundled click
    """Import a subcommand's module and build its Click command, laid out by ``plain_help``.

    Args:
        name: A key of ``SUBCOMMANDS``.

    Returns:
        The command (a group for ``rules``).

    Raises:
        MissingExtraError: The module needs a library of an extra that is not installed.
    """
    try:
        module = importlib.import_module(SUBCOMMANDS[name].module)
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, f"gpuscale {name}")
        if error is None:
            raise
        raise error from None
    holder = typer.Typer(rich_markup_mode=None, pretty_exceptions_enable=False)
    module.register(holder)
    command = typer.main.get_group(holder).commands[name]
    add_version_option(command)
    plain_help(command)
    return command


def package_version() -> str:
    """Gpuscale's installed version, or a line saying it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gpuscale")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _print_version(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        typer.echo(f"{ctx.command_path} version {package_version()}")
        raise typer.Exit


@functools.cache
def _version_option() -> Any:  # noqa: ANN401 - a parameter of Typer's bundled click
    """A ``--version`` option, built once through Typer's public API.

    Every command shares it: a Click parameter holds no per-command state.
    """
    holder = typer.Typer()

    @holder.command()
    def _shows(
        version: Annotated[
            bool,
            typer.Option(
                "--version",
                is_eager=True,
                expose_value=False,
                callback=_print_version,
                help="Show the version and exit.",
            ),
        ] = False,
    ) -> None:
        """Never run: its one parameter is what is wanted."""

    return typer.main.get_command(holder).params[0]


def add_version_option(command: Any) -> None:  # noqa: ANN401 - a command of Typer's bundled click
    """Give ``command`` (and each command of a group) ``--version``, unless it has its own.

    Every command answers ``--version`` the same way (``gpuscale rules render version
    0.1.0``), so a container's entrypoint check works whichever subcommand it runs.
    """
    if not any("--version" in getattr(p, "opts", ()) for p in command.params):
        command.params.append(_version_option())
    for sub in getattr(command, "commands", {}).values():
        add_version_option(sub)


class LazyGroup(TyperGroup):
    """The ``gpuscale`` group: lists every subcommand, imports one only when it is looked up."""

    def list_commands(self, ctx: Any) -> list[str]:  # noqa: ANN401 - Typer's bundled click
        """Every subcommand's name, the lazy ones included."""
        return [*SUBCOMMANDS, *(name for name in self.commands if name not in SUBCOMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:  # noqa: ANN401
        """The subcommand called ``cmd_name``, imported on first use; None if there is none."""
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            self.commands[cmd_name] = load_subcommand(cmd_name)
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:  # noqa: ANN401
        """List the subcommands from their summaries, without importing any of them."""
        commands = {
            name: self.commands.get(name) or TyperCommand(name, help=sub.summary)
            for name, sub in SUBCOMMANDS.items()
        }
        commands.update((n, c) for n, c in self.commands.items() if n not in commands)
        limit = formatter.width - 6 - max(len(name) for name in commands)
        rows = [(n, c.get_short_help_str(limit)) for n, c in commands.items() if not c.hidden]
        with formatter.section("Commands"):
            formatter.write_dl(rows)
