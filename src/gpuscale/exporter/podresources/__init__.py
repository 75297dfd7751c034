r"""Python stubs for the kubelet pod-resources v1 gRPC API.

The kubelet tells which pod and container hold each device only over this
API, and no maintained PyPI package ships its stubs, so the proto lives here
(``api.proto``, field numbers as in ``k8s.io/kubelet/pkg/apis/podresources/v1``)
with the generated modules committed next to it.

Regenerate after editing ``api.proto``, from the repository root::

    python -m grpc_tools.protoc -I src/gpuscale/exporter/podresources \
        --python_out=src/gpuscale/exporter/podresources \
        --pyi_out=src/gpuscale/exporter/podresources \
        --grpc_python_out=src/gpuscale/exporter/podresources \
        src/gpuscale/exporter/podresources/api.proto
    sed -i 's/^import api_pb2 as api__pb2$/from . import api_pb2 as api__pb2/' \
        src/gpuscale/exporter/podresources/api_pb2_grpc.py
    sed -i '1i # ruff: noqa\n# fmt: off' src/gpuscale/exporter/podresources/api_pb2.pyi

The first ``sed`` makes the generated gRPC module import its messages relative
to this package; the second keeps ruff off the generated stub file, which the
pyproject exclude (``*_pb2*.py``) does not cover.

The generated code checks versions at import: it needs grpcio and protobuf at
least as new as the grpcio-tools that generated it (1.85.1, protobuf 7.35.1).
"""
