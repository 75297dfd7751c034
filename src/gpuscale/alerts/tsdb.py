"""A real Prometheus over backfilled history, for backtests.

Prometheus evaluates rules only in real time, so to ask "when would this alert
have fired last week?" the history is written into TSDB blocks (``promtool
tsdb create-blocks-from openmetrics``), the recording rules are backfilled over
it level by level (``promtool tsdb create-blocks-from rules``: a record that
reads another record needs the first one's blocks in place), and every alert
expression is then asked of the real Prometheus with ``query_range``.
"""

import logging
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

import httpx
import yaml

from gpuscale.alerts.model import RecordingRule, RuleGroup
from gpuscale.errors import PermanentError

logger = logging.getLogger(__name__)

READY_TIMEOUT_S = 60.0
Series = tuple[tuple[tuple[str, str], ...], list[tuple[float, float]]]
"""One result series of a range query: its sorted labels and its ``(time, value)`` points."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        msg = f"{name} is not installed: install it (Debian: apt-get install prometheus)"
        raise PermanentError(msg)
    return path


def _run(args: list[str], what: str) -> None:
    # The arguments are our own: a binary found on PATH and paths this module made.
    result = subprocess.run(  # noqa: S603
        args, capture_output=True, text=True, timeout=600, check=False
    )
    if result.returncode != 0:
        tail = " ".join((result.stderr or result.stdout).split())[-400:]
        msg = f"{what} failed: {tail}"
        raise PermanentError(msg)


def record_levels(groups: Sequence[RuleGroup]) -> list[list[RecordingRule]]:
    """Recording rules by dependency level: level 0 reads only raw series.

    Returns:
        Lists of rules; a rule's level is one more than the highest level of a
        record its expression names.
    """
    records = [r for g in groups for r in g.rules if isinstance(r, RecordingRule)]
    names = {r.record for r in records}
    level: dict[str, int] = {}
    pending = list(records)
    while pending:
        progressed = False
        for rule in list(pending):
            deps = {n for n in names if re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", rule.expr)}
            if all(d in level for d in deps - {rule.record}):
                here = 1 + max((level[d] for d in deps - {rule.record}), default=-1)
                level[rule.record] = max(level.get(rule.record, 0), here)
                pending.remove(rule)
                progressed = True
        if not progressed:
            msg = f"recording rules depend on each other in a cycle: {[r.record for r in pending]}"
            raise PermanentError(msg)
    out: list[list[RecordingRule]] = [[] for _ in range(1 + max(level.values(), default=-1))]
    for rule in records:
        out[level[rule.record]].append(rule)
    return out


class HistoryPrometheus:
    """Prometheus serving a TSDB built from an OpenMetrics file, with records backfilled.

    Use as a context manager; the process is stopped by its own PID on exit.

    Args:
        workdir: Empty directory for blocks, configuration and logs.
        step_s: Scrape interval of the history; instant selectors look back two of
            them, as a series that stopped would read after its staleness marker.
    """

    def __init__(self, workdir: Path, step_s: float) -> None:
        self.workdir = workdir
        self.step_s = step_s
        self.data = workdir / "data"
        self.url = ""
        self._proc: subprocess.Popen[bytes] | None = None
        self._log = workdir / "prometheus.log"

    def __enter__(self) -> "HistoryPrometheus":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def load(
        self, openmetrics: Path, groups: Sequence[RuleGroup], start_s: float, end_s: float
    ) -> None:
        """Build blocks from ``openmetrics``, start Prometheus, backfill ``groups``' records."""
        promtool = _binary("promtool")
        _run(
            [
                promtool,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(openmetrics),
                str(self.data),
            ],
            "promtool tsdb create-blocks-from openmetrics",
        )
        self.start()
        for i, level in enumerate(record_levels(groups)):
            rules = self.workdir / f"records-{i}.yml"
            doc = {
                "groups": [
                    {
                        "name": f"level-{i}",
                        "rules": [
                            {"record": r.record, "expr": r.expr, "labels": dict(r.labels)}
                            if r.labels
                            else {"record": r.record, "expr": r.expr}
                            for r in level
                        ],
                    }
                ]
            }
            rules.write_text(yaml.safe_dump(doc, sort_keys=False))
            out = self.workdir / f"blocks-{i}"
            _run(
                [
                    promtool,
                    "tsdb",
                    "create-blocks-from",
                    "rules",
                    f"--url={self.url}",
                    f"--start={int(start_s)}",
                    f"--end={int(end_s) + 1}",
                    f"--eval-interval={int(self.step_s)}s",
                    f"--output-dir={out}",
                    "--quiet",
                    str(rules),
                ],
                f"promtool tsdb create-blocks-from rules ({rules.name})",
            )
            for block in out.iterdir():
                if block.is_dir():
                    shutil.move(str(block), str(self.data / block.name))
            self.stop()
            self.start()

    def start(self) -> None:
        """Start Prometheus on the data directory and wait until it answers."""
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        config = self.workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")
        lookback = max(1, round(2 * self.step_s))
        log = self._log.open("ab")
        self._proc = subprocess.Popen(  # noqa: S603 - our binary and our paths
            [
                _binary("prometheus"),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data}",
                "--storage.tsdb.retention.time=100y",
                f"--query.lookback-delta={lookback}s",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            try:
                if httpx.get(f"{self.url}/-/ready", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        tail = self._log.read_text(errors="replace")[-400:]
        self.stop()
        msg = f"Prometheus did not start on the backtest data: {tail}"
        raise PermanentError(msg)

    def stop(self) -> None:
        """Stop the Prometheus this object started, by its PID."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None

    def query_range(self, expr: str, start_s: float, end_s: float, step_s: float) -> list[Series]:
        """Evaluate ``expr`` at every ``step_s`` from ``start_s`` to ``end_s`` (``query_range``).

        Returns:
            One ``Series`` per label set the expression returned at some step.
        """
        return query_range(self.url, expr, start_s, end_s, step_s)


def query_range(url: str, expr: str, start_s: float, end_s: float, step_s: float) -> list[Series]:
    """Ask the Prometheus at ``url`` for ``expr`` at every ``step_s`` from ``start_s`` to ``end_s``.

    Returns:
        One ``Series`` per label set the expression returned at some step.

    Raises:
        PermanentError: Prometheus cannot be reached or refused the expression.
    """
    params = {"query": expr, "start": start_s, "end": end_s, "step": step_s}
    try:
        r = httpx.post(f"{url.rstrip('/')}/api/v1/query_range", data=params, timeout=120)
        body = r.json()
    except (httpx.HTTPError, ValueError) as exc:
        msg = f"Prometheus at {url} did not answer a range query ({exc})"
        raise PermanentError(msg) from None
    if body.get("status") != "success":
        msg = f"query_range failed ({body.get('error', r.status_code)}): {expr[:200]}"
        raise PermanentError(msg)
    out: list[Series] = []
    for item in body["data"]["result"]:
        labels = tuple(sorted(item["metric"].items()))
        out.append((labels, [(float(t), float(v)) for t, v in item["values"]]))
    return out
