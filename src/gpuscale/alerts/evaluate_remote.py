"""Selectors answered by a real Prometheus, for ``gpuscale up --prometheus URL``.

When a Prometheus already scrapes the fleet, the rules read its data: each
selector of an expression (``name{matchers} offset d``, or the same with a
range) is sent as an instant query at the evaluation time, so the lookback,
staleness and the raw samples of a range are Prometheus's own. The records and
``ALERTS`` the evaluator writes itself stay in its local store.
"""

import httpx
import numpy as np

from gpuscale.alerts.evaluate_binary import QueryError
from gpuscale.alerts.evaluate_promql import Labels, Matrix, Vector


class PrometheusSelectors:
    """Instant and range selectors evaluated by the Prometheus at ``url``.

    Args:
        url: Prometheus's base URL.
        timeout_s: Per query.
    """

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self._client = httpx.Client(timeout=timeout_s)

    def _query(self, text: str, ts_ms: int, kind: str) -> list[dict[str, object]]:
        try:
            r = self._client.post(
                f"{self.url}/api/v1/query", data={"query": text, "time": ts_ms / 1000}
            )
            body = r.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise QueryError(f"Prometheus at {self.url} did not answer {text!r}: {exc}") from None
        if body.get("status") != "success" or body["data"]["resultType"] != kind:
            raise QueryError(f"Prometheus at {self.url} refused {text!r}: {body.get('error')}")
        result: list[dict[str, object]] = body["data"]["result"]
        return result

    @staticmethod
    def _labels(metric: object) -> Labels:
        assert isinstance(metric, dict)  # noqa: S101 - Prometheus's JSON
        return tuple(sorted((str(k), str(v)) for k, v in metric.items()))

    def instant(self, text: str, ts_ms: int) -> Vector:
        """An instant selector's samples at ``ts_ms``.

        Returns:
            Sorted (labels, value) pairs.
        """
        out = []
        for item in self._query(text, ts_ms, "vector"):
            pair = item["value"]
            assert isinstance(pair, list)  # noqa: S101 - Prometheus's JSON: [time, "value"]
            out.append((self._labels(item["metric"]), float(pair[1])))
        return sorted(out)

    def range(self, text: str, ts_ms: int) -> Matrix:
        """A range selector's raw samples at ``ts_ms``.

        Returns:
            (labels, times in ms, values) per series, sorted by labels.
        """
        out: Matrix = []
        for item in self._query(text, ts_ms, "matrix"):
            points = item["values"]
            assert isinstance(points, list)  # noqa: S101 - Prometheus's JSON
            times = np.array([round(float(t) * 1000) for t, _ in points], dtype=np.int64)
            values = np.array([float(v) for _, v in points], dtype=np.float64)
            out.append((self._labels(item["metric"]), times, values))
        return sorted(out, key=lambda s: s[0])

    def close(self) -> None:
        """Close the HTTP client."""
        self._client.close()
