"""dcgm-exporter 4.x's command line, as ``gpuscale exporter`` accepts it.

A drop-in must start from an unchanged DaemonSet: every flag and environment
variable of dcgm-exporter 4.5's ``--help`` exists here with the same long name,
short form, value syntax and precedence (command line over environment over
default). dcgm-exporter parses booleans the Go way, so ``--kubernetes``,
``--kubernetes=true`` and ``-k=false`` all work, and ``DCGM_EXPORTER_KUBERNETES``
takes ``true``/``false``/``1``/``0``. Click has no ``--flag=value`` for
booleans, so ``DcgmCommand`` rewrites those words before Click parses them.

Each option whose meaning exists here is implemented by the exporter; the rest
(a remote host engine, DCGM's own log, DRA, pprof ...) are accepted at their
neutral value and refused with one line saying why otherwise
(``gpuscale.cli.dcgm_unsupported``). The project's own ``GPUSCALE_*`` variables
stay as aliases, read after the ``DCGM_*`` name.
"""

import os
import re
from collections.abc import Sequence
from typing import Any

import typer
from typer.core import TyperCommand

from gpuscale.errors import config_error

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})  # Go's strconv.ParseBool
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_ASSIGNED = re.compile(r"^(-{1,2}[A-Za-z][A-Za-z0-9-]*)=(.*)$")


def parse_go_bool(text: str, where: str) -> bool:
    """Parse a boolean as dcgm-exporter (Go's ``strconv.ParseBool``) does.

    Raises:
        ConfigError: Not one of 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False.
    """
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise config_error(where, f"{text!r} is not a boolean", "use true or false")


class DcgmCommand(TyperCommand):
    """A Typer command that also takes ``--flag=true|false`` for its boolean flags."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # noqa: ANN401 - Click's context
        """Rewrite ``--flag=VALUE`` of boolean flags to ``--flag`` or ``--no-flag``, then parse."""
        flags: dict[str, tuple[str, str]] = {}
        for param in self.params:
            if getattr(param, "is_bool_flag", False) and getattr(param, "secondary_opts", None):
                on = next(o for o in param.opts if o.startswith("--"))
                for name in param.opts:
                    flags[name] = (on, param.secondary_opts[0])
        rewritten: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                rewritten.extend(args[i:])
                break
            match = _ASSIGNED.match(arg)
            if match is None or match[1] not in flags:
                rewritten.append(arg)
                continue
            on, off = flags[match[1]]
            rewritten.append(on if parse_go_bool(match[2], arg) else off)
        return super().parse_args(ctx, rewritten)


def env(*names: str) -> list[str]:
    """The environment variables of one option: dcgm-exporter's first, then ours."""
    return list(names)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user set an option (command line or environment), not its default."""
    source = ctx.get_parameter_source(name)
    # Typer bundles its own click, so compare the enum by name, not by class.
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def where(ctx: typer.Context, name: str, flag: str, value: object) -> str:
    """``--flag VALUE`` or ``ENV=VALUE``: the input a message is about, as the user gave it."""
    source = ctx.get_parameter_source(name)
    if source is not None and source.name == "ENVIRONMENT":
        param = next(p for p in ctx.command.params if p.name == name)
        envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
        var = next((str(v) for v in envvars if v and str(v) in os.environ), None)
        if var is not None:
            return f"{var}={os.environ[var]}"
    shown = str(value).lower() if isinstance(value, bool) else repr(value)
    return f"{flag} {shown}" if not isinstance(value, bool) else f"{flag}={shown}"


def split_items(value: object) -> list[str]:
    """A string-slice option's items: repeated flags, each comma-separated, as urfave/cli."""
    items = value if isinstance(value, list | tuple) else [] if value is None else [value]
    return [part.strip() for item in items for part in str(item).split(",") if part.strip()]


def split_list(value: Sequence[str] | None) -> list[str]:
    """``split_items`` for list options (resource names, regexes)."""
    return split_items(list(value) if value is not None else None)


__all__ = [
    "DcgmCommand",
    "env",
    "given",
    "parse_go_bool",
    "split_list",
    "where",
]
