"""Leader election on a ``coordination.k8s.io/v1`` Lease, so two controllers never both act.

The rules are client-go's ``leaderelection`` (LeaseLock): the holder renews ``renewTime``
every retry period; a candidate may take the Lease only when its holder is empty or the
holder has not renewed for ``leaseDurationSeconds``; every write is a PUT carrying the
resourceVersion this elector read, so when two candidates race for one Lease the API
server lets exactly one win (the other gets 409 and stays a follower). Like client-go, a
candidate measures expiry on its own clock from when it last saw the record change (so
clock skew between machines cannot make it take a live Lease early), and here it also
requires the record's own ``renewTime + leaseDurationSeconds`` to have passed.
"""

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuscale.control.kubecall import KubeCall, KubeUnavailableError, RetryPolicy
from gpuscale.control.kubernetes import ApiClient

logger = logging.getLogger(__name__)

JITTER_FACTOR = 1.2  # client-go's: renewDeadline must exceed retryPeriod by this factor


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The Lease spec fields client-go's LeaderElectionRecord maps to (times in seconds)."""

    holder: str
    lease_duration_s: int
    acquire_time: float | None
    renew_time: float | None
    transitions: int


def _micro(t: float) -> str:
    # metav1.MicroTime: RFC 3339 with exactly six fractional digits, as the API server
    # parses it; datetime.isoformat() drops the fraction when it is zero, so it cannot be used
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _seconds(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _record(lease: dict[str, Any]) -> LeaseRecord:
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        lease_duration_s=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=_seconds(spec.get("acquireTime")),
        renew_time=_seconds(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
    )


class LeaseElector:
    """Acquire, renew and release one Lease for one identity.

    Call ``try_acquire_or_renew`` every ``retry_period_s``; act only while it returns True.

    Args:
        api_client: A configured ``kubernetes.client.ApiClient`` (``KubeActuator.api_client``).
        namespace: The Lease's namespace.
        name: The Lease's name.
        identity: This candidate's unique name (e.g. pod name), the ``holderIdentity``.
        lease_duration_s: How long a silent holder keeps the Lease, seconds.
        renew_deadline_s: A leader that cannot renew for this long stops leading, seconds.
        retry_period_s: How often the caller should call ``try_acquire_or_renew``, seconds.
        clock: Wall clock, seconds since the epoch (a seam for tests).
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration_s: float = 15,
        renew_deadline_s: float = 10,
        retry_period_s: float = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not identity:
            raise ValueError("LeaseElector: identity must not be empty")
        if not lease_duration_s > renew_deadline_s > JITTER_FACTOR * retry_period_s > 0:
            raise ValueError(
                "LeaseElector: need lease_duration_s > renew_deadline_s > "
                f"{JITTER_FACTOR} * retry_period_s > 0 (client-go's rule), got "
                f"{lease_duration_s}, {renew_deadline_s}, {retry_period_s}"
            )
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._clock = clock
        # one try per call, bounded by the renew deadline: the caller's loop is the retry
        self._call = KubeCall(
            api_client, RetryPolicy(attempts=1, timeout_s=max(0.5, renew_deadline_s / 2))
        )
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        self._observed: tuple[LeaseRecord, float] | None = None  # record, when it last changed
        self._renewed_at: float | None = None  # our last successful write as holder

    @property
    def is_leader(self) -> bool:
        """Whether this elector renewed within the renew deadline."""
        return self.valid_for() > 0

    def valid_for(self) -> float:
        """Seconds left before the renew deadline of the last successful renewal passes.

        A standby takes the Lease only after seeing it unrenewed for the lease duration,
        which is longer than the renew deadline: a write that starts and ends while this
        is positive lands while no other replica can hold the Lease.

        Returns:
            Seconds; 0 or less when this elector does not lead.
        """
        if self._renewed_at is None:
            return 0.0
        return self._renewed_at + self.renew_deadline_s - self._clock()

    def try_acquire_or_renew(self) -> bool:
        """Create, take over or renew the Lease for this identity.

        Returns:
            True while this elector leads: the write succeeded now, or it failed for a
            transient reason within the renew deadline of the last successful renewal.

        Raises:
            KubeForbiddenError: The service account may not get/create/update Leases.
        """
        now = self._clock()
        try:
            return self._try(now)
        except KubeUnavailableError as exc:
            if exc.status == 409:
                logger.info(
                    "lease %s/%s: lost a race to another candidate", self.namespace, self.name
                )
                self._renewed_at = None
                return False
            logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            return self.is_leader

    def _try(self, now: float) -> bool:
        try:
            lease = self._call("GET", self._path)
        except KubeUnavailableError as exc:
            if exc.status != 404:
                raise
            body = self._body({}, now, now, transitions=0)
            self._call("POST", self._path.rsplit("/", 1)[0], body=body)
            self._won(now)
            return True
        old = _record(lease)
        if self._observed is None or self._observed[0] != old:
            self._observed = (old, now)
        mine = old.holder == self.identity
        if old.holder and not mine and not self._expired(old, now, self._observed[1]):
            self._renewed_at = None
            return False
        acquire = old.acquire_time if mine and old.acquire_time else now
        transitions = old.transitions if mine else old.transitions + 1  # client-go's count
        body = self._body(lease, acquire, now, transitions)
        self._call("PUT", self._path, body=body)
        if not mine:
            logger.info(
                "lease %s/%s: %s acquired it from %r",
                self.namespace,
                self.name,
                self.identity,
                old.holder,
            )
        self._won(now)
        return True

    def _expired(self, old: LeaseRecord, now: float, observed_at: float) -> bool:
        # client-go: unchanged on our own clock for our lease duration ...
        seen_unchanged_for = now - observed_at
        # ... and here also: the record's own renewTime + leaseDurationSeconds has passed
        renewed = old.renew_time if old.renew_time is not None else float("-inf")
        record_duration = old.lease_duration_s or self.lease_duration_s
        return seen_unchanged_for >= self.lease_duration_s and now >= renewed + record_duration

    def _won(self, now: float) -> None:
        self._renewed_at = now
        self._observed = None  # our own write changed the record

    def _body(
        self, lease: dict[str, Any], acquire: float, renew: float, transitions: int
    ) -> dict[str, Any]:
        meta = {"name": self.name, "namespace": self.namespace}
        if lease.get("metadata", {}).get("resourceVersion"):
            meta["resourceVersion"] = lease["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.lease_duration_s),  # int32 seconds
                "acquireTime": _micro(acquire),
                "renewTime": _micro(renew),
                "leaseTransitions": transitions,
            },
        }

    def release(self) -> bool:
        """Give the Lease up now (holder emptied), so a standby need not wait for expiry.

        Returns:
            True when this elector held the Lease and released it.
        """
        self._renewed_at = None
        try:
            lease = self._call("GET", self._path)
            if _record(lease).holder != self.identity:
                return False
            now = self._clock()
            body = self._body(lease, now, now, _record(lease).transitions)
            # client-go's release: empty holder, a one-second duration
            body["spec"].update(holderIdentity="", leaseDurationSeconds=1)
            self._call("PUT", self._path, body=body)
        except KubeUnavailableError as exc:
            logger.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
            return False
        return True
