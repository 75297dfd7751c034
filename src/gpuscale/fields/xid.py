"""NVIDIA XID codes: the text dcgm-exporter labels them with, what they mean, and which lose work.

One table for every layer: the exporter serves ``err_msg`` from upstream's
message table, the alert catalogue prints the meaning and the first action, and
the scaling policies and the controller's remediation agree on which XIDs mean
the GPU's work is lost or wrong.
"""

from dataclasses import dataclass
from functools import cache
from pathlib import Path

_MESSAGES = Path(__file__).with_name("data") / "xid-messages.tsv"


@cache
def xid_messages() -> dict[int, str]:
    """XID code to the ``err_msg`` dcgm-exporter gives it (data/xid-messages.tsv)."""
    table: dict[int, str] = {}
    for line in _MESSAGES.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            code, text = line.split("\t", 1)
            table[int(code)] = text
    return table


def xid_message(code: int) -> str:
    """The ``err_msg`` of an XID code; ``Unknown Error`` past the table, as upstream."""
    return xid_messages().get(code, "Unknown Error")


@dataclass(frozen=True, slots=True)
class Xid:
    """What an on-call engineer needs to know about one XID code.

    Attributes:
        code: The XID number.
        meaning: What the driver reports, in a few words (after NVIDIA's XID catalogue).
        action: What to do first.
    """

    code: int
    meaning: str
    action: str


XIDS: tuple[Xid, ...] = (
    Xid(
        13,
        "graphics engine exception",
        "usually an application fault; rerun, and suspect "
        "the GPU only if it recurs across applications",
    ),
    Xid(
        31,
        "GPU memory page fault",
        "usually an application's illegal memory access; check the application and driver",
    ),
    Xid(43, "GPU stopped processing", "an application fault; the GPU stays usable"),
    Xid(
        45,
        "preemptive cleanup after a previous error",
        "look for the XID before it; often a killed process",
    ),
    Xid(48, "double-bit ECC error", "drain and reset the GPU; replace it if it recurs"),
    Xid(61, "internal micro-controller breakpoint or warning", "reset the GPU"),
    Xid(62, "internal micro-controller halt", "drain the node and reset the GPU"),
    Xid(
        63,
        "ECC page retirement or row remapping recorded",
        "reset the GPU when drained so the remap takes effect",
    ),
    Xid(64, "ECC page retirement or row remapping failed", "drain; the GPU needs service"),
    Xid(74, "NVLink error", "reset the GPU; check the NVLink or NVSwitch if it recurs"),
    Xid(
        79,
        "GPU has fallen off the bus",
        "drain the node and reboot it; check power, PCIe seating and cooling",
    ),
    Xid(92, "high single-bit ECC error rate", "watch it; plan to drain and reset"),
    Xid(
        94,
        "contained ECC error",
        "the affected application was stopped; reset the GPU when convenient",
    ),
    Xid(
        95, "uncontained ECC error", "every application on the GPU is affected; drain and reset now"
    ),
    Xid(119, "GSP RPC timeout", "reset the GPU; update the driver if it recurs"),
    Xid(120, "GSP error", "reset the GPU; update the driver if it recurs"),
)
BY_CODE: dict[int, Xid] = {x.code: x for x in XIDS}

WORK_LOST_XIDS = frozenset({48, 63, 64, 74, 79, 94, 95})
"""XIDs after which the GPU's work is lost or wrong: 48 (double-bit ECC), 63/64 (row remap
pending/failed), 74 (NVLink), 79 (off the bus), 94/95 (contained/uncontained ECC). 92 (a high
single-bit rate) degrades the GPU but loses nothing, so it is not here."""
