"""Leader election in the loop: with the real LeaseElector over the API double, only the
holder acts; a standby takes over once the holder's lease expires."""

import threading

from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.lease import LeaseElector
from tests.support.control import FAST, feed, pod_names, replicas

STATIC = """\
- scaleTargetRef: {name: web}
  minReplicas: 1
  maxReplicas: 10
  policy: {name: static, replicas: %d}
"""


def controller(make_controller, kapi, kclock, tmp_path, identity, want):
    act = KubeActuator.connect(
        str(kapi.write_kubeconfig(tmp_path / f"kc-{identity}")),
        retry=FAST,
        sleep=lambda _s: None,
        clock=kclock,
    )
    ctl = make_controller(STATIC % want, actuator=act)
    ctl.elector = LeaseElector(act.api_client, "default", "gpuscale", identity, clock=kclock)
    ctl.leader = False
    return ctl, act


def run_for(ctl, kclock, seconds: float) -> None:
    """Run the loop on the manual clock: each wait advances it; stop after ``seconds``."""
    stop, end = threading.Event(), kclock() + seconds

    def wait(pause: float) -> bool:
        kclock.advance(pause)
        return kclock() >= end

    ctl.run(stop, wait)


def test_only_the_lease_holder_acts_and_a_standby_takes_over(
    kapi, kclock, store, make_controller, tmp_path
):
    kapi.create_deployment("web", replicas=1)
    feed(store, kclock(), "x", dict.fromkeys(pod_names(kapi), 1.0))
    a, act_a = controller(make_controller, kapi, kclock, tmp_path, "a", 3)
    b, act_b = controller(make_controller, kapi, kclock, tmp_path, "b", 7)
    assert a.check_leader() is True
    run_for(b, kclock, 10.0)  # within a's 15 s lease: b renews nothing and acts on nothing
    assert b.leader is False
    assert b.metrics.leader._value.get() == 0
    assert replicas(kapi) == 1
    # 10 s after its last renewal a's lease is past its renew deadline: it must not write
    # until it renews (its renewal thread would have; here the test renews by hand).
    [held_back] = a.sync()
    assert held_back.error == "not_leader"
    assert replicas(kapi) == 1
    assert a.check_leader() is True
    a.sync()
    assert replicas(kapi) == 3
    run_for(b, kclock, 30.0)  # a is silent (not renewing): its lease expires, b takes it
    assert replicas(kapi) == 7
    assert b.leader is False  # it gave the lease up when its loop ended
    lease = kapi.get("coordination.k8s.io/v1", "leases", "gpuscale", "default")
    assert lease["spec"]["holderIdentity"] == ""  # b released it when its loop ended
    act_a.close()
    act_b.close()
