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

The second test runs the same check long: over at least a hundred syncs of each
replica, every request slowed, with the API stalled past the lease duration for one
replica at seeded random points, so the Lease changes hands again and again.
"""

import itertools
import random
import threading
import time

from gpuscale.control.kubecall import RetryPolicy
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.lease import LeaseElector
from gpuscale.control.seams import Settings
from tests.support.kubeapi import KubeApiDouble
from tests.support.kubeapi_model import parse_time

TARGETS = [f"web-{i}" for i in range(4)]
"""Several targets: a slow sync is long, so a lease may lapse in the middle of one."""


def static_scaler(names: list[str]) -> str:
    """A GPUScaler of static targets, each wanting ``{want}`` replicas (``start`` fills it)."""
    head = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {{name: test, namespace: default}}
spec:
  targets:
"""
    return head + "".join(
        f"""\
  - scaleTargetRef: {{{{name: {name}}}}}
    minReplicas: 1
    maxReplicas: 10
    policy: {{{{name: static, replicas: {{want}}, intervalSeconds: 0.05}}}}
"""
        for name in names
    )


STATIC = static_scaler(TARGETS)
ONE_TARGET = static_scaler(["web-0"])
TIMEOUT_S = 0.4
TWO = {"spec": {"replicas": 2}}
LEASE = {"lease_duration_s": 3.0, "renew_deadline_s": 2.0, "retry_period_s": 0.25}


def start(
    api,
    tmp_path,
    identity: str,
    want: int,
    stop: threading.Event,
    *,
    config: str = STATIC,
    lease: dict = LEASE,
    timeout_s: float = TIMEOUT_S,
    syncs: dict | None = None,
):
    """One controller over the double as ``controller-<identity>``, its loop on a thread
    (its syncs counted into ``syncs``); returns (controller, actuator, thread)."""
    from gpuscale.control.config import load
    from gpuscale.control.controller import Controller
    from gpuscale.control.targets import runtimes
    from gpuscale.metrics.store import MetricStore

    retry = RetryPolicy(
        attempts=3, base_s=0.02, max_s=0.05, total_s=2 * timeout_s, timeout_s=timeout_s
    )
    act = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / f"kc-{identity}")), retry=retry)
    act.api_client.user_agent = f"controller-{identity}"
    cfg = tmp_path / f"{identity}.yaml"
    cfg.write_text(config.format(want=want))
    elector = LeaseElector(act.api_client, "default", "gpuscale", identity, **lease)
    ctl = Controller(
        runtimes(load(cfg)),
        MetricStore(),
        act,
        settings=Settings(
            sync_period_s=0.05,
            retry_period_s=lease["retry_period_s"],
            workers=1,
            write_margin_s=timeout_s,
        ),
        elector=elector,
    )
    if syncs is not None:
        sync = ctl.sync

        def counted():
            syncs[identity] += 1
            return sync()

        ctl.sync = counted
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


# --- Many slowed syncs: the API turns slow past the lease duration at random points ------

SEED = 31
SYNCS = 100
"""Syncs each replica must run, every one against a slowed API server."""
RUN_CAP_S = 55.0
LONG = {"lease_duration_s": 2.0, "renew_deadline_s": 1.2, "retry_period_s": 0.2}
WRITE_S = 0.3
"""One write request's timeout, and the renewal time a write needs left."""
JITTER_S = 0.02
"""Every request of either replica waits up to this long: every sync is a slowed one."""
LEASE_STALL_S = 2.5
"""A stalled replica's Lease requests wait past the lease duration (2 s)."""


def non_holder_writes(api) -> list[str]:
    """Writes by a replica that did not hold the Lease when the double applied them.

    The holder at a moment is the ``holderIdentity`` of the Lease as last stored before
    it, and only until that record's ``renewTime + leaseDurationSeconds``: after that
    the Lease has lapsed and a standby may take it at any time, so it is nobody's.
    """
    specs = dict(api.lease_specs)
    spec: dict | None = None
    bad = []
    for i, (when, agent, what, _holder) in enumerate(api.writes):
        if i in specs:
            spec = specs[i]
            continue
        who = agent.removeprefix("controller-")
        if who not in ("a", "b"):
            continue  # the client that moves replicas
        held = (
            spec is not None
            and spec.get("holderIdentity") == who
            and when < parse_time(spec["renewTime"]) + spec["leaseDurationSeconds"]
        )
        if not held:
            bad.append(f"{what} by {who} at {when:.3f} (Lease then: {spec})")
    return bad


def held_fraction(api) -> float:
    """Share of the run (first to last Lease write) in which the stored Lease had a holder
    whose record had not lapsed."""
    times = [(api.writes[i][0], spec) for i, spec in api.lease_specs]
    held = 0.0
    for (t, spec), (t_next, _s) in itertools.pairwise(times):
        if spec.get("holderIdentity"):
            lapse = parse_time(spec["renewTime"]) + spec["leaseDurationSeconds"]
            held += max(0.0, min(t_next, lapse) - t)
    return held / (times[-1][0] - times[0][0])


def test_no_non_holder_write_over_a_hundred_slowed_syncs_each(tmp_path):
    # Two replicas sync web-0 continuously (a wants 4 replicas, b 7) while a third client
    # keeps setting 2, so a leader's sync has a /scale write and an Event to make. Every
    # request of either waits a random 0-20 ms. At seeded random points the API stalls
    # for one replica (mostly the leader) for longer than the lease duration: its Lease
    # requests wait 2.5 s (past their timeout, so renewals fail), its other requests
    # wait 50-90 % of their timeout (its syncs go on, slowly, and land late).
    plan = random.Random(SEED)
    jitter = random.Random(SEED + 1)  # drawn under the double's lock

    def base() -> float:
        return jitter.uniform(0.0, JITTER_S)

    def crawl() -> float:
        return jitter.uniform(0.5, 0.9) * WRITE_S

    with KubeApiDouble() as api:
        api.create_deployment("web-0", replicas=1)
        for who in "ab":
            api.agent_stalls[f"controller-{who}"] = [("", base)]
        syncs = {"a": 0, "b": 0}
        stop = threading.Event()
        many = {"config": ONE_TARGET, "lease": LONG, "timeout_s": WRITE_S, "syncs": syncs}
        a, act_a, thread_a = start(api, tmp_path, "a", 4, stop, **many)
        b, act_b, thread_b = start(api, tmp_path, "b", 7, stop, **many)

        def chaos() -> None:
            while not stop.wait(0.15):
                api.patch_object("apps/v1", "deployments", "web-0", "default", TWO)

        mover = threading.Thread(target=chaos, daemon=True)
        mover.start()

        def holder() -> str:
            lease = api.get("coordination.k8s.io/v1", "leases", "gpuscale", "default") or {}
            return (lease.get("spec") or {}).get("holderIdentity") or ""

        began = time.monotonic()
        stalls = {"a": 0, "b": 0}
        while time.monotonic() - began < RUN_CAP_S and (
            min(syncs.values()) < SYNCS or min(stalls.values()) < 2
        ):
            time.sleep(plan.uniform(0.8, 2.0))  # calm: the API is only slowed
            leader = holder() or "a"
            victim = leader if plan.random() < 0.8 else {"a": "b", "b": "a"}[leader]
            stalls[victim] += 1
            agent = f"controller-{victim}"
            api.agent_stalls[agent] = [("/leases/", LEASE_STALL_S), ("", crawl)]
            time.sleep(plan.uniform(2.2, 3.2))  # longer than the lease duration
            api.agent_stalls[agent] = [("", base)]
        elapsed = time.monotonic() - began
        stop.set()
        for t in (mover, thread_a, thread_b):
            t.join(timeout=10)
        act_a.close()
        act_b.close()

        facts = f"after {elapsed:.0f} s: syncs {syncs}, stalls {stalls}"
        assert non_holder_writes(api) == [], facts
        assert min(syncs.values()) >= SYNCS, facts
        holders = [spec.get("holderIdentity") for _i, spec in api.lease_specs]
        takeovers = sum(1 for x, y in itertools.pairwise(holders) if y and x != y)
        assert takeovers >= 2, f"the stalls never moved the Lease; {facts}"
        # Liveness: a holder for most of the run, and both replicas wrote as leaders.
        assert held_fraction(api) > 0.5, facts
        scales = {
            who: sum(
                1
                for _t, agent, what, _h in api.writes
                if agent == f"controller-{who}" and what.startswith("PUT") and "/scale" in what
            )
            for who in "ab"
        }
        assert min(scales.values()) >= 10, f"{facts}, /scale writes {scales}"
        # The guard was tested: some write was refused because the Lease might lapse.
        refused = sum(
            c.metrics.errors.labels("default/Deployment/web-0", "not_leader")._value.get()
            for c in (a, b)
        )
        assert refused >= 1, facts
