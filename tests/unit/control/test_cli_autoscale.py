"""`gpuscale autoscale`'s front door: bad inputs end with one line and exit status 2."""

import logging
import os

import pytest

from gpuscale.cli.app import main

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


@pytest.fixture(autouse=True)
def clean_process(monkeypatch):
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in list(os.environ):
        if name.startswith("GPUSCALE_"):
            monkeypatch.delenv(name)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run(capsys, *args: str) -> tuple[int, str]:
    code = 0
    try:
        main(["autoscale", *args])
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("gpuscale: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


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
    ("args", "expected"),
    [
        ((), "--config/--watch-gpuscalers: neither is given"),
        (
            ("--config", "CONFIG", "--watch-gpuscalers"),
            "--config/--watch-gpuscalers: both are given",
        ),
        (
            ("--config", "CONFIG", "--watch-namespace", "a"),
            "--watch-namespace a: needs --watch-gpuscalers",
        ),
        (
            ("--watch-gpuscalers", "--watch-namespace", "../x"),
            "--watch-namespace: is not a namespace name",
        ),
    ],
)
def test_where_the_targets_come_from_is_checked_first(capsys, tmp_path, args, expected):
    path = tmp_path / "ok.yaml"
    path.write_text(GOOD)
    given = [str(path) if a == "CONFIG" else a for a in args]
    code, err = run(capsys, *given)
    assert code == 2
    assert expected in one_line(err)


def test_watching_gpuscalers_where_the_crd_is_not_installed_is_a_usage_error(capsys, tmp_path):
    from tests.support.kubeapi import KubeApiDouble

    with KubeApiDouble() as api:
        config = api.write_kubeconfig(tmp_path / "kubeconfig")
        code, err = run(
            capsys, "--watch-gpuscalers", "--kubeconfig", str(config), "--once", "--dry-run"
        )
    assert code == 2
    assert "--watch-gpuscalers: the API server serves no gpuscalers.gpuscale.io" in one_line(err)
