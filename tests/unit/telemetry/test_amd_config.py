"""device-metrics-exporter's config.json keys, as ``--amd-metrics-config`` reads them."""

import json

import pytest

from gpuscale.errors import ConfigError
from gpuscale.telemetry.amd_config import AmdConfig, load_amd_config, parse_amd_config
from gpuscale.telemetry.amd_prof import ProfilerSettings


def parse(doc: dict, host: str = "node-a") -> AmdConfig:
    return parse_amd_config(json.dumps(doc), "config.json", host)


def test_custom_labels_are_lower_cased_as_upstream_exports_them():
    config = parse({"GPUConfig": {"CustomLabels": {"CLUSTER_NAME": "lab-a", "Rack": "r7"}}})
    assert config.custom_labels == (("cluster_name", "lab-a"), ("rack", "r7"))


def test_the_profiler_follows_the_host_entry_before_all():
    gpu = {"ProfilerMetrics": {"all": True, "node-b": False}}
    assert parse({"GPUConfig": gpu}, "node-a").profiler == ProfilerSettings()
    assert parse({"GPUConfig": gpu}, "node-b").profiler is None
    assert parse({}).profiler is None  # upstream: off by default, it has a cost
    sampled = {**gpu, "ProfilerConfig": {"SamplingInterval": 5000, "PtlDelay": 20}}
    assert parse({"GPUConfig": sampled}).profiler == ProfilerSettings(5000, 20)


def test_fields_select_series_and_keep_the_node_count():
    config = parse({"GPUConfig": {"Fields": ["GPU_PACKAGE_POWER", "GPU_PROF_SM_ACTIVE"]}})
    assert config.fields == {"gpu_package_power", "gpu_prof_sm_active", "gpu_nodes_total"}
    assert parse({"GPUConfig": {"Fields": []}}).fields is None


def test_upstream_parts_of_other_agents_are_accepted():
    doc = {
        "ServerPort": 5000,
        "CommonConfig": {"MetricsFieldPrefix": "", "HealthService": {"Enable": True}},
        "NICConfig": {"Fields": []},
        "GPUConfig": {"Labels": ["GPU_UUID", "SERIAL_NUMBER", "CLUSTER_NAME", "CARD_MODEL"]},
    }
    assert parse(doc) == AmdConfig()


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"GPUConfig": {"CustomLabels": {"GPU_ID": "7"}}}, "CustomLabels.GPU_ID: is one of"),
        ({"GPUConfig": {"CustomLabels": {f"L{i}": "x" for i in range(11)}}}, "allows 10"),
        ({"GPUConfig": {"CustomLabels": {"bad-name": "x"}}}, "not a Prometheus label name"),
        ({"GPUConfig": {"Labels": ["KFD_PROCESS_ID"]}}, "unbounded"),
        ({"GPUConfig": {"Labels": ["POD_UUID"]}}, "Kubernetes API"),
        ({"GPUConfig": {"Labels": ["GPU_COLOUR"]}}, "not a label of device-metrics-exporter"),
        ({"GPUConfig": {"ExtraPodLabels": {"W": "w"}}}, "ExtraPodLabels"),
        ({"GPUConfig": {"HealthThresholds": {"GPU_ECC_UNCORRECT_UMC": 5}}}, "HealthThresholds"),
        ({"GPUConfig": {"ProfilerConfig": {"SamplingInterval": 500}}}, "at least 1000"),
        ({"GPUConfig": {"ProfilerMetrics": {"all": "yes"}}}, "not true or false"),
        ({"GPUConfig": {"Fields": ["GPU_PACKAGE_POWR", "TEMP"]}}, "Fields TEMP"),
        ({"CommonConfig": {"MetricsFieldPrefix": "amd_"}}, "g_metrics_prefix"),
        ({"GPUconfig": {}}, "unknown key"),
    ],
)
def test_what_cannot_be_honoured_is_one_line_naming_file_and_key(doc, says):
    with pytest.raises(ConfigError) as err:
        parse(doc)
    message = str(err.value)
    assert message.startswith("config.json")
    assert says in message
    assert "\n" not in message


def test_a_broken_or_missing_file_names_the_place(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{\n  "GPUConfig": {,}\n}')
    with pytest.raises(ConfigError, match=r"config.json:2: not JSON"):
        load_amd_config(path, "n")
    with pytest.raises(ConfigError, match=r"--amd-metrics-config .*nope.json: cannot read"):
        load_amd_config(tmp_path / "nope.json", "n")
