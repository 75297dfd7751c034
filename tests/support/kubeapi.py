"""A kube-apiserver test double: a threaded HTTP server on 127.0.0.1 that the real
``kubernetes`` client talks to through a kubeconfig the double writes.

No kube-apiserver can run on these machines, so the actuator and the lease elector are
tested against this. It answers with the JSON shapes and status codes of the Kubernetes
API reference: discovery (``/api``, ``/apis``, ``/version``, APIResourceLists), apps/v1
Deployments and StatefulSets with their ``scale`` subresource (autoscaling/v1 Scale,
``status.selector`` as a string), core/v1 Pods (labelSelector, fieldSelector), Nodes,
Events, ConfigMaps (key names and the 1 MiB total checked), coordination.k8s.io/v1
Leases, and any scalable custom kind a test registers.
Every object has ``metadata.resourceVersion``; a PUT or PATCH naming a stale one answers
409 Conflict; merge, strategic-merge (as a merge) and JSON patches are applied; errors
are meta/v1 Status objects with the real reasons and message shapes.

A minimal controller (kubeapi_workloads.py) keeps each Deployment and StatefulSet at its
``spec.replicas``: it creates pods (``<name>-<template hash>-<5 chars>`` or
``<name>-<ordinal>``), schedules them over the double's nodes (skipping cordoned ones),
marks them Ready after a per-workload delay on the double's clock, and replaces deleted
pods. Test hooks queue injected 5xx/403 answers and count requests by verb and path.

What the double does not model (and so what these tests cannot show):
- authentication beyond one optional bearer token, and RBAC evaluation: a 403 happens only
  when a test injects one;
- admission (webhooks, quotas, limit ranges, defaulting beyond a few fields) and most
  validation (only Scale.spec.replicas >= 0, names, and Time/MicroTime formats are checked);
- watches (``watch=true`` answers 400), list pagination (``limit``/``continue``), server-side
  apply (``application/apply-patch+yaml`` answers 415), dry run, protobuf/CBOR;
- strategic merge patch list semantics: a strategic merge patch is applied as a JSON
  merge patch (lists are replaced, not merged by key);
- garbage collection: deleting a workload leaves its pods; no ReplicaSet or
  ControllerRevision objects are served, rollouts on template change are not performed;
- the kubelet: containers do not run; phase goes Pending -> Running on scheduling, Ready
  after the configured delay; no probes, restarts, resources or taints/tolerations;
- the scheduler only spreads pods over schedulable nodes (``spec.unschedulable``); no
  resources, affinity or GPU accounting;
- Events are stored as sent (no aggregation or series, no TTL); status subresources of
  workloads are not served; conditions on Deployments are not written;
- namespaces are not objects (every namespace exists); DeleteOptions (grace period,
  preconditions, propagation policy) and the ``resourceVersion`` list parameters are
  ignored; a PUT with no resourceVersion is an unconditional update for every kind.
"""

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from tests.support import kubeapi_model as m
from tests.support.kubeapi_model import Obj, Resource
from tests.support.kubeapi_store import ApiError, Store
from tests.support.kubeapi_workloads import GPU, Workloads, is_ready

DEFAULT_USER = "system:serviceaccount:gpuscale:gpuscale-autoscaler"


class ManualClock:
    """A clock a test advances by hand (seconds since the epoch)."""

    def __init__(self, start: float = 1_767_225_600.0) -> None:  # 2026-01-01T00:00:00Z
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class KubeApiDouble:
    """The API server double. Use as a context manager or call start()/stop().

    Args:
        token: When set, every request must carry ``Authorization: Bearer <token>`` (else 401).
        clock: Seconds since the epoch; a ``ManualClock`` makes pod readiness deterministic.
        nodes: Node names to create; pods are spread over the schedulable ones.
        ready_after_s: Default delay from scheduling to Ready.
        terminate_after_s: Grace period of a deleted pod (0: it goes at once).
        user: The user named in injected 403 messages.
    """

    def __init__(
        self,
        *,
        token: str | None = None,
        clock: Callable[[], float] = time.time,
        nodes: tuple[str, ...] = ("node-a", "node-b", "node-c"),
        ready_after_s: float = 0.0,
        terminate_after_s: float = 0.0,
        user: str = DEFAULT_USER,
    ) -> None:
        self.token = token
        self.user = user
        self.clock = clock
        self.store = Store(clock)
        self.workloads = Workloads(
            self.store, ready_after_s=ready_after_s, terminate_after_s=terminate_after_s
        )
        self.faults = m.Faults()
        self.stalls = m.Faults()
        self.requests: Counter[str] = Counter()
        # A slow API server for one client (by User-Agent): seconds each request of it
        # waits before it is handled, by path fragment ("" matches every path); a
        # callable is asked for each request (a random delay).
        self.agent_stalls: dict[str, list[tuple[str, float | Callable[[], float]]]] = {}
        # Every write the store applied: (double's time, User-Agent, "METHOD path", the
        # Lease's holder after it when the path is a Lease's, else "").
        self.writes: list[tuple[float, str, str, str]] = []
        # The Lease's stored spec after each write of it: (index in ``writes``, spec).
        self.lease_specs: list[tuple[int, Obj]] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        for node in nodes:
            self.add_node(node)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> "KubeApiDouble":
        handler = type("Handler", (_Handler,), {"api": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "KubeApiDouble":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._server is not None, "start() the double first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write a kubeconfig (context ``double``) pointing at this server; returns ``path``."""
        user: Obj = {"token": self.token} if self.token else {}
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "double", "cluster": {"server": self.url}}],
            "users": [{"name": "double", "user": user}],
            "contexts": [
                {
                    "name": "double",
                    "context": {"cluster": "double", "user": "double", "namespace": namespace},
                }
            ],
            "current-context": "double",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # --- seeding and inspection (no HTTP) --------------------------------------------------

    def add_node(self, name: str, *, gpus: int | None = None) -> Obj:
        """Add a Ready node; with ``gpus``, the device plugin's allocatable ``nvidia.com/gpu``."""
        with self.store.lock:
            status: Obj = {"conditions": [{"type": "Ready", "status": "True"}]}
            if gpus is not None:
                status["capacity"] = status["allocatable"] = {GPU: str(gpus)}
            body = {
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {},
                "status": status,
            }
            return self.store.create(self._res("v1", "nodes"), "", body)

    def create_deployment(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 1,
        labels: dict[str, str] | None = None,
        ready_after_s: float | None = None,
        annotations: dict[str, str] | None = None,
        gpus: int = 0,
    ) -> Obj:
        """Create a Deployment whose pods turn Ready ``ready_after_s`` after scheduling.

        With ``gpus``, each pod's container sets that many ``nvidia.com/gpu`` as limits.
        """
        return self._create_workload(
            "deployments", name, namespace, replicas, labels, ready_after_s, annotations, gpus=gpus
        )

    def create_statefulset(
        self,
        name: str,
        namespace: str = "default",
        *,
        replicas: int = 1,
        labels: dict[str, str] | None = None,
        ready_after_s: float | None = None,
        parallel: bool = False,
    ) -> Obj:
        """Create a StatefulSet (OrderedReady unless ``parallel``)."""
        extra = {"podManagementPolicy": "Parallel" if parallel else "OrderedReady"}
        return self._create_workload(
            "statefulsets", name, namespace, replicas, labels, ready_after_s, None, extra
        )

    def _create_workload(
        self,
        plural: str,
        name: str,
        namespace: str,
        replicas: int,
        labels: dict[str, str] | None,
        ready_after_s: float | None,
        annotations: dict[str, str] | None,
        extra_spec: Obj | None = None,
        *,
        gpus: int = 0,
    ) -> Obj:
        labels = labels or {"app": name}
        container: Obj = {"name": "serve", "image": "registry.example/serve:1"}
        if gpus:
            container["resources"] = {"limits": {GPU: str(gpus)}}
        body = {
            "metadata": {"name": name, "labels": dict(labels), "annotations": annotations or {}},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": dict(labels)},
                "template": {
                    "metadata": {"labels": dict(labels)},
                    "spec": {"containers": [container]},
                },
                **(extra_spec or {}),
            },
            "status": {},
        }
        if not body["metadata"]["annotations"]:
            del body["metadata"]["annotations"]
        with self.store.lock:
            obj = self.store.create(self._res("apps/v1", plural), namespace, body)
            if ready_after_s is not None:
                self.workloads.delays[obj["metadata"]["uid"]] = ready_after_s
            self.workloads.sync()
            return obj

    def register_scalable_kind(
        self, group: str, version: str, kind: str, plural: str, *, namespaced: bool = True
    ) -> Resource:
        """Serve a custom kind with a CRD-style /scale subresource (no controller)."""
        res = Resource(
            group, version, plural, kind, namespaced=namespaced, scale=True, builtin=False
        )
        with self.store.lock:
            self.store.add_resource(res)
        return res

    def create_object(self, group_version: str, plural: str, body: Obj, namespace: str = "") -> Obj:
        with self.store.lock:
            obj = self.store.create(self._res(group_version, plural), namespace, body)
            self.workloads.sync()
            return obj

    def patch_object(
        self, group_version: str, plural: str, name: str, namespace: str, patch: Obj
    ) -> Obj:
        """Merge-patch an object as another API client would (bumps its resourceVersion)."""
        with self.store.lock:
            res = self._res(group_version, plural)
            obj = self.store.patch(res, namespace, name, "application/merge-patch+json", patch)
            self.workloads.sync()
            return obj

    def get(self, group_version: str, plural: str, name: str, namespace: str = "") -> Obj | None:
        """The stored object (a live reference; copy before changing), or None."""
        with self.store.lock:
            self.workloads.sync()
            return self.store.objects.get((group_version, plural, namespace, name))

    def pods(self, namespace: str = "default", selector: str = "") -> list[Obj]:
        with self.store.lock:
            self.workloads.sync()
            return self.store.list(self._res("v1", "pods"), namespace, selector)

    def ready_pods(self, namespace: str = "default", selector: str = "") -> list[Obj]:
        return [p for p in self.pods(namespace, selector) if is_ready(p)]

    def set_pod_ready(self, namespace: str, name: str, ready: bool) -> None:
        """Force a pod's readiness (as a failing or recovering readiness probe would)."""
        with self.store.lock:
            pod = self.store.get(self._res("v1", "pods"), namespace, name)
            self.workloads.hold_unready(pod, ready)
            self.workloads.sync()

    def _res(self, group_version: str, plural: str) -> Resource:
        return self.store.resource(group_version, plural)

    # --- fault hooks and counters ----------------------------------------------------------

    def fail_next(
        self, code: int, count: int = 1, *, method: str | None = None, path: str | None = None
    ) -> None:
        """Answer the next ``count`` requests (matching method and exact path) with ``code``.

        5xx answers are InternalError/ServiceUnavailable Status bodies; 403 is the RBAC
        authorizer's Forbidden message for the request's verb and resource.
        """
        with self.store.lock:
            self.faults.rules.append([code, count, method, path])

    def before_next(
        self,
        action: Callable[[], object],
        count: int = 1,
        *,
        method: str | None = None,
        path: str | None = None,
    ) -> None:
        """Run ``action`` before the next ``count`` matching requests are handled."""
        with self.store.lock:
            self.faults.rules.append([action, count, method, path])

    def stall_next(
        self, seconds: float, count: int = 1, *, method: str | None = None, path: str | None = None
    ) -> None:
        """Answer the next ``count`` matching requests ``seconds`` late (a slow API server)."""
        with self.store.lock:
            self.stalls.rules.append([seconds, count, method, path])

    def count(self, method: str, path: str) -> int:
        """Requests seen for ``METHOD path`` (path without the query string)."""
        return self.requests[f"{method} {path}"]

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the store lock (requests wait), e.g. to change several objects at once."""
        with self.store.lock:
            yield


# --- HTTP ------------------------------------------------------------------------------------


def _verb(method: str, name: str, query: dict[str, list[str]]) -> str:
    if method == "GET":
        if query.get("watch", ["false"])[0] in ("true", "1"):
            return "watch"
        return "get" if name else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
        method, method.lower()
    )


class _Handler(BaseHTTPRequestHandler):
    api: KubeApiDouble
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as two writes; no 40 ms stall

    def log_message(self, format: str, *args: Any) -> None:
        pass  # keep test output quiet

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _send(self, code: int, body: Obj) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        retry_after = (body.get("details") or {}).get("retryAfterSeconds")
        if body.get("kind") == "Status" and retry_after:
            self.send_header("Retry-After", str(retry_after))
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        # the client may have given up (a timeout test); there is no one to answer then
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(data)

    def _serve(self, method: str) -> None:
        parts = urlsplit(self.path)
        path, query = parts.path.rstrip("/") or "/", parse_qs(parts.query)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api = self.api
        agent = self.headers.get("User-Agent", "")
        with api.store.lock:
            api.requests[f"{method} {path}"] += 1
            stall = api.stalls.take(method, path)
            for fragment, seconds in api.agent_stalls.get(agent, ()):
                if fragment in path:
                    stall = max(stall or 0.0, seconds() if callable(seconds) else seconds)
                    break
        if stall:
            time.sleep(stall)  # outside the lock: other requests are answered meanwhile
        with api.store.lock:
            try:
                _authenticate(api, self.headers.get("Authorization"))
                api.workloads.sync()
                code, body = _route(
                    api, method, path, query, raw, self.headers.get("Content-Type", "")
                )
                api.workloads.sync()
            except ApiError as exc:
                code, body = exc.code, exc.body
            if method != "GET" and 200 <= code < 300:
                holder = ""
                if "/leases/" in path or path.endswith("/leases"):
                    ns = str((body.get("metadata") or {}).get("namespace") or "")
                    key = ("coordination.k8s.io/v1", "leases", ns, body_name(body))
                    lease = api.store.objects.get(key)
                    spec = (lease or {}).get("spec") or {}
                    holder = spec.get("holderIdentity") or ""
                    api.lease_specs.append((len(api.writes), dict(spec)))
                api.writes.append((api.clock(), agent, f"{method} {path}", holder))
        self._send(code, body)


def body_name(body: Obj) -> str:
    """The name of the object an answer holds ("" when none)."""
    return str((body.get("metadata") or {}).get("name") or "")


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # Go's decoder rejects NaN and Infinity too


def _authenticate(api: KubeApiDouble, header: str | None) -> None:
    if api.token and header != f"Bearer {api.token}":
        raise ApiError(m.status(401, "Unauthorized", "Unauthorized"))


def _route(
    api: KubeApiDouble, method: str, path: str, query: dict[str, list[str]], raw: bytes, ctype: str
) -> tuple[int, Obj]:
    segs = path.strip("/").split("/")
    discovery = _discovery(api, segs)
    if discovery is not None:
        _fault(api, method, path, None)
        return 200, discovery
    if segs[0] == "api" and len(segs) >= 3:
        gv, rest = segs[1], segs[2:]
    elif segs[0] == "apis" and len(segs) >= 4:
        gv, rest = f"{segs[1]}/{segs[2]}", segs[3:]
    else:
        raise ApiError(
            m.status(404, "NotFound", "the server could not find the requested resource")
        )
    ns = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    plural, name, sub = (
        rest[0],
        (rest[1] if len(rest) > 1 else ""),
        (rest[2] if len(rest) > 2 else ""),
    )
    res = api.store.resource(gv, plural)
    verb = _verb(method, name, query)
    _fault(api, method, path, (res, verb, ns, name, sub))
    if verb == "watch":
        raise ApiError(m.bad_request("watch is not modelled by the API double"))
    body: Any = None
    if raw:
        try:
            body = json.loads(raw, parse_constant=_no_constant)
        except (json.JSONDecodeError, ValueError) as exc:
            raise ApiError(m.bad_request(f"invalid JSON in request body: {exc}")) from None
    store = api.store
    if sub == "scale":
        if not res.scale:
            raise ApiError(
                m.status(404, "NotFound", "the server could not find the requested resource")
            )
        if method == "GET":
            return 200, store.scale_of(res, store.get(res, ns, name))
        if method == "PUT":
            return 200, store.write_scale(res, ns, name, body or {})
        if method == "PATCH":
            current = store.scale_of(res, store.get(res, ns, name))
            patched = store.apply_patch(res, current, ctype, body)
            return 200, store.write_scale(res, ns, name, patched)
        raise ApiError(m.status(405, "MethodNotAllowed", f"{method} is not supported on scale"))
    if sub:
        raise ApiError(
            m.status(404, "NotFound", "the server could not find the requested resource")
        )
    if method == "GET" and name:
        return 200, store.get(res, ns, name)
    if method == "GET":
        items = store.list(
            res, ns, query.get("labelSelector", [""])[0], query.get("fieldSelector", [""])[0]
        )
        strip = [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]
        meta = {"resourceVersion": str(store._rv)}
        return 200, {
            "kind": f"{res.kind}List",
            "apiVersion": res.group_version,
            "metadata": meta,
            "items": strip,
        }
    if method == "POST" and not name:
        return 201, store.create(res, ns, body or {})
    if method == "PUT" and name:
        return 200, store.replace(res, ns, name, body or {})
    if method == "PATCH" and name:
        return 200, store.patch(res, ns, name, ctype, body)
    if method == "DELETE" and name:
        obj = store.get(res, ns, name)
        if res.plural == "pods":
            return 200, api.workloads.terminate(obj)
        return 200, store.delete(res, ns, name)
    raise ApiError(
        m.status(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    )


def _fault(api: KubeApiDouble, method: str, path: str, target: tuple[Any, ...] | None) -> None:
    code = api.faults.take(method, path)
    if code is None:
        return
    if callable(code):
        code()
        return
    if code == 403 and target is not None:
        res, verb, ns, name, sub = target
        raise ApiError(m.forbidden(res, verb, api.user, ns, name, sub))
    if code == 403:
        raise ApiError(
            m.status(403, "Forbidden", f'forbidden: User "{api.user}" cannot get path "{path}"')
        )
    known = code >= 500 or code == 429
    raise ApiError(m.server_error(code) if known else m.status(code, "Unknown", "injected fault"))


def _discovery(api: KubeApiDouble, segs: list[str]) -> Obj | None:
    resources = list(api.store.resources.values())
    if segs == ["version"]:
        return {
            "major": "1",
            "minor": "31",
            "gitVersion": "v1.31.0",
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2024-08-13T07:28:49Z",
            "goVersion": "go1.22.5",
            "compiler": "gc",
            "platform": "linux/amd64",
        }
    if segs == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": api.url[7:]}
            ],
        }
    if segs == ["apis"]:
        groups: dict[str, list[str]] = {}
        for r in resources:
            if r.group and r.version not in groups.setdefault(r.group, []):
                groups[r.group].append(r.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in groups.items()
            ],
        }
    if segs == ["api", "v1"] or (len(segs) == 3 and segs[0] == "apis"):
        gv = "v1" if segs[0] == "api" else f"{segs[1]}/{segs[2]}"
        listed = [r for r in resources if r.group_version == gv]
        if not listed:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv,
            "resources": [d for r in listed for d in r.discovery()],
        }
    return None
