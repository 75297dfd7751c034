"""A fixed fleet served by the fluid queue, for tests and checks.

``serve_fixed`` runs ``fluid.FluidQueue`` with the same Ready replicas
throughout, the counterpart of ``des.simulate_requests``: the two are compared
in tests/unit/sim/test_fluid_vs_des.py.
"""

from dataclasses import dataclass

from gpuscale.sim.fluid import FluidQueue, residual_arrival_scv
from gpuscale.sim.latency import summarise_latency
from gpuscale.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class FixedRun:
    """Totals of a queue served by a fixed set of replicas (for tests and checks).

    Attributes:
        requests: Requests that arrived.
        completed: Requests served.
        dropped: Requests dropped after waiting past the timeout.
        within_slo: Requests served within the SLO.
        mean_latency_s: Mean end-to-end latency of served requests, seconds.
        in_flight: Requests queued or in service when the run ended.
    """

    requests: float
    completed: float
    dropped: float
    within_slo: float
    mean_latency_s: float
    in_flight: float

    @property
    def attainment(self) -> float:
        """Share of arrived requests served within the SLO."""
        return self.within_slo / self.requests if self.requests > 0 else 1.0


def serve_fixed(
    workload: Workload,
    *,
    replicas: int,
    slo_s: float,
    timeout_s: float,
    speed: float = 1.0,
    slots: int = 1,
    service_scv: float = 1.0,
) -> FixedRun:
    """Run the fluid queue with ``replicas`` Ready replicas of equal ``speed`` throughout.

    A workload with a ``profile`` is served and scored with its measured
    service-time shape (``service_scv`` is then the profile's).

    Returns:
        Request totals and latency of the run.
    """
    if workload.profile is not None:
        service_scv = workload.profile.scv
    q = FluidQueue(
        timeout_s=timeout_s,
        service_scv=service_scv,
        arrival_scv=residual_arrival_scv(workload),
    )
    for t in range(workload.duration_s):
        a, w = float(workload.arrivals[t]), float(workload.work_s[t])
        q.step(t, a, w, replicas * slots, replicas * speed)
    in_flight = q.finish()
    s = summarise_latency(
        q.records,
        slo_s=slo_s,
        timeout_s=timeout_s,
        row_steps=workload.duration_s,
        n_rows=1,
        service_scv=service_scv,
        profile=workload.profile,
    )
    return FixedRun(
        float(workload.arrivals.sum()),
        s.completed,
        q.dropped + s.dropped,
        s.within_slo,
        s.mean_latency_s,
        in_flight,
    )
