"""AMD's own Grafana dashboards against a real Prometheus, over both AMD sources.

Each source runs as an exporter process with a mixed fleet: MI300X boards (two
with an uncorrectable ECC error, so the exporter's health rule marks them
unhealthy) and MI210 cards, whose ``card_model`` values select the other branch
of each dashboard's MI2xx/MI3xx queries. ``amdsmi``: ``--source amd`` over the
amdsmi fake (tests/fakes/amdsmi_site), with the profiler turned on through
device-metrics-exporter's config.json and the rocpctl stand-in
(tests/fakes/rocpctl_bin) giving the ``gpu_prof_*`` counters. ``sim``: the same
layout of simulated MI300X/MI210 (``--source sim --gpu-models MI300X,...``). A
real gRPC pod-resources server gives three GPUs to Kubernetes pods, and Slurm
prolog files (AMD's format) give three others to a Slurm job, so both the pod
and the job variants of the dashboards' queries have something to show. Every
expression of the five dashboards (tests/data/amd, copied from
ROCm/device-metrics-exporter) is run with the dashboards' own template
variables, resolved through their own ``label_values`` chain the way Grafana
resolves them; a query passes when some choice of variable values returns data.
All 261 must, from each source. (Without the profiler, the ``gpu_prof_*``
series other than ``gpu_prof_gui_util_percent`` are absent, never 0: see
tests/unit/telemetry/test_amd_prof.py.)
"""

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import httpx
import pytest

from gpuscale.exporter.podresources import api_pb2, api_pb2_grpc
from gpuscale.fields.amd import AMD_PROFILER_ONLY
from tests.support.servers import Process, Prometheus, free_port, gpuscale_cmd, wait_http

pytestmark = pytest.mark.integration

TESTS = Path(__file__).resolve().parents[1]
DASHBOARDS = sorted((TESTS / "data" / "amd").glob("dashboard_*.json"))
FLEET = "mi300x:4,mi300x+ecc:2,mi210:2"
GPUS = 8
CLUSTER = "lab-a"
# The device plugin lists AMD GPUs by PCI address; the fake puts GPU i at 0x0c + 0x10 * i.
# train-1 and the Slurm job each hold an unhealthy MI300X and an MI210, so the
# job dashboard's "unhealthy GPUs of this pod/job" panels have something to show.
PODS = {"llm-0": ((0,), "serving", "vllm"), "train-1": ((5, 6), "ml", "trainer")}
SLURM_GPUS = "3,4,7"
# $__interval: ten 1 s scrapes, so delta() over it always has two samples.
INTERVAL = "10s"


class _Kubelet(api_pb2_grpc.PodResourcesListerServicer):
    def List(self, request, context):  # noqa: N802 - the gRPC method name
        pods = [
            api_pb2.PodResources(
                name=name,
                namespace=namespace,
                containers=[
                    api_pb2.ContainerResources(
                        name=container,
                        devices=[
                            api_pb2.ContainerDevices(
                                resource_name="amd.com/gpu",
                                device_ids=[f"0000:{0x0C + 0x10 * g:02x}:00.0" for g in gpus],
                            )
                        ],
                    )
                ],
            )
            for name, (gpus, namespace, container) in PODS.items()
        ]
        return api_pb2.ListPodResourcesResponse(pod_resources=pods)


@pytest.fixture(scope="module")
def kubelet_socket() -> Iterator[str]:
    # A short path: unix socket names are limited to 108 bytes.
    folder = tempfile.mkdtemp(prefix="amdk", dir="/tmp")
    path = f"{folder}/kubelet.sock"
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Kubelet(), server)
    server.add_insecure_port(f"unix:{path}")
    server.start()
    try:
        yield path
    finally:
        server.stop(grace=None).wait(5)
        shutil.rmtree(folder, ignore_errors=True)


def _slurm_prolog(folder: Path) -> None:
    """The files AMD's slurm-prolog.sh writes: one per GPU of the job, the same JSON."""
    env = {
        "SLURM_JOB_ID": "4711",
        "SLURM_JOB_USER": "alice",
        "SLURM_JOB_PARTITION": "mi300",
        "SLURM_CLUSTER_NAME": "hpc-a",
        "SLURM_JOB_GPUS": SLURM_GPUS,
        "CUDA_VISIBLE_DEVICES": SLURM_GPUS,
    }
    folder.mkdir()
    for gpu in SLURM_GPUS.split(","):
        (folder / gpu).write_text(json.dumps(env))


def _exporter_args(source: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """The exporter command and environment for one of the two AMD sources.

    ``amdsmi``: the amdsmi fake, with the profiler on through config.json (AMD's
    ``ProfilerMetrics``) and the rocpctl stand-in on PATH; the cluster name comes
    from config.json's ``CustomLabels``. ``sim``: simulated MI300X/MI210 in the same
    layout (GPUs 4 and 5 take an uncorrectable ECC error at start), the cluster name
    from ``GPUSCALE_CLUSTER_NAME``.
    """
    env = {"PYTHONUNBUFFERED": "1", "GPUSCALE_SLURM_JOB_DIR": str(tmp / "slurm")}
    if source == "amdsmi":
        site = str(TESTS / "fakes" / "amdsmi_site")
        config = tmp / "config.json"
        config.write_text(
            json.dumps(
                {
                    "ServerPort": 5000,
                    "GPUConfig": {
                        "CustomLabels": {"CLUSTER_NAME": CLUSTER},
                        "ProfilerMetrics": {"all": True},
                        "ProfilerConfig": {"SamplingInterval": 1000, "PtlDelay": 0},
                    },
                }
            )
        )
        env |= {
            "PYTHONPATH": os.pathsep.join(p for p in (site, os.environ.get("PYTHONPATH")) if p),
            "PATH": f"{TESTS / 'fakes' / 'rocpctl_bin'}{os.pathsep}{os.environ['PATH']}",
            "FAKE_AMDSMI_FLEET": FLEET,
        }
        return ["--source", "amd", "--amd-metrics-config", str(config)], env
    env["GPUSCALE_CLUSTER_NAME"] = CLUSTER
    models = ",".join(["MI300X"] * 6 + ["MI210"] * 2)
    args = ["--source", "sim", "--gpus", str(GPUS), "--gpu-models", models]
    args += ["--load", "constant:0.6", "--fault", "ecc-dbe@0:gpu=4", "--fault", "ecc-dbe@0:gpu=5"]
    return args, env


@pytest.fixture(scope="module", params=["amdsmi", "sim"])
def amd_prometheus(
    request, prometheus_bin, kubelet_socket, tmp_path_factory
) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp(f"amd-{request.param}")
    _slurm_prolog(tmp / "slurm")
    port = free_port()
    source_args, source_env = _exporter_args(request.param, tmp)
    env = {**os.environ, **source_env}
    if request.param == "amdsmi":  # the cluster name must come from config.json
        env.pop("GPUSCALE_CLUSTER_NAME", None)
    args = [*gpuscale_cmd(), "exporter", *source_args, "--address", f"127.0.0.1:{port}"]
    args += ["--collect-interval", "500", "--kubernetes"]
    args += ["--pod-resources-kubelet-socket", kubelet_socket]
    exporter = Process(args, tmp / "exporter.log", env)
    server = None
    try:
        wait_http(f"http://127.0.0.1:{port}/metrics", 20)
        server = Prometheus(prometheus_bin, tmp, [f"127.0.0.1:{port}"])
        server.wait_for(f"count(gpu_health) == {GPUS}")
        server.wait_for('count(gpu_used_vram{pod!=""}) == 3')
        server.wait_for('count(gpu_used_vram{job_id="4711"}) == 3')
        server.wait_for(f"count(gpu_prof_sm_active) == {GPUS}")
        time.sleep(3)  # a few more scrapes, so every delta() window holds two samples
        yield server
    except TimeoutError:
        pytest.fail(f"exporter never served: {exporter.output()[-2000:]}")
    finally:
        if server is not None:
            server.process.stop()
        exporter.stop()


def _interpolate(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name in ("__interval", "__rate_interval"):
            return INTERVAL
        return values.get(name, "")

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, text)


def _label_values(prom: Prometheus, query: str) -> list[str]:
    """Grafana's ``label_values([selector,] label)`` over Prometheus' label API."""
    match = re.fullmatch(r"label_values\((?:(.*),)?\s*(\w+)\s*\)", query.strip())
    assert match is not None, query
    selector, label = match.groups()
    params = {"match[]": selector} if selector else {}
    r = httpx.get(f"{prom.url}/api/v1/label/{label}/values", params=params, timeout=5)
    # Prometheus refuses a selector whose matchers all match empty; Grafana shows no options.
    return sorted(r.json()["data"]) if r.status_code == 200 else []


def _by_dependency(variables: list[dict]) -> list[dict]:
    """Variables in the order Grafana refreshes them: each after those its query names."""
    names = {v["name"] for v in variables}
    done: list[dict] = []
    todo = list(variables)
    while todo:
        ready = next(
            v
            for v in todo
            if set(re.findall(r"\$\{?(\w+)", v["query"])) & names <= {d["name"] for d in done}
        )
        done.append(ready)
        todo.remove(ready)
    return done


def _assignments(prom: Prometheus, variables: list[dict]) -> list[dict[str, str]]:
    """Every choice of single values the dashboard's variable chain offers."""
    choices: list[dict[str, str]] = [{}]
    for var in _by_dependency(variables):
        grown = []
        for chosen in choices:
            if var["type"] != "query":
                grown.append({**chosen, var["name"]: ""})
                continue
            options = _label_values(prom, _interpolate(var["query"], chosen)) or [""]
            grown += [{**chosen, var["name"]: option} for option in options]
        choices = grown
    return choices


def _classic(promql: str) -> str:
    """``{"name", m...}`` (Prometheus 3's quoted-name selector) as ``name{m...}``.

    Some panels use the Prometheus 3 form; Debian's Prometheus 2.42 parses only
    the classic one. Prometheus 3 defines the two as the same selector.
    """
    return re.sub(r'\{"([a-zA-Z_:][a-zA-Z0-9_:]*)",\s*', r"\1{", promql)


def _has_data(prom: Prometheus, expr: str, choices: list[dict[str, str]], seen: dict) -> bool:
    for chosen in choices:
        promql = _classic(_interpolate(expr, chosen))
        if promql not in seen:
            seen[promql] = bool(prom.query(promql))
        if seen[promql]:
            return True
    return False


def test_dashboard_copies_hold_the_five_gpu_dashboards():
    titles = {json.loads(p.read_text())["title"] for p in DASHBOARDS}
    assert len(titles) == 5
    exprs = [
        e
        for p in DASHBOARDS
        for panel in json.loads(p.read_text())["panels"]
        for e in panel["exprs"]
    ]
    assert len(exprs) == 261  # every target expression of the five upstream files


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_dashboard_query_returns_data(amd_prometheus, path):
    dashboard = json.loads(path.read_text())
    choices = _assignments(amd_prometheus, dashboard["variables"])
    seen: dict[str, bool] = {}
    empty = [
        (panel["title"], expr)
        for panel in dashboard["panels"]
        for expr in panel["exprs"]
        if not _has_data(amd_prometheus, expr, choices, seen)
    ]
    assert not empty, f"{len(empty)} queries without data: {empty}"


def test_variable_chain_resolves_to_the_fleet(amd_prometheus):
    dashboard = json.loads((TESTS / "data" / "amd" / "dashboard_system.json").read_text())
    choices = _assignments(amd_prometheus, dashboard["variables"])
    assert {c["g_cluster_name"] for c in choices} == {CLUSTER}
    assert {c["g_gpu_id"] for c in choices} == {str(i) for i in range(GPUS)}
    assert {c["g_gpu_partition_id"] for c in choices} == {"0"}


def test_pods_jobs_and_unhealthy_gpus_reach_prometheus(amd_prometheus):
    held = amd_prometheus.query('gpu_used_vram{pod!=""}')
    assert {(r["metric"]["pod"], r["metric"]["gpu_id"]) for r in held} == {
        ("llm-0", "0"),
        ("train-1", "5"),
        ("train-1", "6"),
    }
    jobs = amd_prometheus.query('gpu_used_vram{job_id!=""}')
    assert {
        (r["metric"]["job_id"], r["metric"]["job_user"], r["metric"]["gpu_id"]) for r in jobs
    } == {("4711", "alice", gpu) for gpu in SLURM_GPUS.split(",")}
    # The custom cluster label wins over the job's SLURM_CLUSTER_NAME, as upstream.
    assert {r["metric"]["cluster_name"] for r in jobs} == {CLUSTER}
    sick = amd_prometheus.query("gpu_health < 1")
    assert sorted(r["metric"]["gpu_id"] for r in sick) == ["4", "5"]


def test_profiler_series_are_per_gpu_and_in_range(amd_prometheus):
    for name in AMD_PROFILER_ONLY:
        found = amd_prometheus.query(name)
        assert len(found) == GPUS, name
    # Upstream's ranges: percentages 0-100, SIMD utilisation a fraction.
    assert amd_prometheus.query("gpu_prof_sm_active > 100 or gpu_prof_sm_active < 0") == []
    assert amd_prometheus.query("gpu_prof_simd_utilization > 1") == []


def test_hbm_temperatures_only_where_the_board_reports_them(amd_prometheus):
    # MI300X boards report no HBM stack temperature: only the two MI210s have any.
    hbm = amd_prometheus.query("count by (gpu_id) (gpu_hbm_temperature)")
    assert {r["metric"]["gpu_id"]: r["value"][1] for r in hbm} == {"6": "4", "7": "4"}
