"""Reader for counters files in dcgm-exporter's format.

A user's existing ``default-counters.csv`` must work unchanged, so the grammar
is dcgm-exporter's: ``FIELD, type, help`` rows, ``#`` comments, blank lines and
stray spaces around names. Anything the exporter cannot honour is rejected at
start-up with the file and line, so a typo never silently drops a series.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from gpuscale.errors import ConfigError
from gpuscale.fields.catalogue import DCGM_FIELDS, Field

CounterType = Literal["gauge", "counter", "histogram", "summary", "label"]
_TYPES: frozenset[str] = frozenset({"gauge", "counter", "histogram", "summary", "label"})


@dataclass(frozen=True, slots=True)
class Counter:
    """One enabled row of a counters file.

    Attributes:
        field: The catalogue entry the row names.
        type: The Prometheus type the row asks for.
        help: Help text from the row (the catalogue's when the row has none).
    """

    field: Field
    type: CounterType
    help: str

    @property
    def name(self) -> str:
        """Series name."""
        return self.field.name


def parse_counters(text: str, source: str = "<counters>") -> tuple[Counter, ...]:
    """Parse counters-file text.

    Args:
        text: File content.
        source: Name used in error messages (usually the path).

    Returns:
        Enabled counters in file order.

    Raises:
        ConfigError: A row is malformed, names an unknown field or type, or repeats a field.
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
                f"{source}:{lineno}: malformed row {line!r}: expected 'FIELD, type, help'"
            )
        name, type_ = parts[0], parts[1].lower()
        help_text = parts[2] if len(parts) == 3 else ""
        field = DCGM_FIELDS.get(name)
        if field is None:
            raise ConfigError(
                f"{source}:{lineno}: unknown field {name!r}: "
                "use a DCGM field name from `gpuscale fields` or remove the row"
            )
        if type_ not in _TYPES:
            raise ConfigError(
                f"{source}:{lineno}: unknown type {parts[1]!r} for {name}: "
                "use one of gauge, counter, histogram, summary, label"
            )
        if name in seen:
            raise ConfigError(
                f"{source}:{lineno}: {name} is already listed on line {seen[name]}: remove one row"
            )
        seen[name] = lineno
        counters.append(Counter(field, cast(CounterType, type_), help_text or field.help))
    return tuple(counters)


def read_counters(path: Path) -> tuple[Counter, ...]:
    """Read and parse a counters file.

    Raises:
        ConfigError: The file cannot be read or does not parse.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"{path}: cannot read counters file ({exc.__class__.__name__}: {exc}): "
            "check --collectors"
        ) from exc
    return parse_counters(text, str(path))


def _default_csv() -> str:
    rows = ["# DCGM FIELD, Prometheus metric type, help message"]
    for field in DCGM_FIELDS.values():
        prefix = "" if field.default else "# "
        rows.append(f"{prefix}{field.name}, {field.type}, {field.help}")
    return "\n".join(rows) + "\n"


DEFAULT_COUNTERS_CSV: str = _default_csv()
"""The built-in counters file: dcgm-exporter's default set, the rest commented out."""


def default_counters() -> tuple[Counter, ...]:
    """Counters enabled by default, the same set dcgm-exporter enables.

    Returns:
        Enabled counters in catalogue order.
    """
    return parse_counters(DEFAULT_COUNTERS_CSV, "<built-in>")
