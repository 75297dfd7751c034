"""A stand-in for Triton Inference Server's ``/metrics`` (port 8002), in its text format.

Triton serves its metrics through prometheus-cpp, whose counters keep their names (no
``_total``); the names, types and the ``model``/``version`` labels here follow Triton's
metrics guide (``docs/user_guide/metrics.md``), as does the time-to-first-response
histogram's default buckets (100, 500, 2000, 5000 ms). The exposition is written out by
hand, as prometheus-cpp's text serializer (``core/src/text_serializer.cc``) writes it:
counters without ``_total`` (prometheus_client would add it), histograms as ``_count``,
``_sum`` and ``_bucket`` lines, and every number, ``le`` bounds included, in fixed
notation with six decimals (``le="100.000000"``).

The load is steady and set by the test: each counter grows at a fixed rate per second
of wall time since the stand-in started, so a ``rate`` over any window holds the rate.
"""

import time
from dataclasses import dataclass

from tests.support.scrape_target import StandIn

FIRST_RESPONSE_BUCKETS_MS = (100.0, 500.0, 2000.0, 5000.0)


@dataclass(frozen=True)
class SteadyLoad:
    """What the server does each second.

    Attributes:
        executing: Requests executing at any moment (their time adds this many s/s).
        queued: Requests queued at any moment.
        completed: Requests completed per second.
        first_response_ms: Per second, how many first responses took each time (ms).
    """

    executing: float
    queued: float
    completed: float
    first_response_ms: tuple[tuple[float, float], ...]


class FakeTriton(StandIn):
    """One model's Triton metrics on 127.0.0.1.

    Args:
        load: The steady load served.
        model: The ``model`` label.
        version: The ``version`` label.
    """

    def __init__(self, load: SteadyLoad, model: str, version: str = "1") -> None:
        self.load, self.labels = load, f'model="{model}",version="{version}"'
        self.started = time.monotonic()

    def exposition(self) -> str:
        """The text format at this moment.

        Returns:
            The ``/metrics`` body.
        """
        t, load, labels = time.monotonic() - self.started, self.load, self.labels
        lines: list[str] = []

        def family(name: str, kind: str, value: float) -> None:
            lines.extend((f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value:f}"))

        family("nv_inference_request_success", "counter", load.completed * t)
        family(
            "nv_inference_request_duration_us", "counter", (load.executing + load.queued) * t * 1e6
        )
        family("nv_inference_queue_duration_us", "counter", load.queued * t * 1e6)
        family("nv_inference_pending_request_count", "gauge", load.queued)
        name = "nv_inference_first_response_histogram_ms"
        lines.append(f"# TYPE {name} histogram")
        per_s = load.first_response_ms
        total = sum(n for _, n in per_s) * t
        lines.append(f"{name}_count{{{labels}}} {total:f}")
        lines.append(f"{name}_sum{{{labels}}} {sum(v * n for v, n in per_s) * t:f}")
        for bound in FIRST_RESPONSE_BUCKETS_MS:
            count = sum(n for v, n in per_s if v <= bound) * t
            lines.append(f'{name}_bucket{{{labels},le="{bound:f}"}} {count:f}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {total:f}')
        return "\n".join(lines) + "\n"

    def body(self) -> bytes:
        """The ``/metrics`` body at this moment."""
        return self.exposition().encode()
