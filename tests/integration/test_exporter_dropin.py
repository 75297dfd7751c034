"""The exporter as a drop-in for dcgm-exporter 4.x, run as a real process.

Upstream's own deployment files start it unchanged: the Helm chart's env block (rendered
with the chart's values, as Helm does) and dcgm-exporter.yaml's. Every counters file
upstream ships is served family by family with the file's name, type and help, and with
upstream's label order. Files: tests/data/dcgm-exporter (Apache-2.0, see NOTICE there).
"""

import os
import re
import signal
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from tests.support.apiserver import ApiServer
from tests.support.exposition import Family, parse
from tests.support.helm import render_env
from tests.support.kubelet import FakeKubelet
from tests.support.servers import Process, free_port, gpuscale_cmd, wait_http

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[1] / "data" / "dcgm-exporter"
COUNTERS = (
    "default-counters.csv",
    "dcp-metrics-included.csv",
    "1.x-compatibility-metrics.csv",
    "helm-default-counters.csv",
)
# The chart's values.yaml defaults that the env block reads; the address is the one value
# changed (tests bind 127.0.0.1 on a free port, never :9400 on every interface).
CHART_VALUES = {
    "kubernetes": {"enablePodLabels": False, "enablePodUID": False, "podLabelAllowlistRegex": []},
    "tlsServerConfig": {"enabled": False},
    "basicAuth": {"users": {}},
    "kubernetesDRA": {"enabled": False},
}
HEAD = ["gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"]
# Labels each DCGM_EXP_* family adds to the label-rows map, and the per-series attributes:
# upstream's template writes each map in sorted key order, labels before attributes.
EXTRA_LABELS = {"window_size_in_ms", "xid", "clock_event", "health_watch", "health_error_code"}
EXTRA_LABELS |= {"peer_gpu", "link_status"}
ATTRIBUTES = {"err_code", "err_msg", "pod", "namespace", "container"}
NODE = "gpu-node-7"
# Two models so that every field has a GPU that reports it: the H100 remaps rows and the
# V100 retires pages (each lacks the other's fields, as the real parts do).
SIM = ("--gpu-models", "H100,V100", "--gpus", "4")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPUSCALE_", "DCGM_", "KUBERNETES_", "NVIDIA_", "NODE_NAME"))
    }
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _start(tmp: Path, args: list[str], env: dict[str, str]) -> Process:
    # This machine has no GPUs, and the exporter's default (auto) refuses to start
    # without them: the drop-in is exercised on simulated GPUs, the one flag added.
    return Process(
        [*gpuscale_cmd(), "exporter", "--source", "sim", *args],
        tmp / f"exporter-{time.monotonic_ns()}.log",
        env,
    )


def _rows(path: Path, *, uncomment: bool = False) -> list[tuple[str, str, str]]:
    """(name, type, help) of each enabled row, first of a repeated name only, as upstream."""
    rows: dict[str, tuple[str, str, str]] = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if uncomment and re.match(r"^#\s*(DCGM_|dcgm_)\w+\s*,", line):
            line = line.lstrip("#").strip()
        if not line or line.startswith("#"):
            continue
        name, type_, help_ = (p.strip() for p in line.split(",", 2))
        rows.setdefault(name, (name, type_, help_))
    return list(rows.values())


def _check_label_order(family: Family, label_rows: set[str]) -> None:
    for pairs, _ in family.samples:
        keys = [k for k, _ in pairs]
        assert keys[: len(HEAD)] == HEAD, (family.name, keys)
        tail = keys[len(HEAD) :]
        labels = [k for k in tail if k in label_rows | EXTRA_LABELS]
        attrs = [k for k in tail if k in ATTRIBUTES or k.startswith("hpc_")]
        assert tail == sorted(labels) + sorted(attrs), (family.name, keys)


def _check_conformance(text: str, rows: list[tuple[str, str, str]]) -> None:
    families = parse(text)
    label_rows = {name for name, type_, _ in rows if type_ == "label"}
    gpu_series = (
        families["DCGM_FI_DEV_GPU_UTIL"].labels() if "DCGM_FI_DEV_GPU_UTIL" in families else None
    )
    for name, type_, help_ in rows:
        if type_ == "label":
            series = gpu_series or next(iter(families.values())).labels()
            assert all(name in labels for labels in series), name
            continue
        assert name in families, f"{name} is not served"
        family = families[name]
        assert (family.type, family.help) == (type_, help_), name
        assert family.samples, name
        _check_label_order(family, label_rows)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Each shipped counters file, and the same file with every commented-out row enabled."""
    tmp = tmp_path_factory.mktemp("counters")
    out = {}
    for name in COUNTERS:
        out[name] = DATA / name
        lines = []
        for raw in (DATA / name).read_text().splitlines():
            match = re.match(r"^(\s*)#\s*((DCGM_|dcgm_)\w+\s*,.*)$", raw)
            lines.append(match[1] + match[2] if match else raw)
        (tmp / f"all-{name}").write_text("\n".join(lines) + "\n")
        out[f"all-{name}"] = tmp / f"all-{name}"
    return out


def test_every_shipped_counters_file_is_served_family_by_family(files, tmp_path):
    # Started together, then each checked: 8 processes, each bounded to 20 s to answer.
    running = {}
    for name, path in files.items():
        port = free_port()
        args = ["-a", f"127.0.0.1:{port}", "-f", str(path), "-c", "500", *SIM]
        running[name] = (_start(tmp_path, args, _clean_env(NODE_NAME=NODE)), port, path)
    try:
        for name, (_, port, path) in running.items():
            wait_http(f"http://127.0.0.1:{port}/metrics", 20)
            time.sleep(0.6)  # a second collect, so rates that need two are there too
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            rows = _rows(path)
            assert rows, name
            _check_conformance(text, rows)
            assert f'Hostname="{NODE}"' in text, name
    finally:
        for proc, _, _ in running.values():
            proc.stop()


def test_an_unknown_row_fails_with_file_and_line_and_exit_2(tmp_path):
    bad = tmp_path / "custom.csv"
    lines = (DATA / "default-counters.csv").read_text().splitlines()
    lines.insert(7, "DCGM_FI_DEV_NOT_A_FIELD, gauge, typo")
    bad.write_text("\n".join(lines) + "\n")
    proc = _start(tmp_path, ["-a", f"127.0.0.1:{free_port()}", "-f", str(bad)], _clean_env())
    try:
        assert proc.proc.wait(30) == 2
    finally:
        proc.stop()
    (line,) = [ln for ln in proc.output().splitlines() if ln]
    # The row is named by line and column; its text is not repeated (a file given by
    # mistake, /etc/shadow say, must not reach the log).
    assert line.startswith(f"gpuscale: error: {bad}:8:1: not a DCGM field name")
    assert "DCGM_FI_DEV_NOT_A_FIELD" not in line


def _env_block(rendered: list[dict], port: int) -> dict[str, str]:
    """Environment variables as the kubelet sets them from a container's env list."""
    env = {}
    for item in rendered:
        if "valueFrom" in item:
            assert item["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
            env[item["name"]] = NODE
        elif item["name"] == "DCGM_EXPORTER_LISTEN":
            env[item["name"]] = f"127.0.0.1:{port}"  # the value the test gives the chart
        else:
            env[item["name"]] = item["value"]
    return env


def _manifest_env() -> list[dict]:
    docs = list(yaml.safe_load_all((DATA / "dcgm-exporter.yaml").read_text()))
    (daemonset,) = [d for d in docs if d and d.get("kind") == "DaemonSet"]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    return container["env"]


@pytest.mark.parametrize("deployment", ["helm", "manifest"])
def test_upstream_env_block_runs_as_is_with_pod_labels_address_and_node_name(tmp_path, deployment):
    port = free_port()
    if deployment == "helm":
        template = (DATA / "helm-daemonset-env.yaml.tpl").read_text()
        rendered = render_env(
            template, {**CHART_VALUES, "service": {"address": f"127.0.0.1:{port}"}}
        )
    else:
        rendered = _manifest_env()
    env = _env_block(rendered, port)
    assert env["DCGM_EXPORTER_KUBERNETES"] == "true"
    kubelet = FakeKubelet()
    kubelet.hold("llm-0", "serving", "vllm", "nvidia.com/gpu", "nvidia0")  # device-name ids
    # The chart mounts the kubelet's pod-resources directory; here the socket is the fake's.
    env["DCGM_POD_RESOURCES_KUBELET_SOCKET"] = kubelet.socket
    # The chart's arguments: -f with its ConfigMap's counters, mounted as a file.
    counters = tmp_path / "default-counters.csv"
    counters.write_text((DATA / "helm-default-counters.csv").read_text())
    proc = _start(tmp_path, ["-f", str(counters), "-c", "500"], _clean_env(**env))
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", 20)
        deadline, text = time.monotonic() + 15, ""
        while time.monotonic() < deadline and 'pod="llm-0"' not in text:
            text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            time.sleep(0.3)
    finally:
        proc.stop()
        kubelet.stop()
    util = parse(text)["DCGM_FI_DEV_GPU_UTIL"].labels()
    gpu0 = next(lb for lb in util if lb["gpu"] == "0")
    assert (gpu0["pod"], gpu0["namespace"], gpu0["container"]) == ("llm-0", "serving", "vllm")
    assert all(lb["Hostname"] == NODE for lb in util)
    assert "pod" not in next(lb for lb in util if lb["gpu"] == "1")
    _check_conformance(text, _rows(counters))


def test_helm_pod_labels_and_uid_come_from_the_api_server(tmp_path):
    port = free_port()
    values = {**CHART_VALUES, "service": {"address": f"127.0.0.1:{port}"}}
    values["kubernetes"] = {
        "enablePodLabels": True,
        "enablePodUID": True,
        "podLabelAllowlistRegex": ["^app\\.kubernetes\\.io/", "^team$"],
    }
    env = _env_block(render_env((DATA / "helm-daemonset-env.yaml.tpl").read_text(), values), port)
    assert env["DCGM_EXPORTER_KUBERNETES_POD_LABEL_ALLOWLIST_REGEX"] == (
        "^app\\.kubernetes\\.io/,^team$"
    )
    api = ApiServer(tmp_path / "serviceaccount")
    labels = {"app.kubernetes.io/name": "vllm", "team": "ml", "pod-template-hash": "7d9"}
    api.pods[("serving", "llm-0")] = {"uid": "0c1d-uid", "labels": labels}
    kubelet = FakeKubelet()
    kubelet.hold("llm-0", "serving", "vllm", "nvidia.com/gpu", "nvidia0")
    env |= api.env() | {"DCGM_POD_RESOURCES_KUBELET_SOCKET": kubelet.socket}
    proc = _start(tmp_path, ["-c", "300", "--gpus", "2"], _clean_env(**env))
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(url, 20)
        deadline, gpu0 = time.monotonic() + 15, {}
        while time.monotonic() < deadline and "pod_uid" not in gpu0:
            util = parse(httpx.get(url, timeout=5).text)["DCGM_FI_DEV_GPU_UTIL"].labels()
            gpu0 = next(lb for lb in util if lb["gpu"] == "0")
            time.sleep(0.3)
    finally:
        proc.stop()
        kubelet.stop()
        api.stop()
    assert gpu0["pod_uid"] == "0c1d-uid"
    assert (gpu0["app_kubernetes_io_name"], gpu0["team"]) == ("vllm", "ml")
    assert "pod_template_hash" not in gpu0  # not in the allowlist


def test_helm_values_this_exporter_cannot_honour_stop_it_in_one_line(tmp_path):
    values = {**CHART_VALUES, "service": {"address": f"127.0.0.1:{free_port()}"}}
    values["kubernetesDRA"] = {"enabled": True}
    rendered = render_env((DATA / "helm-daemonset-env.yaml.tpl").read_text(), values)
    proc = _start(tmp_path, [], _clean_env(**_env_block(rendered, 0)))
    try:
        assert proc.proc.wait(30) == 2
    finally:
        proc.stop()
    (line,) = [ln for ln in proc.output().splitlines() if ln]
    assert line.startswith("gpuscale: error: KUBERNETES_ENABLE_DRA=true: DRA attribution needs")


def test_sighup_reloads_the_counters_file_and_a_broken_one_keeps_the_last(tmp_path):
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
    port = free_port()
    proc = _start(
        tmp_path, ["-a", f"127.0.0.1:{port}", "-f", str(counters), "-c", "200"], _clean_env()
    )
    url = f"http://127.0.0.1:{port}/metrics"

    def served() -> set[str]:
        return {n for n in parse(httpx.get(url, timeout=5).text) if n.startswith("DCGM_")}

    def wait_for(names: set[str]) -> set[str]:
        deadline, got = time.monotonic() + 10, set()
        while time.monotonic() < deadline and got != names:
            got = served()
            time.sleep(0.2)
        return got

    try:
        wait_http(url, 20)
        assert wait_for({"DCGM_FI_DEV_GPU_UTIL"}) == {"DCGM_FI_DEV_GPU_UTIL"}
        counters.write_text(
            counters.read_text() + "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
        )
        proc.proc.send_signal(signal.SIGHUP)
        assert wait_for({"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}) == {
            "DCGM_FI_DEV_GPU_UTIL",
            "DCGM_FI_DEV_POWER_USAGE",
        }
        counters.write_text("DCGM_FI_DEV_NOPE, gauge, typo\n")
        proc.proc.send_signal(signal.SIGHUP)
        time.sleep(1.0)
        assert proc.proc.poll() is None
        assert served() == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"}
    finally:
        proc.stop()
    assert f"{counters}:1:1: not a DCGM field name" in proc.output()


def test_a_changed_counters_file_is_reloaded_without_a_signal(tmp_path):
    counters = tmp_path / "counters.csv"
    counters.write_text("DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n")
    port = free_port()
    proc = _start(
        tmp_path, ["-a", f"127.0.0.1:{port}", "-f", str(counters), "-c", "200"], _clean_env()
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(url, 20)
        # As a ConfigMap update does: a new file swapped in under the same name.
        fresh = tmp_path / "counters.csv.new"
        fresh.write_text("DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n")
        fresh.replace(counters)
        deadline, names = time.monotonic() + 10, set()  # the file is checked every 2 s
        while time.monotonic() < deadline and "DCGM_FI_DEV_POWER_USAGE" not in names:
            names = set(parse(httpx.get(url, timeout=5).text))
            time.sleep(0.2)
    finally:
        proc.stop()
    assert "DCGM_FI_DEV_POWER_USAGE" in names
    assert "DCGM_FI_DEV_GPU_UTIL" not in names
    assert "counters file reloaded" in proc.output()


# Plays systemd: a listening socket on fd 3, LISTEN_PID and LISTEN_FDS for this very process
# (exec keeps the pid), then the exporter with --web-systemd-socket and no address.
_SOCKET_UNIT = """
import os, socket, sys
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(16)
with open(sys.argv[1] + ".tmp", "w") as f:  # renamed whole: the test never reads it half-written
    f.write(str(s.getsockname()[1]))
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
if s.fileno() != 3:
    os.dup2(s.fileno(), 3)
os.set_inheritable(3, True)
os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS="1")
os.execv(sys.executable, [sys.executable, "-m", "gpuscale", "exporter", *sys.argv[2:]])
"""


def test_web_systemd_socket_serves_on_the_socket_systemd_passes(tmp_path):
    port_file = tmp_path / "port"
    args = [str(port_file), "--web-systemd-socket", "--source", "sim", "--gpus", "2"]
    proc = Process([sys.executable, "-c", _SOCKET_UNIT, *args], tmp_path / "unit.log", _clean_env())
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not port_file.exists():
            time.sleep(0.05)
        text = wait_http(f"http://127.0.0.1:{port_file.read_text()}/metrics", 20).text
    finally:
        proc.stop()
    assert "DCGM_FI_DEV_GPU_UTIL{" in text


def test_web_systemd_socket_without_systemd_exits_2_in_one_line(tmp_path):
    proc = _start(tmp_path, ["--web-systemd-socket"], _clean_env())
    try:
        assert proc.proc.wait(30) == 2
    finally:
        proc.stop()
    (line,) = [ln for ln in proc.output().splitlines() if ln]
    assert line.startswith("gpuscale: error: --web-systemd-socket: systemd passed no socket")


def test_kubernetes_virtual_gpus_writes_each_time_sliced_replica(tmp_path):
    kubelet = FakeKubelet()
    # The NVIDIA device plugin's time-slicing ids: <device>::<replica>.
    kubelet.hold("a", "ml", "s", "nvidia.com/gpu", "nvidia0::0")
    kubelet.hold("b", "ml", "s", "nvidia.com/gpu", "nvidia0::1")
    port = free_port()
    env = _clean_env(
        DCGM_EXPORTER_KUBERNETES="true",
        KUBERNETES_VIRTUAL_GPUS="true",
        DCGM_POD_RESOURCES_KUBELET_SOCKET=kubelet.socket,
    )
    proc = _start(tmp_path, ["-a", f"127.0.0.1:{port}", "--gpus", "2", "-c", "300"], env)
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        wait_http(url, 20)
        deadline, got = time.monotonic() + 15, []
        while time.monotonic() < deadline and len(got) < 2:
            util = parse(httpx.get(url, timeout=5).text)["DCGM_FI_DEV_GPU_UTIL"].labels()
            got = sorted((lb["pod"], lb["vgpu"]) for lb in util if "vgpu" in lb)
            time.sleep(0.3)
    finally:
        proc.stop()
        kubelet.stop()
    assert got == [("a", "0"), ("b", "1")]


def test_configmap_data_reads_counters_through_the_api_and_refusals_exit_2(tmp_path):
    api = ApiServer(tmp_path / "serviceaccount")
    api.configmaps[("gpu", "exporter-metrics")] = {
        "metrics": (DATA / "helm-default-counters.csv").read_text()
    }
    port = free_port()
    args = ["-a", f"127.0.0.1:{port}", "-m", "gpu:exporter-metrics", "-c", "300", *SIM]
    proc = _start(tmp_path, args, _clean_env(**api.env()))
    missing = _start(tmp_path, ["-a", "127.0.0.1:0", "-m", "gpu:nope"], _clean_env(**api.env()))
    try:
        text = wait_http(f"http://127.0.0.1:{port}/metrics", 20).text
        assert missing.proc.wait(30) == 2
    finally:
        proc.stop()
        missing.stop()
        api.stop()
    _check_conformance(text, _rows(DATA / "helm-default-counters.csv"))
    (line,) = [ln for ln in missing.output().splitlines() if ln]
    assert line == (
        "gpuscale: error: --configmap-data gpu:nope: no ConfigMap nope in namespace gpu:"
        " create it or fix the name"
    )
