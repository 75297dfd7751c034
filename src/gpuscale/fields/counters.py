"""Reader for counters files in dcgm-exporter's format.

A user's existing ``default-counters.csv`` must work unchanged, so the grammar
is dcgm-exporter's: ``FIELD, type, help`` rows, ``#`` comments, blank lines and
stray spaces around names. Anything the exporter cannot honour is rejected at
start-up with the file and line, so a typo never silently drops a series.
"""

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from gpuscale.errors import ConfigError
from gpuscale.fields.catalogue import DEFAULT_CSV_PATH, Field, dcgm_field
from gpuscale.inputs import read_text_file

logger = logging.getLogger(__name__)

CounterType = Literal["gauge", "counter", "histogram", "summary", "label"]
_TYPES: frozenset[str] = frozenset({"gauge", "counter", "histogram", "summary", "label"})


@dataclass(frozen=True, slots=True)
class Counter:
    """One enabled row of a counters file.

    Attributes:
        field: The catalogue entry the row names (for a legacy name, the field it stands for).
        type: The Prometheus type the row asks for.
        help: Help text from the row (the catalogue's when the row has none).
        name: Series name as the row spells it (a legacy ``dcgm_*`` name stays as written).
    """

    field: Field
    type: CounterType
    help: str
    name: str = ""

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", self.field.name)


def parse_counters(text: str, source: str = "<counters>") -> tuple[Counter, ...]:
    """Parse counters-file text.

    Args:
        text: File content.
        source: Name used in error messages (usually the path).

    Returns:
        Enabled counters in file order.

    Raises:
        ConfigError: A row is malformed or names an unknown field or type.
    """
    counters: list[Counter] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",", 2)]
        if len(parts) < 2 or not parts[0] or not parts[1]:
            raise ConfigError(
                f"{source}:{lineno}: malformed row: expected 'FIELD, type, help' "
                "(a DCGM field name, a metric type and a help text, separated by commas)"
            )
        name, type_ = parts[0], parts[1].lower()
        help_text = parts[2] if len(parts) == 3 else ""
        try:
            field = dcgm_field(name)
        except KeyError:
            raise ConfigError(
                f"{source}:{lineno}:1: not a DCGM field name: "
                "use one from `gpuscale fields` or remove the row"
            ) from None
        if type_ not in _TYPES:
            raise ConfigError(
                f"{source}:{lineno}:2: unknown metric type for {name}: "
                "use one of gauge, counter, histogram, summary, label"
            )
        if name in seen:
            # dcgm-exporter serves the first row of a repeated field (its own
            # 1.x-compatibility file lists dcgm_fi_prof_pcie_*_bytes twice), so do the same.
            logger.warning(
                "%s:%d: %s is already listed on line %d: this row is ignored",
                source,
                lineno,
                name,
                seen[name],
            )
            continue
        seen[name] = lineno
        counters.append(Counter(field, cast(CounterType, type_), help_text or field.help, name))
    return tuple(counters)


def read_counters(path: Path) -> tuple[Counter, ...]:
    """Read and parse a counters file.

    Raises:
        ConfigError: The file cannot be read or does not parse.
    """
    text = read_text_file(path, "--collectors")
    return parse_counters(text, str(path))


DEFAULT_COUNTERS_CSV: str = DEFAULT_CSV_PATH.read_text(encoding="utf-8")
"""The built-in counters file: dcgm-exporter 4.x's own default-counters.csv, unchanged."""


def default_counters() -> tuple[Counter, ...]:
    """Counters enabled by default, the same set dcgm-exporter enables.

    Returns:
        Enabled counters in the file's order, with the file's help texts.
    """
    return parse_counters(DEFAULT_COUNTERS_CSV, "<built-in>")
