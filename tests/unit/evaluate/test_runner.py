import dataclasses
import math
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from gpuscale.errors import ConfigError
from gpuscale.evaluate.fleet import POOL_HEADROOM, pool_replicas
from gpuscale.evaluate.runner import (
    POLICY_NAMES,
    EvaluationRequest,
    build_policy,
    default_slo_s,
    plan,
    run_all,
    run_evaluation,
    serving_for,
)
from gpuscale.scaling.hpa import HpaConfig
from gpuscale.scaling.oracle import OraclePolicy
from gpuscale.scaling.static import StaticConfig
from gpuscale.sim.cluster import ClusterConfig
from gpuscale.sim.generators import from_rate
from gpuscale.sim.latency import centred_mean
from gpuscale.sim.serving import (
    MEASURED_SERVICE_SCV,
    ServingConfig,
    replica_slots,
    required_replicas,
)
from gpuscale.sim.traces import load_trace


@pytest.fixture(scope="module")
def prepared():
    return EvaluationRequest("ramp", scale=2.0, duration_s=900, seed=5).prepare()


@pytest.fixture(scope="module")
def serial(prepared):
    return run_evaluation(prepared, jobs=1)


ROOT = Path(__file__).resolve().parents[3]


def test_parameters_follow_the_documented_fair_rules(prepared):
    sc = prepared.scenario
    required = required_replicas(sc.workload, sc)
    assert np.array_equal(prepared.required, required)
    peak = int(required.max())
    p = prepared.configs
    assert list(p) == list(POLICY_NAMES)
    assert p["static"] == StaticConfig(replicas=math.ceil(np.quantile(required, 0.95)))
    pool = sc.cluster.max_gpus  # one GPU per replica: the node pool's bound
    assert prepared.parameters("hpa") == {
        "target_average_value": 70.0,
        "min_replicas": 1,
        "max_replicas": pool,
    }
    assert p["hpa"] == HpaConfig(target_average_value=70.0, min_replicas=1, max_replicas=pool)
    assert {p[n].max_replicas for n in ("keda", "kpa", "oracle", "hpa-sm")} == {pool}
    assert p["keda"].threshold == pytest.approx(0.7)  # one slot per replica
    assert p["kpa"].target == pytest.approx(0.7)
    cold = sc.cluster.cold_start.quantile(0.95)
    grows = peak > sc.cluster.initial_nodes * sc.cluster.gpus_per_node
    assert p["oracle"].lead_s == pytest.approx(cold, abs=0.05)
    assert p["oracle"].node_lead_s == (180.0 if grows else 0.0)
    assert p["oracle"].fast_capacity == sc.cluster.floor_nodes * sc.cluster.gpus_per_node
    assert p["oracle"].hold_s == pytest.approx(30.0 + cold, abs=0.05)
    assert sc.initial_replicas == max(int(required[:60].max()), 1)
    want = pool_replicas(sc.workload, sc.serving, sc.cluster.gpu_model)
    assert sc.cluster.max_nodes == math.ceil(want / sc.cluster.gpus_per_node)


def test_the_node_pool_is_sized_from_the_peak_rate_not_from_the_oracle():
    # About 50 requests/s of 0.5 s each: a peak load of about 25 replicas, a pool of 50.
    workload = from_rate("flat", np.full(900, 50.0), service_s=0.5, seed=3)
    peak_rate = float(centred_mean(workload.arrivals, 60).max())
    want = math.ceil(POOL_HEADROOM * peak_rate * workload.mean_service_s())
    assert pool_replicas(workload, ServingConfig(), "H100") == want
    assert 48 <= want <= 58
    bounds = set()
    peaks = set()
    for slo in (1.0, 3.0):  # a tighter SLO needs more replicas; the pool does not change
        prepared = plan(
            workload,
            trace="flat",
            policies=["hpa", "oracle"],
            scale=1.0,
            slo_latency_s=slo,
            timeout_s=4 * slo,
            seed=0,
        )
        peaks.add(int(prepared.required.max()))
        bounds.add((prepared.scenario.cluster.max_nodes, prepared.configs["hpa"].max_replicas))
        assert prepared.configs["oracle"].max_replicas == prepared.configs["hpa"].max_replicas
    assert len(peaks) == 2
    nodes = math.ceil(pool_replicas(workload, ServingConfig(), "H100") / 8)
    assert bounds == {(nodes, 8 * nodes)}


AZURE_CONV_FILES = ("azure_llm_2023_conv.csv", "AzureLLMInferenceTrace_conv.csv")
"""The names the shared Azure conversation trace is found under (``sim.traces``)."""


def test_keda_and_kpa_thresholds_use_the_kv_bound_slots_of_an_llm_replica():
    traces = Path(os.environ.get("GPUSCALE_TRACES_DIR", ROOT / ".." / "shared" / "traces"))
    if not any((traces / f).is_file() for f in AZURE_CONV_FILES):
        pytest.skip(f"Azure's conversation trace absent from {traces}")
    prepared = EvaluationRequest(
        "azure-conv", scale=100.0, duration_s=600, policies=("keda", "kpa"), traces_dir=traces
    ).prepare()
    sc = prepared.scenario
    slots = replica_slots(sc.serving, sc.cluster.gpu_model, sc.workload)
    assert slots < sc.serving.slots_per_replica  # the KV cache binds before the batch limit
    assert prepared.configs["keda"].threshold == pytest.approx(0.7 * slots)
    assert prepared.configs["kpa"].target == pytest.approx(0.7 * slots)


def test_llm_traces_get_batched_serving_and_batch_sized_targets():
    assert serving_for("azure-conv").slots_per_replica == ServingConfig.for_llm().slots_per_replica
    assert serving_for("gentd26").slots_per_replica == 1
    rate = np.full(600, 50.0)
    workload = from_rate("llm", rate, service_s=0.05, seed=1)
    prepared = plan(
        workload,
        trace="azure-conv",
        policies=["keda", "kpa"],
        scale=1.0,
        slo_latency_s=15.0,
        timeout_s=60.0,
        seed=0,
    )
    slots = ServingConfig.for_llm().slots_per_replica
    assert prepared.configs["keda"].threshold == pytest.approx(0.7 * slots)
    assert prepared.configs["kpa"].target == pytest.approx(0.7 * slots)


def test_default_slo_is_four_unqueued_service_times():
    workload = from_rate("w", np.full(100, 3.0), service_s=0.5, seed=0)
    assert default_slo_s(workload, ServingConfig(), "H100") == pytest.approx(2.0)
    assert default_slo_s(workload, ServingConfig.for_llm(slots=8), "H100") == pytest.approx(16.0)


def test_every_policy_runs_on_the_same_scenario(serial):
    evaluation, results = serial
    assert [r.policy for r in results] == list(POLICY_NAMES)
    assert len({r.requests for r in results}) == 1
    assert evaluation.duration_s == 900.0
    assert evaluation.seed == 5
    oracle = evaluation.policies["oracle"]
    assert oracle.slo_attainment is not None
    assert oracle.slo_attainment > 0.93
    static = evaluation.policies["static"]
    assert static.scale_events <= 1
    assert static.parameters["replicas"] >= 1


def test_static_policy_holds_its_count_after_the_first_decision(serial, prepared):
    _, results = serial
    static = next(r for r in results if r.policy == "static")
    want = prepared.configs["static"].replicas
    assert np.all(static.timeline.desired_replicas == want)


def test_process_pool_gives_the_same_numbers_as_serial(prepared, serial):
    _, serial_results = serial
    seen: dict[str, float] = {}
    pooled = run_all(prepared, jobs=2, progress=lambda name, f: seen.__setitem__(name, f))
    assert [r.policy for r in pooled] == [r.policy for r in serial_results]
    for a, b in zip(pooled, serial_results, strict=True):
        assert a.gpu_seconds == b.gpu_seconds
        assert a.within_slo == b.within_slo
        assert a.scale_events == b.scale_events
    assert seen == dict.fromkeys(POLICY_NAMES, 1.0)


def test_oracle_is_built_from_the_requirement(prepared):
    oracle = build_policy("oracle", prepared.configs["oracle"], prepared.required)
    assert isinstance(oracle, OraclePolicy)
    assert oracle.name == "oracle"
    assert oracle.min_replicas == 1
    assert oracle.max_replicas == prepared.configs["oracle"].max_replicas
    assert oracle.needed(0.0) == int(prepared.required[: math.ceil(oracle.lead_s + 5)].max())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"policies": ("hpa", "magic")}, r"--policy magic: unknown policy; use one of static"),
        ({"policies": ("hpa", "hpa")}, r"--policy hpa hpa: a policy is named twice"),
        ({"slo_latency_s": -1.0}, r"--slo-latency -1.0: must be"),
        ({"timeout_s": math.inf}, r"--timeout inf"),
        ({"faults": ("melt@10",)}, r"--fault 'melt@10': unknown fault kind"),
        ({"faults": ("gpu-lost@5000",)}, r"--fault gpu-lost@5000: falls after the run's 600 s"),
        ({"scale": -2.0}, r"--scale -2.0"),
    ],
)
def test_bad_requests_are_config_errors_before_any_run(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        EvaluationRequest("ramp", duration_s=600, **kwargs).prepare()


def test_a_trace_without_requests_is_rejected(tmp_path):
    path = tmp_path / "idle.csv"
    path.write_text("time_s,rps\n0,0\n100,0\n")
    with pytest.raises(ConfigError, match=r"no requests"):
        EvaluationRequest(str(path)).prepare()


def test_faults_reach_every_run():
    prepared = EvaluationRequest(
        "ramp", duration_s=600, policies=("static",), faults=("gpu-lost@100",)
    ).prepare()
    assert [f.kind for f in prepared.scenario.faults] == ["gpu-lost"]
    evaluation, _ = run_evaluation(prepared)
    assert evaluation.faults == ("gpu-lost@100",)


def test_faults_are_recorded_as_windows_for_the_report():
    prepared = EvaluationRequest(
        "ramp",
        duration_s=600,
        policies=("static",),
        faults=("thermal@100:duration=50", "ecc-dbe@200", "gpu-lost@300"),
    ).prepare()
    evaluation, _ = run_evaluation(prepared)
    assert [(w.spec, w.start_s, w.end_s) for w in evaluation.fault_windows] == [
        ("thermal@100:duration=50", 100.0, 150.0),
        ("ecc-dbe@200", 200.0, None),  # instantaneous
        ("gpu-lost@300", 300.0, 600.0),  # never replaced: to the end of the run
    ]
    assert evaluation.to_json()["fault_windows"][1] == {
        "spec": "ecc-dbe@200",
        "start_s": 200.0,
        "end_s": None,
    }


def test_the_cluster_template_keeps_every_field_but_the_sized_node_counts():
    template = ClusterConfig(
        gpu_model="A100",
        gpus_per_node=4,
        min_nodes=1,
        node_provision_s=99.0,
        node_idle_remove_s=77.0,
        termination_grace_s=11.0,
        namespace="ml",
        deployment="llm",
    )
    prepared = EvaluationRequest("ramp", duration_s=600, cluster=template).prepare()
    sized = prepared.scenario.cluster
    for f in dataclasses.fields(ClusterConfig):
        if f.name not in ("initial_nodes", "max_nodes"):
            assert getattr(sized, f.name) == getattr(template, f.name), f.name


def test_prepared_configs_are_typed_and_pickle_to_workers(prepared):
    copy = pickle.loads(pickle.dumps(prepared))  # noqa: S301 - our own bytes, as a worker gets them
    assert copy.configs == prepared.configs
    assert all(dataclasses.is_dataclass(c) for c in prepared.configs.values())


def test_one_at_a_time_traces_get_gentd26s_measured_service_variability():
    assert serving_for("diurnal").service_scv == MEASURED_SERVICE_SCV
    assert serving_for("azure-code").service_scv == 1.0  # its profile's SCV replaces it
    traces = Path(os.environ.get("GPUSCALE_TRACES_DIR", ROOT / ".." / "shared" / "traces"))
    if not (traces / "gentd26_model_predict_ms.csv.gz").is_file():
        pytest.skip(f"GenTD26's model_predict_ms absent from {traces}")
    workload = load_trace("gentd26", duration_s=3600, traces_dir=traces)
    assert workload.profile is not None
    # The constant is the trace's figure rounded to two places.
    assert workload.profile.scv == pytest.approx(MEASURED_SERVICE_SCV, abs=0.005)
