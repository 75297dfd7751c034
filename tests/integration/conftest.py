"""Real servers for integration tests: Prometheus (and the exporter as a real process).

Each server binds 127.0.0.1 on a free port with a temporary directory, is shared
across the session where that is safe, and is stopped by its own PID.
"""

import shutil
import time
from collections.abc import Iterator

import pytest

from tests.support.servers import Process, Prometheus, start_exporter, wait_http


@pytest.fixture(scope="session")
def prometheus_bin() -> str:
    path = shutil.which("prometheus")
    if path is None:
        pytest.fail("prometheus is not installed: run ./scripts/test, which installs it")
    return path


@pytest.fixture(scope="session")
def sim_exporter(tmp_path_factory) -> Iterator[tuple[Process, int, float]]:
    """An 8-GPU simulated exporter process; yields (process, port, seconds to first /metrics)."""
    tmp = tmp_path_factory.mktemp("exporter")
    started = time.monotonic()
    proc, port = start_exporter(tmp, "--source", "sim", "--gpus", "8", "--collect-interval", "500")
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", 15)
        yield proc, port, time.monotonic() - started
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def prometheus(prometheus_bin, sim_exporter, tmp_path_factory) -> Iterator[Prometheus]:
    _, port, _ = sim_exporter
    server = Prometheus(
        prometheus_bin, tmp_path_factory.mktemp("prometheus"), [f"127.0.0.1:{port}"]
    )
    try:
        yield server
    finally:
        server.process.stop()
