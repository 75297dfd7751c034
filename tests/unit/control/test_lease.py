"""LeaseElector over the real kubernetes client against the API double: acquire, renew,
expiry takeover, races decided by resourceVersion, release, the renew deadline."""

import threading

import pytest

from gpuscale.control.kubecall import KubeForbiddenError
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.lease import LeaseElector
from tests.support.kubeapi import KubeApiDouble, ManualClock

LEASE = "/apis/coordination.k8s.io/v1/namespaces/gpuscale/leases/autoscaler"


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def api(clock):
    with KubeApiDouble(clock=clock) as double:
        yield double


@pytest.fixture
def client(api, tmp_path):
    act = KubeActuator.connect(str(api.write_kubeconfig(tmp_path / "kc")))
    yield act.api_client
    act.close()


def elector(client, clock, identity):
    return LeaseElector(client, "gpuscale", "autoscaler", identity, clock=clock)


def spec(api):
    return api.get("coordination.k8s.io/v1", "leases", "autoscaler", "gpuscale")["spec"]


def test_first_candidate_creates_the_lease(api, client, clock):
    a = elector(client, clock, "a")
    assert a.try_acquire_or_renew()
    assert a.is_leader
    s = spec(api)
    assert s["holderIdentity"] == "a"
    assert s["leaseDurationSeconds"] == 15
    assert s["leaseTransitions"] == 0
    # MicroTime: six fractional digits even at a whole second (the double rejects fewer)
    assert s["renewTime"] == s["acquireTime"] == "2026-01-01T00:00:00.000000Z"


def test_holder_renews_and_keeps_its_acquire_time(api, client, clock):
    a = elector(client, clock, "a")
    assert a.try_acquire_or_renew()
    clock.advance(2.5)
    assert a.try_acquire_or_renew()
    s = spec(api)
    assert s["acquireTime"] == "2026-01-01T00:00:00.000000Z"
    assert s["renewTime"] == "2026-01-01T00:00:02.500000Z"
    assert s["leaseTransitions"] == 0


def test_standby_waits_for_expiry_then_takes_over(api, client, clock):
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(14.9)  # a silent holder keeps the lease for leaseDurationSeconds = 15
    assert not b.try_acquire_or_renew()
    clock.advance(0.2)
    assert b.try_acquire_or_renew()
    s = spec(api)
    assert s["holderIdentity"] == "b"
    assert s["leaseTransitions"] == 1
    assert s["acquireTime"] == s["renewTime"] == "2026-01-01T00:00:15.100000Z"
    assert not a.try_acquire_or_renew()
    assert not a.is_leader


def test_a_renewing_holder_is_never_taken_over(api, client, clock):
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    for _ in range(20):  # 40 s, far past one lease duration
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
        clock.advance(2.0)
    assert spec(api)["holderIdentity"] == "a"


def test_newcomer_measures_expiry_from_its_own_observation(api, client, clock):
    # client-go: a candidate that just started waits a full duration even if renewTime is old
    a = elector(client, clock, "a")
    assert a.try_acquire_or_renew()
    clock.advance(60.0)
    late = elector(client, clock, "late")
    assert not late.try_acquire_or_renew()
    clock.advance(15.0)
    assert late.try_acquire_or_renew()


def test_release_lets_a_standby_take_over_at_once(api, client, clock):
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert spec(api).get("holderIdentity", "") == ""
    assert b.try_acquire_or_renew()
    assert spec(api)["leaseTransitions"] == 1
    assert not a.release()  # no longer the holder


def test_losing_a_write_race_makes_a_follower(api, client, clock):
    a, b = elector(client, clock, "a"), elector(client, clock, "b")
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock.advance(16.0)

    # a renews between b's read and b's write: b's PUT carries a stale resourceVersion
    def a_renews() -> None:
        lease = api.get("coordination.k8s.io/v1", "leases", "autoscaler", "gpuscale")
        renew = {"spec": {"renewTime": "2026-01-01T00:00:16.000000Z"}}
        api.patch_object("coordination.k8s.io/v1", "leases", "autoscaler", "gpuscale", renew)
        assert lease["spec"]["holderIdentity"] == "a"

    api.before_next(a_renews, method="PUT", path=LEASE)
    assert not b.try_acquire_or_renew()
    assert spec(api)["holderIdentity"] == "a"
    assert api.count("PUT", LEASE) == 1


def _race(e: LeaseElector, barrier: threading.Barrier, results: dict[str, bool]) -> None:
    barrier.wait()
    results[e.identity] = e.try_acquire_or_renew()


def test_concurrent_candidates_elect_exactly_one(api, client, clock):
    electors = [elector(client, clock, f"c{i}") for i in range(6)]
    for _round in range(5):
        barrier = threading.Barrier(len(electors))
        results: dict[str, bool] = {}
        threads = [threading.Thread(target=_race, args=(e, barrier, results)) for e in electors]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        winners = [k for k, v in results.items() if v]
        assert len(results) == len(electors)
        assert winners == [spec(api)["holderIdentity"]]
        clock.advance(16.0)  # past the duration: next round is open to all again


def test_leader_rides_out_api_errors_until_the_renew_deadline(api, client, clock):
    a = elector(client, clock, "a")
    assert a.try_acquire_or_renew()
    api.fail_next(503, 100, method="GET", path=LEASE)
    clock.advance(2.0)
    assert a.try_acquire_or_renew()  # 2 s since the last renewal < renew deadline 10 s
    clock.advance(8.0)
    assert not a.try_acquire_or_renew()  # 10 s without a renewal: stop leading


def test_forbidden_lease_access_names_the_rule(api, client, clock):
    api.fail_next(403, method="GET", path=LEASE)
    with pytest.raises(KubeForbiddenError) as err:
        elector(client, clock, "a").try_acquire_or_renew()
    assert err.value.rule == (
        '{apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get"]}'
    )


def test_timings_follow_client_go_rules(client):
    with pytest.raises(ValueError, match="lease_duration_s > renew_deadline_s"):
        LeaseElector(client, "ns", "l", "a", lease_duration_s=10, renew_deadline_s=10)
    with pytest.raises(ValueError, match="identity"):
        LeaseElector(client, "ns", "l", "")
