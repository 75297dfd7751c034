"""PrometheusSource: what it sends, how it reads the API's JSON, and how it fails.

The transport is httpx's MockTransport answering with the JSON shapes of the
Prometheus HTTP API documentation (``/api/v1/query``, ``/api/v1/query_range``);
the same source against real Prometheus and VictoriaMetrics is in
tests/integration/test_metrics_sources.py.
"""

import math
from urllib.parse import parse_qs

import httpx
import pytest

from gpuscale.errors import ConfigError
from gpuscale.metrics import MetricsUnavailable, Signal
from gpuscale.metrics.prometheus import PrometheusSource

SIG = Signal("DCGM_FI_DEV_GPU_UTIL", {"namespace": "a"}, "avg", ("pod",), 60.0)


def _source(handler, **kw) -> tuple[PrometheusSource, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    client = httpx.Client(transport=httpx.MockTransport(record))
    return PrometheusSource("http://prom:9090/prefix/", client=client, **kw), seen


def _ok(data: dict) -> httpx.Response:
    return httpx.Response(200, json={"status": "success", "data": data})


def _form(request: httpx.Request) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(request.content.decode()).items()}


def test_instant_posts_the_compiled_query_and_reads_the_vector():
    vector = {
        "resultType": "vector",
        "result": [
            {"metric": {"pod": "b"}, "value": [1000.5, "2.5"]},
            {"metric": {"__name__": "x", "pod": "a"}, "value": [1000.5, "NaN"]},
            {"metric": {"pod": "c"}, "value": [1000.5, "+Inf"]},
        ],
    }
    src, seen = _source(lambda r: _ok(vector))
    found = src.instant(SIG, 1000.5)
    (req,) = seen
    assert req.method == "POST"
    assert str(req.url) == "http://prom:9090/prefix/api/v1/query"
    assert req.headers["content-type"] == "application/x-www-form-urlencoded"
    assert _form(req) == {
        "query": 'avg by (pod) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{namespace="a"}[60s]))',
        "time": "1000.500",
    }
    assert [dict(r.labels) for r in found] == [{"pod": "a"}, {"pod": "b"}, {"pod": "c"}]
    assert math.isnan(found[0].points[0][1])
    assert found[1].points == ((1000.5, 2.5),)
    assert found[2].points == ((1000.5, math.inf),)


def test_range_reads_the_matrix():
    matrix = {
        "resultType": "matrix",
        "result": [{"metric": {}, "values": [[10, "1"], [25, "-Inf"], [40, "3.25"]]}],
    }
    src, seen = _source(lambda r: _ok(matrix))
    (res,) = src.range(Signal("m", aggregation="sum"), 10.0, 40.0, 15.0)
    assert res.points == ((10.0, 1.0), (25.0, -math.inf), (40.0, 3.25))
    form = _form(seen[0])
    assert str(seen[0].url).endswith("/api/v1/query_range")
    assert (form["start"], form["end"], form["step"]) == ("10.000", "40.000", "15.0")
    with pytest.raises(ValueError, match="bad range"):
        src.range(Signal("m"), 10.0, 40.0, 0.0)


def test_newest_is_the_max_timestamp_or_none():
    answers = iter([[{"metric": {}, "value": [99, "95.123"]}], []])
    src, seen = _source(lambda r: _ok({"resultType": "vector", "result": next(answers)}))
    assert src.newest(SIG, 99.0) == 95.123
    assert src.newest(SIG, 99.0) is None
    assert _form(seen[0])["query"] == 'max(timestamp(DCGM_FI_DEV_GPU_UTIL{namespace="a"}))'


def test_auth_and_custom_headers_are_sent():
    src, seen = _source(lambda r: _ok({"resultType": "vector", "result": []}), bearer_token="t0k")
    src.instant(Signal("m"), 1.0)
    assert seen[0].headers["authorization"] == "Bearer t0k"
    src, seen = _source(
        lambda r: _ok({"resultType": "vector", "result": []}),
        basic_auth=("u", "p"),
        headers={"X-Scope-OrgID": "tenant-1"},
    )
    src.instant(Signal("m"), 1.0)
    assert seen[0].headers["authorization"] == "Basic dTpw"  # base64("u:p")
    assert seen[0].headers["x-scope-orgid"] == "tenant-1"


@pytest.mark.parametrize(
    ("response", "reason", "words"),
    [
        (
            httpx.Response(
                400,
                json={"status": "error", "errorType": "bad_data", "error": "parse error\nat 1"},
            ),
            "query",
            "HTTP 400, bad_data: parse error at 1",
        ),
        (httpx.Response(401, text="Unauthorized\n"), "http", "HTTP 401 Unauthorized: Unauthorized"),
        (httpx.Response(200, text="<html>hi</html>"), "response", "not a Prometheus API answer"),
        (
            httpx.Response(200, json={"status": "success", "data": {"resultType": "vector"}}),
            "response",
            "malformed query result",
        ),
        (
            httpx.Response(
                200, json={"status": "success", "data": {"resultType": "string", "result": []}}
            ),
            "response",
            "unexpected resultType",
        ),
    ],
)
def test_failures_are_one_metrics_unavailable_line(response, reason, words):
    src, _ = _source(lambda r: response)
    with pytest.raises(MetricsUnavailable) as info:
        src.instant(Signal("m"), 1.0)
    message = str(info.value)
    assert info.value.reason == reason
    assert message.startswith("http://prom:9090/prefix/api/v1/query: ")
    assert words in message
    assert "\n" not in message


def test_transport_errors_name_the_url_and_hide_credentials():
    def refuse(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    def slow(request):
        raise httpx.ReadTimeout("timed out", request=request)

    client = httpx.Client(transport=httpx.MockTransport(refuse))
    src = PrometheusSource("http://user:secret@prom:9090", client=client)
    with pytest.raises(MetricsUnavailable, match=r"^http://prom:9090/api/v1/query: cannot connect"):
        src.instant(Signal("m"), 1.0)
    src = PrometheusSource(
        "http://prom:9090", client=httpx.Client(transport=httpx.MockTransport(slow)), timeout_s=0.5
    )
    with pytest.raises(MetricsUnavailable, match=r"no answer within 0\.5 s") as info:
        src.newest(Signal("m"), 1.0)
    assert info.value.reason == "timeout"


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"url": "prom:9090"}, "url prom:9090: not an http(s) URL"),
        ({"bearer_token": "t", "basic_auth": ("u", "p")}, "choose one authentication mode"),
        ({"ca_file": "/nonexistent/ca.pem"}, "ca_file=/nonexistent/ca.pem: no such file"),
        ({"timeout_s": 0}, "timeout_s=0: must be > 0"),
    ],
)
def test_bad_options_are_config_errors(kwargs, words):
    args = {"url": "http://prom:9090", **kwargs}
    with pytest.raises(ConfigError) as info:
        PrometheusSource(args.pop("url"), **args)
    assert words in str(info.value)


def test_cert_without_key_is_a_config_error(tmp_path):
    cert = tmp_path / "c.pem"
    cert.write_text("x")
    with pytest.raises(ConfigError, match="give both or neither"):
        PrometheusSource("https://prom:9090", cert_file=cert)


def test_closes_only_the_client_it_made():
    given = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    with PrometheusSource("http://p:1", client=given):
        pass
    assert not given.is_closed
    with PrometheusSource("http://p:1") as src:
        made = src._client
    assert made.is_closed


def test_unreadable_pem_is_a_config_error(tmp_path):
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match=r"cannot be loaded .*give PEM files"):
        PrometheusSource("https://prom:9090", ca_file=junk)


def test_tls_options_with_a_given_client_are_refused():
    with (
        httpx.Client() as given,
        pytest.raises(ConfigError, match="set TLS on the client you pass"),
    ):
        PrometheusSource("https://p:1", client=given, insecure_skip_verify=True)


def test_url_parameters_and_headers_go_with_every_query_as_a_keda_trigger_sends_them():
    src, seen = _source(
        lambda r: _ok({"resultType": "vector", "result": []}),
        headers={"X-Scope-OrgID": "tenant-a"},
        params={"namespace": "serving", "dedup": "true"},
    )
    src.instant(Signal("q", query="sum(rate(x[1m]))"), 10.0)
    assert src.newest(Signal("q", query="sum(rate(x[1m]))"), 10.0) is None
    for req in seen:
        assert dict(req.url.params) == {"namespace": "serving", "dedup": "true"}
        assert req.headers["X-Scope-OrgID"] == "tenant-a"
    assert [_form(r)["query"] for r in seen] == ["sum(rate(x[1m]))", "max(timestamp(x{}))"]
