"""`gpuscale autoscale` as a process against the API double: a dry run decides and logs,
and changes nothing; without --dry-run the same sync writes. What it says is loud and
single: an unreachable Prometheus is one warning at start, a hold and one Event in the
first sync; steady syncs repeat no line above DEBUG; a dry run needs no cluster."""

import json
import os
import subprocess
import time

import pytest

from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import Process, free_port, gpuscale_cmd
from tests.support.tsdb import BearerProxy

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: once, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: web}
      maxReplicas: 10
      policy: {name: static, replicas: 5}
"""


def test_once_dry_run_then_for_real(tmp_path):
    with KubeApiDouble() as api:
        api.create_deployment("web", replicas=2)
        config = tmp_path / "once.yaml"
        config.write_text(CONFIG)
        base = [
            *gpuscale_cmd(), "--log-format", "json", "autoscale", "--once",
            "--config", str(config), "--kubeconfig", str(api.write_kubeconfig(tmp_path / "kc")),
            "--prometheus", f"http://127.0.0.1:{free_port()}",
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCALE_")}

        def replicas() -> int:
            return int(api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"])

        dry = subprocess.run(
            [*base, "--dry-run"], capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert dry.returncode == 0, dry.stderr
        [decision] = [
            json.loads(line)["decision"] for line in dry.stderr.splitlines() if '"decision"' in line
        ]
        assert (decision["current"], decision["replicas"], decision["dry_run"]) == (2, 5, True)
        assert replicas() == 2
        real = subprocess.run(
            base, capture_output=True, text=True, timeout=60, env=env, check=False
        )
        assert real.returncode == 0, real.stderr
        assert replicas() == 5


SECRET = "pr0mS3cret"  # a test credential, searched for in the output
REQUEST_LOGGERS = ("httpx", "httpcore", "urllib3", "kubernetes.client.rest")

HOLDING = (  # CONFIG and a target that reads Prometheus
    CONFIG
    + """\
    - scaleTargetRef: {name: llm}
      maxReplicas: 10
      policy: {name: hpa}
"""
)


def _records(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCALE_")}
    return {**env, **extra}


@pytest.fixture
def bearer_proxy():
    proxy = BearerProxy(f"http://127.0.0.1:{free_port()}", "the-right-token")
    yield proxy
    proxy.stop()


@pytest.mark.parametrize("kind", ["refused", "unauthorized"])
def test_an_unreachable_prometheus_is_one_warning_a_hold_and_an_event_in_one_sync(
    tmp_path, bearer_proxy, kind
):
    if kind == "refused":  # a mistyped port; the URL's credentials never shown
        url, cause, extra = f"http://scraper:{SECRET}@127.0.0.1:{free_port()}", "connect", []
    else:  # kube-rbac-proxy in front of Prometheus refuses our token: 401
        token = tmp_path / "token"
        token.write_text(SECRET)
        url, cause = bearer_proxy.url, "http"
        extra = ["--prometheus-bearer-token-file", str(token)]
    with KubeApiDouble() as api:
        api.create_deployment("web", replicas=2)
        api.create_deployment("llm", replicas=3)
        config = tmp_path / "loud.yaml"
        config.write_text(HOLDING)
        kubeconfig = api.write_kubeconfig(tmp_path / "kc")
        cmd = [
            *gpuscale_cmd(), "--log-format", "json", "autoscale", "--once", "--config", str(config),
            "--kubeconfig", str(kubeconfig), "--prometheus", url, *extra,
        ]  # fmt: skip
        done = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=60,
            env=_clean_env(),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        records = _records(done.stderr)
        # At start: one WARNING naming the flag and the cause; the process runs on.
        [start] = [r for r in records if r["msg"].startswith("--prometheus ")]
        assert start["level"] == "warning"
        assert f"does not answer ({cause}: " in start["msg"]
        if kind == "unauthorized":
            assert "HTTP 401 Unauthorized" in start["msg"]
        # In the one sync: the target reading metrics holds, with the same cause...
        [llm] = [r["decision"] for r in records if "decision" in r and "llm" in r["msg"]]
        assert (llm["current"], llm["replicas"], llm["held"]) == (3, 3, "unavailable")
        assert llm["reason"].startswith(f"hold: metrics unavailable: {cause}: ")
        assert int(api.get("apps/v1", "deployments", "llm", "default")["spec"]["replicas"]) == 3
        # ...and a Warning Event says why; the target needing no metrics scaled.
        found = api.store.list(api.store.resource("v1", "events"), "default")
        [event] = [e for e in found if e["reason"] == "MetricsUnhealthy"]
        assert event["type"] == "Warning"
        assert event["involvedObject"]["name"] == "llm"
        assert f"never scaling in: metrics unavailable: {cause}: " in event["message"]
        assert int(api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"]) == 5
    assert SECRET not in done.stderr + done.stdout
    # The HTTP clients' per-request lines stay at DEBUG (httpx logs each answer at INFO).
    assert [r for r in records if r["logger"].startswith(REQUEST_LOGGERS)] == []
    assert "HTTP Request" not in done.stderr


def test_steady_syncs_log_one_line_per_decision_change_and_one_event(tmp_path):
    wanted = 8  # syncs of each target counted
    with KubeApiDouble() as api:
        api.create_deployment("web", replicas=2)
        api.create_deployment("llm", replicas=3)
        config = tmp_path / "loud.yaml"
        config.write_text(HOLDING)
        log = tmp_path / "autoscale.log"
        kubeconfig = api.write_kubeconfig(tmp_path / "kc")
        cmd = [
            *gpuscale_cmd(), "--log-format", "json", "--log-level", "debug", "autoscale",
            "--config", str(config), "--kubeconfig", str(kubeconfig),
            "--prometheus", f"http://127.0.0.1:{free_port()}", "--no-leader-elect",
            "--sync-period", "0.2", "--metrics-address", f"127.0.0.1:{free_port()}",
        ]  # fmt: skip
        proc = Process(
            cmd,
            log,
            _clean_env(PYTHONUNBUFFERED="1"),
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                decided = [
                    r["decision"]["target"] for r in _records(proc.output()) if "decision" in r
                ]
                if min(decided.count(f"default/Deployment/{n}") for n in ("web", "llm")) >= wanted:
                    break
                time.sleep(0.2)
        finally:
            proc.stop()
        found = api.store.list(api.store.resource("v1", "events"), "default")
        reasons = sorted((e["involvedObject"]["name"], e["reason"]) for e in found)
    records = [r for r in _records(proc.output()) if "decision" in r]

    def levels(name: str) -> list[str]:
        return [r["level"] for r in records if r["decision"]["target"].endswith(f"/{name}")]

    web, llm = levels("web"), levels("llm")
    assert min(len(web), len(llm)) >= wanted, proc.output()[-2000:]
    # web: 2 -> 5 (a change), then 5 read (a change), then steady at DEBUG.
    assert web == ["info", "info"] + ["debug"] * (len(web) - 2)
    # llm: Prometheus is down: the hold starts once (WARNING), then steady at DEBUG.
    assert llm == ["warning"] + ["debug"] * (len(llm) - 1)
    assert reasons == [("llm", "MetricsUnhealthy"), ("web", "SuccessfulRescale")]


def test_a_dry_run_once_without_a_kubeconfig_prints_its_decisions(tmp_path):
    config = tmp_path / "loud.yaml"
    config.write_text(HOLDING)
    # HOME has no .kube/config, KUBECONFIG and KUBERNETES_SERVICE_HOST are unset.
    env = {
        k: v
        for k, v in _clean_env(HOME=str(tmp_path)).items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    base = [
        *gpuscale_cmd(), "autoscale", "--once", "--config", str(config),
        "--prometheus", f"http://127.0.0.1:{free_port()}",
    ]  # fmt: skip
    dry = subprocess.run(
        [*base, "--dry-run", "--assume-replicas", "web=3"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert dry.returncode == 0, dry.stderr
    web, llm = dry.stdout.splitlines()
    assert web == "default/Deployment/web: 3 -> 5 (static 5 replicas)"
    assert llm.startswith("default/Deployment/llm: 1 -> 1 (hold: metrics unavailable: connect: ")
    assert "Invalid kube-config" not in dry.stderr
    assert "replicas assumed: default/Deployment/web=3, default/Deployment/llm=1" in dry.stderr
    # The same without --dry-run: one line naming the missing file and the ways out.
    real = subprocess.run(base, capture_output=True, text=True, timeout=60, env=env, check=False)
    assert real.returncode == 2
    [line] = real.stderr.splitlines()
    assert line.startswith(f"gpuscale: error: kubeconfig {tmp_path}/.kube/config: no such file")
    assert "add --dry-run to decide without a cluster" in line
