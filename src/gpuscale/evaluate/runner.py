"""Run every policy on the same scenario, with parameters chosen the same fair way.

A comparison is only as fair as the parameters each contender gets, so they
are derived here, from the scenario alone, by one documented rule each:

* Every policy shares the trace, scale, seed, faults, cluster, serving model,
  SLO and bounds: ``min_replicas`` 1 (so no policy pays a cold start for the
  first request after a lull; KEDA and KPA could scale to zero but do not
  here) and ``max_replicas`` what the node pool holds (``max_nodes`` x
  ``gpus_per_node`` GPUs, over the GPUs per replica), never the oracle's plan.
* The node pool is sized from what a user knows (``pool_replicas``): the
  trace's peak request rate (averaged over ``POOL_RATE_WINDOW_S``) x the mean
  time a replica spends per request x ``POOL_HEADROOM``, rounded up to whole
  nodes, plus one GPU per injected fault.
* The run starts warm with the replicas the oracle needs in the first minute.
* ``static``: the 95th percentile of the per-second requirement
  (``sim.serving.required_replicas``): provisioned for p95 demand, never moves.
* ``hpa``: Kubernetes HPA on ``DCGM_FI_DEV_GPU_UTIL`` with a 70 % target and
  the controller's defaults.
* ``keda``: KEDA's Prometheus trigger on in-flight plus queued requests; its
  threshold is what one replica holds at the same 70 % (0.7 x its batch slots,
  bounded by the KV cache for LLMs: ``sim.serving.replica_slots``).
* ``kpa``: Knative's KPA on concurrency with the same target per pod.
* ``oracle``: the requirement itself, requested ``lead_s`` ahead (the 95th
  percentile cold start), and ``node_lead_s`` earlier still for replicas beyond
  the nodes that are always up; it keeps replicas across dips shorter than a
  termination grace plus a cold start, since churning would cost more. The
  sweep (``evaluate.sweep``) searches its margin on each seed until it meets
  the target attainment (``evaluate.oracle_search``).

Each rule is the ``fair`` function of the policy's entry in
``evaluate.policies``, the one registry of policies; this module computes the
``FairInputs`` they read. Runs are independent, so they may go to a process pool
(``jobs``, see ``pool.RunPool``); policy objects are built inside each worker
from their typed configs.
"""

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuscale.errors import config_error
from gpuscale.evaluate import policies as registry
from gpuscale.evaluate.fleet import fleet_replicas, gpus_per_replica, pool_replicas
from gpuscale.evaluate.pool import RunPool, decisions_at_debug
from gpuscale.evaluate.results import Evaluation, FaultWindow, evaluation_from, fault_windows
from gpuscale.scaling.policy import ScalingPolicy
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.engine import Scenario, simulate
from gpuscale.sim.faults import SimFault, parse_sim_fault
from gpuscale.sim.llm import step_model
from gpuscale.sim.outcome import RunResult
from gpuscale.sim.queue_model import QueueModel
from gpuscale.sim.serving import (
    MEASURED_SERVICE_SCV,
    ServingConfig,
    relative_speed,
    replica_slots,
    required_replicas,
)
from gpuscale.sim.traces import AZURE_FILES, load_trace
from gpuscale.sim.workload import Workload

logger = logging.getLogger(__name__)

POLICY_NAMES = registry.default_names()
"""The policies run by default when this module was imported (``policies.default_names()``)."""


TARGET_UTILIZATION = 0.70
"""The one utilisation target every reactive baseline is given (HPA's common 70 %)."""

STATIC_QUANTILE = 0.95
"""Static provisioning covers this quantile of the per-second requirement."""

ORACLE_COLD_START_QUANTILE = 0.95
"""The oracle plans for this quantile of the cold-start distribution."""

SLO_SERVICE_MULTIPLE = 4.0
"""Default SLO: this many times a request's service time on one batch slot."""

TIMEOUT_SLO_MULTIPLE = 4.0
"""Default drop timeout: this many times the SLO."""

ProgressFn = Callable[[str, float], None]


@dataclass(frozen=True, slots=True)
class EvaluationRequest:
    """What the user asked for, before anything is loaded.

    Attributes:
        trace: Trace name or rate-file path.
        policies: Policy names to run; empty runs every registered policy.
        scale: Request-rate multiplier.
        slo_latency_s: SLO latency, seconds; None derives it from the service time.
        timeout_s: Drop timeout, seconds; None is ``TIMEOUT_SLO_MULTIPLE`` x SLO.
        duration_s: Seconds to simulate; None for the whole trace.
        seed: Seed of every run.
        faults: Fault specs (``sim.faults.parse_sim_fault`` syntax).
        traces_dir: Directory of the shared trace files.
        service_s: GPU seconds per request for generators and rate files.
        cluster: Cluster template; its node counts are sized to the trace.
        queue_model: The simulated queue (``Scenario.queue_model``): ``auto``, ``fluid``
            or ``requests``.
        alerts: Evaluate the alert catalogue in every run (``Scenario.alerting``).
        remediate: The decision step deletes pods on broken GPUs (``Scenario.remediate``).
        placement: The decision step marks the pods a scale-in takes so whole nodes
            empty (``Scenario.placement``).
    """

    trace: str
    policies: tuple[str, ...] = ()
    scale: float = 1.0
    slo_latency_s: float | None = None
    timeout_s: float | None = None
    duration_s: int | None = None
    seed: int = 0
    faults: tuple[str, ...] = ()
    traces_dir: Path | None = None
    service_s: float | None = None
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    queue_model: QueueModel = "auto"
    alerts: bool = False
    remediate: bool = False
    placement: bool = False

    def prepare(self) -> "PreparedEvaluation":
        """Load the trace, check every input and derive each policy's parameters.

        Returns:
            Everything the runs need.

        Raises:
            ConfigError: Any input is wrong (one line naming it).
        """
        chosen = registry.choose(self.policies)
        for flag, value in (("--slo-latency", self.slo_latency_s), ("--timeout", self.timeout_s)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise config_error(
                    f"{flag} {value}", "must be a number of seconds > 0", f"e.g. {flag} 10"
                )
        faults = tuple(parse_sim_fault(f) for f in self.faults)
        workload = load_trace(
            self.trace,
            scale=self.scale,
            duration_s=self.duration_s,
            seed=self.seed,
            traces_dir=self.traces_dir,
            service_s=self.service_s,
        )
        if workload.arrivals.sum() <= 0:
            raise config_error(
                f"--trace {self.trace}",
                "no requests in the chosen span",
                "choose a trace or --duration with requests",
            )
        late = [f.spec() for f in faults if f.at_s >= workload.duration_s]
        if late:
            raise config_error(
                f"--fault {late[0]}",
                f"falls after the run's {workload.duration_s} s",
                "fault earlier",
            )
        serving = serving_for(self.trace)
        slo = self.slo_latency_s or default_slo_s(workload, serving, self.cluster.gpu_model)
        timeout = self.timeout_s or TIMEOUT_SLO_MULTIPLE * slo
        return plan(
            workload,
            trace=self.trace,
            policies=chosen,
            scale=self.scale,
            slo_latency_s=slo,
            timeout_s=timeout,
            seed=self.seed,
            faults=self.faults,
            serving=serving,
            cluster=self.cluster,
            scenario_faults=faults,
            queue_model=self.queue_model,
            alerting=self.alerts,
            remediate=self.remediate,
            placement=self.placement,
        )


@dataclass(frozen=True, slots=True)
class PreparedEvaluation:
    """A scenario and the parameters of each policy, ready to run.

    Attributes:
        trace: Trace name or path, for the report.
        scale: Request-rate multiplier, for the report.
        fault_specs: Fault specs as given, for the report.
        scenario: The scenario every policy runs on.
        required: Fewest Ready replicas meeting the SLO, per second (the oracle's input).
        configs: Policy name to the typed config it is built from, in run order.
        fault_windows: When each fault acts, for the report.
    """

    trace: str
    scale: float
    fault_specs: tuple[str, ...]
    scenario: Scenario
    required: np.ndarray
    configs: Mapping[str, Any]
    fault_windows: tuple[FaultWindow, ...] = ()

    @property
    def policies(self) -> tuple[str, ...]:
        """Policy names in run order."""
        return tuple(self.configs)

    def parameters(self, name: str) -> dict[str, Any]:
        """The parameters of one policy that its fair rule set, as recorded.

        Returns:
            Field name to value.
        """
        return registry.get(name).record(self.configs[name])


def serving_for(trace: str) -> ServingConfig:
    """The serving model a trace implies: LLM batching for Azure, one at a time otherwise.

    One at a time, service times vary as GenTD26's measured ones do
    (``MEASURED_SERVICE_SCV``) unless the trace measures its own (``Workload.profile``).

    Returns:
        The serving config.
    """
    if trace in AZURE_FILES:
        return ServingConfig.for_llm()
    return ServingConfig(service_scv=MEASURED_SERVICE_SCV)


def default_slo_s(workload: Workload, serving: ServingConfig, gpu_model: str) -> float:
    """The default SLO: ``SLO_SERVICE_MULTIPLE`` x the mean latency of an unqueued request.

    Returns:
        Seconds, rounded up to 0.1 s.
    """
    speed = relative_speed(gpu_model, serving.reference_model)
    service = workload.mean_service_s() * serving.slots_per_replica / speed
    return math.ceil(SLO_SERVICE_MULTIPLE * service * 10.0) / 10.0


def wait_budget_s(
    workload: Workload, serving: ServingConfig, gpu_model: str, slo_latency_s: float
) -> float:
    """The wait in the queue a mean request may have and still meet its SLO.

    An LLM request's TTFT is its wait plus its prefill, so its budget is
    ``ttft_slowdown - 1`` idle prefills of the trace's mean prompt; any other
    request's is the latency SLO less its mean service time on ``gpu_model``.

    Returns:
        Seconds, at least 0.
    """
    profile = workload.profile
    if serving.llm_slo is not None and profile is not None and profile.context_q is not None:
        prefill = float(step_model(gpu_model).prefill_step_s(1.0, float(profile.context_q.mean())))
        return (serving.llm_slo.ttft_slowdown - 1.0) * prefill
    speed = relative_speed(gpu_model, serving.reference_model)
    return max(slo_latency_s - workload.mean_service_s() / speed, 0.0)


def plan(
    workload: Workload,
    *,
    trace: str,
    policies: Sequence[str],
    scale: float,
    slo_latency_s: float,
    timeout_s: float,
    seed: int,
    faults: Sequence[str] = (),
    serving: ServingConfig | None = None,
    cluster: ClusterConfig | None = None,
    scenario_faults: Sequence[SimFault] | None = None,
    queue_model: QueueModel = "auto",
    alerting: bool = False,
    remediate: bool = False,
    placement: bool = False,
) -> PreparedEvaluation:
    """Size the cluster to the workload and derive each policy's parameters.

    Returns:
        The prepared evaluation.
    """
    serving = serving or serving_for(trace)
    template = cluster or ClusterConfig()
    parsed = (
        tuple(scenario_faults)
        if scenario_faults is not None
        else tuple(parse_sim_fault(f) for f in faults)
    )
    probe = Scenario(workload, template, serving, slo_latency_s, timeout_s, seed)
    required = required_replicas(workload, probe)
    peak = max(int(required.max()), 1)
    static = max(math.ceil(float(np.quantile(required, STATIC_QUANTILE))), 1)
    initial = max(int(required[:60].max()), 1)
    per_node, gpr = template.gpus_per_node, gpus_per_replica(serving)
    initial_nodes = math.ceil(initial * gpr / per_node)
    pool = pool_replicas(workload, serving, template.gpu_model)
    max_nodes = max(math.ceil((pool * gpr + len(parsed)) / per_node), initial_nodes)
    cluster_cfg = dataclasses.replace(template, initial_nodes=initial_nodes, max_nodes=max_nodes)
    max_replicas = fleet_replicas(cluster_cfg, serving)
    scenario = Scenario(
        workload,
        cluster_cfg,
        serving,
        slo_latency_s,
        timeout_s,
        seed,
        initial_replicas=initial,
        faults=parsed,
        queue_model=queue_model,
        alerting=alerting,
        remediate=remediate,
        placement=placement,
    )
    grows = peak * gpr > initial_nodes * per_node
    cold = cluster_cfg.cold_start.quantile(ORACLE_COLD_START_QUANTILE)
    node_lead = cluster_cfg.node_provision_s if grows else 0.0
    slots = replica_slots(serving, template.gpu_model, workload)
    fair = registry.FairInputs(
        min_replicas=1,
        max_replicas=max_replicas,
        static_replicas=static,
        target_utilization=TARGET_UTILIZATION,
        per_replica=TARGET_UTILIZATION * slots,
        lead_s=round(cold, 1),
        hold_s=round(cluster_cfg.termination_grace_s + cold, 1),
        node_lead_s=node_lead,
        fast_capacity=cluster_cfg.floor_nodes * per_node // gpr,
        node_size=max(per_node // gpr, 1),
        node_keep_s=cluster_cfg.node_idle_remove_s,
        wait_budget_s=wait_budget_s(workload, serving, template.gpu_model, slo_latency_s),
        pod_concurrency=slots,
    )
    logger.info(
        "scenario %s: %d s, peak need %d replicas, static %d, max %d, initial %d, nodes %d-%d",
        trace, workload.duration_s, peak, static, max_replicas, initial, initial_nodes, max_nodes,
    )  # fmt: skip
    return PreparedEvaluation(
        trace=trace,
        scale=scale,
        fault_specs=tuple(faults),
        scenario=scenario,
        required=required,
        configs={name: registry.get(name).fair(fair) for name in registry.choose(policies)},
        fault_windows=fault_windows(parsed, workload.duration_s),
    )


def build_policy(name: str, config: object, required: np.ndarray) -> ScalingPolicy[Any]:
    """Construct a registered policy from its typed config.

    Returns:
        The policy object, named ``name``.

    Raises:
        ConfigError: Unknown policy name.
    """
    return registry.get(name).build(config, required.tolist(), name)


def run_one(
    prepared: PreparedEvaluation,
    name: str,
    *,
    progress: Callable[[float], None] | None = None,
    quiet: bool = False,
) -> RunResult:
    """Simulate one policy on the prepared scenario; ``quiet`` logs its start at DEBUG.

    Returns:
        The run's result.
    """
    policy = build_policy(name, prepared.configs[name], prepared.required)
    logger.log(logging.DEBUG if quiet else logging.INFO, "running %s on %s", name, prepared.trace)
    with decisions_at_debug():
        return simulate(prepared.scenario, policy, progress=progress)


def run_all(
    prepared: PreparedEvaluation,
    *,
    jobs: int = 1,
    pool: RunPool | None = None,
    progress: ProgressFn | None = None,
) -> list[RunResult]:
    """Run every policy: in ``pool`` if given, in a new pool when ``jobs`` > 1, else here.

    Args:
        prepared: The scenario and parameters.
        jobs: Worker processes when no pool is given; 1 runs in this process.
        pool: Workers started earlier (before any thread, see ``RunPool``).
        progress: Called with (policy, fraction done).

    Returns:
        One result per policy, in the order of ``prepared.policies``.
    """
    calls = [(name, (prepared, name)) for name in prepared.policies]
    if pool is not None:
        return pool.run(run_one, calls, progress)
    if jobs > 1 and len(calls) > 1:
        with RunPool(min(jobs, len(calls))) as own:
            return own.run(run_one, calls, progress)
    out = []
    for name in prepared.policies:

        def report(fraction: float, name: str = name) -> None:
            if progress is not None:
                progress(name, fraction)

        out.append(run_one(prepared, name, progress=report))
    return out


def run_evaluation(
    prepared: PreparedEvaluation,
    *,
    jobs: int = 1,
    pool: RunPool | None = None,
    progress: ProgressFn | None = None,
) -> tuple[Evaluation, list[RunResult]]:
    """Run and score every policy of a prepared evaluation (see ``run_all``).

    Returns:
        The scores and the runs behind them.
    """
    results = run_all(prepared, jobs=jobs, pool=pool, progress=progress)
    sc = prepared.scenario
    evaluation = evaluation_from(
        trace=prepared.trace,
        seed=sc.seed,
        duration_s=float(sc.workload.duration_s),
        scale=prepared.scale,
        slo_latency_s=sc.slo_latency_s,
        timeout_s=sc.timeout_s,
        faults=prepared.fault_specs,
        runs=[(r, prepared.parameters(r.policy)) for r in results],
        units={name: registry.get(name).fair_units() for name in prepared.policies},
        fault_windows=prepared.fault_windows,
    )
    return evaluation, results
