"""The RBAC under deploy/ allows every request the controller makes, and nothing it does not.

The requests come from the code, not from a list kept here: the real controller (with
its real actuator and Lease elector) runs over the Kubernetes API double with the example
GPUScaler as an object in the cluster, as the overlays deploy it, and every request it
sends is recorded with the function that sent it. Further runs read the same GPUScaler
from a file (docs/deploy.md's overlay for that mode) and add what only the node rights
serve (cordon, a policy filling whole nodes). Each request is then authorised as the
API server's RBAC authoriser does (group, resource and subresource, verb, namespace,
resource name) against the Roles, ClusterRoles and bindings the overlays render; every
verb of every rule must have been needed by some request. Finally, every place in
``gpuscale.control`` that sends a request (found in its source) must have sent one in
these runs, so a new API call cannot slip past this test unexercised.
"""

import ast
import copy
import inspect
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

import gpuscale.control
from gpuscale.control import kubecall
from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.crd import manifest
from gpuscale.control.informer import Informer
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.lease import LeaseElector
from gpuscale.control.owners import OtherAutoscalers
from gpuscale.control.scalers import ClusterScalers, collection_path
from gpuscale.control.seams import Settings
from gpuscale.control.statestore import StateConfigMap
from gpuscale.control.targets import runtimes
from gpuscale.metrics.store import MetricStore
from tests.support.control import FAST
from tests.support.kubeapi import KubeApiDouble, ManualClock
from tests.support.manifests import DEPLOY, documented_overlay, find, render

CONTROL = Path(gpuscale.control.__file__).parent
NAMESPACE = "gpuscale"  # the controller's, where its Lease lives
ACCOUNT = ("gpuscale", "gpuscale-autoscaler")
METHODS = {"GET", "POST", "PUT", "PATCH", "DELETE"}


@dataclass(frozen=True)
class Request:
    """One API request as RBAC sees it (``k8s.io/apiserver``'s RequestInfo)."""

    verb: str
    group: str
    resource: str  # with its subresource: deployments/scale
    namespace: str
    name: str
    site: tuple[str, str]  # (module, function) in gpuscale.control that sent it


def request_info(
    method: str, path: str, query: dict | None, site: tuple[str, str]
) -> Request | None:
    """The RBAC attributes of a request; None for discovery (every user may read it)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    else:
        group, rest = parts[1], parts[3:]
    namespace = ""
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    if not rest:
        return None  # /api/v1, /apis/apps/v1: discovery, granted by system:discovery
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource += "/" + rest[2]
    if method == "GET":
        verb = "get" if name else ("watch" if (query or {}).get("watch") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}[method]
        if verb == "delete" and not name:
            verb = "deletecollection"
    return Request(verb, group, resource, namespace, name, site)


def own_nodes(func: ast.FunctionDef):
    """The nodes of ``func``'s body, not those of functions defined inside it."""
    stack = list(func.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def call_sites() -> set[tuple[str, str, str]]:
    """(module, function, method) of every request ``gpuscale.control`` sends, from source:
    each ``….call("VERB", …)``, ``….call.once("VERB", …)`` and ``…._call("VERB", …)``."""
    found = set()
    for path in CONTROL.glob("*.py"):
        if path.name == "kubecall.py":
            continue  # the transport every request goes through
        for func in ast.walk(ast.parse(path.read_text())):
            if not isinstance(func, ast.FunctionDef):
                continue
            for node in own_nodes(func):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in {"call", "_call", "once"}
                    and node.args
                    and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in METHODS
                ):
                    found.add((path.stem, func.name, node.args[0].value))
    return found


def sender() -> tuple[str, str]:
    """The function in gpuscale.control (outside the transport) that sent this request."""
    for frame in inspect.stack()[2:]:
        path = Path(frame.filename)
        if path.parent == CONTROL and path.name != "kubecall.py":
            return path.stem, frame.function
    raise AssertionError("a request from outside gpuscale.control")


@pytest.fixture
def recorded(monkeypatch) -> list[tuple[str, str, dict | None, tuple[str, str]]]:
    sent: list[tuple[str, str, dict | None, tuple[str, str]]] = []
    once = kubecall.KubeCall.once

    def recording(self, method, path, *, query=None, **kw):
        sent.append((method, path, query, sender()))
        return once(self, method, path, query=query, **kw)

    def streaming(self, path, *, query, **kw):
        sent.append(("GET", path, query, sender()))
        return stream(self, path, query=query, **kw)

    stream = kubecall.KubeCall.stream
    monkeypatch.setattr(kubecall.KubeCall, "once", recording)
    monkeypatch.setattr(kubecall.KubeCall, "stream", streaming)
    return sent


def feed(store: MetricStore, t: float, metric: str, pods: dict[str, float], **labels) -> None:
    series = [
        {"pod": p, "namespace": "serving", "UUID": f"GPU-{i}", **labels} for i, p in enumerate(pods)
    ]
    store.ingest(t, metric, series, np.array(list(pods.values()), dtype=float))


def run_controller(
    tmp_path: Path, config: dict, recorded: list, *, cluster: bool = False
) -> list[Request]:
    """Two leader-elected syncs and a release over the API double; the requests sent.

    With ``cluster``, the config is a GPUScaler object read by list and watch (the
    ``--watch-gpuscalers`` mode), whose status the controller writes. KEDA is served,
    so the search for another autoscaler lists ScaledObjects as well as HPAs.
    """
    clock = ManualClock()
    with KubeApiDouble(clock=clock) as api:
        api.serve_keda()
        for name in ("gpu-a", "gpu-b", "gpu-c", "gpu-d", "gpu-e"):
            api.add_node(name, gpus=4)
        # llm runs one replica above its maxReplicas (16): the scale-in to the bound marks
        # the pod to go with a deletion cost
        api.create_deployment("llm", "serving", replicas=17, gpus=1)
        api.create_statefulset("embedder", "serving", replicas=1, parallel=True)
        api.register_scalable_kind(*CUSTOM)
        chat = {"metadata": {"name": "chat"}, "spec": {"replicas": 1}, "status": {"replicas": 1}}
        api.create_object(f"{CUSTOM[0]}/{CUSTOM[1]}", CUSTOM[3], chat, "serving")
        llm = sorted(
            p["metadata"]["name"] for p in api.pods("serving") if "llm" in p["metadata"]["name"]
        )
        emb = [
            p["metadata"]["name"]
            for p in api.pods("serving")
            if "embedder" in p["metadata"]["name"]
        ]
        store = MetricStore()
        now = clock() - 1
        feed(store, now, "DCGM_FI_DEV_GPU_UTIL", {p: 95.0 for p in llm}, container="serve")
        feed(store, now, "DCGM_FI_DEV_GPU_UTIL", {p: 150.0 for p in emb}, container="embedder")
        feed(
            store,
            now,
            "gpuscale_gpu_up",
            # two broken GPUs: the scale-in takes one pod, remediation deletes the other
            {p: 0.0 if p in llm[:2] else 1.0 for p in llm},
            Hostname="gpu-a",
        )
        path = tmp_path / "gpuscaler.yaml"
        path.write_text(yaml.safe_dump(config))
        actuator = KubeActuator.connect(
            str(api.write_kubeconfig(tmp_path / "kubeconfig")),
            retry=FAST,
            sleep=lambda _s: None,
            clock=clock,
            state=StateConfigMap(NAMESPACE),
        )
        elector = LeaseElector(
            actuator.api_client, NAMESPACE, "gpuscale-autoscaler", "replica-0", clock=clock
        )
        catalog = None
        if cluster:
            api.install_crd(manifest())
            api.create_object("gpuscale.io/v1alpha1", "gpuscalers", config, "serving")
            informer = Informer(actuator.call, collection_path(None), watch_s=1)
            informer.relist()
            informer.watch()
            catalog = ClusterScalers(informer, actuator)
        controller = Controller(
            [] if cluster else runtimes(load(path)),
            store,
            actuator,
            settings=Settings(sync_period_s=15.0, workers=1),
            elector=elector,
            clock=clock,
            catalog=catalog,
            owners=OtherAutoscalers(actuator.call),
        )
        turns = iter(range(2))

        def wait(seconds: float) -> bool:
            clock.advance(max(seconds, 15.0))
            return next(turns, None) is None

        try:
            controller.run(threading.Event(), wait)
        finally:
            actuator.close()
    found = [request_info(*r) for r in recorded]
    return [r for r in found if r is not None]


def example() -> dict:
    return yaml.safe_load((DEPLOY / "examples" / "gpuscaler.yaml").read_text())


def with_node_rights(doc: dict) -> dict:
    """The example with cordon on, and llm (whose pods hold GPUs) filling whole nodes."""
    doc = copy.deepcopy(doc)
    llm = doc["spec"]["targets"][0]
    llm["cordon"] = True
    llm["policy"] = {"name": "predictive", "nodeSize": 2}
    return doc


CUSTOM = ("serving.example.io", "v1", "InferenceService", "inferenceservices")


def with_custom_kind(doc: dict) -> dict:
    """The example plus a target of a custom kind with /scale (found by discovery)."""
    doc = copy.deepcopy(doc)
    ref = {"apiVersion": f"{CUSTOM[0]}/{CUSTOM[1]}", "kind": CUSTOM[2], "name": "chat"}
    doc["spec"]["targets"].append(
        {"scaleTargetRef": ref, "maxReplicas": 4, "policy": {"name": "static", "replicas": 2}}
    )
    return doc


# --- RBAC as the API server's authoriser evaluates it ------------------------------------


@dataclass(frozen=True)
class Rule:
    """One PolicyRule of a Role or ClusterRole, with where it applies."""

    source: str  # Kind/namespace/name of the role
    namespace: str  # "" for a ClusterRole bound cluster-wide
    groups: frozenset[str]
    resources: frozenset[str]
    verbs: frozenset[str]
    names: frozenset[str]

    def allows(self, r: Request) -> bool:
        return (
            (not self.namespace or self.namespace == r.namespace)
            and r.group in self.groups
            and r.resource in self.resources
            and r.verb in self.verbs
            and (not self.names or r.name in self.names)
        )


def bound_rules(objects: list[dict]) -> list[Rule]:
    """Rules of every role bound to the controller's ServiceAccount, where each applies."""
    roles = {
        (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"]): o for o in objects
    }
    rules = []
    for binding in find(objects, "RoleBinding") + find(objects, "ClusterRoleBinding"):
        subjects = {
            (s.get("namespace", ""), s["name"])
            for s in binding["subjects"]
            if s["kind"] == "ServiceAccount"
        }
        if ACCOUNT not in subjects:
            continue
        where = binding["metadata"].get("namespace", "")
        ref = binding["roleRef"]
        role = roles[(ref["kind"], where if ref["kind"] == "Role" else "", ref["name"])]
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"], role
            rules.append(
                Rule(
                    f"{ref['kind']}/{where}/{ref['name']}",
                    where,
                    frozenset(rule["apiGroups"]),
                    frozenset(rule["resources"]),
                    frozenset(rule["verbs"]),
                    frozenset(rule.get("resourceNames", [])),
                )
            )
    return rules


def denied(requests: list[Request], rules: list[Rule]) -> set[tuple]:
    return {
        (r.verb, r.group, r.resource, r.namespace, r.name)
        for r in requests
        if not any(rule.allows(r) for rule in rules)
    }


def unused(requests: list[Request], rules: list[Rule]) -> set[tuple]:
    """Each (rule, verb, resource, name) that no request needed."""
    out = set()
    for rule in rules:
        for verb in rule.verbs:
            for resource in rule.resources:
                for name in rule.names or {""}:
                    need = [
                        r
                        for r in requests
                        if rule.allows(r)
                        and r.verb == verb
                        and r.resource == resource
                        and (not name or r.name == name)
                    ]
                    if not need:
                        out.add((rule.source, verb, resource, name))
    return out


def rbac(*directories: str | Path) -> list[Rule]:
    return bound_rules([o for d in directories for o in render(DEPLOY / d)])


def without_gpuscaler_rights(rules: list[Rule]) -> list[Rule]:
    return [r for r in rules if not r.resources & {"gpuscalers", "gpuscalers/status"}]


def test_a_request_outside_the_rules_is_denied_and_a_rule_nobody_needs_is_reported():
    # The two checks below can fail.
    rules = rbac("rbac/targets")
    wrong = Request("update", "apps", "deployments/scale", "serving", "other", ("m", "f"))
    assert denied([wrong], rules) == {("update", "apps", "deployments/scale", "serving", "other")}
    assert ("Role/serving/gpuscale-autoscaler-targets", "delete", "pods", "") in unused([], rules)


@pytest.mark.parametrize("overlay", ["prometheus-operator", "plain-prometheus", "gpu-operator"])
def test_the_example_needs_exactly_the_overlays_rules(overlay, tmp_path, recorded):
    # As deployed: the controller reconciles the example as a GPUScaler object.
    requests = run_controller(tmp_path, example(), recorded, cluster=True)
    rules = rbac(f"overlays/{overlay}")
    assert denied(requests, rules) == set()
    assert unused(requests, rules) == set()
    # the Lease and the state only in the controller's namespace, the targets only in theirs
    own = {"leases", "configmaps"}
    assert {r.namespace for r in requests if r.resource in own} == {NAMESPACE}
    assert {r.namespace for r in requests if r.resource not in own} <= {"serving", ""}
    # the workloads are only read: the state needs no write on them
    workloads = {"deployments", "statefulsets"}
    assert {r.verb for r in requests if r.resource in workloads} == {"get"}


def test_cordon_and_node_filling_need_exactly_the_node_rights(tmp_path, recorded):
    requests = run_controller(tmp_path, with_node_rights(example()), recorded)
    base = rbac("overlays/prometheus-operator")
    nodes = rbac("rbac/nodes")
    assert {(r.verb, r.resource) for r in requests if r.resource == "nodes"} == {
        ("get", "nodes"),
        ("patch", "nodes"),
    }
    assert denied(requests, base) == {
        (r.verb, "", "nodes", "", r.name) for r in requests if r.resource == "nodes"
    }
    assert denied(requests, base + nodes) == set()
    assert unused(requests, nodes) == set()


def test_gpuscalers_from_the_cluster_need_exactly_the_gpuscalers_rights(tmp_path, recorded):
    requests = run_controller(tmp_path, example(), recorded, cluster=True)
    rest = without_gpuscaler_rights(rbac("overlays/prometheus-operator"))
    scalers = rbac("rbac/gpuscalers")
    assert {(r.verb, r.resource) for r in denied_requests(requests, rest)} == {
        ("list", "gpuscalers"),
        ("watch", "gpuscalers"),
        ("patch", "gpuscalers/status"),
    }
    assert denied(requests, rest + scalers) == set()
    assert unused(requests, scalers) == set()


def test_the_documented_file_mode_needs_exactly_its_rules(tmp_path, recorded):
    # docs/deploy.md's overlay for --config drops the GPUScaler rights; the controller
    # reading the same GPUScaler from the file needs all the rest, and nothing more.
    rules = rbac(documented_overlay(tmp_path / "docs"))
    assert without_gpuscaler_rights(rules) == rules
    (tmp_path / "run").mkdir()
    requests = run_controller(tmp_path / "run", example(), recorded)
    assert denied(requests, rules) == set()
    assert unused(requests, rules) == set()


def denied_requests(requests: list[Request], rules: list[Rule]) -> list[Request]:
    return [r for r in requests if not any(rule.allows(r) for rule in rules)]


def test_every_request_site_in_the_controller_was_exercised(tmp_path, recorded):
    runs = {"a": example(), "b": with_node_rights(example()), "c": with_custom_kind(example())}
    for name, config in runs.items():
        (tmp_path / name).mkdir()
        run_controller(tmp_path / name, config, recorded)
    (tmp_path / "d").mkdir()
    run_controller(tmp_path / "d", example(), recorded, cluster=True)
    sent = {(module, function, method) for method, _p, _q, (module, function) in recorded}
    sites = call_sites()
    assert len(sites) >= 10  # the parse found the actuator's and the elector's calls
    assert sites - sent == set(), "extend run_controller so these requests are sent"


def test_another_scalable_kind_needs_its_own_rule(tmp_path, recorded):
    requests = run_controller(tmp_path, with_custom_kind(example()), recorded)
    custom = {(r.verb, r.resource) for r in requests if r.group == CUSTOM[0]}
    assert custom == {
        ("get", "inferenceservices/scale"),
        ("update", "inferenceservices/scale"),
        ("get", "inferenceservices"),
    }
    rules = rbac("overlays/prometheus-operator")
    assert {d[:3] for d in denied(requests, rules)} == {(v, CUSTOM[0], r) for v, r in custom}


def test_workload_patch_is_neither_granted_nor_needed(tmp_path, recorded):
    # The policy state lives in the controller's ConfigMap: a Role that still granted
    # patch on the targets would be reported unused, and a controller that still wrote
    # the state onto a target would be denied.
    requests = run_controller(tmp_path, example(), recorded)
    rules = rbac("overlays/prometheus-operator")
    assert not any(
        r.resources & {"deployments", "statefulsets"} and r.verbs - {"get"} for r in rules
    )
    granted = Rule(
        "Role/serving/old",
        "serving",
        frozenset({"apps"}),
        frozenset({"deployments"}),
        frozenset({"get", "patch"}),
        frozenset({"llm"}),
    )
    assert ("Role/serving/old", "patch", "deployments", "llm") in unused(requests, [granted])
    old_write = Request("patch", "apps", "deployments", "serving", "llm", ("kubernetes", "x"))
    assert denied([old_write], rules) == {("patch", "apps", "deployments", "serving", "llm")}
    state = [r for r in requests if r.resource == "configmaps"]
    assert {(r.verb, r.name) for r in state} == {
        ("get", "gpuscale-autoscaler-state"),
        ("patch", "gpuscale-autoscaler-state"),
        ("create", ""),
    }
