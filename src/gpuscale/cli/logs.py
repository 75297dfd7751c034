"""Logging set up once for every subcommand: text for people, JSON for log pipelines."""

import json
import logging
import sys
from typing import Literal

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
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(level: str, fmt: LogFormat) -> None:
    """Send logs to stderr at ``level`` in ``fmt``."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
