"""GPUScaler objects in the cluster as the loop's targets, and each one's ``.status`` written back.

``--config`` gives the loop a fixed list of targets; with the CRD installed, the
targets come from GPUScaler objects instead (``ClusterScalers``): the informer
keeps the objects current, and each sync asks for the targets afresh. An object
is validated exactly as a file is (``config.validate``, the same models); one that
does not validate runs nothing, gets ``ScalingActive`` False with the one-line
problem, and a Warning Event naming the key, once per generation, while the
others run. A target already scaled by an older GPUScaler is refused on the newer
one the same way. An object whose generation has not changed keeps its runtimes
(the policy objects), so the loop's cached step and state carry on; a deleted
object's targets simply stop being reconciled and keep their replicas.

After each sync ``report`` writes each object's status through the ``/status``
subresource (a JSON patch replacing ``.status``), only when it differs from what
was last written or ``STATUS_REFRESH_S`` has passed; the write goes through the
actuator's request chokepoint, so the leader guard checks it like every write.
"""

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuscale.control.config import API_VERSION, KIND, object_where, validate
from gpuscale.control.informer import Informer, object_key
from gpuscale.control.kubecall import (
    Json,
    KubeForbiddenError,
    KubeUnavailableError,
    NotLeaderError,
)
from gpuscale.control.kubernetes import KubeActuator, TargetRef
from gpuscale.control.seams import Outcome, label
from gpuscale.control.status import Decision as DecisionReport
from gpuscale.control.status import (
    ForecastReport,
    GPUScalerStatus,
    TargetReport,
    carry_transitions,
    invalid_verdicts,
    summarise,
    target_verdicts,
    timestamp,
)
from gpuscale.control.targets import TargetRuntime, close_sources, runtime
from gpuscale.errors import ConfigError

logger = logging.getLogger(__name__)

STATUS_REFRESH_S = 300.0
"""An unchanged status is rewritten at most this often, seconds (repairs one edited by hand)."""

GROUP_PATH = f"/apis/{API_VERSION}"


def collection_path(namespace: str | None) -> str:
    """The GPUScaler collection the controller watches: one namespace, or all when None.

    Returns:
        The API path.
    """
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"{GROUP_PATH}{where}/gpuscalers"


@dataclass(slots=True)
class _Scaler:
    """One object as last built: its runtimes, or why it runs nothing."""

    uid: str
    generation: int
    runtimes: list[TargetRuntime]
    invalid: str  # why the spec does not validate ("" when it does)
    problem: str = ""  # why it runs nothing this sync: invalid, or a target taken
    previous: Json = field(default_factory=dict)  # the status seen on the object


@dataclass(frozen=True, slots=True)
class _Written:
    text: str
    at: float


class ClusterScalers:
    """The targets of the cluster's GPUScaler objects, and their status.

    Args:
        informer: Keeps the objects current.
        actuator: Writes status and Events (its chokepoint carries the leader guard).
        dry_run: Decide and log only: no status, no Events.
    """

    def __init__(
        self, informer: Informer, actuator: KubeActuator, *, dry_run: bool = False
    ) -> None:
        self.informer, self.actuator, self.dry_run = informer, actuator, dry_run
        self._scalers: dict[tuple[str, str], _Scaler] = {}
        self._written: dict[tuple[str, str], _Written] = {}
        self._scaled_at: dict[TargetRef, float] = {}
        self._warned: set[tuple[str, int, str]] = set()

    # ------------------------------------------------------------------ targets
    def runtimes(self) -> list[TargetRuntime]:
        """Every valid object's targets, oldest object first.

        Returns:
            The targets to reconcile this sync.
        """
        objects = sorted(
            self.informer.objects(),
            key=lambda o: (str(o["metadata"].get("creationTimestamp") or ""), object_key(o)),
        )
        claimed: dict[tuple[str, str, str], str] = {}
        built: dict[tuple[str, str], _Scaler] = {}
        for obj in objects:
            key, meta = object_key(obj), obj["metadata"]
            uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 1)
            scaler = self._scalers.get(key)
            if scaler is None or (scaler.uid, scaler.generation) != (uid, generation):
                scaler = self._build(obj, uid, generation)
            scaler.previous = obj.get("status") or {}
            scaler.problem = scaler.invalid or self._claim(key, scaler.runtimes, claimed)
            built[key] = scaler
            if scaler.problem:
                self._warn(obj, scaler)
        # a rebuilt or deleted object's targets retire: their own servers' clients close
        retired = [
            rt
            for key, old in self._scalers.items()
            if built.get(key) is not old
            for rt in old.runtimes
        ]
        close_sources(retired)
        self._scalers = built
        self._written = {k: v for k, v in self._written.items() if k in built}
        return [rt for s in built.values() if not s.problem for rt in s.runtimes]

    def _build(self, obj: Json, uid: str, generation: int) -> _Scaler:
        namespace, name = object_key(obj)
        # a list's items may leave out their kind (built-in lists do); a watch event's do not
        data = {"apiVersion": API_VERSION, "kind": KIND}
        data.update((k, v) for k, v in obj.items() if k != "status")
        try:
            doc = validate(data, object_where(namespace, name))
            built = [runtime(doc, t) for t in doc.spec.targets]
        except ConfigError as exc:
            return _Scaler(uid, generation, [], str(exc))
        return _Scaler(uid, generation, built, "")

    @staticmethod
    def _claim(
        key: tuple[str, str],
        built: Sequence[TargetRuntime],
        claimed: dict[tuple[str, str, str], str],
    ) -> str:
        """Claim the object's targets; the problem when an older object has one of them."""
        for i, rt in enumerate(built):
            ident = (rt.ref.kind, rt.ref.namespace, rt.ref.name)
            if ident in claimed and claimed[ident] != rt.owner:
                return (
                    f"GPUScaler {key[0]}/{key[1]} spec.targets[{i}].scaleTargetRef: "
                    f"{rt.ref.kind} {rt.ref.namespace}/{rt.ref.name} is already scaled by "
                    f"GPUScaler {claimed[ident]}; scale each workload from one GPUScaler only"
                )
        for rt in built:
            claimed[(rt.ref.kind, rt.ref.namespace, rt.ref.name)] = rt.owner
        return ""

    def _warn(self, obj: Json, scaler: _Scaler) -> None:
        """Log and record one Warning Event per problem and generation of an object."""
        episode = (scaler.uid, scaler.generation, scaler.problem)
        if episode in self._warned:
            return
        self._warned.add(episode)
        logger.warning("%s; its targets are not reconciled", scaler.problem)
        if self.dry_run:
            return
        namespace, name = object_key(obj)
        involved = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": name,
            "namespace": namespace,
            "uid": scaler.uid,
        }
        try:
            self.actuator.record_object_event(involved, "InvalidSpec", scaler.problem, warning=True)
        except (KubeForbiddenError, KubeUnavailableError, NotLeaderError) as exc:
            logger.warning(
                "GPUScaler %s/%s: could not record Event InvalidSpec: %s", namespace, name, exc
            )

    # ------------------------------------------------------------------- status
    def report(self, done: Sequence[tuple[TargetRuntime, Outcome]], now: float) -> None:
        """Write each object's status from this sync's outcomes, when it changed.

        Args:
            done: Each reconciled target with its outcome.
            now: The sync's time, seconds since the epoch.
        """
        by_owner: dict[str, list[tuple[TargetRuntime, Outcome]]] = {}
        for rt, out in done:
            by_owner.setdefault(rt.owner, []).append((rt, out))
            if out.scaled:
                self._scaled_at[rt.ref] = now
        for key, scaler in self._scalers.items():
            mine = by_owner.get(f"{key[0]}/{key[1]}", [])
            if not scaler.problem and not mine:
                continue
            status = self._status(key, scaler, mine, now)
            body = status.model_dump(by_alias=True, exclude_none=True)
            self._write(key, body, now)

    def _status(
        self,
        key: tuple[str, str],
        scaler: _Scaler,
        mine: list[tuple[TargetRuntime, Outcome]],
        now: float,
    ) -> GPUScalerStatus:
        """The object's status; transitions carried from the last written (else the object's)."""
        last = self._written.get(key)
        previous: Json = json.loads(last.text) if last is not None else scaler.previous
        if scaler.problem:
            conditions = carry_transitions(
                summarise([("", invalid_verdicts(scaler.problem))]),
                previous.get("conditions") or [],
                now,
            )
            return GPUScalerStatus(observed_generation=scaler.generation, conditions=conditions)
        old_targets = {
            _ref_text(t.get("scaleTargetRef") or {}): t for t in previous.get("targets") or []
        }
        reports, per_target = [], []
        for rt, out in mine:
            verdicts = target_verdicts(
                error=out.error,
                reason=out.reason,
                held=out.held,
                scaled=out.scaled,
                replicas=out.replicas,
                bounds=(rt.spec.min_replicas, rt.spec.max_replicas),
                owned_by=out.owned_by,
            )
            per_target.append((label(rt.ref), verdicts))
            ref = _ref_json(rt.ref)
            old = old_targets.get(_ref_text(ref)) or {}
            scaled_at = self._scaled_at.get(rt.ref)
            reports.append(
                TargetReport(
                    scale_target_ref=ref,
                    policy=rt.policy.name,
                    current_replicas=out.current,
                    desired_replicas=out.replicas,
                    last_scale_time=(
                        timestamp(scaled_at) if scaled_at is not None else old.get("lastScaleTime")
                    ),
                    last_decision=DecisionReport(
                        replicas=out.replicas, reason=out.reason[:1024], held=out.held
                    ),
                    forecast=(
                        ForecastReport(
                            mean=round(out.forecast.mean, 3),
                            upper=round(out.forecast.upper, 3),
                            model=out.forecast.model,
                            horizon_seconds=round(out.forecast.horizon_s, 1),
                        )
                        if out.forecast is not None
                        else None
                    ),
                    conditions=carry_transitions(verdicts, old.get("conditions") or [], now),
                )
            )
        return GPUScalerStatus(
            observed_generation=scaler.generation,
            current_replicas=_total(r.current_replicas for r in reports),
            desired_replicas=_total(r.desired_replicas for r in reports),
            last_scale_time=max(
                (r.last_scale_time for r in reports if r.last_scale_time), default=None
            ),
            conditions=carry_transitions(
                summarise(per_target), previous.get("conditions") or [], now
            ),
            targets=reports,
        )

    def _write(self, key: tuple[str, str], body: Json, now: float) -> None:
        text = json.dumps(body, sort_keys=True)
        last = self._written.get(key)
        if last is not None and last.text == text and now - last.at < STATUS_REFRESH_S:
            return
        if self.dry_run:
            return
        path = f"{GROUP_PATH}/namespaces/{key[0]}/gpuscalers/{key[1]}/status"
        patch = [{"op": "add", "path": "/status", "value": body}]
        try:
            self.actuator.call(
                "PATCH", path, body=patch, content_type="application/json-patch+json"
            )
        except (KubeForbiddenError, KubeUnavailableError, NotLeaderError) as exc:
            logger.warning("GPUScaler %s/%s: could not write status: %s", key[0], key[1], exc)
            return
        self._written[key] = _Written(text, now)


def _ref_json(ref: TargetRef) -> dict[str, str]:
    return {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ref.namespace,
    }


def _ref_text(ref: Mapping[str, Any]) -> str:
    return "/".join(str(ref.get(k, "")) for k in ("apiVersion", "kind", "namespace", "name"))


def _total(values: Any) -> int | None:  # noqa: ANN401 - an iterable of optional ints
    known = [v for v in values if v is not None]
    return sum(known) if known else None
