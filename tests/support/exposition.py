"""A strict reader of the Prometheus text format that keeps names and label order as written.

prometheus_client's parser renames counter samples to ``<name>_total`` and returns labels
as a dict; dcgm-exporter compatibility is about the exact names and the order on the wire.
"""

import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})? (?P<value>\S+)$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


@dataclass
class Family:
    """One family as written: HELP, TYPE and samples as (ordered label pairs, value)."""

    name: str
    help: str = ""
    type: str = ""
    samples: list[tuple[tuple[tuple[str, str], ...], float]] = field(default_factory=list)

    def labels(self) -> list[dict[str, str]]:
        """Each sample's labels as a dict."""
        return [dict(pairs) for pairs, _ in self.samples]


def parse(text: str) -> dict[str, Family]:
    """Families by name; raises AssertionError on any line that is not valid text format."""
    families: dict[str, Family] = {}
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            _, kind, name, *rest = line.split(" ", 3)
            family = families.setdefault(name, Family(name))
            setattr(family, "help" if kind == "HELP" else "type", rest[0] if rest else "")
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        raw = match["labels"] or ""
        pairs = tuple((k, v) for k, v in _LABEL.findall(raw))
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == raw, f"bad labels: {raw!r}"
        families.setdefault(match["name"], Family(match["name"])).samples.append(
            (pairs, float(match["value"]))
        )
    return families
