"""`gpuscale keda-scaler`: bad inputs end with one line and exit status 2; started for real, it
answers KEDA over mutual TLS from the cluster (the API double) and Prometheus."""

import os

import pytest

from gpuscale.keda import externalscaler_pb2 as pb
from gpuscale.keda.scaler import METRIC_NAME
from tests.support import cli as support_cli
from tests.support.keda import keda_client, make_tls_files, scaled_object
from tests.support.servers import Process, free_port, gpuscale_cmd, wait_http

clean_process = pytest.fixture(autouse=True)(support_cli.clean_process)


def run(capsys, *args: str) -> tuple[int, str]:
    code, err = support_cli.run(capsys, "keda-scaler", *args)
    return code, support_cli.one_line(err)


def test_tls_is_required_unless_insecure_is_asked_for(capsys):
    code, line = run(capsys)
    assert code == 2
    assert line.startswith(
        "gpuscale: error: --tls-cert-file/--tls-key-file: both are required unless --insecure"
    )


def test_insecure_with_tls_files_is_refused(capsys, tmp_path):
    tls = make_tls_files(tmp_path)
    code, line = run(capsys, "--insecure", "--tls-cert-file", str(tls.server_cert))
    assert (code, line) == (
        2,
        "gpuscale: error: --insecure: is given with TLS files; drop --insecure, or drop the "
        "TLS files",
    )


def test_a_key_that_is_not_the_certificates_is_refused(capsys, tmp_path):
    tls = make_tls_files(tmp_path)
    code, line = run(
        capsys, "--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.client_key)
    )
    assert code == 2
    assert "not a certificate and its private key" in line
    assert "BEGIN" not in line  # never the file's content


def test_a_missing_client_ca_file_is_named(capsys, tmp_path):
    tls = make_tls_files(tmp_path)
    code, line = run(
        capsys,
        *("--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key)),
        *("--tls-client-ca-file", str(tmp_path / "absent.crt")),
    )
    assert code == 2
    assert "--tls-client-ca-file" in line


def test_no_cluster_is_one_line_that_offers_no_dry_run(capsys, tmp_path, monkeypatch):
    # the scaler has no dry run: the hint must not send the user to one
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    tls = make_tls_files(tmp_path)
    code, line = run(
        capsys, "--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key)
    )
    assert code == 2
    assert "no such file, and not in a pod" in line
    assert "--dry-run" not in line
    assert "pass --kubeconfig PATH" in line


def test_started_it_serves_kedas_calls_over_mutual_tls(tmp_path, kapi):
    kapi.create_deployment("web", "default", replicas=3)
    tls = make_tls_files(tmp_path)
    port, metrics_port = free_port(), free_port()
    args = [
        *gpuscale_cmd(),
        "keda-scaler",
        *("--address", f"127.0.0.1:{port}", "--metrics-address", f"127.0.0.1:{metrics_port}"),
        *("--tls-cert-file", str(tls.server_cert), "--tls-key-file", str(tls.server_key)),
        *("--tls-client-ca-file", str(tls.client_cert)),
        *("--kubeconfig", str(kapi.write_kubeconfig(tmp_path / "kubeconfig"))),
        # No Prometheus answers here: the fail-safe holds the current count.
        *("--prometheus", f"http://127.0.0.1:{free_port()}", "--prometheus-timeout", "1"),
    ]
    proc = Process(args, tmp_path / "keda-scaler.log", {**os.environ, "PYTHONUNBUFFERED": "1"})
    ref = scaled_object(
        "web",
        "default",
        policy="hpa",
        scaleTargetName="web",
        maxReplicas="5",
        targetAverageValue="50",
    )
    try:
        with keda_client(
            port, ca=tls.server_cert, cert=tls.client_cert, key=tls.client_key
        ) as keda:
            [spec] = keda.GetMetricSpec(ref, timeout=30, wait_for_ready=True).metricSpecs
            assert spec.metricName == METRIC_NAME
            [value] = keda.GetMetrics(
                pb.GetMetricsRequest(scaledObjectRef=ref, metricName=METRIC_NAME), timeout=30
            ).metricValues
            assert (value.metricValue, value.metricValueFloat) == (3, 3.0)
            assert keda.IsActive(ref, timeout=30).result is True
        exposition = wait_http(f"http://127.0.0.1:{metrics_port}/metrics", 10).text
        assert 'gpuscale_autoscaler_desired_replicas{target="default/Deployment/web"} 3.0' in (
            exposition
        )
        assert wait_http(f"http://127.0.0.1:{metrics_port}/healthz", 10).status_code == 200
    finally:
        proc.stop()
    log = proc.output()
    assert "serving KEDA's external scaler API on 127.0.0.1:" in log
    assert "(mutual TLS)" in log
    assert "hold" in log
