"""The committed stubs are what grpcio-tools makes of the committed proto, and the proto is
KEDA's external scaler API: its package, service, methods and every field's number."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

from gpuscale.keda import externalscaler_pb2 as pb

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = ROOT / "src" / "gpuscale" / "keda"
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def test_committed_stubs_are_current(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([ROOT / "scripts" / "gen-keda-stubs", tmp_path], check=True, env=env)
    match, mismatch, errors = filecmp.cmpfiles(PACKAGE, tmp_path, GENERATED, shallow=False)
    assert (mismatch, errors) == ([], []), "run scripts/gen-keda-stubs and commit the result"
    assert sorted(match) == sorted(GENERATED)


def test_the_api_is_kedas():
    service = pb.DESCRIPTOR.services_by_name["ExternalScaler"]
    assert pb.DESCRIPTOR.package == "externalscaler"
    methods = {
        m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods
    }
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True),
    }
    fields = {
        name: {f.name: f.number for f in pb.DESCRIPTOR.message_types_by_name[name].fields}
        for name in pb.DESCRIPTOR.message_types_by_name
    }
    assert fields == {
        "ScaledObjectRef": {"name": 1, "namespace": 2, "scalerMetadata": 3},
        "IsActiveResponse": {"result": 1},
        "GetMetricSpecResponse": {"metricSpecs": 1},
        "MetricSpec": {"metricName": 1, "targetSize": 2, "targetSizeFloat": 3},
        "GetMetricsRequest": {"scaledObjectRef": 1, "metricName": 2},
        "GetMetricsResponse": {"metricValues": 1},
        "MetricValue": {"metricName": 1, "metricValue": 2, "metricValueFloat": 3},
    }
