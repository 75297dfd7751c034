"""Two `gpuscale autoscale` processes against the API double: while the first holds the
Lease the second does not act; when the first dies without releasing, the second takes
over once the Lease expires, reading the state the first stored in its ConfigMap."""

import pytest

from gpuscale.control.statestore import StateConfigMap
from tests.support.autoscale import Autoscaler, wait_until
from tests.support.control import saved_state
from tests.support.kubeapi import KubeApiDouble
from tests.support.servers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

# Static policies read no signals, so no Prometheus is needed; each controller wants a
# different count, so the Deployment shows which one acted.
CONFIG = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: static, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: web}
      minReplicas: 1
      maxReplicas: 10
      policy: {name: static, replicas: %d, intervalSeconds: 1}
"""
LEASE_S = 4
TARGET = "default/Deployment/web"
STATE = StateConfigMap("default")  # the Lease's namespace: no --lease-namespace given
STATE_PATH = f"/api/v1/namespaces/{STATE.namespace}/configmaps/{STATE.name}"


def test_standby_does_not_act_until_the_lease_expires(tmp_path):
    with KubeApiDouble() as api:
        api.create_deployment("web", replicas=1)
        kubeconfig = api.write_kubeconfig(tmp_path / "kubeconfig")
        nowhere = f"http://127.0.0.1:{free_port()}"
        args = (
            "--sync-period",
            "1",
            "--lease-duration",
            str(LEASE_S),
            "--renew-deadline",
            "3",
            "--retry-period",
            "0.5",
        )

        def start(name: str, want: int) -> Autoscaler:
            config = tmp_path / f"{name}.yaml"
            config.write_text(CONFIG % want)
            return Autoscaler(
                tmp_path, config, kubeconfig, nowhere, *args, "--identity", name, name=name
            )

        def replicas() -> int:
            return int(api.get("apps/v1", "deployments", "web", "default")["spec"]["replicas"])

        first = start("first", 3)
        second = start("second", 7)
        try:
            wait_until(lambda: replicas() == 3, 30)
            wait_until(lambda: second.metric("gpuscale_autoscaler_leader") == 0, 10)
            # Several lease durations with both running: the standby never acts.
            scale_path = "/apis/apps/v1/namespaces/default/deployments/web/scale"
            patches = api.count("PATCH", scale_path)
            end = wait_until(lambda: len(first.decisions(TARGET)) >= 2 * LEASE_S + 4, 30)
            assert end
            assert replicas() == 3
            assert second.decisions(TARGET) == []
            assert second.metric("gpuscale_autoscaler_leader") == 0
            assert first.metric("gpuscale_autoscaler_leader") == 1
            assert api.count("PATCH", scale_path) == patches  # 3 was set once, then held
            lease = api.get("coordination.k8s.io/v1", "leases", "gpuscale-autoscaler", "default")
            assert lease["spec"]["holderIdentity"] == "first"

            # the first stored the state in the controllers' ConfigMap, not on the target
            assert saved_state(api, where=STATE) == {"policy": "static", "state": {}}
            reads = api.count("GET", STATE_PATH)

            first.process.proc.kill()  # no release: the standby must wait for expiry
            killed = wait_until(lambda: first.process.proc.poll() is not None, 10)
            took = wait_until(lambda: replicas() == 7, 30)
            # client-go's rule: a Lease may be taken once renewTime + duration has passed,
            # judged on the standby's clock; it retries every 0.5 s and syncs at once.
            assert took - killed <= LEASE_S + 2 * 0.5 + 1.0
            assert took - killed >= LEASE_S - 0.5 - 1.0  # not before the Lease could expire
            # the new leader read the stored state back (it carries on from it, see
            # test_autoscale_e2e's restart) and found it usable
            assert api.count("GET", STATE_PATH) > reads
            second_says = [r.get("msg", "") for r in second.records()]
            assert not [m for m in second_says if "saved policy state ignored" in m]
            assert "became the leader; reloading every target's state" in second_says
            workload = "/apis/apps/v1/namespaces/default/deployments/web"
            assert [w for w in api.writes if w[2].split(" ")[1] == workload] == []
        finally:
            first.stop()
            second.stop()
