"""A cluster assumed, not read: ``gpuscale autoscale --dry-run`` where there is no cluster.

A user trying a GPUScaler against a Prometheus (a laptop beside ``gpuscale up``,
a CI job checking a config) has no kubeconfig and no service account, and a dry
run writes nothing anyway. ``AssumedCluster`` stands behind the same ``Actuator``
protocol as ``KubeActuator``: each target has the replica count the user gave
(``--assume-replicas [NAMESPACE/]NAME=N``) or its ``minReplicas``, and no pods. The
decision step runs unchanged on it, so the decisions printed are those the
controller would make from that count. Nothing is written: the loop skips writes in
a dry run, and the writing methods here refuse, so a slip would be loud.
"""

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpuscale.control.kubecall import WriteGuard
from gpuscale.control.kubernetes import TargetRef
from gpuscale.control.targets import TargetRuntime
from gpuscale.errors import config_error
from gpuscale.scaling.policy import TargetStatus

ASSUME_FLAG = "--assume-replicas"
_ASSUMPTION = re.compile(r"^(?:(?P<namespace>[^/=\s]+)/)?(?P<name>[^/=\s]+)=(?P<replicas>\d+)$")


def assumed_replicas(
    targets: Sequence[TargetRuntime], given: Sequence[str]
) -> dict[TargetRef, int]:
    """Each target's assumed ``spec.replicas``: as given by name, else its ``minReplicas``.

    Args:
        targets: The targets from the config.
        given: ``[NAMESPACE/]NAME=N`` items; ``NAME`` is the ``scaleTargetRef`` name,
            ``NAMESPACE`` tells apart targets of one name in two namespaces.

    Returns:
        Replicas per target, for every target.

    Raises:
        ConfigError: An item is not ``[NAMESPACE/]NAME=N``, or names no target, or
            names several.
    """
    out = {rt.ref: rt.spec.min_replicas for rt in targets}
    for item in given:
        found = _ASSUMPTION.fullmatch(item.strip())
        if found is None:
            raise config_error(
                f"{ASSUME_FLAG} {item!r}",
                "is not [NAMESPACE/]NAME=N",
                "give a target's scaleTargetRef name and a whole number, e.g. web=3",
            )
        name, namespace = found["name"], found["namespace"]
        refs = [
            rt.ref
            for rt in targets
            if rt.ref.name == name and namespace in (None, rt.ref.namespace)
        ]
        if len(refs) != 1:
            known = ", ".join(sorted(f"{rt.ref.namespace}/{rt.ref.name}" for rt in targets))
            problem = "names no target" if not refs else f"names {len(refs)} targets"
            raise config_error(
                f"{ASSUME_FLAG} {item!r}",
                f"{problem} of the config",
                f"name one of: {known}" if not refs else "add the namespace: NAMESPACE/NAME=N",
            )
        out[refs[0]] = int(found["replicas"])
    return out


class AssumedCluster:
    """An ``Actuator`` that answers from assumed replica counts and writes nothing.

    Args:
        replicas: ``spec.replicas`` of each target (``assumed_replicas``).
    """

    def __init__(self, replicas: Mapping[TargetRef, int]) -> None:
        self.replicas = dict(replicas)

    def status(self, ref: TargetRef, *, node_slots: bool = False) -> TargetStatus:
        """The assumed count and no pods (there is no cluster to list them from).

        Returns:
            ``TargetStatus(desired=<assumed>)``; node room unknown.
        """
        del node_slots  # no nodes to read: policies see their room as unknown
        return TargetStatus(desired=self.replicas[ref])

    def load_state(self, ref: TargetRef) -> dict[str, Any]:
        """No stored state to read: every policy starts from its initial state.

        Returns:
            {}.
        """
        del ref
        return {}

    def guard_writes(self, guard: WriteGuard | None) -> None:
        """Nothing to guard: nothing is written."""
        del guard

    def close(self) -> None:
        """Nothing to release."""

    def scale(self, ref: TargetRef, replicas: int) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        raise _refused(f"scale {ref} to {replicas}")

    def save_state(self, ref: TargetRef, state: Mapping[str, Any]) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        del state
        raise _refused(f"save the state of {ref}")

    def record_event(
        self, ref: TargetRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        del message, warning
        raise _refused(f"record Event {reason} on {ref}")

    def delete_pod(self, namespace: str, name: str) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        raise _refused(f"delete pod {namespace}/{name}")

    def cordon(self, node: str) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        raise _refused(f"cordon node {node}")

    def set_deletion_cost(self, namespace: str, name: str, cost: int | None) -> None:
        """Refuse: a dry run writes nothing (the loop never calls it)."""
        raise _refused(f"annotate pod {namespace}/{name}")


def _refused(what: str) -> RuntimeError:
    return RuntimeError(f"{what}: there is no cluster in a dry run without one")
