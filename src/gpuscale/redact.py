"""Credentials kept out of what gpuscale prints.

A URL may carry ``user:password@`` (``--prometheus http://u:p@host``), and log
lines, error messages and request logs of libraries all show URLs. Messages
that name a URL pass it through ``redact_url``; ``redact_text`` is the last
line of defence the logging set-up applies to every record.
"""

import re
from urllib.parse import urlsplit, urlunsplit

_USERINFO = re.compile(r"(?<=://)[^/\s@]+@")


def redact_url(url: str) -> str:
    """The URL without its ``user:password@`` part, for messages.

    Returns:
        The URL with the user information dropped; others unchanged.
    """
    try:
        parts = urlsplit(url)
        if parts.username is None and parts.password is None:
            return url
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:  # a port that is not a number: fall back to the text rule
        return redact_text(url)
    return urlunsplit(parts._replace(netloc=netloc))


def redact_text(text: str) -> str:
    """``text`` with every ``scheme://user:password@`` shortened to ``scheme://***@``.

    Returns:
        The text, credentials replaced.
    """
    return _USERINFO.sub("***@", text)
