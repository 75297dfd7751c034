"""Pure pieces of the Kubernetes API double: resource table, Status bodies, selectors,
patches and the API's two time formats.

Each rule here follows the Kubernetes API reference (api-concepts, the meta/v1 types)
so the double answers the way kube-apiserver does; see kubeapi.py for what it serves.
"""

import copy
import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

Obj = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    """One served resource type, as discovery (APIResourceList) describes it."""

    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    scale: bool = False  # has the /scale subresource
    # CRD-style scale paths (specReplicasPath, statusReplicasPath, labelSelectorPath)
    spec_replicas: str = ".spec.replicas"
    status_replicas: str = ".status.replicas"
    selector_path: str = ".status.selector"
    # fields a fieldSelector may name for this type (others answer 400, as the real server does)
    fields: tuple[str, ...] = ("metadata.name", "metadata.namespace")
    builtin: bool = True  # built-in types accept strategic merge patch; custom ones do not
    verbs: tuple[str, ...] = (
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    )

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``deployments.apps`` as used in messages; ``pods`` for the core group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def discovery(self) -> list[Obj]:
        main: Obj = {
            "name": self.plural,
            "singularName": self.kind.lower(),
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        out = [main]
        if self.scale:
            out.append(
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        return out


# the pod fields the real API server indexes for fieldSelector (pkg/registry/core/pod)
POD_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
NODE_FIELDS = ("metadata.name", "spec.unschedulable")
EVENT_FIELDS = (
    "metadata.name",
    "metadata.namespace",
    "involvedObject.kind",
    "involvedObject.name",
    "involvedObject.namespace",
    "involvedObject.uid",
    "reason",
    "type",
    "source",
    "reportingComponent",
)

BUILTIN = (
    Resource("", "v1", "pods", "Pod", short_names=("po",), fields=POD_FIELDS),
    Resource("", "v1", "nodes", "Node", namespaced=False, short_names=("no",), fields=NODE_FIELDS),
    Resource("", "v1", "events", "Event", short_names=("ev",), fields=EVENT_FIELDS),
    Resource("", "v1", "configmaps", "ConfigMap", short_names=("cm",)),
    Resource("apps", "v1", "deployments", "Deployment", short_names=("deploy",), scale=True),
    Resource("apps", "v1", "statefulsets", "StatefulSet", short_names=("sts",), scale=True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease"),
)


# --- Status bodies (meta/v1 Status), with the reason and message shapes of the real server ---


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _details(res: Resource, name: str) -> Obj:
    out: Obj = {"name": name, "kind": res.plural}
    if res.group:
        out["group"] = res.group
    return out


def not_found(res: Resource, name: str) -> Obj:
    return status(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> Obj:
    msg = f'{res.qualified} "{name}" already exists'
    return status(409, "AlreadyExists", msg, _details(res, name))


def conflict(res: Resource, name: str) -> Obj:
    msg = (
        f'Operation cannot be fulfilled on {res.qualified} "{name}": the object has been '
        "modified; please apply your changes to the latest version and try again"
    )
    return status(409, "Conflict", msg, _details(res, name))


def invalid(res: Resource, name: str, kind: str, field_path: str, value: Any, why: str) -> Obj:
    msg = f'{kind} "{name}" is invalid: {field_path}: Invalid value: {json.dumps(value)}: {why}'
    details = _details(res, name) | {
        "causes": [
            {"reason": "FieldValueInvalid", "message": f"Invalid value: {value}: {why}"}
            | {"field": field_path}
        ]
    }
    return status(422, "Invalid", msg, details)


def bad_request(message: str) -> Obj:
    return status(400, "BadRequest", message)


def forbidden(
    res: Resource, verb: str, user: str, namespace: str, name: str = "", sub: str = ""
) -> Obj:
    """403 as the RBAC authorizer words it (``<resource>.<group> "<name>" is forbidden: ...``)."""
    what = f'{res.qualified} "{name}"' if name else res.qualified
    resource = f"{res.plural}/{sub}" if sub else res.plural
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    msg = (
        f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
        f'in API group "{res.group}" {scope}'
    )
    return status(403, "Forbidden", msg, _details(res, name))


def server_error(code: int) -> Obj:
    if code == 429:  # API Priority and Fairness rejecting a request
        msg = "Too many requests, please try again later."
        return status(429, "TooManyRequests", msg, {"retryAfterSeconds": 1})
    if code == 503:
        return status(
            503, "ServiceUnavailable", "the server is currently unable to handle the request"
        )
    if code == 504:
        return status(
            504, "Timeout", "the server was unable to return a response in the time allotted"
        )
    return status(code, "InternalError", "Internal error occurred: injected fault")


# --- time formats: metav1.Time (RFC 3339, seconds) and metav1.MicroTime (exactly 6 digits) ---

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_RFC3339_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


def fmt_time(t: float) -> str:
    """metav1.Time: RFC 3339 in UTC, whole seconds."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_micro(t: float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def check_time(value: Any, micro: bool) -> str | None:
    """Why a JSON value is not a valid Time/MicroTime (Go's time.Parse rules), or None."""
    if value is None:
        return None
    if not isinstance(value, str):
        return f"cannot unmarshal {type(value).__name__} into a time"
    pattern, layout = (
        (_RFC3339_MICRO, "2006-01-02T15:04:05.000000Z07:00")
        if micro
        else (_RFC3339, "2006-01-02T15:04:05Z07:00")
    )
    if not pattern.match(value):
        return f'parsing time "{value}" as "{layout}": cannot parse'
    return None


# --- label and field selectors ---

_REQ = re.compile(
    r"^\s*(?P<neg>!)?\s*(?P<key>[A-Za-z0-9._/-]+)\s*"
    r"(?:(?P<op>==|=|!=)\s*(?P<val>[A-Za-z0-9._-]*)|\s+(?P<setop>in|notin)\s*\((?P<set>[^)]*)\))?\s*$"
)


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def label_matcher(text: str) -> Any:
    """Compile a labelSelector string; returns a predicate over a labels dict.

    Raises:
        ValueError: For a selector the real server rejects.
    """
    reqs = []
    for part in _split_selector(text or ""):
        m = _REQ.match(part)
        if not m:
            raise ValueError(f"unable to parse requirement: {part!r}")
        reqs.append(m.groupdict())

    def match(labels: dict[str, str]) -> bool:
        for r in reqs:
            key, have = r["key"], labels.get(r["key"])
            if r["op"] in ("=", "=="):
                ok = have == r["val"]
            elif r["op"] == "!=":
                ok = have != r["val"]
            elif r["setop"]:
                values = {v.strip() for v in r["set"].split(",")}
                ok = (have in values) if r["setop"] == "in" else (have not in values)
            else:
                ok = (key in labels) != bool(r["neg"])
            if not ok:
                return False
        return True

    return match


def format_selector(selector: Obj) -> str:
    """metav1.FormatLabelSelector: matchLabels then matchExpressions, as Scale.status.selector."""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        op, key, vals = expr["operator"], expr["key"], sorted(expr.get("values") or [])
        if op == "In":
            parts.append(f"{key} in ({','.join(vals)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(vals)})")
        elif op == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)


def field_matcher(text: str, allowed: tuple[str, ...]) -> Any:
    reqs = []
    for part in _split_selector(text or ""):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise ValueError(f"invalid selector: {part!r}")
        if m.group(1) not in allowed:
            raise ValueError(f"field label not supported: {m.group(1)}")
        reqs.append(m.groups())

    def match(obj: Obj) -> bool:
        for path, op, val in reqs:
            have = get_path(obj, "." + path)
            have = "" if have is None else str(have)
            if (have == val) != (op != "!="):
                return False
        return True

    return match


# --- paths and patches ---


def get_path(obj: Any, path: str) -> Any:
    for key in path.strip(".").split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def set_path(obj: Obj, path: str, value: Any) -> None:
    keys = path.strip(".").split(".")
    for key in keys[:-1]:
        obj = obj.setdefault(key, {})
    obj[keys[-1]] = value


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (null deletes a key; lists are replaced)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _pointer(path: str) -> list[str]:
    if not path.startswith("/"):
        raise ValueError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def json_patch(target: Obj, ops: Any) -> Obj:
    """RFC 6902 JSON patch: add, remove, replace, test (move/copy not modelled)."""
    if not isinstance(ops, list):
        raise ValueError(  # noqa: TRY004 - the API server's own words for this error
            "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"
        )
    doc = copy.deepcopy(target)
    for op in ops:
        keys = _pointer(op.get("path", ""))
        parent: Any = doc
        for key in keys[:-1]:
            parent = parent[int(key)] if isinstance(parent, list) else parent[key]
        last, kind = keys[-1], op.get("op")
        if kind == "test":
            have = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if have != op.get("value"):
                raise ValueError(f"testing value {op.get('path')} failed")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                idx = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(idx, op["value"])
                else:
                    parent[idx] = op["value"]
            else:
                if kind == "replace" and last not in parent:
                    raise ValueError(
                        f"replace operation does not apply: doc is missing key: {op['path']}"
                    )
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            elif last in parent:
                del parent[last]
            else:
                raise ValueError(
                    f"remove operation does not apply: doc is missing path: {op['path']}"
                )
        else:
            raise ValueError(f"unexpected kind: {kind}")
    return doc


@dataclass
class Faults:
    """Queued injections: [status code or callable, remaining count, method, path].

    A code is answered instead of the request; a callable runs before the request is
    handled (under the store lock), e.g. to make a concurrent write that causes a 409.
    """

    rules: list[list[Any]] = field(default_factory=list)

    def take(self, method: str, path: str) -> Any:
        for rule in self.rules:
            action, left, want_method, want_path = rule
            if left > 0 and want_method in (None, method) and want_path in (None, path):
                rule[1] -= 1
                return action
        return None
