"""Policy state in one ConfigMap the controller owns, so it needs no write right on workloads.

Each target's policy state (``{"policy": name, "state": <the state's JSON>}``) is one
key of one ConfigMap in the controller's own namespace (where its Lease lives). One
ConfigMap rather than one per target: the Role names a single object for ``get`` and
``patch``, a new leader reads every target's state from the object it already knows,
and a user sees all of it with one ``kubectl get configmap``.

A write is a JSON merge patch of ``data.<key>`` alone. The API server applies it to
the object as stored, atomically, so concurrent writes of different targets (the
controller's workers) never lose each other's keys, and none needs a
``resourceVersion``: a key has a single writer, the Lease holder, whose every write
is guarded by the Lease (``KubeCall.guard``), and a precondition would only make
the leader's own workers conflict. A missing ConfigMap is created on the first write
(``create`` answering 409 AlreadyExists means another writer made it first: patch it).

Every target's state is read when the controller starts or gains the Lease, all in
one sync: one GET of the ConfigMap serves every target read within a second of it
(concurrent readers wait for the one GET in flight), so a sync over N targets reads
the ConfigMap at most once a second, not N times. A second is shorter than any Lease
(``leaseDurationSeconds`` is a whole number, at least 1), so a copy never outlives a
change of leader; the controller's own writes are applied to the copy.

Sizes are bounded: a value is refused above 256 KiB (the API server's limit on all
of an object's annotations, where earlier versions kept it), and the API server
refuses a ConfigMap above 1 MiB in all, which is turned into one line naming the
ConfigMap.
"""

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gpuscale.control.kubecall import MERGE_PATCH, Json, KubeCall, KubeUnavailableError

logger = logging.getLogger(__name__)

STATE_CONFIGMAP = "gpuscale-autoscaler-state"
"""The ConfigMap's default name."""
VALUE_MAX_BYTES = 256 * 1024
CONFIG_MAP_MAX_BYTES = 1024 * 1024  # the API server's limit on a ConfigMap's data
_KEY_MAX = 253  # a ConfigMap key's longest (IsConfigMapKey)
REREAD_AFTER_S = 1.0
"""A read of the ConfigMap serves the loads of this many seconds (under any Lease)."""
_HASH_CHARS = 16


def state_key(api_version: str, kind: str, namespace: str, name: str) -> str:
    """The ConfigMap key of one target: ``<kind>.<group>_<namespace>_<name>``.

    ConfigMap keys allow ``[-._a-zA-Z0-9]``. A kind has no ``_`` or ``.`` (it is a
    DNS-1035 label, lower-cased), and an API group, a namespace and a name have no
    ``_``, so the key names one target only. The core group reads ``core``. A key
    that would pass 253 characters keeps its start and ends in a hash of the whole.

    Returns:
        The key, e.g. ``deployment.apps_serving_llm``.
    """
    group = api_version.rpartition("/")[0] or "core"
    key = f"{kind.lower()}.{group}_{namespace}_{name}"
    if len(key) <= _KEY_MAX:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:_HASH_CHARS]
    return f"{key[: _KEY_MAX - _HASH_CHARS - 1]}_{digest}"


@dataclass(frozen=True, slots=True)
class StateConfigMap:
    """Where the policy state lives.

    Attributes:
        namespace: The controller's own namespace (its Lease's).
        name: The ConfigMap's name.
    """

    namespace: str = "default"
    name: str = STATE_CONFIGMAP

    def __str__(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"


class StateStore:
    """Reads and writes each target's key of the state ConfigMap.

    Args:
        call: The request chokepoint (retries, the Lease guard on writes).
        where: The ConfigMap.
        monotonic: Elapsed-time clock for the read's reuse (a seam for tests).
    """

    def __init__(
        self,
        call: KubeCall,
        where: StateConfigMap,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call, self.where = call, where
        self._path = f"/api/v1/namespaces/{where.namespace}/configmaps/{where.name}"
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._read: tuple[float, dict[str, str] | None] | None = None  # (when, data)

    def _data(self) -> dict[str, str] | None:
        """The ConfigMap's data (None when it does not exist), read at most once a second."""
        with self._lock:  # held over the GET: concurrent loads wait for its answer
            if self._read is not None and self._monotonic() - self._read[0] < REREAD_AFTER_S:
                return self._read[1]
            try:
                found: Json = self.call("GET", self._path)
                data: dict[str, str] | None = dict(found.get("data") or {})
            except KubeUnavailableError as exc:
                if exc.status != 404:
                    raise
                data = None
            self._read = (self._monotonic(), data)
            return data

    def _wrote(self, key: str, text: str) -> None:
        """Keep a recent read in step with this replica's own write."""
        with self._lock:
            if self._read is not None:
                self._read = (self._read[0], {**(self._read[1] or {}), key: text})

    def load(self, key: str) -> dict[str, Any] | None:
        """The JSON object under ``key``.

        Returns:
            The saved state; {} when the value is not a JSON object (logged); None when
            the ConfigMap or the key is absent.
        """
        text = (self._data() or {}).get(key)
        if text is None:
            return None
        try:
            state = json.loads(text)
        except ValueError:
            state = None
        if not isinstance(state, dict):
            logger.warning("kubernetes: %s: key %s is not a JSON object; ignored", self.where, key)
            return {}
        return state

    def save(self, key: str, state: Mapping[str, Any]) -> None:
        """Write ``state`` as JSON under ``key`` (merge patch; the ConfigMap made if absent).

        Raises:
            ValueError: The state is not JSON (NaN, infinity) or is over 256 KiB.
            KubeUnavailableError: The API refused the write; 422 when the ConfigMap
                would pass 1 MiB.
        """
        try:  # NaN and Infinity are not JSON: the API server would answer 400
            text = json.dumps(state, sort_keys=True, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"state for {key!r} is not JSON: {exc}") from None
        size = len(text.encode())
        if size > VALUE_MAX_BYTES:
            raise ValueError(
                f"state for {key!r} is {size} bytes; {self.where} holds at most "
                f"{VALUE_MAX_BYTES} per target"
            )
        try:
            self._patch(key, text)
        except KubeUnavailableError as exc:
            if exc.status != 404:
                raise
            self._create(key, text)
        self._wrote(key, text)

    def _patch(self, key: str, text: str) -> None:
        try:
            self.call("PATCH", self._path, body={"data": {key: text}}, content_type=MERGE_PATCH)
        except KubeUnavailableError as exc:
            if exc.status != 422:
                raise
            raise KubeUnavailableError(
                f"{self.where}: the state of {key} ({len(text.encode())} bytes) does not fit "
                f"(a ConfigMap holds {CONFIG_MAP_MAX_BYTES} bytes in all): {exc}; "
                "give some targets to another controller",
                exc.status,
            ) from None

    def _create(self, key: str, text: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self.where.name,
                "namespace": self.where.namespace,
                "labels": {"app.kubernetes.io/managed-by": "gpuscale"},
            },
            "data": {key: text},
        }
        path = self._path.rsplit("/", 1)[0]
        try:
            self.call("POST", path, body=body, retry_conflicts=False)
        except KubeUnavailableError as exc:
            if exc.status != 409:
                raise
            self._patch(key, text)  # another writer created it first
