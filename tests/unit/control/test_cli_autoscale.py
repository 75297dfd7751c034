"""`gpuscale autoscale`'s front door: bad inputs end with one line and exit status 2."""

import pytest

from tests.support import cli as support_cli

GOOD = """\
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: a, namespace: default}
spec:
  targets:
    - scaleTargetRef: {name: web}
      maxReplicas: 3
      policy: {name: static, replicas: 2}
"""


clean_process = pytest.fixture(autouse=True)(support_cli.clean_process)
one_line = support_cli.one_line


def run(capsys, *args: str) -> tuple[int, str]:
    return support_cli.run(capsys, "autoscale", *args)


def test_invalid_config_names_file_line_and_key(capsys, tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD.replace("replicas: 2", "replicas: 2, replicaz: 3"))
    code, err = run(capsys, "--config", str(path))
    assert code == 2
    assert f"{path}:8 spec.targets[0].policy.replicaz: unknown key" in one_line(err)


def test_missing_config_file(capsys, tmp_path):
    code, err = run(capsys, "--config", str(tmp_path / "absent.yaml"))
    assert code == 2
    assert "absent.yaml: cannot be read" in one_line(err)


def test_missing_kubeconfig_is_a_usage_error(capsys, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--kubeconfig", str(tmp_path / "kc"))
    assert code == 2
    assert "--kubeconfig" in one_line(err)


def test_renew_deadline_must_be_shorter_than_the_lease(capsys, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--lease-duration", "5", "--renew-deadline", "5")
    assert code == 2
    assert "--renew-deadline 5: must be shorter than --lease-duration 5" in one_line(err)


@pytest.mark.parametrize("name", ["Has_Upper", "a/../b", "x" * 254])
def test_state_configmap_must_be_a_configmap_name(capsys, tmp_path, name):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--state-configmap", name)
    assert code == 2
    line = one_line(err)
    assert f"--state-configmap {name}: is not a valid ConfigMap name" in line
    assert "253 characters" in line


def test_bad_prometheus_url(capsys, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--prometheus", "prometheus:9090")
    assert code == 2
    assert "not an http(s) URL" in one_line(err)


def test_basic_auth_file_must_hold_user_and_password(capsys, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    secret = tmp_path / "basic"
    secret.write_text("just-a-password\n")
    code, err = run(capsys, "--config", str(path), "--prometheus-basic-auth-file", str(secret))
    assert code == 2
    assert "does not hold USER:PASSWORD" in one_line(err)
    token = tmp_path / "token"
    token.write_text("t0ken")
    secret.write_text("user:pw")
    code, err = run(
        capsys,
        "--config",
        str(path),
        "--prometheus-basic-auth-file",
        str(secret),
        "--prometheus-bearer-token-file",
        str(token),
    )
    assert code == 2
    assert "both are given" in one_line(err)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("foo", "not an http(s) URL with a host"),
        ("http//prometheus:9090", "not an http(s) URL with a host"),
        ("http://prometheus:99999", "not a valid URL (Port out of range 0-65535)"),
        ("http://prometheus:90a0", "not a valid URL (Port could not be cast to integer"),
        ("http://prometheus:0", "port 0 is no server's port"),
    ],
)
def test_a_malformed_prometheus_url_is_one_line_naming_the_flag(capsys, tmp_path, url, problem):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--once", "--prometheus", url)
    assert code == 2
    line = one_line(err)
    assert line.startswith(f"gpuscale: error: --prometheus {url}: {problem}")
    assert "WARNING" not in err  # refused before anything is asked of it


def test_a_malformed_url_never_shows_its_password(capsys, tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--prometheus", "http://u:pw0rd@prom:99999")
    assert code == 2
    assert "--prometheus http://***@prom:99999: not a valid URL" in one_line(err)
    assert "pw0rd" not in err


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """No kubeconfig anywhere the client looks, and not in a pod."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return tmp_path / ".kube" / "config"


def test_no_kubeconfig_outside_a_pod_names_the_path_and_the_ways_out(capsys, tmp_path, no_cluster):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--once", "--prometheus", "http://127.0.0.1:1")
    assert code == 2
    line = one_line(err)
    assert f"kubeconfig {no_cluster}: no such file, and not in a pod" in line
    assert "pass --kubeconfig PATH" in line
    assert "add --dry-run" in line
    assert "Invalid kube-config" not in err


def test_a_dry_run_without_a_cluster_decides_from_assumed_replicas(capsys, tmp_path, no_cluster):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD.replace("name: static, replicas: 2", "name: static, replicas: 3"))
    base = ["--config", str(path), "--once", "--dry-run", "--prometheus", "http://127.0.0.1:1"]
    # No --assume-replicas: the target's minReplicas (1 by default).
    assert _stdout(capsys, *base) == ["default/Deployment/web: 1 -> 3 (static 3 replicas)"]
    assert _stdout(capsys, *base, "--assume-replicas", "web=2") == [
        "default/Deployment/web: 2 -> 3 (static 3 replicas)"
    ]
    assert _stdout(capsys, *base, "--assume-replicas", "default/web=3") == [
        "default/Deployment/web: 3 -> 3 (static 3 replicas)"
    ]


def _stdout(capsys, *args: str) -> list[str]:
    code = 0
    try:
        support_cli.main(["autoscale", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out.splitlines()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--assume-replicas", "web=2"], "--assume-replicas: only a dry run can assume replicas"),
        (["--dry-run", "--assume-replicas", "web"], "--assume-replicas 'web': is not"),
        (["--dry-run", "--assume-replicas", "api=2"], "'api=2': names no target of the config"),
        (
            ["--dry-run", "--assume-replicas", "web=2", "--kubeconfig", "kc"],
            "--assume-replicas/--kubeconfig: both are given",
        ),
    ],
)
def test_assumed_replicas_are_checked(capsys, tmp_path, no_cluster, extra, words):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    code, err = run(capsys, "--config", str(path), "--once", *extra)
    assert code == 2
    assert words in one_line(err)
