"""Every overlay renders, every object is valid for three Kubernetes minor versions, and
the objects fit together (names, ports, labels) as the API server and kubelet would need.

Built-in kinds are checked with kubernetes-validate's offline schemas in strict mode
(unknown fields refused). Kinds defined by a CRD are checked against that CRD's schema
where it is here (GPUScaler), else by the fields the Prometheus Operator's CRDs require
(their schemas are not available offline).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kubernetes_validate import utils as kv_utils

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import load_config
from gpuscale.alerts.render import render as render_rules
from tests.support.manifests import (
    DEPLOY,
    OVERLAYS,
    documented_overlay,
    find,
    named,
    one,
    render,
)

VERSIONS = sorted(set(kv_utils.all_versions()), key=lambda v: tuple(map(int, v.split("."))))[-3:]
"""The three newest Kubernetes minor versions kubernetes-validate ships schemas for."""

OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


def test_three_versions_are_checked():
    assert len({kv_utils.major_minor(v) for v in VERSIONS}) == 3


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_builtin_object_validates_strictly(rendered, overlay):
    errors = []
    for obj in rendered[overlay]:
        if obj["kind"] in OPERATOR_KINDS:
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kv_utils.ValidationError as exc:
                errors.append(f"{obj['kind']}/{obj['metadata']['name']} {version}: {exc.message}")
    assert errors == []


def test_strict_validation_refuses_an_unknown_field():
    # The check above can fail: a misspelt field is refused, not ignored.
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": 80}], "clusterIp": "None"},
    }
    with pytest.raises(kv_utils.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def crd_schema() -> dict:
    doc = yaml.safe_load((DEPLOY / "crd" / "gpuscalers.gpuscale.io.yaml").read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_example_is_a_valid_gpuscaler_object_in_its_targets_namespace():
    (doc,) = render(DEPLOY / "examples")
    assert (doc["apiVersion"], doc["kind"]) == ("gpuscale.io/v1alpha1", "GPUScaler")
    # Its targets' namespace, where deploy/rbac/targets grants the controller's rights.
    assert doc["metadata"]["namespace"] == "serving"
    # OpenAPI v3.0 bounds are draft 4's (boolean exclusiveMinimum).
    assert list(jsonschema.Draft4Validator(crd_schema()).iter_errors(doc)) == []
    broken = {**doc, "spec": {"targets": [{**doc["spec"]["targets"][0], "maxReplicas": 0}]}}
    assert list(jsonschema.Draft4Validator(crd_schema()).iter_errors(broken))


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_installs_a_controller_that_reconciles_gpuscalers(rendered, overlay):
    objects = rendered[overlay]
    (container,) = one(objects, "Deployment", "gpuscale-autoscaler")["spec"]["template"]["spec"][
        "containers"
    ]
    assert "--watch-gpuscalers" in container["args"]
    assert not any(a.startswith(("--config", "--watch-namespace")) for a in container["args"])
    assert one(objects, "CustomResourceDefinition", "gpuscalers.gpuscale.io")
    # The rights to read GPUScalers, bound to the controller's ServiceAccount everywhere.
    binding = one(objects, "ClusterRoleBinding", "gpuscale-autoscaler-gpuscalers")
    assert binding["roleRef"]["name"] == "gpuscale-autoscaler-gpuscalers"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpuscale-autoscaler", "namespace": "gpuscale"}
    ]
    role = one(objects, "ClusterRole", "gpuscale-autoscaler-gpuscalers")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "gpuscalers",
        "gpuscalers/status",
    }
    # No GPUScaler in an overlay: its kind is unknown until the CRD is established.
    assert find(objects, "GPUScaler") == []
    configs = [o["metadata"]["name"] for o in find(objects, "ConfigMap")]
    assert not [n for n in configs if n.startswith("gpuscale-autoscaler-config")]


@pytest.fixture(scope="module")
def from_file(tmp_path_factory) -> list[dict]:
    overlay = documented_overlay(tmp_path_factory.mktemp("docs"))
    # What the guide tells users to write keeps to what kubectl 1.20 reads, too.
    fields = set(yaml.safe_load((overlay / "kustomization.yaml").read_text()))
    assert fields <= KUSTOMIZE_V2_FIELDS
    return render(overlay)


def test_the_documented_file_mode_runs_the_same_controller_from_a_configmap(rendered, from_file):
    default = one(rendered["prometheus-operator"], "Deployment", "gpuscale-autoscaler")
    deployment = one(from_file, "Deployment", "gpuscale-autoscaler")
    (before,) = default["spec"]["template"]["spec"]["containers"]
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    config = named(from_file, "ConfigMap", "gpuscale-autoscaler-config")
    assert yaml.safe_load(config["data"]["gpuscaler.yaml"]) == yaml.safe_load(
        (DEPLOY / "examples" / "gpuscaler.yaml").read_text()
    )
    volume = next(v for v in spec["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    assert mount["readOnly"] is True
    # Only the one arg differs: the rest stays the base's.
    swapped = [
        f"--config={mount['mountPath']}/gpuscaler.yaml" if a == "--watch-gpuscalers" else a
        for a in before["args"]
    ]
    assert container["args"] == swapped
    # Least privilege: nothing on GPUScaler objects, which this mode never reads.
    assert find(from_file, "ClusterRole") == find(from_file, "ClusterRoleBinding") == []
    errors = []
    for obj in from_file:
        if obj["kind"] in OPERATOR_KINDS:
            continue
        try:
            kubernetes_validate.validate(obj, VERSIONS[-1], strict=True)
        except kv_utils.ValidationError as exc:
            errors.append(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    assert errors == []


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def container_ports(pod_spec: dict) -> set[str]:
    return {p["name"] for c in pod_spec["containers"] for p in c.get("ports", [])}


@pytest.mark.parametrize("overlay", ["prometheus-operator", "gpu-operator"])
def test_operator_objects_have_what_their_crds_require(rendered, overlay):
    objects = rendered[overlay]
    for monitor in find(objects, "ServiceMonitor"):
        spec = monitor["spec"]
        services = [
            s
            for s in find(objects, "Service")
            if selects(spec["selector"]["matchLabels"], s["metadata"].get("labels", {}))
        ]
        assert services, monitor["metadata"]["name"]
        names = {p["name"] for s in services for p in s["spec"]["ports"]}
        assert {e["port"] for e in spec["endpoints"]} <= names
    for monitor in find(objects, "PodMonitor"):
        spec = monitor["spec"]
        pods = [
            w["spec"]["template"]
            for w in find(objects, "Deployment") + find(objects, "DaemonSet")
            if selects(spec["selector"]["matchLabels"], w["spec"]["template"]["metadata"]["labels"])
        ]
        assert pods, monitor["metadata"]["name"]
        ports = set().union(*(container_ports(p["spec"]) for p in pods))
        assert {e["port"] for e in spec["podMetricsEndpoints"]} <= ports
    rule = one(objects, "PrometheusRule", "gpuscale")
    assert rule["metadata"]["namespace"] == "gpuscale"
    assert rule["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpuscale"
    for group in rule["spec"]["groups"]:
        assert group["name"]
        assert group["rules"]
        for r in group["rules"]:
            assert ("record" in r) != ("alert" in r), r
            assert r["expr"], r


def test_prometheus_operator_overlay_scrapes_exporter_and_controller(rendered):
    objects = rendered["prometheus-operator"]
    monitor = one(objects, "ServiceMonitor", "gpuscale-exporter")
    # The exporter's pod/namespace/container labels name the GPU's holder.
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    # The job is the Service's name (no jobLabel), which the rules' exporter job matches.
    assert "jobLabel" not in monitor["spec"]
    service = one(objects, "Service", "gpuscale-exporter")
    rules = yaml.safe_dump(one(objects, "PrometheusRule", "gpuscale"))
    jobs = set(re.findall(r'up\{job=~"([^"]+)"\}', rules))
    assert len(jobs) == 1
    assert re.fullmatch(jobs.pop(), service["metadata"]["name"])
    assert one(objects, "PodMonitor", "gpuscale-autoscaler")


def test_the_exporter_pod_is_least_privileged_and_reaches_what_it_reads(rendered):
    pod = one(rendered["prometheus-operator"], "DaemonSet", "gpuscale-exporter")["spec"]
    spec = pod["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec[
        "tolerations"
    ]
    assert spec["automountServiceAccountToken"] is False
    (container,) = spec["containers"]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["privileged"] is False
    (mount,) = container["volumeMounts"]
    assert mount == {
        "name": "pod-resources",
        "mountPath": "/var/lib/kubelet/pod-resources",
        "readOnly": True,
    }
    assert container["image"] == "gpuscale-exporter:0.1.0"
    assert container["resources"]["requests"] == {"cpu": "50m", "memory": "64Mi"}
    assert container["resources"]["limits"] == {"cpu": "500m", "memory": "128Mi"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "metrics"}


def test_the_controller_runs_two_non_root_replicas_with_leader_election(rendered):
    deployment = one(rendered["prometheus-operator"], "Deployment", "gpuscale-autoscaler")
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (container,) = spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "--leader-elect" in container["args"]
    assert container["image"] == "gpuscale-controller:0.1.0"
    assert [v["name"] for v in spec["volumes"]] == ["tmp"]
    assert spec["serviceAccountName"] == "gpuscale-autoscaler"


def test_gpu_operator_overlay_runs_no_exporter_and_its_rules_watch_the_operators_job(rendered):
    objects = rendered["gpu-operator"]
    assert find(objects, "DaemonSet") == []
    assert find(objects, "ServiceMonitor") == []
    text = yaml.safe_dump(one(objects, "PrometheusRule", "gpuscale"))
    assert 'job=~"nvidia-dcgm-exporter"' in text
    assert "gpuscale-exporter" not in text
    assert one(objects, "Deployment", "gpuscale-autoscaler")


@pytest.mark.parametrize(
    ("path", "fmt", "settings"),
    [
        ("overlays/plain-prometheus/gpuscale-rules.yml", "prometheus", None),
        (
            "overlays/gpu-operator/monitoring/gpuscale-prometheusrule.yaml",
            "prometheus-operator",
            "overlays/gpu-operator/alerts-settings.yml",
        ),
    ],
)
def test_rendered_rules_in_overlays_are_current(path, fmt, settings):
    config = load_config(DEPLOY / settings if settings else None)
    flag = f" --config deploy/{settings}" if settings else ""
    fix = f"regenerate: gpuscale rules render --format {fmt}{flag} -o deploy/{path}"
    assert (DEPLOY / path).read_text() == render_rules(build_catalogue(config), fmt), fix


def test_plain_prometheus_config_passes_promtool(rendered, tmp_path):
    data = named(rendered["plain-prometheus"], "ConfigMap", "gpuscale-prometheus")["data"]
    config = yaml.safe_load(data["prometheus.yml"])
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert set(jobs) == {"gpuscale-exporter", "gpuscale-autoscaler"}
    assert jobs["gpuscale-exporter"]["honor_labels"] is True
    rules = tmp_path / "gpuscale-rules.yml"
    rules.write_text(data["gpuscale-rules.yml"])
    assert config["rule_files"] == ["/etc/prometheus/gpuscale/gpuscale-rules.yml"]
    config["rule_files"] = [str(rules)]
    # Debian's Prometheus is built without Kubernetes service discovery, so promtool
    # here checks the rest (relabelling, rules) with a static target in its place.
    for job in config["scrape_configs"]:
        sd = job.pop("kubernetes_sd_configs")
        assert sd == [{"role": "pod", "namespaces": {"names": ["gpuscale"]}}]
        job["static_configs"] = [{"targets": ["127.0.0.1:9"]}]
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = subprocess.run(
        ["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load(data["gpuscale-rules.yml"])["groups"])
    assert count > 0
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_plain_prometheus_scrapes_the_annotated_port():
    # The __address__ rule, applied as Prometheus applies it (anchored RE2 regex on the
    # source labels joined by ";"): the pod IP with the annotation's port.
    config = yaml.safe_load((DEPLOY / "overlays/plain-prometheus/prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        (rule,) = [r for r in job["relabel_configs"] if r.get("target_label") == "__address__"]
        for address in ("10.0.0.5:8080", "10.0.0.5"):
            m = re.fullmatch(rule["regex"], f"{address};9400")
            assert m is not None
            assert m.expand(rule["replacement"].replace("$", "\\")) == "10.0.0.5:9400"


def test_plain_prometheus_pods_carry_the_scrape_annotations(rendered):
    objects = rendered["plain-prometheus"]
    for kind, name, port in (
        ("DaemonSet", "gpuscale-exporter", "9400"),
        ("Deployment", "gpuscale-autoscaler", "8080"),
    ):
        notes = one(objects, kind, name)["spec"]["template"]["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true"
        assert notes["prometheus.io/port"] == port
        ports = one(objects, kind, name)["spec"]["template"]["spec"]["containers"][0]["ports"]
        assert [p["containerPort"] for p in ports] == [int(port)]


# Fields of a kustomization that kustomize v2.0.3 (kubectl 1.14 to 1.20, Debian
# bookworm's kubernetes-client) reads; newer ones (components, labels, patches,
# directories under resources) would fail there.
KUSTOMIZE_V2_FIELDS = {
    "namespace",
    "namePrefix",
    "nameSuffix",
    "commonLabels",
    "commonAnnotations",
    "resources",
    "bases",
    "images",
    "configMapGenerator",
    "secretGenerator",
    "generatorOptions",
    "patchesStrategicMerge",
    "patchesJson6902",
    "vars",
    "crds",
}


def test_kustomizations_use_only_what_kubectl_1_20_reads():
    files = sorted(DEPLOY.rglob("kustomization.yaml"))
    assert len(files) >= 10
    for path in files:
        doc = yaml.safe_load(path.read_text())
        assert set(doc) <= KUSTOMIZE_V2_FIELDS, path
        for entry in doc.get("resources", []):
            assert (path.parent / entry).is_file(), f"{path}: {entry} (directories go in bases)"


def run_cli(args: list[str], env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpuscale", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **env},
        cwd=tmp_path,
    )


def expand(args: list[str], env: dict[str, str]) -> list[str]:
    """``$(VAR)`` in args, as the kubelet expands them from the container's env."""
    return [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], a) for a in args]


def container_env(container: dict) -> dict[str, str]:
    values = {"spec.nodeName": "gpu-node-1", "metadata.name": "p-0", "metadata.namespace": "ns"}
    return {
        e["name"]: e["value"] if "value" in e else values[e["valueFrom"]["fieldRef"]["fieldPath"]]
        for e in container.get("env", [])
    }


def test_the_exporter_accepts_its_args_and_env(rendered, tmp_path):
    pod = one(rendered["prometheus-operator"], "DaemonSet", "gpuscale-exporter")["spec"]
    container = pod["template"]["spec"]["containers"][0]
    assert container["args"] == ["exporter", "--source", "nvml", "--kubernetes"]
    env = container_env(container)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    pythonpath = {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    result = run_cli(container["args"], {**env, **pythonpath}, tmp_path)
    # Options and env parse (a usage error is exit 2); with no GPU here NVML is missing.
    assert result.returncode == 1, result.stderr
    assert "NVML" in result.stderr
