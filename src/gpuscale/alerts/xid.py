"""XID meanings in alert text: the table of ``gpuscale.fields.xid`` as a Go template.

An XID is the driver's error report for one GPU. The alert carries only the
code, and the on-call engineer needs the meaning at a glance.
"""

from gpuscale.fields.xid import XIDS


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
