"""A cache of one kind's objects kept current by list and watch, as client-go's informer keeps it.

The controller reconciles GPUScaler objects from the cluster: it must see a new,
changed or deleted object within a sync, without listing every object every sync.
So it lists once (remembering the list's ``resourceVersion``), then watches from
there: each ADDED, MODIFIED or DELETED event updates the cache as it arrives. A
watch ends after ``watch_s`` (the API server's ``timeoutSeconds``) and is reopened
from the last version seen; a ``410 Gone`` (the version was compacted away) or a
broken watch makes it relist, and it relists every ``resync_s`` anyway, so a missed
event cannot leave the cache wrong for longer than that.

The cache is read by ``objects()`` (a copy, so the loop reads a consistent set
while events arrive); ``relist()`` is the seam tests call on a fake clock instead
of running the thread.
"""

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from gpuscale.control.kubecall import Json, KubeCall, KubeForbiddenError, KubeUnavailableError

logger = logging.getLogger(__name__)

GONE = 410


class Informer:
    """Keeps every object of one collection, by namespace and name.

    Args:
        call: The request chokepoint (the actuator's, so retries and errors are shared).
        path: The collection: ``/apis/<group>/<version>[/namespaces/<ns>]/<plural>``.
        resync_s: Relist at least this often, seconds.
        watch_s: Each watch's ``timeoutSeconds``.
        monotonic: Elapsed-time clock (a seam for tests).
    """

    def __init__(
        self,
        call: KubeCall,
        path: str,
        *,
        resync_s: float = 300.0,
        watch_s: int = 60,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call, self.path = call, path
        self.resync_s, self.watch_s = resync_s, watch_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._objects: dict[tuple[str, str], Json] = {}
        self._version = ""
        self._listed_at = -float("inf")
        self.synced = threading.Event()
        """Set once the first list has landed (the cache is the cluster's, not empty)."""

    def objects(self) -> list[Json]:
        """A copy of every cached object, by namespace and name.

        Returns:
            The objects.
        """
        with self._lock:
            return [copy.deepcopy(self._objects[k]) for k in sorted(self._objects)]

    def relist(self) -> None:
        """Replace the cache by one list; the next watch starts from its version."""
        answer = self.call("GET", self.path)
        items = answer.get("items") or []
        with self._lock:
            self._objects = {object_key(o): o for o in items}
            self._version = str((answer.get("metadata") or {}).get("resourceVersion") or "")
            self._listed_at = self._monotonic()
        self.synced.set()

    def watch(self) -> bool:
        """Follow one watch until the server ends it; apply every event to the cache.

        Returns:
            False when the cache must be relisted first (410 Gone, or never listed).
        """
        if not self._version:
            return False
        query = {
            "watch": "1",
            "resourceVersion": self._version,
            "timeoutSeconds": str(self.watch_s),
            "allowWatchBookmarks": "true",
        }
        for event in self.call.stream(self.path, query=query, timeout_s=self.watch_s + 5.0):
            kind, obj = str(event.get("type")), event.get("object") or {}
            if kind == "ERROR":
                code = obj.get("code")
                logger.debug("watch %s ended: %s %s", self.path, code, obj.get("message"))
                return code != GONE
            version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
            with self._lock:
                if kind in ("ADDED", "MODIFIED"):
                    self._objects[object_key(obj)] = obj
                elif kind == "DELETED":
                    self._objects.pop(object_key(obj), None)
                if version:
                    self._version = version
        return True

    def run(self, stop: threading.Event) -> None:
        """List, then watch and rewatch until ``stop``; relist on 410, errors and each resync.

        Args:
            stop: Ends the loop (after the current watch returns).
        """
        listed = False
        backoff = 1.0
        while not stop.is_set():
            try:
                stale = self._monotonic() - self._listed_at >= self.resync_s
                if not listed or stale:
                    self.relist()
                listed = self.watch()
                backoff = 1.0
            except (KubeForbiddenError, KubeUnavailableError) as exc:
                logger.warning(
                    "cannot list or watch %s: %s; retrying in %g s", self.path, exc, backoff
                )
                listed = False
                if stop.wait(backoff):
                    return
                backoff = min(backoff * 2, 30.0)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object ("" for a cluster-scoped one's namespace).

    Returns:
        The key.
    """
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
