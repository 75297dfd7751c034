"""What each NVIDIA XID code means and what to do about it, for alert text and runbooks.

An XID is the driver's error report for one GPU. The alert carries only the
code, and the on-call engineer needs the meaning at a glance. These one-line
meanings follow NVIDIA's XID catalogue (the "XID Errors" chapter of the GPU
deployment and management documentation).
"""

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Xid:
    """One XID code.

    Attributes:
        code: The XID number.
        meaning: What the driver reports, in a few words.
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


def meaning_template(label: str = "xid") -> str:
    """A Go template that prints the meaning of the XID in ``$labels.<label>``.

    Prometheus expands annotations with Go's text/template, which has ``else if``
    but no map literal, so the table becomes one chain of comparisons.

    Returns:
        Template text; an unknown code prints ``see NVIDIA's XID catalogue``.
    """
    parts = [
        f'{"if" if i == 0 else "else if"} eq $labels.{label} "{x.code}" }}}}{x.meaning}: {x.action}'
        for i, x in enumerate(XIDS)
    ]
    return "{{ " + "{{ ".join(parts) + "{{ else }}see NVIDIA's XID catalogue{{ end }}"
