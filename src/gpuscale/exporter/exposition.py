"""Text exposition (format 0.0.4) that keeps dcgm-exporter's series names exactly.

prometheus_client renders every counter as ``<name>_total``. dcgm-exporter's
counters (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``...) have no such suffix, and
dashboards and rules query them by that name, so the GPU families are written
here: the same families prometheus_client builds, with the TYPE line naming
the samples as they are. Label order is kept as given, like dcgm-exporter's.
"""

from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.utils import floatToGoString


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(value: str) -> str:
    """Escape a label value for the text format."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render(families: Iterable[Metric]) -> bytes:
    """Render metric families in the Prometheus text format.

    Returns:
        UTF-8 exposition text.
    """
    # Each family is encoded as soon as it is written, so the peak is about twice the
    # body (the chunks and the joined result) rather than four times (lines, joined
    # text, its encoding and the copy).
    chunks: list[bytes] = []
    # Every family of one GPU shares one label dict, so format each label set once.
    label_text: dict[int, str] = {}
    for family in families:
        if not family.samples:
            continue
        name = family.name
        ftype = family.type
        if ftype == "counter" and family.samples[0].name == name + "_total":
            name += "_total"
        elif ftype not in ("counter", "gauge", "histogram", "summary"):
            ftype = "untyped"
        out = [f"# HELP {name} {_escape_help(family.documentation)}\n# TYPE {name} {ftype}\n"]
        for sample in family.samples:
            value = floatToGoString(sample.value)  # type: ignore[no-untyped-call]
            if not sample.labels:
                out.append(f"{sample.name} {value}\n")
                continue
            text = label_text.get(id(sample.labels))
            if text is None:
                text = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sample.labels.items())
                label_text[id(sample.labels)] = text
            out.append(f"{sample.name}{{{text}}} {value}\n")
        chunks.append("".join(out).encode("utf-8"))
    return b"".join(chunks)
