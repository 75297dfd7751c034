"""The options that reach Prometheus and the cluster, shared by every command that scales.

``gpuscale autoscale`` and ``gpuscale keda-scaler`` both read signals from a
Prometheus-compatible API and the workload from the Kubernetes API, with the same
flags, environment variables and checks; they are declared once here, as
``Annotated`` types a command's signature uses, and ``prometheus_source`` builds
the source from them.
"""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuscale.durations import positive_seconds_option
from gpuscale.errors import config_error
from gpuscale.inputs import read_text_file

if TYPE_CHECKING:
    from gpuscale.metrics.prometheus import PrometheusSource

_SECRET_MAX_BYTES = 64 * 1024  # a token or USER:PASSWORD; a JWT is a few KiB

_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

StateConfigMapName = Annotated[
    str,
    typer.Option(
        "--state-configmap",
        help="ConfigMap holding each target's policy state, one key per target, in this "
        "process's own namespace (the Lease's, for autoscale); created on the first write.",
        envvar="GPUSCALE_STATE_CONFIGMAP",
    ),
]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        help="Kubeconfig file (default: in-cluster config, else ~/.kube/config).",
        envvar="GPUSCALE_KUBECONFIG",
    ),
]
KubeContext = Annotated[
    str | None,
    typer.Option(help="Kubeconfig context (default: the current one).", envvar="GPUSCALE_CONTEXT"),
]
PrometheusUrl = Annotated[
    str,
    typer.Option(
        help="Prometheus-compatible query API base URL (Prometheus, VictoriaMetrics, "
        "Thanos); a malformed one exits 2, one that does not answer at start is a warning "
        "and every target holds until it does.",
        envvar="GPUSCALE_PROMETHEUS",
    ),
]
PrometheusTimeout = Annotated[
    float,
    typer.Option(
        parser=positive_seconds_option,
        metavar="<duration>",
        help="Seconds before a query is abandoned.",
        envvar="GPUSCALE_PROMETHEUS_TIMEOUT",
    ),
]
PrometheusBearerTokenFile = Annotated[
    Path | None,
    typer.Option(
        help="File holding a bearer token for Prometheus.",
        envvar="GPUSCALE_PROMETHEUS_BEARER_TOKEN_FILE",
    ),
]
PrometheusCaFile = Annotated[
    Path | None,
    typer.Option(
        help="PEM CA bundle to verify Prometheus' certificate.",
        envvar="GPUSCALE_PROMETHEUS_CA_FILE",
    ),
]
PrometheusBasicAuthFile = Annotated[
    Path | None,
    typer.Option(
        help="File holding USER:PASSWORD for Prometheus basic auth.",
        envvar="GPUSCALE_PROMETHEUS_BASIC_AUTH_FILE",
    ),
]
PrometheusCertFile = Annotated[
    Path | None,
    typer.Option(
        help="PEM client certificate for Prometheus (with --prometheus-key-file).",
        envvar="GPUSCALE_PROMETHEUS_CERT_FILE",
    ),
]
PrometheusKeyFile = Annotated[
    Path | None,
    typer.Option(
        help="PEM private key of --prometheus-cert-file.", envvar="GPUSCALE_PROMETHEUS_KEY_FILE"
    ),
]
PrometheusInsecureSkipVerify = Annotated[
    bool,
    typer.Option(
        "--prometheus-insecure-skip-verify",
        help="Do not verify Prometheus' certificate (KEDA's unsafeSsl).",
        envvar="GPUSCALE_PROMETHEUS_INSECURE_SKIP_VERIFY",
    ),
]


def read_secret(path: Path | None, flag: str) -> str | None:
    """A small secret file's text, stripped (None when not given).

    Returns:
        The secret.

    Raises:
        ConfigError: The file is missing, unreadable or too large (named by ``flag``).
    """
    if path is None:
        return None
    return read_text_file(path, flag, limit=_SECRET_MAX_BYTES).strip()


def prometheus_source(
    url: str,
    *,
    timeout_s: float,
    bearer_token_file: Path | None,
    basic_auth_file: Path | None,
    ca_file: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    insecure_skip_verify: bool,
) -> "PrometheusSource":
    """The Prometheus source the ``--prometheus-*`` flags describe, checked.

    Returns:
        The source (close it when done).

    Raises:
        ConfigError: A secret file is unreadable or malformed, or both ways to
            authenticate are given.
    """
    from gpuscale.metrics.prometheus import PrometheusSource

    token = read_secret(bearer_token_file, "--prometheus-bearer-token-file")
    basic = read_secret(basic_auth_file, "--prometheus-basic-auth-file")
    user, sep, password = (basic or "").partition(":")
    if basic is not None and not (sep and user):
        raise config_error(
            f"--prometheus-basic-auth-file {basic_auth_file}",
            "does not hold USER:PASSWORD",
            "write one line: the user, a colon, the password",
        )
    if token is not None and basic is not None:
        raise config_error(
            "--prometheus-bearer-token-file/--prometheus-basic-auth-file",
            "both are given",
            "choose one way to authenticate to Prometheus",
        )
    return PrometheusSource(
        url,
        timeout_s=timeout_s,
        bearer_token=token,
        basic_auth=(user, password) if basic is not None else None,
        ca_file=ca_file,
        cert_file=cert_file,
        key_file=key_file,
        insecure_skip_verify=insecure_skip_verify,
    )


def own_namespace(given: str | None = None) -> str:
    """The namespace given, else the pod's own in-cluster, else ``default``.

    Returns:
        The namespace.
    """
    if given:
        return given
    try:
        return _SA_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def check_state_configmap(name: str) -> None:
    """Refuse a ``--state-configmap`` that is not a ConfigMap name, before any request.

    Raises:
        ConfigError: Not a DNS-1123 subdomain.
    """
    from gpuscale.control.config import DNS1123_SUBDOMAIN

    if DNS1123_SUBDOMAIN.fullmatch(name) is None:
        raise config_error(
            f"--state-configmap {name}",
            "is not a valid ConfigMap name",
            "use lower-case letters, digits, '-' and '.' (at most 253 characters)",
        )
