import threading

import httpx
import pytest

from gpuscale.errors import ConfigError
from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.sampler import Sampler
from gpuscale.exporter.server import ExporterServer, parse_address
from gpuscale.fields import default_counters


@pytest.fixture
def served(source):
    sampler = Sampler(source, SnapshotFamilies(default_counters()), interval_s=0.05, timeout_s=0.05)
    sampler.collect_once()
    server = ExporterServer(("127.0.0.1", 0), sampler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, sampler, f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        server.server_close()
        source.release.set()


def test_scrapes_keep_answering_while_the_source_hangs(served, source):
    _, sampler, url = served
    source.hang.set()
    assert not sampler.collect_once()  # abandoned after 50 ms, counted
    r = httpx.get(f"{url}/metrics", timeout=2)
    assert r.status_code == 200
    assert r.text.count("DCGM_FI_DEV_GPU_UTIL{") == 2  # the last snapshot is still fresh
    assert 'gpuscale_exporter_collect_errors_total{reason="timeout"} 1.0' in r.text


def test_health_turns_503_with_the_reason_once_data_is_stale(served, source):
    _, sampler, url = served
    assert httpx.get(f"{url}/health").status_code == 200
    source.hang.set()
    sampler.collect_once()
    # Age the snapshot past three intervals without sleeping: move its collect time back.
    sampler._published.at -= 1.0
    r = httpx.get(f"{url}/health")
    assert r.status_code == 503
    assert "no successful collect for" in r.text
    assert "DCGM_FI_DEV_GPU_UTIL{" not in httpx.get(f"{url}/metrics").text


def test_unknown_path_is_404_and_root_links_metrics(served):
    _, _, url = served
    assert httpx.get(f"{url}/nope").status_code == 404
    assert 'href="/metrics"' in httpx.get(f"{url}/").text


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (":9400", ("0.0.0.0", 9400)),  # noqa: S104
        ("127.0.0.1:0", ("127.0.0.1", 0)),
        ("[::1]:9400", ("::1", 9400)),
    ],
)
def test_address_forms(address, expected):
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9400", "host:", "host:http", ":70000"])
def test_bad_address_is_a_config_error(address):
    with pytest.raises(ConfigError, match="--address"):
        parse_address(address)
