"""MIG under ``-d/--devices``, over the NVML fake in MIG mode, as dcgm-exporter exports it."""

import pytest

from gpuscale.errors import ConfigError
from gpuscale.exporter.collector import SnapshotFamilies
from gpuscale.exporter.devices import parse_devices, select_entities
from gpuscale.exporter.exposition import render
from gpuscale.fields import default_counters
from gpuscale.telemetry.nvml import NvmlSource
from tests.support.exposition import parse
from tests.support.nvml import fake_pynvml

GIB = 1024**3


@pytest.fixture
def source(monkeypatch):
    nv = fake_pynvml(monkeypatch)
    migs = [
        nv.FakeMig(gi_id=7, profile_index=0, uuid="MIG-a", memory_total=10 * GIB, memory_used=GIB),
        nv.FakeMig(
            gi_id=1, profile_index=2, uuid="MIG-b", memory_total=40 * GIB, memory_used=5 * GIB
        ),
    ]
    # GPU 0 in MIG mode: NVML's whole-GPU memory counts what its instances use (6 GiB);
    # GPU 1 is a plain GPU using 20 GiB.
    nv.configure(
        [
            nv.FakeGpu(mig=migs, memory_used=6 * GIB),
            nv.FakeGpu(
                uuid="GPU-22222222-2222-3333-4444-555555555555", minor=1, memory_used=20 * GIB
            ),
        ]
    )
    return NvmlSource(hostname="node-a")


def _fb_used(source, devices: str) -> list[tuple[str, str | None, float]]:
    keep = select_entities(parse_devices(devices), source.devices())
    text = render(SnapshotFamilies(default_counters(), keep=keep).build(source.sample(), {}))
    return sorted(
        (dict(pairs)["gpu"], dict(pairs).get("GPU_I_ID"), value)
        for pairs, value in parse(text.decode())["DCGM_FI_DEV_FB_USED"].samples
    )


def test_default_exports_instances_of_a_mig_gpu_and_plain_gpus_whole(source):
    got = _fb_used(source, "f")
    assert got == [("0", "1", 5120.0), ("0", "7", 1024.0), ("1", None, 20480.0)]
    # sum() over the node counts each MiB once: the MIG GPU's own 6 GiB is not added again.
    assert sum(v for *_, v in got) == (1 + 5 + 20) * 1024


def test_g_exports_whole_gpus_only(source):
    assert _fb_used(source, "g") == [("0", None, 6144.0), ("1", None, 20480.0)]
    assert _fb_used(source, "g:1") == [("1", None, 20480.0)]


def test_i_exports_instances_numbered_across_the_host(source):
    assert _fb_used(source, "i") == [("0", "1", 5120.0), ("0", "7", 1024.0)]
    # Instances in discovery order (GPU, then instance id): 0 is GI 1, 1 is GI 7.
    assert _fb_used(source, "i:1") == [("0", "7", 1024.0)]


@pytest.mark.parametrize(
    ("devices", "fragment"),
    [("g:5", "no GPU 5 on this host"), ("i:2", "no GPU instance 2"), ("g+i", "use f, g[:RANGE]")],
)
def test_indices_must_exist_and_the_grammar_is_upstreams(source, devices, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("[", r"\[")):
        select_entities(parse_devices(devices), source.devices())


def test_i_needs_mig_instances(monkeypatch):
    nv = fake_pynvml(monkeypatch)
    nv.configure([nv.FakeGpu()])
    with pytest.raises(ConfigError, match="no MIG GPU instances on this host"):
        select_entities(parse_devices("i"), NvmlSource(hostname="h").devices())
