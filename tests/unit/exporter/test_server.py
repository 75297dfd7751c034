import httpx
import pytest

from gpuscale.errors import ConfigError
from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.sampler import Sampler
from gpuscale.exporter.server import ExporterServer, parse_address
from gpuscale.fields import default_counters


@pytest.fixture
def served(source, clock):
    # Staleness runs on the fake clock, so only the test ages the data; a loaded machine
    # cannot. The real-time collect timeout is generous: a healthy collect never hits it.
    sampler = Sampler(
        source,
        SnapshotFamilies(default_counters()),
        source_name="sim",
        interval_s=1.0,
        timeout_s=10.0,
        monotonic=clock,
    )
    assert sampler.collect_once()
    server = ExporterServer(("127.0.0.1", 0), sampler)
    server.serve_in_background()
    try:
        yield server, sampler, f"http://127.0.0.1:{server.port}"
    finally:
        server.shutdown()
        source.release.set()


def _hang(source, sampler) -> None:
    """Make the next collect hang until the fixture releases it, and abandon it at once."""
    source.hang.set()
    sampler.timeout_s = 0.01
    assert not sampler.collect_once()  # abandoned, counted


def test_scrapes_keep_answering_while_the_source_hangs(served, source, clock):
    _, sampler, url = served
    _hang(source, sampler)
    clock.advance(2.9)  # still within three intervals of the last good collect
    r = httpx.get(f"{url}/metrics", timeout=5)
    assert r.status_code == 200
    assert r.text.count("DCGM_FI_DEV_GPU_UTIL{") == 2  # the last snapshot is still served
    assert 'gpuscale_exporter_collect_errors_total{reason="timeout"} 1.0' in r.text
    assert httpx.get(f"{url}/health", timeout=5).text == "ok\n"


def test_health_turns_503_with_the_reason_once_data_is_stale(served, source, clock):
    _, sampler, url = served
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    _hang(source, sampler)
    clock.advance(3.5)  # past three intervals of 1 s
    r = httpx.get(f"{url}/health", timeout=5)
    assert r.status_code == 503
    assert r.text == "no successful collect for 3.5 s (collect timed out after 0.01 s)\n"
    assert "DCGM_FI_DEV_GPU_UTIL{" not in httpx.get(f"{url}/metrics", timeout=5).text


def test_unknown_path_is_404_and_root_links_metrics(served):
    _, _, url = served
    assert httpx.get(f"{url}/nope", timeout=5).status_code == 404
    assert 'href="/metrics"' in httpx.get(f"{url}/", timeout=5).text


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
    with pytest.raises(ConfigError) as raised:
        parse_address(address)
    assert str(raised.value) == (
        f"--address {address!r}: not an address to listen on; give [HOST]:PORT with a port "
        "from 0 to 65535, such as ':9400' or '127.0.0.1:9400'"
    )
