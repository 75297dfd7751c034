"""One chokepoint for every request to the API server: retries, backoff and one-line errors.

409, 429, 5xx and connection errors are retried with capped exponential backoff
and full jitter (client-go's rule for conflicts and throttling); a 403 becomes one
``KubeForbiddenError`` naming the RBAC rule to add; anything else is one
``KubeUnavailableError`` line. It sends through the ``kubernetes`` client's
``ApiClient``, which ``control/kubernetes.py`` builds (the only module that
imports the client), so this module needs only the two methods it calls.
"""

import json
import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import urllib3

from gpuscale.errors import PermanentError, TransientError

logger = logging.getLogger(__name__)

T = TypeVar("T")
Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class Response(Protocol):
    """What ``ApiClient.call_api`` returns (the client's ``RESTResponse``)."""

    @property
    def status(self) -> int:
        """The HTTP status."""
        ...

    @property
    def headers(self) -> Mapping[str, str] | None:
        """The response headers."""
        ...

    def read(self) -> bytes:
        """The whole body."""
        ...


class ApiClientLike(Protocol):
    """The two methods of ``kubernetes.client.ApiClient`` a request needs."""

    @property
    def param_serialize(self) -> Callable[..., tuple[object, ...]]:
        """Builds the request's method, URL, headers and body, with auth applied."""
        ...

    @property
    def call_api(self) -> Callable[..., Response]:
        """Sends a serialized request."""
        ...


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard to retry 409, 429, 5xx and connection errors.

    Attributes:
        attempts: Tries in all, the first included.
        base_s: First backoff cap, seconds; doubles per retry (full jitter below the cap).
        max_s: Largest backoff cap, seconds.
        total_s: Give up once this much time has passed since the first try, seconds.
        timeout_s: Per-request timeout, seconds.
    """

    attempts: int = 5
    base_s: float = 0.2
    max_s: float = 5.0
    total_s: float = 20.0
    timeout_s: float = 10.0


class KubeForbiddenError(PermanentError):
    """The API server answered 403: the controller's service account lacks an RBAC rule.

    Attributes:
        rule: The missing rule, as a Role/ClusterRole ``rules`` entry in flow YAML.
    """

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


class KubeUnavailableError(TransientError):
    """The API server could not be reached or refused the request for another reason.

    Attributes:
        status: The HTTP status, or None for a connection error or timeout.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class NotLeaderError(TransientError):
    """A write was refused before it was sent: this replica may no longer hold the Lease."""


WriteGuard = Callable[[str], None]
"""Called with ``METHOD path`` before each write is sent; raises ``NotLeaderError`` to stop it."""


class _RetryableError(Exception):
    def __init__(self, cause: str, status: int | None, delay_s: float | None = None) -> None:
        super().__init__(cause)
        self.status = status
        self.delay_s = delay_s


def _request_parts(method: str, path: str) -> tuple[str, str, str, str]:
    """(verb, resource[/subresource], API group, namespace) of a request path."""
    segs = path.split("?")[0].strip("/").split("/")
    group, rest = ("", segs[2:]) if segs[0] == "api" else (segs[1], segs[3:])
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    resource = rest[0] if rest else ""
    if len(rest) >= 3:
        resource += "/" + rest[2]
    verb = ("get" if len(rest) >= 2 else "list") if method == "GET" else _VERBS[method]
    return verb, resource, group, namespace


def _forbidden(method: str, path: str, body: str) -> KubeForbiddenError:
    verb, resource, group, namespace = _request_parts(method, path)
    user = re.search(r'User "([^"]*)"', _message(body))
    who = f' for User "{user.group(1)}"' if user else ""
    where = f'in namespace "{namespace}"' if namespace else "at cluster scope"
    rule = f'{{apiGroups: ["{group}"], resources: ["{resource}"], verbs: ["{verb}"]}}'
    scope = "Role" if namespace else "ClusterRole"
    return KubeForbiddenError(
        f'Kubernetes API forbids {verb} on {resource} in API group "{group}" {where}{who}; '
        f"add this rule to the controller's {scope}: {rule}",
        rule,
    )


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", "")) or body[:200]
    except (ValueError, AttributeError):
        return body[:200]


class KubeCall:
    """One chokepoint for every request: serialization, auth, timeouts, retries, errors.

    Args:
        api_client: A configured ``kubernetes.client.ApiClient``.
        retry: The retry bounds.
        sleep: Sleeps between retries (a seam for tests).
        monotonic: Elapsed-time clock for the total bound (a seam for tests).
        rng: Jitter source.
    """

    def __init__(
        self,
        api_client: ApiClientLike,
        retry: RetryPolicy | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.api_client = api_client
        self.retry = retry or RetryPolicy()
        self.guard: WriteGuard | None = None
        """Checked before every write (each retry included): leadership, in the controller."""
        self._sleep = sleep
        self._monotonic = monotonic
        self._rng = rng or random.Random()  # noqa: S311 - backoff jitter, not a secret

    def __call__(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        retry_conflicts: bool = True,
    ) -> Json:
        """Send one request, retried within the policy's bounds.

        Returns:
            The decoded JSON answer.

        Raises:
            KubeForbiddenError: On 403.
            KubeUnavailableError: On any other failure, or when retries run out.
        """
        return self.retrying(
            f"{method} {path}",
            lambda: self.once(method, path, query=query, body=body, content_type=content_type),
            retry_conflicts=retry_conflicts,
        )

    def once(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
    ) -> Json:
        """Send one request with no retry; retryable failures raise ``_RetryableError``.

        Returns:
            The decoded JSON answer.

        Raises:
            NotLeaderError: The write guard refused a write (nothing was sent).
        """
        if method != "GET" and self.guard is not None:
            self.guard(f"{method} {path}")
        headers = {"Accept": "application/json", "Content-Type": content_type}
        params = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(*params, _request_timeout=self.retry.timeout_s)
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise _RetryableError(
                f"cannot reach the API server: {type(exc).__name__}", None
            ) from None
        text = data.decode("utf-8", "replace") if data else ""
        code = int(response.status)
        if 200 <= code < 300:
            try:
                return json.loads(text) if text else {}
            except ValueError:
                raise KubeUnavailableError(f"{method} {path}: answer is not JSON", code) from None
        if code == 403:
            raise _forbidden(method, path, text)
        if code in (409, 429) or code >= 500:
            after = response.headers.get("Retry-After") if response.headers else None
            delay = float(after) if after and after.isdigit() else None
            raise _RetryableError(f"HTTP {code}: {_message(text)}", code, delay)
        raise KubeUnavailableError(f"{method} {path}: HTTP {code}: {_message(text)}", code)

    def retrying(self, what: str, op: Callable[[], T], *, retry_conflicts: bool = True) -> T:
        """Run ``op`` until it succeeds or the policy's bounds run out.

        Returns:
            What ``op`` returns.

        Raises:
            KubeUnavailableError: When the last try still failed retryably.
        """
        policy, start = self.retry, self._monotonic()
        for attempt in range(1, policy.attempts + 1):
            try:
                return op()
            except _RetryableError as exc:
                cap = min(policy.max_s, policy.base_s * 2 ** (attempt - 1))
                delay = exc.delay_s if exc.delay_s is not None else self._rng.uniform(0, cap)
                final = attempt == policy.attempts or (exc.status == 409 and not retry_conflicts)
                if final or self._monotonic() - start + delay > policy.total_s:
                    raise KubeUnavailableError(
                        f"{what}: {exc} (gave up after {attempt} attempt(s))", exc.status
                    ) from None
                logger.debug("kubernetes: %s: %s; retry %d in %.2f s", what, exc, attempt, delay)
                self._sleep(delay)
        raise AssertionError("unreachable")  # pragma: no cover
