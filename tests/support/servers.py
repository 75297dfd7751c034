"""Real servers for tests: free loopback ports, child processes stopped by their own PID,
the exporter as a process, and Prometheus.

Every server binds 127.0.0.1 on a free port in a temporary directory.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float, **kw) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url, timeout=1.0, **kw)
            if r.status_code < 500:
                return r
        except httpx.HTTPError as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer within {timeout} s ({last})")


class Process:
    """A child process we started, stopped by its own PID."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.log = log
        self._fh = log.open("wb")
        self.proc = subprocess.Popen(args, stdout=self._fh, stderr=subprocess.STDOUT, env=env)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._fh.close()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def gpuscale_cmd() -> list[str]:
    return [sys.executable, "-m", "gpuscale"]


def start_exporter(tmp: Path, *args: str) -> tuple[Process, int]:
    port = free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = Process(
        [*gpuscale_cmd(), "exporter", "--address", f"127.0.0.1:{port}", *args],
        tmp / f"exporter-{port}.log",
        env,
    )
    return proc, port


class Prometheus:
    """A Prometheus on 127.0.0.1 scraping ``targets`` every second.

    The optional arguments serve servers that hold backfilled history (``data_dir``,
    no targets), require auth or TLS (``web_config``, ``scheme``, and ``wait_kw`` for httpx's
    ``auth``/``verify`` while waiting for ``/-/ready``) or need
    other flags (``extra_args``).
    """

    def __init__(
        self,
        binary: str,
        workdir: Path,
        targets: list[str],
        *,
        data_dir: Path | None = None,
        web_config: Path | None = None,
        scheme: str = "http",
        wait_kw: dict | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        config = workdir / "prometheus.yml"
        target_list = ", ".join(f"'{t}'" for t in targets)
        text = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        if targets:
            text += (
                "scrape_configs:\n  - job_name: gpu\n    scrape_timeout: 1s\n"
                f"    static_configs:\n      - targets: [{target_list}]\n"
            )
        config.write_text(text)
        args = [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={data_dir or workdir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--web.enable-lifecycle",
        ]
        if web_config is not None:
            args.append(f"--web.config.file={web_config}")
        self.process = Process([*args, *extra_args], workdir / "prometheus.log")
        wait_http(f"{self.url}/-/ready", 30, **(wait_kw or {}))

    def query(self, promql: str) -> list[dict]:
        r = httpx.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def wait_for(self, promql: str, timeout: float = 30.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = self.query(promql)
            if result:
                return result
            time.sleep(0.5)
        raise TimeoutError(f"no data for {promql!r} within {timeout} s")
