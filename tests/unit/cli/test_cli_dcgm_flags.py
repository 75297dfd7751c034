"""``gpuscale exporter`` takes dcgm-exporter 4.x's command line unchanged.

The flag list is upstream's own (tests/data/dcgm-exporter/flags.tsv, read from
dcgm-exporter 4.5.3-4.8.2's pkg/cmd/app.go), so a flag upstream has and we lack fails here.
"""

import logging
import os
from pathlib import Path

import pytest

from gpuscale.cli.app import main
from gpuscale.cli.commands import load_subcommand
from gpuscale.cli.dcgm_unsupported import REFUSED

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm-exporter"
FLAGS = [
    line.split("\t")
    for line in (DATA / "flags.tsv").read_text().splitlines()
    if line and not line.startswith("#")
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in list(os.environ):
        if name.startswith(("GPUSCALE_", "DCGM_", "NVIDIA_RESOURCE", "KUBERNETES_", "DISABLE_")):
            monkeypatch.delenv(name)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def exporter_command():
    return load_subcommand("exporter")


def params(args: list[str]) -> dict:
    return exporter_command().make_context("exporter", list(args)).params


def run(capsys, *args):
    code = 0
    try:
        main(["exporter", *args])
    except SystemExit as exc:
        code = exc.code
    return code, *capsys.readouterr()


@pytest.mark.parametrize(("name", "kind", "shorts", "envs"), FLAGS, ids=[f[0] for f in FLAGS])
def test_every_upstream_flag_exists_with_its_short_forms_and_env_vars(name, kind, shorts, envs):
    by_opt = {opt: p for p in exporter_command().params for opt in p.opts}
    param = by_opt.get(f"--{name}")
    assert param is not None, f"--{name} is missing"
    for short in filter(None, shorts.split(",")):
        assert f"-{short}" in param.opts
    envvars = param.envvar if isinstance(param.envvar, list) else [param.envvar]
    for var in filter(None, envs.split(",")):
        assert envvars[0] == var  # upstream's name first: it wins over our GPUSCALE_* alias
    assert getattr(param, "is_bool_flag", False) == (kind == "Bool")


@pytest.mark.parametrize(
    ("args", "name", "value"),
    [
        (["--kubernetes=true"], "kubernetes", True),
        (["--kubernetes=false"], "kubernetes", False),
        (["-k"], "kubernetes", True),
        (["-k=1"], "kubernetes", True),
        (["-k=F"], "kubernetes", False),
        (["-d", "f"], "devices", "f"),
        (["-d", "g:0,2-3"], "devices", "g:0,2-3"),
        (["-c", "30000"], "collect_interval", 30000),
        (["--collect-interval=30000"], "collect_interval", 30000),
        (["-a", "127.0.0.1:9500"], "address", "127.0.0.1:9500"),
        (["-f", "/x.csv"], "collectors", Path("/x.csv")),
        (["-x", "60000"], "xid_count_window_size", 60000),
        (["-n"], "no_hostname", True),
        (["-o"], "use_old_namespace", True),
        (["-rbmn"], "replace_blanks_in_model_name", True),
        (["--replace-blanks-in-model-name=true"], "replace_blanks_in_model_name", True),
        (["--clock-events-count-window-size", "1000"], "clock_events_count_window_size", 1000),
        (["--debug"], "debug", True),
        (["--log-format", "json"], "log_format", "json"),
        (["--kubernetes-gpu-id-type", "device-name"], "kubernetes_gpu_id_type", "device-name"),
        (["--pod-resources-kubelet-socket", "/s"], "pod_resources_socket", "/s"),
        (["--hpc-job-mapping-dir", "/j"], "hpc_job_mapping_dir", Path("/j")),
        (
            ["--nvidia-resource-names", "nvidia.com/a100"],
            "nvidia_resource_names",
            ["nvidia.com/a100"],
        ),
        (["--dump-compression=false"], "dump_compression", False),
        (["--disable-startup-validate"], "disable_startup_validate", True),
        (["--hostname-label", "hostname"], "hostname_label", "hostname"),  # ours
    ],
)
def test_value_syntax_is_upstreams(args, name, value):
    assert params(args)[name] == value


@pytest.mark.parametrize(
    ("env", "name", "value"),
    [
        ({"DCGM_EXPORTER_COLLECTORS": "/c.csv"}, "collectors", Path("/c.csv")),
        ({"DCGM_EXPORTER_LISTEN": "127.0.0.1:19551"}, "address", "127.0.0.1:19551"),
        ({"DCGM_EXPORTER_INTERVAL": "30000"}, "collect_interval", 30000),
        ({"DCGM_EXPORTER_KUBERNETES": "true"}, "kubernetes", True),
        ({"DCGM_EXPORTER_USE_OLD_NAMESPACE": "1"}, "use_old_namespace", True),
        ({"DCGM_EXPORTER_DEVICES_STR": "g:0"}, "devices", "g:0"),
        ({"DCGM_EXPORTER_NO_HOSTNAME": "true"}, "no_hostname", True),
        ({"DCGM_EXPORTER_WEB_CONFIG_FILE": "/w.yml"}, "web_config_file", Path("/w.yml")),
        ({"DCGM_EXPORTER_XID_COUNT_WINDOW_SIZE": "1000"}, "xid_count_window_size", 1000),
        (
            {"DCGM_EXPORTER_REPLACE_BLANKS_IN_MODEL_NAME": "true"},
            "replace_blanks_in_model_name",
            True,
        ),
        ({"DCGM_EXPORTER_DEBUG": "true"}, "debug", True),
        (
            {"DCGM_EXPORTER_CLOCK_EVENTS_COUNT_WINDOW_SIZE": "9"},
            "clock_events_count_window_size",
            9,
        ),
        ({"DCGM_EXPORTER_LOG_FORMAT": "json"}, "log_format", "json"),
        ({"DCGM_POD_RESOURCES_KUBELET_SOCKET": "/k.sock"}, "pod_resources_socket", "/k.sock"),
        ({"DCGM_HPC_JOB_MAPPING_DIR": "/j"}, "hpc_job_mapping_dir", Path("/j")),
        (
            {"NVIDIA_RESOURCE_NAMES": "nvidia.com/a100"},
            "nvidia_resource_names",
            ["nvidia.com/a100"],
        ),
        (
            {"DCGM_EXPORTER_KUBERNETES_GPU_ID_TYPE": "device-name"},
            "kubernetes_gpu_id_type",
            "device-name",
        ),
        ({"DCGM_EXPORTER_CPU_DEVICES_STR": "f"}, "cpu_devices", "f"),
        ({"DCGM_EXPORTER_OTHER_DEVICES_STR": "f"}, "switch_devices", "f"),
        ({"DCGM_EXPORTER_CONFIGMAP_DATA": "none"}, "configmap_data", "none"),
        ({"DCGM_EXPORTER_DCGM_LOG_LEVEL": "WARN"}, "dcgm_log_level", "WARN"),
        ({"DCGM_EXPORTER_DUMP_DIRECTORY": "/d"}, "dump_directory", "/d"),
        ({"DCGM_EXPORTER_DUMP_RETENTION": "0"}, "dump_retention", 0),
        ({"DCGM_EXPORTER_DUMP_COMPRESSION": "false"}, "dump_compression", False),
        ({"DISABLE_STARTUP_VALIDATE": "true"}, "disable_startup_validate", True),
        (
            {"DCGM_EXPORTER_GPU_BIND_UNBIND_POLL_INTERVAL": "5s"},
            "gpu_bind_unbind_poll_interval",
            "5s",
        ),
        (
            {"DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX": "^app$"},
            "kubernetes_pod_label_allowlist_regex",
            ["^app$"],
        ),
        # Every refused option's variable is read too (and refused by the command, below).
        *(
            ({var: "true"}, name, True)
            for name, var in (
                ("kubernetes_enable_pod_labels", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_LABELS"),
                ("kubernetes_enable_pod_uid", "DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID"),
                ("kubernetes_virtual_gpus", "KUBERNETES_VIRTUAL_GPUS"),
                ("kubernetes_enable_dra", "KUBERNETES_ENABLE_DRA"),
                ("fake_gpus", "DCGM_EXPORTER_USE_FAKE_GPUS"),
                ("enable_dcgm_log", "DCGM_EXPORTER_ENABLE_DCGM_LOG"),
                ("dump_enabled", "DCGM_EXPORTER_DUMP_ENABLED"),
                ("enable_gpu_bind_unbind_watch", "DCGM_EXPORTER_ENABLE_GPU_BIND_UNBIND_WATCH"),
                ("enable_pprof", "DCGM_EXPORTER_ENABLE_PPROF"),
            )
        ),
        ({"DCGM_REMOTE_HOSTENGINE_INFO": "h:5555"}, "remote_hostengine_info", "h:5555"),
        ({"DCGM_EXPORTER_SYSTEMD_SOCKET": "true"}, "web_systemd_socket", True),
    ],
)
def test_each_environment_variable_sets_its_option(monkeypatch, env, name, value):
    for var, text in env.items():
        monkeypatch.setenv(var, text)
    assert params([])[name] == value


def test_command_line_beats_environment_and_dcgm_names_beat_gpuscale_aliases(monkeypatch):
    monkeypatch.setenv("DCGM_EXPORTER_INTERVAL", "500")
    monkeypatch.setenv("DCGM_EXPORTER_KUBERNETES", "true")
    assert params(["-c", "2000", "--kubernetes=false"])["collect_interval"] == 2000
    assert params(["--kubernetes=false"])["kubernetes"] is False
    assert params([])["collect_interval"] == 500
    monkeypatch.setenv("GPUSCALE_COLLECT_INTERVAL", "700")
    assert params([])["collect_interval"] == 500  # DCGM_EXPORTER_INTERVAL is read first
    monkeypatch.delenv("DCGM_EXPORTER_INTERVAL")
    assert params([])["collect_interval"] == 700  # the alias alone still works


@pytest.mark.parametrize(("name", "spec"), REFUSED.items(), ids=list(REFUSED))
def test_options_without_a_meaning_here_are_refused_in_one_line(capsys, name, spec):
    flag, neutral, why, _ = spec
    args = [flag, "host:5555"] if neutral is None else [f"{flag}=true"]
    code, out, err = run(capsys, "-a", "127.0.0.1:0", *args)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"gpuscale: error: {flag}")
    assert why in err


def test_refused_option_named_by_its_environment_variable(capsys, monkeypatch):
    monkeypatch.setenv("DCGM_REMOTE_HOSTENGINE_INFO", "10.0.0.1:5555")
    code, _, err = run(capsys, "-a", "127.0.0.1:0")
    assert code == 2
    assert err.startswith(
        "gpuscale: error: DCGM_REMOTE_HOSTENGINE_INFO=10.0.0.1:5555: there is no DCGM host engine"
    )


@pytest.mark.parametrize(
    ("args", "env", "fragment"),
    [
        (
            ["--kubernetes=maybe"],
            {},
            "--kubernetes=maybe: 'maybe' is not a boolean; use true or false",
        ),
        ([], {"DCGM_EXPORTER_KUBERNETES": "maybe"}, "DCGM_EXPORTER_KUBERNETES=maybe"),
        (["-d", "g+i"], {}, "--devices 'g+i': use f, g[:RANGE] or i[:RANGE]"),
        (["-d", "f:1"], {}, "f takes no range"),
        (["-p", "g"], {}, "--cpu-devices 'g': there are no DCGM CPU entities here"),
        (["-s", "i:0"], {}, "--switch-devices 'i:0': there are no DCGM NvSwitch entities here"),
        (["--dcgm-log-level", "LOUD"], {}, "not a DCGM log level"),
        (["--gpu-bind-unbind-poll-interval", "soon"], {}, "not a duration"),
        (["--kubernetes-pod-label-allowlist-regex", "(["], {}, "not a regular expression"),
        (["--kubernetes-gpu-id-type", "serial"], {}, "--kubernetes-gpu-id-type serial"),
        (["--log-format", "xml"], {}, "--log-format xml"),
        (["-m", "just-a-name"], {}, "--configmap-data 'just-a-name': use NAMESPACE:NAME"),
        (["-m", "gpu:cm"], {}, "--configmap-data gpu:cm: not in a Kubernetes pod"),
        (
            ["-k", "--kubernetes-enable-pod-uid"],
            {},
            "--kubernetes-enable-pod-uid: not in a Kubernetes pod",
        ),
    ],
)
def test_bad_values_get_one_line_naming_the_input(capsys, monkeypatch, args, env, fragment):
    for var, text in env.items():
        monkeypatch.setenv(var, text)
    code, _, err = run(capsys, "-a", "127.0.0.1:0", *args)
    assert code == 2
    assert err.count("\n") == 1
    assert fragment in err


def test_version_and_short_help(capsys):
    code, out, _ = run(capsys, "--version")
    assert code == 0
    assert out.startswith("gpuscale exporter version ")
    assert "dcgm-exporter 4.5.3-4.8.2" in out
    assert run(capsys, "-v") == (0, out, "")  # urfave/cli's short form
    code, out, _ = run(capsys, "-h")
    assert code == 0
    assert "--remote-hostengine-info" in out
