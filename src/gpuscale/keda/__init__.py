r"""gpuscale as a KEDA external scaler: any gpuscale policy behind a ScaledObject.

Teams that run KEDA keep their ScaledObjects and their HPA; a trigger of type
``external`` or ``external-push`` pointing at ``gpuscale keda-scaler`` takes its
replica count from a gpuscale policy. ``metadata`` turns a trigger's metadata into
a target, ``scaler`` runs the controller's reconcile on it and turns the decision
into the metric KEDA's HPA scales on, ``service`` serves KEDA's gRPC API over TLS.

``externalscaler.proto`` is KEDA's API (the file says where it comes from and its
licence); the generated modules are committed next to it. Regenerate them after
editing the proto, from the repository root, with ``scripts/gen-keda-stubs``
(a unit test checks that they are current). The generated code checks versions at
import: it needs grpcio and protobuf at least as new as the grpcio-tools that
generated it (1.85.1, protobuf 7.35.1).
"""
