"""Metadata of the rendered ``PrometheusRule``, checked against Kubernetes' rules for object names.

The Prometheus Operator loads a ``PrometheusRule`` only when its labels match
the ``ruleSelector`` of the ``Prometheus`` resource and its namespace is one the
operator watches. kube-prometheus-stack's chart selects ``release: <Helm
release name>`` by default, so the object's own labels (not the rules' labels)
decide whether the rules are loaded at all. The API server refuses names,
namespaces and label keys or values outside its grammar; they are refused here
first, with the key that holds them.
"""

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from gpuscale.alerts.alert_settings import Settings

# k8s.io/apimachinery/pkg/util/validation: IsDNS1123Subdomain, IsDNS1123Label,
# IsQualifiedName and IsValidLabelValue.
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*"
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_QUALIFIED_NAME = rf"(?:(?=[^/]{{1,253}}/){_SUBDOMAIN}/)?(?=[^/]{{1,63}}$){_NAME}"
_ENDS = "starting and ending with a letter or digit"


def _grammar(pattern: str, max_len: int, what: str) -> AfterValidator:
    """A validator refusing text longer than ``max_len`` or outside ``pattern``."""
    compiled = re.compile(pattern)

    def check(text: str) -> str:
        if len(text) > max_len or not compiled.fullmatch(text):
            msg = f"is not a Kubernetes {what}, {_ENDS}"
            raise ValueError(msg)
        return text

    return AfterValidator(check)


ObjectName = Annotated[
    str,
    _grammar(
        _SUBDOMAIN, 253, "object name: lower-case letters, digits, - and ., at most 253 characters"
    ),
]
Namespace = Annotated[
    str,
    _grammar(_DNS_LABEL, 63, "namespace: lower-case letters, digits and -, at most 63 characters"),
]
Key = Annotated[
    str,
    _grammar(
        _QUALIFIED_NAME,
        253 + 1 + 63,
        "label or annotation key: an optional DNS prefix and /, then at most 63 letters, "
        "digits, -, _ and .",
    ),
]
LabelValue = Annotated[
    str, _grammar(f"(?:{_NAME})?", 63, "label value: at most 63 letters, digits, -, _ and .")
]

DEFAULT_LABELS = {"app.kubernetes.io/name": "gpuscale", "release": "kube-prometheus-stack"}
"""``release: kube-prometheus-stack`` is what kube-prometheus-stack's default ruleSelector
matches when the chart is installed under that release name; set it to yours."""


class ResourceMetadata(Settings):
    """``metadata`` of the ``PrometheusRule`` (the rules' own labels are ``labels``).

    Attributes:
        name: The object's name.
        namespace: Its namespace; None leaves it to ``kubectl apply -n``.
        labels: Its labels, which the ``Prometheus`` resource's ``ruleSelector`` matches.
        annotations: Its annotations.
    """

    name: ObjectName = "gpuscale"
    namespace: Namespace | None = None
    labels: dict[Key, LabelValue] = Field(default_factory=lambda: dict(DEFAULT_LABELS))
    annotations: dict[Key, str] = Field(default_factory=dict)
