import pytest
from prometheus_client.parser import text_string_to_metric_families

import gpuscale
from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.sampler import Sampler
from gpuscale.fields import default_counters, parse_counters
from gpuscale.telemetry.base import XidEvent
from tests.support.exposition import parse


def _values(body: bytes) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def _named(body: bytes, name: str) -> list[float]:
    return [v for (n, _), v in _values(body).items() if n == name]


def _sampler(source, clock, **kw):
    kw.setdefault(
        "timeout_s", 10.0
    )  # real time: a healthy collect never hits it, even on a busy box
    kw.setdefault("source_name", "sim")
    return Sampler(source, SnapshotFamilies(default_counters()), monotonic=clock, **kw)


def test_publishes_snapshot_and_health_ok(source, clock):
    sampler = _sampler(source, clock)
    assert sampler.health()[0] is False
    assert sampler.collect_once()
    body = sampler.exposition()
    assert sorted(_named(body, "DCGM_FI_DEV_GPU_UTIL")) == [50.0, 51.0]
    assert sampler.health() == (True, "ok")
    assert _named(body, "gpuscale_exporter_collects_total") == [1.0]


@pytest.mark.parametrize("name", ["sim", "nvml", "amd"])
def test_says_which_source_it_serves_and_its_version(source, clock, name):
    sampler = _sampler(source, clock, source_name=name)
    for _ in range(2):  # before the first collect, and with GPU series
        info = {
            labels: v
            for (n, labels), v in _values(sampler.exposition()).items()
            if n == "gpuscale_exporter_info"
        }
        assert info == {(("source", name), ("version", gpuscale.__version__)): 1.0}
        sampler.collect_once()


def test_stale_snapshot_is_withdrawn_after_three_intervals(source, clock):
    sampler = _sampler(source, clock, interval_s=1.0)
    sampler.collect_once()
    clock.advance(2.9)
    assert _named(sampler.exposition(), "DCGM_FI_DEV_GPU_UTIL")
    clock.advance(0.2)
    body = sampler.exposition()
    assert _named(body, "DCGM_FI_DEV_GPU_UTIL") == []
    assert _named(body, "gpuscale_gpu_up") == []
    assert _named(body, "gpuscale_exporter_snapshot_age_seconds")[0] > 3.0
    ok, reason = sampler.health()
    assert not ok
    assert "no successful collect for 3.1 s" in reason


def test_source_error_is_counted_and_previous_data_kept_until_stale(source, clock):
    sampler = _sampler(source, clock)
    sampler.collect_once()
    source.raise_next = True
    assert not sampler.collect_once()
    body = sampler.exposition()
    errors = {
        dict(k[1])["reason"]: v
        for k, v in _values(body).items()
        if k[0] == "gpuscale_exporter_collect_errors_total"
    }
    assert errors["source"] == 1.0
    assert errors["timeout"] == 0.0
    assert _named(body, "DCGM_FI_DEV_GPU_UTIL")


def test_next_collect_is_one_interval_later_or_now_when_behind(source, clock):
    sampler = _sampler(source, clock, interval_s=1.0)
    assert sampler.next_collect_at(clock.now) == clock.now + 1.0
    due = clock.now
    clock.advance(2.5)  # a slow collect: the missed ticks are skipped
    assert sampler.next_collect_at(due) == clock.now


def test_transient_source_error_holds_the_next_collect_for_its_delay(source, clock, caplog):
    sampler = _sampler(source, clock, interval_s=1.0)
    source.raise_next = True
    source.retry_delay = 5.0
    failed_at = clock.now
    assert not sampler.collect_once()
    assert sampler.next_collect_at(failed_at) == failed_at + 5.0
    assert "backend went away; next try in 5.0 s at the earliest" in caplog.text
    # A delay shorter than the interval does not make the sampler collect sooner.
    source.retry_delay = 0.1
    assert not sampler.collect_once()
    assert sampler.next_collect_at(failed_at) == failed_at + 1.0
    source.raise_next = False
    clock.advance(1.0)
    assert sampler.collect_once()
    assert sampler.next_collect_at(clock.now) == clock.now + 1.0


def test_hanging_source_times_out_and_scrapes_keep_answering(source, clock):
    sampler = _sampler(source, clock, timeout_s=0.05)
    source.hang.set()
    try:
        assert not sampler.collect_once()  # abandoned after 50 ms
        assert not sampler.collect_once()  # still hung: counted, not stacked
        body = sampler.exposition()
        errors = {
            dict(k[1])["reason"]: v
            for k, v in _values(body).items()
            if k[0] == "gpuscale_exporter_collect_errors_total"
        }
        assert errors["timeout"] == 2.0
        assert source.calls == 1
        ok, reason = sampler.health()
        assert not ok
        assert "still running" in reason
    finally:
        source.hang.clear()
        source.release.set()


def test_failed_fields_and_lost_gpu_are_counted_once(source, clock):
    sampler = _sampler(source, clock)
    source.failed_fields[0] = ("DCGM_FI_DEV_SM_CLOCK",)
    source.lost.add(1)
    sampler.collect_once()
    sampler.collect_once()
    body = sampler.exposition()
    errors = {
        dict(k[1])["reason"]: v
        for k, v in _values(body).items()
        if k[0] == "gpuscale_exporter_collect_errors_total"
    }
    assert errors["field"] == 2.0
    assert errors["device_lost"] == 1.0
    up = {dict(k[1])["gpu"]: v for k, v in _values(body).items() if k[0] == "gpuscale_gpu_up"}
    assert up == {"0": 1.0, "1": 0.0}


EXP_ROWS = """DCGM_FI_DEV_GPU_UTIL, gauge, util
DCGM_EXP_XID_ERRORS_COUNT, counter, reported XIDs during last window
DCGM_EXP_CLOCK_EVENTS_COUNT, counter, reported clock events
"""


def _exp_sampler(source, clock, **kw):
    families = SnapshotFamilies(parse_counters(EXP_ROWS), clock_window_ms=10_000)
    return Sampler(source, families, source_name="sim", monotonic=clock, timeout_s=10.0, **kw)


def _counts(body: bytes, name: str, label: str) -> dict[tuple[str, str | None], float]:
    family = parse(body.decode())[name]
    return {(dict(p)["gpu"], dict(p).get(label)): v for p, v in family.samples}


def test_xid_events_counted_in_window_then_expire(source, clock):
    source._clock = clock
    sampler = _exp_sampler(source, clock, xid_window_ms=10_000)
    source.xids[0] = [XidEvent(clock.now, 79)]
    sampler.collect_once()
    got = _counts(sampler.exposition(), "DCGM_EXP_XID_ERRORS_COUNT", "xid")
    assert got == {("0", "79"): 1.0, ("1", None): 0.0}
    clock.advance(11.0)
    sampler.collect_once()
    got = _counts(sampler.exposition(), "DCGM_EXP_XID_ERRORS_COUNT", "xid")
    assert got == {("0", None): 0.0, ("1", None): 0.0}


def test_clock_events_count_collects_with_each_reason_bit_in_the_window(source, clock):
    source._clock = clock
    sampler = _exp_sampler(source, clock)
    source.values[0]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = 0x4 | 0x40  # power cap, hw thermal
    source.values[1]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = 0x1  # idle
    sampler.collect_once()
    clock.advance(5.0)
    source.values[0]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = 0x4
    sampler.collect_once()
    got = _counts(sampler.exposition(), "DCGM_EXP_CLOCK_EVENTS_COUNT", "clock_event")
    assert got == {("0", "power_cap"): 2.0, ("0", "hw_thermal"): 1.0, ("1", "gpu_idle"): 2.0}
    clock.advance(6.0)  # the first collect leaves the 10 s window
    source.values[0]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = 0
    sampler.collect_once()
    got = _counts(sampler.exposition(), "DCGM_EXP_CLOCK_EVENTS_COUNT", "clock_event")
    assert got == {("0", "power_cap"): 1.0, ("1", "gpu_idle"): 2.0}


def test_gzip_body_is_one_stream_equal_to_the_plain_body(source, clock):
    import zlib

    sampler = _sampler(source, clock)
    sampler.collect_once()
    for _ in range(2):  # the saved compressor state is reused, not consumed
        body = sampler.exposition(gzipped=True)
        one_member = zlib.decompressobj(31)
        text = one_member.decompress(body)
        assert one_member.eof
        assert one_member.unused_data == b""
        assert text == sampler.exposition()
        assert b"gpuscale_exporter_collects_total" in text


def test_replaced_families_are_served_from_the_next_collect(source, clock):
    source._clock = clock
    sampler = _sampler(source, clock)
    sampler.collect_once()
    assert "DCGM_EXP_CLOCK_EVENTS_COUNT" not in parse(sampler.exposition().decode())
    sampler.replace_families(SnapshotFamilies(parse_counters(EXP_ROWS)))
    source.values[0]["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"] = 0x1
    sampler.collect_once()
    got = _counts(sampler.exposition(), "DCGM_EXP_CLOCK_EVENTS_COUNT", "clock_event")
    assert got == {("0", "gpu_idle"): 1.0, ("1", None): 0.0}
    assert "DCGM_FI_DEV_POWER_USAGE" not in parse(sampler.exposition().decode())  # not listed
