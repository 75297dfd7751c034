"""Logging set up once for every subcommand: text for people, JSON for log pipelines.

Every record passes ``_Redact`` on its way out, so no URL credential reaches a
log line whichever module (ours or a library's) wrote it, and the HTTP client
libraries' per-request lines stay at DEBUG: one line per query is noise at
INFO, and it names the URL (they log at DEBUG only under ``--log-level debug``).
"""

import json
import logging
import sys
from typing import Literal

from gpuscale.redact import redact_text

LogFormat = Literal["text", "json"]


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": record.created,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        decision = getattr(record, "decision", None)
        if isinstance(decision, dict):  # the autoscaler's structured decision record
            entry["decision"] = decision
        if record.exc_info:
            entry["exc"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


_REQUEST_LOGGERS = ("httpx", "httpcore", "urllib3", "kubernetes.client.rest")
"""Libraries that log every request at INFO or DEBUG, with its URL."""


class _Redact(logging.Filter):
    """Replace ``scheme://user:password@`` in each record's message (and traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = redact_text(message)
        if clean != message:
            record.msg, record.args = clean, ()
        if record.exc_info and record.exc_text is None:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def configure_logging(level: str, fmt: LogFormat) -> None:
    """Send logs to stderr at ``level`` in ``fmt``, credentials redacted."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_Redact())
    for name in _REQUEST_LOGGERS:
        quiet = logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
        logging.getLogger(name).setLevel(quiet)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
