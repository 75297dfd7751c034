"""The GPUScaler: what the live autoscaler scales, with which policy, within which bounds.

One schema serves two readers: ``gpuscale autoscale --config FILE`` reads it from
YAML, and the ``gpuscalers.gpuscale.io`` CustomResourceDefinition under
``deploy/crd/`` is generated from the same pydantic models (``control.crd``), so
a document the API server accepts is one the controller accepts. A file holds one
GPUScaler, several (``---`` separated) or a YAML list of them. Each names its
targets like an HPA's ``scaleTargetRef``, the policy and its parameters (the
policy's own config fields, ``control.params``), the bounds, the signals'
scoping and freshness, and whether to remediate pods on sick GPUs.

A bad file stops the controller before it acts, with one line naming the file,
the line, the key path (``spec.targets[2].policy.targetAverageValue``) and why.
"""

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from gpuscale.control.params import (
    BOUNDS,
    KINDS,
    SIGNAL_MODEL,
    build,
    camel,
    policy_model,
)
from gpuscale.control.scaledobject import (
    ScaledObjectTarget,
    as_gpuscaler,
    document_loc,
    is_scaled_object,
    is_scaled_object_document,
    scaled_object_problem,
)
from gpuscale.errors import ConfigError, config_error
from gpuscale.inputs import file_where, load_yaml, read_text_file
from gpuscale.metrics.rawquery import parse
from gpuscale.metrics.serving_stacks import StackName
from gpuscale.scaling.catalogue import PolicyKind

API_VERSION = "gpuscale.io/v1alpha1"
KIND = "GPUScaler"

_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS1123_LABEL = re.compile(_LABEL)
"""A namespace's form (RFC 1123 label, as Kubernetes checks it): at most 63 characters."""
DNS1123_SUBDOMAIN = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")
"""A Deployment's or StatefulSet's name (RFC 1123 subdomain): at most 253 characters."""
GROUP_VERSION = re.compile(rf"((?=.{{1,253}}/){_LABEL}(\.{_LABEL})*/)?{_LABEL}")
"""An apiVersion: ``v1`` or ``<group>/<version>``, the group a subdomain."""


def _matching(pattern: re.Pattern[str], form: str) -> Callable[[str], str]:
    """A validator refusing text that is not ``pattern`` before it reaches a request path."""

    def check(value: str) -> str:
        if pattern.fullmatch(value) is None:
            raise ValueError(f"must be {form}")  # the value is not echoed back
        return value

    return check


_SUBDOMAIN_FORM = "a DNS-1123 subdomain: lower-case letters, digits, '-' and '.', 253 at most"
_LABEL_FORM = "a DNS-1123 label: lower-case letters, digits and '-', 63 at most"
ObjectName = Annotated[str, AfterValidator(_matching(DNS1123_SUBDOMAIN, _SUBDOMAIN_FORM))]
NamespaceName = Annotated[str, AfterValidator(_matching(DNS1123_LABEL, _LABEL_FORM))]
GroupVersion = Annotated[
    str, AfterValidator(_matching(GROUP_VERSION, "v1 or <group>/<version>, e.g. apps/v1"))
]


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=False, allow_inf_nan=False
    )


class ScaleTargetRef(_Strict):
    """The scaled workload, as an HPA's ``scaleTargetRef`` names it."""

    api_version: GroupVersion = Field(
        "apps/v1", alias="apiVersion", description="API group/version."
    )
    kind: str = Field(
        "Deployment",
        pattern=r"^[A-Za-z][A-Za-z0-9]*$",
        description="Kind with a /scale subresource.",
    )
    name: ObjectName = Field(min_length=1, max_length=253, description="Object name.")
    namespace: NamespaceName | None = Field(
        None,
        min_length=1,
        max_length=63,
        description="Namespace; the GPUScaler's own namespace when absent.",
    )


def _http_url(value: str) -> str:
    if re.fullmatch(r"https?://[^\s/?#]+(/[^\s?#]*)?", value) is None:
        raise ValueError("must be an http(s) URL such as http://prometheus:9090")
    return value


class MetricsServer(_Strict):
    """A Prometheus-compatible server of this target's own (a KEDA trigger's ``serverAddress``)."""

    address: Annotated[str, AfterValidator(_http_url)] = Field(
        description="Base URL; /api/v1/query is appended."
    )
    headers: dict[str, str] = Field(
        default_factory=dict, description="Request headers (KEDA's customHeaders)."
    )
    query_parameters: dict[str, str] = Field(
        default_factory=dict,
        alias="queryParameters",
        description="Added to every query (KEDA's queryParameters and namespace).",
    )
    insecure_skip_verify: bool = Field(
        False, alias="insecureSkipVerify", description="Skip certificate checks (unsafeSsl)."
    )
    timeout_seconds: float = Field(5.0, alias="timeoutSeconds", gt=0, description="Per query.")


_OPERATORS = ("=~", "!~", "!=")


def _check_equalities(matchers: Mapping[str, str], prefix: str) -> None:
    """Refuse a matcher value written as a PromQL operator: matchers here are equalities."""
    for name, value in matchers.items():
        if value.startswith(_OPERATORS):
            raise ValueError(
                f"{prefix}matcher {name} is a label equality, not {value[:2]}; write "
                f"{name}{value[:2]}... in a raw query (a signal's query) instead"
            )


class MetricsSpec(_Strict):
    """How the policy's signals are scoped to this target and when they count as stale."""

    step_seconds: float = Field(
        15.0, alias="stepSeconds", gt=0, description="Resolution of history range queries."
    )
    stale_after_seconds: float = Field(
        60.0,
        alias="staleAfterSeconds",
        gt=0,
        description="A signal whose newest sample is older than this holds the target.",
    )
    scrape_interval_seconds: float = Field(
        15.0,
        alias="scrapeIntervalSeconds",
        gt=0,
        description="How often Prometheus scrapes the signals' series. A policy that samples "
        "faster (kpa: every second) is refused unless this is at most its interval.",
    )
    matchers: dict[str, str] = Field(
        default_factory=dict,
        description="Label matchers added to every signal of the policy (e.g. a job or model).",
    )
    signals: dict[str, SIGNAL_MODEL] = Field(  # type: ignore[valid-type]
        default_factory=dict,
        description="Replaces a policy signal by its key (the metric name the policy reads).",
    )
    serving_stack: StackName | None = Field(
        None,
        alias="servingStack",
        description="Read the serving stack's own series in place of gpuscale's serving "
        "series (requests running, queued and completed) and, for hybrid, its TTFT "
        "histogram as a quantile. A key in signals still wins.",
    )
    latency_quantile: float = Field(
        0.99,
        alias="latencyQuantile",
        gt=0,
        lt=1,
        description="With servingStack: the quantile its latency histograms are read at, "
        "the SLO's percentile (0.99 reads p99).",
    )

    server: MetricsServer | None = Field(
        None,
        description="Where this target's signals are read; absent: the controller's "
        "--prometheus. No --prometheus-* credentials are sent to it.",
    )

    @field_validator("matchers")
    @classmethod
    def _equalities(cls, matchers: dict[str, str]) -> dict[str, str]:
        _check_equalities(matchers, "")
        return matchers

    @field_validator("signals")
    @classmethod
    def _raw_queries_parse(cls, signals: dict[str, Any]) -> dict[str, Any]:
        for key, signal in signals.items():
            _check_equalities(signal.matchers, f"signal {key}: ")
            if signal.query:
                try:
                    parse(signal.query)
                except ValueError as exc:
                    raise ValueError(f"signal {key}: {exc}") from None
        return signals


def _policy_union() -> Any:  # noqa: ANN401 - a typing expression
    models = tuple(policy_model(kind) for kind in KINDS.values())
    return Annotated[Union[models], Field(discriminator="name")]  # noqa: UP007


if TYPE_CHECKING:
    PolicyModel = Any
else:
    PolicyModel = _policy_union()


class Target(_Strict):
    """One scale target and how it is scaled."""

    scale_target_ref: ScaleTargetRef = Field(alias="scaleTargetRef")
    min_replicas: int = Field(1, alias="minReplicas", ge=0, description="Lower bound.")
    max_replicas: int = Field(alias="maxReplicas", ge=1, description="Upper bound.")
    policy: PolicyModel = Field(description="Policy name and its parameters.")
    metrics: MetricsSpec = Field(default_factory=MetricsSpec)  # type: ignore[arg-type]
    max_scale_up_step: int | None = Field(
        None, alias="maxScaleUpStep", ge=1, description="Most replicas added in one sync."
    )
    max_scale_down_step: int | None = Field(
        None, alias="maxScaleDownStep", ge=1, description="Most replicas removed in one sync."
    )
    remediate: bool = Field(
        False, description="Delete a pod whose GPU is unhealthy (one per sync, never below min)."
    )
    cordon: bool = Field(False, description="With remediate: also cordon the sick GPU's node.")
    placement: bool = Field(
        False,
        description=(
            "Before a scale-in, mark the pods to go with controller.kubernetes.io/"
            "pod-deletion-cost (unhealthy, loading, then on the emptiest nodes) so whole "
            "GPU nodes empty; needs patch on pods."
        ),
    )

    @model_validator(mode="after")
    def _bounds(self) -> "Target":
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas {self.min_replicas} is above maxReplicas {self.max_replicas}"
            )
        return self

    @property
    def kind(self) -> PolicyKind:
        """The policy kind named in ``policy.name``."""
        return KINDS[str(self.policy.name)]


class Metadata(BaseModel):
    """Object metadata; only name and namespace are read, the rest is kept."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)

    name: ObjectName = Field(min_length=1, max_length=253)
    namespace: NamespaceName = Field("default", min_length=1, max_length=63)


def _keda_spelling(targets: object) -> object:
    """Targets written as KEDA ScaledObject specs, read into gpuscale's spelling.

    Raises:
        ValidationError: A ScaledObject spec gpuscale refuses, at its own key path.
    """
    if not isinstance(targets, list):
        return targets
    out: list[object] = []
    for i, item in enumerate(targets):
        if not is_scaled_object(item):
            out.append(item)
            continue
        try:
            out.append(ScaledObjectTarget.model_validate(item).target())
        except ValidationError as exc:
            details = [
                InitErrorDetails(
                    type=e["type"], loc=(i, *e["loc"]), input=e["input"], ctx=e.get("ctx", {})
                )
                for e in exc.errors()
            ]
            raise ValidationError.from_exception_data("ScaledObject", details) from None
    return out


class GPUScalerSpec(_Strict):
    """The targets one GPUScaler scales; each in gpuscale's spelling or a KEDA ScaledObject's."""

    targets: Annotated[list[Target], BeforeValidator(_keda_spelling)] = Field(min_length=1)


class GPUScaler(_Strict):
    """A ``gpuscale.io/v1alpha1`` GPUScaler document."""

    api_version: Literal["gpuscale.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["GPUScaler"]
    metadata: Metadata
    spec: GPUScalerSpec


def _path(loc: Sequence[int | str]) -> str:
    """``('spec', 'targets', 2, 'policy', 'hpa', 'x')`` -> ``spec.targets[2].policy.x``."""
    out = ""
    items = list(loc)
    for i, part in enumerate(items):
        if isinstance(part, int):
            out += f"[{part}]"
        elif i > 0 and items[i - 1] == "policy" and part in KINDS:
            continue  # the discriminated union's tag, not a key of the file
        else:
            out += ("." if out else "") + part
    return out


def _line(node: yaml.Node | None, loc: Sequence[int | str]) -> int | None:
    """The 1-based line of the deepest node of ``loc`` present in the YAML tree."""
    line = None if node is None else node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if getattr(k, "value", None) == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            nxt = node.value[part] if 0 <= part < len(node.value) else None
        else:
            nxt = None
        if nxt is None:
            if part in KINDS:
                continue
            break
        node, line = nxt, nxt.start_mark.line + 1
    return line


def _renamed_type(err: Any) -> bool:  # noqa: ANN401 - pydantic's ErrorDetails
    """Whether ``err`` is a rate policy's ``kind``, which the HPA spells ``type``."""
    loc = tuple(err["loc"])
    return bool(err["type"] == "extra_forbidden" and loc[-1:] == ("kind",) and "policies" in loc)


def _problem(err: Any) -> tuple[str, str]:  # noqa: ANN401 - pydantic's ErrorDetails
    kind, msg = err["type"], str(err["msg"]).removeprefix("Value error, ")
    if _renamed_type(err):
        return "unknown key", "rename it to type, as the HPA's behavior spells it"
    if kind == "extra_forbidden":
        return "unknown key", "remove it or check its spelling (keys are camelCase)"
    if kind == "missing":
        return "is required", "add it"
    if kind == "union_tag_invalid":
        tag = err.get("ctx", {}).get("tag", "")
        return f"unknown policy {tag!r}", f"use one of {', '.join(KINDS)}"
    if kind == "union_tag_not_found":
        return "policy has no name", f"set policy.name to one of {', '.join(KINDS)}"
    return msg[:1].lower() + msg[1:], "see docs/autoscaler.md for the schema"


def _documents(path: Path) -> list[tuple[Any, yaml.Node | None, str]]:
    """Each GPUScaler in the file with its YAML node and the key prefix naming it."""
    text = read_text_file(path, "--config")
    documents = load_yaml(text, file_where(path))
    docs: list[tuple[Any, yaml.Node | None, str]] = []
    for data, node in documents:
        if data is None:
            continue
        if isinstance(data, list) and isinstance(node, yaml.SequenceNode):
            docs += [
                (d, n, f"[{i}]") for i, (d, n) in enumerate(zip(data, node.value, strict=True))
            ]
        else:
            docs.append((data, node, ""))
    if len(docs) > 1:
        docs = [(d, n, p or f"[{i}]") for i, (d, n, p) in enumerate(docs)]
    if not docs:
        raise config_error(str(path), "holds no GPUScaler", "see deploy/examples/gpuscaler.yaml")
    return docs


def load(path: str | Path) -> list[GPUScaler]:
    """Read and validate a GPUScaler file.

    Args:
        path: YAML file: one GPUScaler, several documents, or a list of them; a
            KEDA ScaledObject document counts as a GPUScaler with one target.

    Returns:
        The validated GPUScalers, in file order.

    Raises:
        ConfigError: One line: ``FILE:LINE KEY.PATH: problem; fix``.
    """
    path = Path(path)
    out: list[GPUScaler] = []
    seen: dict[tuple[str, str, str], str] = {}
    for raw, node, prefix in _documents(path):
        whole_keda = is_scaled_object_document(raw)

        def where(
            loc: Sequence[int | str],
            node: yaml.Node | None = node,
            pre: str = prefix,
            keda: bool = whole_keda,
        ) -> str:
            loc = document_loc(tuple(loc)) if keda else loc
            line, key = _line(node, loc), _path(loc)
            key = f"{pre}.{key}" if pre and key else (pre or key)
            place = f"{path}:{line}" if line else str(path)
            return f"{place} {key}" if key else place

        data = raw
        if whole_keda:
            refused = scaled_object_problem(raw)
            if refused is not None:
                raise config_error(where(refused[0]), refused[1], refused[2])
            data = as_gpuscaler(raw, API_VERSION, KIND)
        doc = validate(data, where)
        for t, target in enumerate(doc.spec.targets):
            ident = target_ident(doc, target)
            loc: tuple[int | str, ...] = ("spec", "targets", t)
            if ident in seen:
                raise config_error(
                    where((*loc, "scaleTargetRef")),
                    f"{ident[0]} {ident[1]}/{ident[2]} is already scaled by {seen[ident]}",
                    "scale each workload from one target only",
                )
            seen[ident] = where(loc)
        out.append(doc)
    return out


def target_ident(doc: GPUScaler, target: Target) -> tuple[str, str, str]:
    """(kind, namespace, name) of a target: two targets with one ident fight over it.

    Returns:
        The ident.
    """
    ref = target.scale_target_ref
    return (ref.kind, ref.namespace or doc.metadata.namespace, ref.name)


def validate(data: Any, where: Callable[[Sequence[int | str]], str]) -> GPUScaler:  # noqa: ANN401 - parsed YAML or JSON
    """Validate one GPUScaler document, from a file or from the cluster, the same way.

    Args:
        data: The parsed document.
        where: Names the place of a key path (``FILE:LINE key`` for a file,
            ``GPUScaler NAMESPACE/NAME key`` for an object).

    Returns:
        The validated GPUScaler.

    Raises:
        ConfigError: One line naming the place, the problem and the fix.
    """
    try:
        doc = GPUScaler.model_validate(data)
    except ValidationError as exc:
        errs = exc.errors()
        err = next((e for e in errs if _renamed_type(e)), errs[0])  # not "type: required"
        problem, fix = _problem(err)
        raise config_error(where(tuple(err["loc"])), problem, fix) from None
    for t, target in enumerate(doc.spec.targets):
        try:
            policy_config(target)
        except ConfigError as exc:
            raise _policy_error(exc, ("spec", "targets", t), where) from None
    return doc


_DATACLASS_MESSAGE = re.compile(r"^\w+\.([\w.\[\]]+?)=(.*?): (.*)$")
_INDEXED = re.compile(r"^(\w+)\[(\d+)\]$")


def _policy_error(
    exc: ConfigError, loc: tuple[int | str, ...], where: Callable[[Sequence[int | str]], str]
) -> ConfigError:
    """Re-aim a policy config's own ``Config.field=value: problem; fix`` at the YAML key.

    A nested field (``HpaConfig.behavior.scale_up.policies[0].period_s``) is aimed at
    its own key (``policy.behavior.scaleUp.policies[0].periodSeconds``).
    """
    m = _DATACLASS_MESSAGE.match(str(exc))
    if m is None:
        return config_error(where((*loc, "policy")), str(exc), "see docs/autoscaler.md")
    dotted, value, rest = m.groups()
    keys: list[int | str] = []
    for part in dotted.split("."):
        indexed = _INDEXED.match(part)
        keys += [camel(indexed[1]), int(indexed[2])] if indexed else [camel(part)]
    name = dotted.split(".")[0]
    key: tuple[int | str, ...] = (*loc, *keys) if name in BOUNDS else (*loc, "policy", *keys)
    problem, _, fix = rest.partition("; ")
    return config_error(where(key), f"{value} is {problem}", fix or "see docs/autoscaler.md")


def policy_config(target: Target) -> Any:  # noqa: ANN401 - the policy's config dataclass
    """The policy's config dataclass, bounds from the target when it has them.

    Returns:
        The config.

    Raises:
        ConfigError: The config's own checks refused a value.
    """
    kind = target.kind
    bounds = (
        {"min_replicas": target.min_replicas, "max_replicas": target.max_replicas}
        if kind.bounded()
        else {}
    )
    return build(target.policy, **bounds)


def object_where(namespace: str, name: str) -> Callable[[Sequence[int | str]], str]:
    """Names a key of a GPUScaler object in the cluster, as ``validate`` reports it.

    Returns:
        ``loc`` -> ``GPUScaler NAMESPACE/NAME key.path``.
    """

    def where(loc: Sequence[int | str]) -> str:
        return f"GPUScaler {namespace}/{name} {_path(loc)}".rstrip()

    return where
