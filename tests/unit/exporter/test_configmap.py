"""-m/--configmap-data against an HTTPS double of the API server's ConfigMap GET."""

import pytest

from gpuscale.errors import ConfigError
from gpuscale.exporter.configmap import parse_configmap_ref, read_configmap_counters
from tests.support.apiserver import ApiServer

ROWS = "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n"


@pytest.fixture
def api(tmp_path):
    server = ApiServer(tmp_path / "serviceaccount")
    yield server
    server.stop()


def test_reads_the_metrics_key_with_the_service_account(api):
    api.configmaps[("gpu", "exporter-metrics")] = {"metrics": ROWS}
    assert read_configmap_counters("gpu:exporter-metrics", api.env()) == ROWS


@pytest.mark.parametrize(
    ("setup", "spec", "fragment"),
    [
        (lambda a: None, "gpu:missing", "no ConfigMap missing in namespace gpu"),
        (lambda a: a.forbidden.add("gpu"), "gpu:x", "may not get ConfigMaps in gpu"),
        (lambda a: a.configmaps.update({("gpu", "x"): {"other": ""}}), "gpu:x", "no 'metrics' key"),
    ],
)
def test_api_refusals_are_one_line_config_errors(api, setup, spec, fragment):
    setup(api)
    with pytest.raises(ConfigError, match=fragment) as err:
        read_configmap_counters(spec, api.env())
    assert str(err.value).startswith(f"--configmap-data {spec}: ")


def test_outside_a_pod_says_to_mount_the_configmap_instead(tmp_path):
    with pytest.raises(ConfigError, match=r"not in a Kubernetes pod.*pass -f instead"):
        read_configmap_counters("gpu:x", {"GPUSCALE_SERVICE_ACCOUNT_DIR": str(tmp_path)})


@pytest.mark.parametrize("spec", ["gpu", ":x", "gpu:", "a:b:c"])
def test_reference_is_namespace_colon_name(spec):
    with pytest.raises(ConfigError, match="use NAMESPACE:NAME"):
        parse_configmap_ref(spec)
