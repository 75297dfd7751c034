"""The autoscaler's documented GPUScalers, run as written against the simulated exporter.

Each GPUScaler in docs/autoscaler.md and deploy/examples/ is run by the real
``gpuscale autoscale --dry-run --once`` (no cluster: replicas assumed at
``minReplicas``) against a real Prometheus scraping ``gpuscale exporter --source
sim``. The docs say which targets hold there (their signals need the pod labels
only a kubelet gives) and which decide; this test holds the docs to it.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import Prometheus, gpuscale_cmd, start_exporter

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "autoscaler.md"
NO_POD_LABELS = "hold at 2: no DCGM_FI_DEV_GPU_UTIL sample for any pod"

# Each documented GPUScaler: target -> the start of its one decision line on stdout.
EXPECTED = {
    "deploy/examples/gpuscaler.yaml": {
        "serving/Deployment/llm": f"2 -> 2 ({NO_POD_LABELS})",
        "serving/StatefulSet/embedder": "1 -> 1 (hold: missing: query_0 (metric "
        "DCGM_FI_DEV_GPU_UTIL, query sum (DCGM_FI_DEV_GPU_UTIL"
        '{container="embedder",namespace="serving"})): no series)',
    },
    "docs/autoscaler.md#inference": {"serving/Deployment/llm": f"2 -> 2 ({NO_POD_LABELS})"},
    # The HPA's behavior pasted in (Coming from the HPA or KEDA): the same pod labels.
    "docs/autoscaler.md#llm": {"serving/Deployment/llm": f"2 -> 2 ({NO_POD_LABELS})"},
    # A ScaledObject's spec: its trigger's serverAddress is that target's own server,
    # which is not reachable here: a hold on it (the controller's --prometheus unused).
    "docs/autoscaler.md#web": {
        "default/Deployment/my-deployment": "1 -> 1 (hold: metrics unavailable: connect: "
    },
    # Reads series without pod labels: it decides. The simulated load is above 0, so
    # the sum of utilisation asks for at least one replica: KEDA's HPA arithmetic.
    "docs/autoscaler.md#try": {"default/Deployment/llm": "1 -> "},
}


def documented() -> dict[str, str]:
    """Every GPUScaler document: the example files, and the docs' YAML blocks by name."""
    found = {
        str(path.relative_to(ROOT)): path.read_text()
        for path in sorted((ROOT / "deploy" / "examples").glob("*.yaml"))
        if "kind: GPUScaler" in path.read_text()
    }
    for block in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.DOTALL):
        name = re.search(r"^metadata: \{name: ([a-z0-9-]+)", block, flags=re.MULTILINE)
        if block.startswith("apiVersion: gpuscale.io/") and name:
            found[f"docs/autoscaler.md#{name[1]}"] = block
    return found


def test_every_documented_gpuscaler_has_an_expectation():
    assert sorted(documented()) == sorted(EXPECTED)


@pytest.fixture(scope="module")
def sim_prometheus(tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not installed: run ./scripts/test, which installs it")
    tmp = tmp_path_factory.mktemp("examples")
    exporter, port = start_exporter(tmp, "--source", "sim", "--gpus", "4")
    prom = Prometheus(binary, tmp, [f"127.0.0.1:{port}"])
    try:
        prom.wait_for("DCGM_FI_DEV_GPU_UTIL", 40)
        yield prom
    finally:
        prom.process.stop()
        exporter.stop()


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_a_documented_gpuscaler_runs_as_the_docs_say(tmp_path, sim_prometheus, name):
    config = tmp_path / "scaler.yaml"
    config.write_text(documented()[name])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPUSCALE_") and k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")
    }
    done = subprocess.run(
        [*gpuscale_cmd(), "autoscale", "--config", str(config), "--dry-run", "--once",
         "--prometheus", sim_prometheus.url],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "HOME": str(tmp_path)},  # no ~/.kube/config: a dry run without a cluster
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert sorted(lines) == sorted(EXPECTED[name])
    for target, start in EXPECTED[name].items():
        assert lines[target].startswith(start), lines[target]
    if name.endswith("#try"):
        assert "hold" not in lines["default/Deployment/llm"]
