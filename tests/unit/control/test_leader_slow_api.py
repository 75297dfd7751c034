"""One leader even when the API is slow: a replica whose Lease renewals fail stops writing
before a standby can take the Lease, whatever its syncs are doing.

Two controllers run their real loops (the Lease renewed on its own thread) against the
API double on the wall clock, with client-go's timing rules scaled down (lease 3 s,
renew deadline 2 s, retry 0.25 s) and a one-request timeout of 0.4 s. A third client
keeps moving the workload's replicas, so every sync of the leader writes ``/scale``.
Then the API turns slow for the leader alone: its Lease requests wait past their
timeout (renewals fail) while its other requests wait just under it (its syncs go on,
slowly). The double logs every write it applies with the Lease's holder at that
moment; no write by a replica that did not hold the Lease may ever land.
"""

import threading
import time

from gpuscale.control.kubecall import RetryPolicy
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.lease import LeaseElector
from gpuscale.control.seams import Settings
from tests.support.kubeapi import KubeApiDouble

TARGETS = [f"web-{i}" for i in range(4)]
"""Several targets: a slow sync is long, so a lease may lapse in the middle of one."""
STATIC = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {{name: test, namespace: default}}
spec:
  targets:
""" + "".join(
    f"""\
  - scaleTargetRef: {{{{name: {name}}}}}
    minReplicas: 1
    maxReplicas: 10
    policy: {{{{name: static, replicas: {{want}}, intervalSeconds: 0.05}}}}
"""
    for name in TARGETS
)
TIMEOUT_S = 0.4
LEASE = {"lease_duration_s": 3.0, "renew_deadline_s": 2.0, "retry_period_s": 0.25}


def start(api, tmp_path, identity: str, want: int, stop: threading.Event):
    from gpuscale.control.config import load
    from gpuscale.control.controller import Controller
    from gpuscale.control.targets import runtimes
    from gpuscale.metrics.store import MetricStore

    retry = RetryPolicy(attempts=3, base_s=0.02, max_s=0.05, total_s=0.8, timeout_s=TIMEOUT_S)
    act = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / f"kc-{identity}")), retry=retry)
    act.api_client.user_agent = f"controller-{identity}"
    cfg = tmp_path / f"{identity}.yaml"
    cfg.write_text(STATIC.format(want=want))
    elector = LeaseElector(act.api_client, "default", "gpuscale", identity, **LEASE)
    ctl = Controller(
        runtimes(load(cfg)),
        MetricStore(),
        act,
        settings=Settings(
            sync_period_s=0.05, retry_period_s=0.25, workers=1, write_margin_s=TIMEOUT_S
        ),
        elector=elector,
    )
    thread = threading.Thread(target=ctl.run, args=(stop,), daemon=True)
    thread.start()
    return ctl, act, thread


def test_no_write_lands_from_a_replica_without_the_lease(tmp_path):
    with KubeApiDouble() as api:
        for name in TARGETS:
            api.create_deployment(name, replicas=1)
        stop_a, stop_b, stop_chaos = threading.Event(), threading.Event(), threading.Event()
        a, act_a, thread_a = start(api, tmp_path, "a", 4, stop_a)
        deadline = time.monotonic() + 5
        while not a.leader and time.monotonic() < deadline:
            time.sleep(0.02)
        assert a.leader
        b, act_b, thread_b = start(api, tmp_path, "b", 7, stop_b)

        def chaos() -> None:  # another client: every sync of the leader has a write to make
            while not stop_chaos.wait(0.1):
                for name in TARGETS:
                    two = {"spec": {"replicas": 2}}
                    api.patch_object("apps/v1", "deployments", name, "default", two)

        mover = threading.Thread(target=chaos, daemon=True)
        mover.start()
        time.sleep(1.5)
        # The API turns slow for a alone: renewals time out (the elector waits 1 s for a
        # Lease request), its other calls just make their 0.4 s timeout.
        api.agent_stalls["controller-a"] = [("/leases/", 1.5), ("", TIMEOUT_S * 0.9)]
        deadline = time.monotonic() + 12
        while not b.leader and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.leader, "the standby never took over"
        time.sleep(3.0)  # a keeps syncing slowly; none of its writes may land now
        stop_chaos.set()
        stop_a.set()
        stop_b.set()
        for t in (mover, thread_a, thread_b):
            t.join(timeout=10)
        act_a.close()
        act_b.close()

        holder, scale_writes = "", {"a": 0, "b": 0}
        for when, agent, what, lease_holder in api.writes:
            if "/leases/" in what or what.endswith("/leases"):
                holder = lease_holder
                continue
            who = agent.removeprefix("controller-")
            if who not in ("a", "b"):
                continue  # the third client
            assert who == holder, f"{what} by {who} landed at {when} while {holder!r} held it"
            if what.endswith("/scale"):
                scale_writes[who] += 1
        assert scale_writes["a"] >= 3
        assert scale_writes["b"] >= 3
