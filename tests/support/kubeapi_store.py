"""The API double's object store and REST verbs, without HTTP.

Every object carries ``metadata.resourceVersion`` from one global counter (as etcd's
revision does); a write whose body names a stale resourceVersion answers 409 Conflict;
creation fills uid, creationTimestamp and (for workloads) generation. Errors are raised
as ``ApiError`` carrying the meta/v1 Status body the real server would send.
"""

import copy
import re
import threading
import uuid
from collections.abc import Callable
from typing import Any

from tests.support import kubeapi_model as m
from tests.support.kubeapi_model import Obj, Resource

Key = tuple[str, str, str, str]  # (groupVersion, plural, namespace, name)

_TIME_FIELDS = {
    "leases": (("spec.acquireTime", True), ("spec.renewTime", True)),
    "events": (
        ("firstTimestamp", False),
        ("lastTimestamp", False),
        ("eventTime", True),
    ),
}


CONFIG_MAP_MAX_BYTES = 1024 * 1024  # corevalidation.MaxConfigMapSize: data and binaryData
_CONFIG_MAP_KEY = re.compile(r"[-._a-zA-Z0-9]+")


class ApiError(Exception):
    """A failed request, with the Status body to answer."""

    def __init__(self, body: Obj) -> None:
        super().__init__(body["message"])
        self.body = body
        self.code = int(body["code"])


class Store:
    """Objects by (groupVersion, plural, namespace, name), guarded by one lock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.RLock()
        self.resources: dict[tuple[str, str], Resource] = {}
        self.objects: dict[Key, Obj] = {}
        self._rv = 1000
        self.on_write: Callable[[Resource, Obj], None] = lambda res, obj: None
        for res in m.BUILTIN:
            self.add_resource(res)

    def add_resource(self, res: Resource) -> None:
        self.resources[(res.group_version, res.plural)] = res

    def resource(self, group_version: str, plural: str) -> Resource:
        res = self.resources.get((group_version, plural))
        if res is None:
            raise ApiError(
                m.status(404, "NotFound", "the server could not find the requested resource")
            )
        return res

    def next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    # --- verbs -----------------------------------------------------------------------------

    def get(self, res: Resource, ns: str, name: str) -> Obj:
        obj = self.objects.get((res.group_version, res.plural, ns, name))
        if obj is None:
            raise ApiError(m.not_found(res, name))
        return obj

    def list(self, res: Resource, ns: str, labels: str = "", fields: str = "") -> list[Obj]:
        try:
            match_labels = m.label_matcher(labels)
            match_fields = m.field_matcher(fields, res.fields)
        except ValueError as exc:
            raise ApiError(m.bad_request(str(exc))) from None
        return [
            obj
            for (gv, plural, o_ns, _), obj in sorted(self.objects.items())
            if (gv, plural) == (res.group_version, res.plural)
            and (not ns or o_ns == ns)
            and match_labels(obj["metadata"].get("labels") or {})
            and match_fields(obj)
        ]

    def create(self, res: Resource, ns: str, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise ApiError(
                    m.invalid(
                        res, "", res.kind, "metadata.name", "", "name or generateName is required"
                    )
                )
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if res.namespaced:
            if meta.get("namespace", ns) != ns:
                raise ApiError(
                    m.bad_request(
                        "the namespace of the provided object does not match the namespace "
                        "sent on the request"
                    )
                )
            meta["namespace"] = ns
        key = (res.group_version, res.plural, ns if res.namespaced else "", meta["name"])
        if key in self.objects:
            raise ApiError(m.already_exists(res, meta["name"]))
        self._check_times(res, obj)
        if res.plural == "events":
            self._check_event(res, obj)
        if res.plural == "configmaps":
            self._check_config_map(res, obj)
        obj["apiVersion"], obj["kind"] = res.group_version, res.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = m.fmt_time(self.clock())
        meta["resourceVersion"] = self.next_rv()
        meta.pop("deletionTimestamp", None)
        if res.scale:
            meta["generation"] = 1
        self.objects[key] = obj
        self.on_write(res, obj)
        return obj

    def replace(self, res: Resource, ns: str, name: str, body: Obj) -> Obj:
        old = self.get(res, ns, name)
        meta = body.get("metadata") or {}
        if meta.get("name", name) != name:
            raise ApiError(
                m.bad_request("the name of the object does not match the name on the URL")
            )
        rv = meta.get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(m.conflict(res, name))
        new = copy.deepcopy(body)
        return self._store(res, old, new)

    def patch(self, res: Resource, ns: str, name: str, content_type: str, patch: Any) -> Obj:
        old = self.get(res, ns, name)
        new = self.apply_patch(res, old, content_type, patch)
        rv = (new.get("metadata") or {}).get("resourceVersion")
        if rv and rv != old["metadata"]["resourceVersion"]:
            raise ApiError(m.conflict(res, name))
        return self._store(res, old, new)

    @staticmethod
    def apply_patch(res: Resource, old: Obj, content_type: str, patch: Any) -> Obj:
        """Apply a PATCH body by its media type, as the API server's patch handler does."""
        kind = content_type.split(";")[0].strip()
        merge_kinds = {"application/merge-patch+json"}
        if res.builtin:  # custom resources do not support strategic merge patch
            merge_kinds.add("application/strategic-merge-patch+json")
        if kind == "application/json-patch+json":
            try:
                return m.json_patch(old, patch)
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise ApiError(m.status(422, "Invalid", str(exc))) from None
        if kind in merge_kinds:
            if not isinstance(patch, dict):
                raise ApiError(
                    m.bad_request(
                        "json: cannot unmarshal array into Go value of type map[string]interface {}"
                    )
                )
            return m.merge_patch(old, patch)
        accepted = ["application/json-patch+json", *sorted(merge_kinds)]
        raise ApiError(
            m.status(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join(accepted)}, application/apply-patch+yaml",
            )
        )

    def delete(self, res: Resource, ns: str, name: str) -> Obj:
        obj = self.get(res, ns, name)
        del self.objects[(res.group_version, res.plural, ns, name)]
        return obj

    def _store(self, res: Resource, old: Obj, new: Obj) -> Obj:
        """Write ``new`` over ``old``: keep immutable metadata, bump rv and generation."""
        self._check_times(res, new)
        if res.plural == "configmaps":
            self._check_config_map(res, new)
        meta = new.setdefault("metadata", {})
        for keep in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "generation",
        ):
            if keep in old["metadata"]:
                meta[keep] = old["metadata"][keep]
        new["apiVersion"], new["kind"] = res.group_version, res.kind
        if res.scale and new.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation", 1)) + 1
        if res.scale and res.builtin:
            # the main resource ignores status writes (they go through /status)
            new["status"] = copy.deepcopy(old.get("status", {}))
        meta["resourceVersion"] = self.next_rv()
        key = (res.group_version, res.plural, meta.get("namespace", ""), meta["name"])
        self.objects[key] = new
        self.on_write(res, new)
        return new

    @staticmethod
    def _check_event(res: Resource, obj: Obj) -> None:
        """The core/v1 Event checks of the API server's validation that a client can trip."""
        name, ref = obj["metadata"]["name"], obj.get("involvedObject") or {}
        ns = obj["metadata"].get("namespace", "")
        if ref.get("namespace", ns) != ns:
            why = "does not match event.namespace"
            raise ApiError(
                m.invalid(res, name, "Event", "involvedObject.namespace", ref["namespace"], why)
            )
        if obj.get("type") not in (None, "Normal", "Warning"):
            raise ApiError(
                m.invalid(
                    res, name, "Event", "type", obj["type"], "supported values: Normal, Warning"
                )
            )

    @staticmethod
    def _check_config_map(res: Resource, obj: Obj) -> None:
        """The ConfigMap checks of the API server's validation: key names, 1 MiB in all."""
        name = obj["metadata"]["name"]
        total = 0
        for field in ("data", "binaryData"):
            for key, value in (obj.get(field) or {}).items():
                if not _CONFIG_MAP_KEY.fullmatch(key) or key in (".", "..") or len(key) > 253:
                    why = (
                        "a valid config key must consist of alphanumeric characters, '-', '_' "
                        "or '.' (e.g. 'key.name', or 'KEY_NAME', or 'key-name', regex used "
                        "for validation is '[-._a-zA-Z0-9]+')"
                    )
                    raise ApiError(m.invalid(res, name, "ConfigMap", f"{field}[{key}]", key, why))
                total += len(str(value).encode())
        if total > CONFIG_MAP_MAX_BYTES:
            msg = (
                f'ConfigMap "{name}" is invalid: []: Too long: must have at most '
                f"{CONFIG_MAP_MAX_BYTES} bytes"
            )
            raise ApiError(m.status(422, "Invalid", msg, {"name": name, "kind": "configmaps"}))

    @staticmethod
    def _check_times(res: Resource, obj: Obj) -> None:
        for path, micro in _TIME_FIELDS.get(res.plural, ()):
            why = m.check_time(m.get_path(obj, "." + path), micro)
            if why:
                raise ApiError(
                    m.bad_request(
                        f'{res.kind} in version "{res.version}" cannot be handled as a '
                        f"{res.kind}: {why}"
                    )
                )

    # --- the /scale subresource (autoscaling/v1 Scale) -------------------------------------

    def scale_of(self, res: Resource, obj: Obj) -> Obj:
        meta = obj["metadata"]
        if res.builtin:
            selector = m.format_selector(obj.get("spec", {}).get("selector") or {})
        else:
            selector = m.get_path(obj, res.selector_path) or ""
        scale_status: Obj = {"replicas": int(m.get_path(obj, res.status_replicas) or 0)}
        if selector:
            scale_status["selector"] = selector
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": int(m.get_path(obj, res.spec_replicas) or 0)},
            "status": scale_status,
        }

    def write_scale(self, res: Resource, ns: str, name: str, scale: Obj) -> Obj:
        """Apply a Scale's spec.replicas to its parent (PUT or the result of a PATCH)."""
        obj = self.get(res, ns, name)
        rv = (scale.get("metadata") or {}).get("resourceVersion")
        if rv and rv != obj["metadata"]["resourceVersion"]:
            raise ApiError(m.conflict(res, name))
        replicas = (scale.get("spec") or {}).get("replicas", 0)
        if not isinstance(replicas, int) or replicas < 0:
            raise ApiError(
                m.invalid(
                    res,
                    name,
                    "Scale.autoscaling",
                    "spec.replicas",
                    replicas,
                    "must be greater than or equal to 0",
                )
            )
        new = copy.deepcopy(obj)
        m.set_path(new, res.spec_replicas, replicas)
        new["metadata"].pop("resourceVersion", None)
        stored = self._store(res, obj, new)
        return self.scale_of(res, stored)
