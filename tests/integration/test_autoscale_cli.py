"""`gpuscale autoscale --once` as a process against the API double: a dry run decides and
logs, and changes nothing; without --dry-run the same sync writes."""

import json
import os
import subprocess

import pytest

from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import free_port, gpuscale_cmd

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
