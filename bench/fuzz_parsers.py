"""Fuzz every parser that reads what a user, or a server we talk to, hands gpuscale.

Each parser gets ``--examples`` hypothesis inputs (1,000 by default): random
text and bytes, and structured inputs near the valid ones (a real GPUScaler
with one field changed, counters rows naming real fields, Prometheus answers
of the right shape with wrong parts), and each input is sorted into:

* accepted: the parser returned, and the result passed its validity check;
* refused: the parser raised its documented error with a one-line message;
* traceback: any other exception (a bug: the user would see a traceback);
* hang: the call took over 1 s of this thread's CPU time, or over 10 s of wall time
  (a parser that loops burns CPU; one that blocks waits: the wall bound is wider so a
  loaded machine's scheduling does not read as a hang);
* accepted-but-invalid: returned something its validity check rejects
  (an index past the device limit, a non-finite float, an unsafe name);
* multi-line: refused, but the message spans lines.

Run:

    python bench/fuzz_parsers.py               # 1,000 inputs per parser
    python bench/fuzz_parsers.py --examples 50 # a quick pass

It prints one row per parser and exits 1 if any traceback, hang, invalid
acceptance or multi-line message was seen.
"""

import argparse
import dataclasses
import json
import logging
import math
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gpuscale.alerts.config import load_config
from gpuscale.control.config import DNS1123_LABEL, DNS1123_SUBDOMAIN, GPUScaler, load
from gpuscale.errors import ConfigError
from gpuscale.exporter.devices import MAX_INDEX, parse_devices
from gpuscale.exporter.pods import device_keys, normalize_pci_bus_id
from gpuscale.exporter.webconfig import load_web_config
from gpuscale.fields import DCGM_FIELDS
from gpuscale.fields.counters import parse_counters
from gpuscale.metrics.prometheus import PrometheusSource
from gpuscale.metrics.signal import MetricsUnavailable, Signal
from gpuscale.sim.faults import parse_sim_fault
from gpuscale.sim.traces import MAX_TRACE_S, read_rate_file

HANG_CPU_S = 1.0
HANG_WALL_S = 10.0


@dataclass
class Tally:
    """What one parser did with its inputs."""

    inputs: int = 0
    accepted: int = 0
    refused: int = 0
    tracebacks: int = 0
    hangs: int = 0
    invalid: int = 0
    multiline: int = 0
    first_problem: str = ""

    def note(self, problem: str, value: object) -> None:
        if not self.first_problem:
            self.first_problem = f"{problem}: {value!r}"[:300]


@dataclass
class Target:
    """One parser: how to call it on an input, what it may raise, and what a valid result is."""

    name: str
    strategy: st.SearchStrategy[Any]
    call: Callable[[Any], Any]
    refusals: tuple[type[BaseException], ...] = (ConfigError,)
    valid: Callable[[Any], bool] = lambda _result: True
    tally: Tally = field(default_factory=Tally)

    def run(self, value: Any) -> None:
        tally = self.tally
        tally.inputs += 1
        start, start_cpu = time.perf_counter(), time.thread_time()
        try:
            result = self.call(value)
        except self.refusals as exc:
            tally.refused += 1
            if "\n" in str(exc):
                tally.multiline += 1
                tally.note(f"multi-line {str(exc)!r}", value)
        except Exception as exc:  # noqa: BLE001 - every other exception is the finding
            tally.tracebacks += 1
            tally.note(f"{type(exc).__name__}: {exc}", value)
        else:
            if self.valid(result):
                tally.accepted += 1
            else:
                tally.invalid += 1
                tally.note("accepted but invalid", value)
        if time.thread_time() - start_cpu > HANG_CPU_S or time.perf_counter() - start > HANG_WALL_S:
            tally.hangs += 1
            tally.note("hang", value)


# --- inputs -------------------------------------------------------------------------------------

_WORDS = st.sampled_from(
    ["", " ", ",", ":", "-", "\n", "\0", "&a", "*a", "[", "]", "{", "}", "#", "'", '"', "..",
     "/", "1e9", "-1", "nan", ".inf", "99999999", "0", "4095", "4096", "é", "\t"]
)  # fmt: skip
_NOISE = st.lists(st.one_of(_WORDS, st.text(max_size=8)), max_size=20).map("".join)
_FIELD_NAMES = sorted(DCGM_FIELDS)


def _counters_text() -> st.SearchStrategy[str]:
    row = st.tuples(
        st.one_of(st.sampled_from(_FIELD_NAMES), _NOISE),
        st.one_of(st.sampled_from(["gauge", "counter", "label", "histogram", "GAUGE"]), _NOISE),
        _NOISE,
    ).map(", ".join)
    return st.one_of(st.lists(st.one_of(row, _NOISE), max_size=8).map("\n".join), st.text())


def _yaml_text(keys: list[str]) -> st.SearchStrategy[str]:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), _NOISE, st.sampled_from(keys)
    )
    tree = st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(st.sampled_from(keys), _NOISE), inner, max_size=4),
        ),
        max_leaves=12,
    )
    dumped = tree.map(lambda data: yaml.safe_dump(data, allow_unicode=True))
    return st.one_of(dumped, _NOISE, st.text(max_size=200))


_WEB_KEYS = [
    "tls_server_config", "cert_file", "key_file", "client_auth_type", "client_ca_file",
    "min_version", "max_version", "cipher_suites", "curve_preferences", "basic_auth_users",
    "http_server_config", "headers", "http2", "X-Frame-Options", "TLS12", "RequireAnyClientCert",
]  # fmt: skip

_SCALER = {
    "apiVersion": "gpuscale.io/v1alpha1",
    "kind": "GPUScaler",
    "metadata": {"name": "llm", "namespace": "serving"},
    "spec": {
        "targets": [
            {
                "scaleTargetRef": {"name": "vllm", "kind": "Deployment"},
                "minReplicas": 1,
                "maxReplicas": 8,
                "policy": {"name": "hpa", "targetAverageValue": 60},
                "metrics": {"stepSeconds": 15, "staleAfterSeconds": 60},
            }
        ]
    },
}
_SCALER_PATHS = [
    ("metadata", "name"),
    ("metadata", "namespace"),
    ("spec", "targets", 0, "scaleTargetRef", "name"),
    ("spec", "targets", 0, "scaleTargetRef", "namespace"),
    ("spec", "targets", 0, "scaleTargetRef", "apiVersion"),
    ("spec", "targets", 0, "scaleTargetRef", "kind"),
    ("spec", "targets", 0, "minReplicas"),
    ("spec", "targets", 0, "maxReplicas"),
    ("spec", "targets", 0, "policy", "targetAverageValue"),
    ("spec", "targets", 0, "policy", "name"),
    ("spec", "targets", 0, "metrics", "stepSeconds"),
    ("spec", "targets", 0, "metrics", "staleAfterSeconds"),
]
_ODD_VALUES = st.one_of(
    st.floats(),
    st.integers(),
    _NOISE,
    st.sampled_from(["a/../b", "UPPER", "x" * 254, "-a", "a.", "v1", "apps/v1", ".inf", "..."]),
    st.none(),
)


def _mutated_scaler(changes: list[tuple[tuple[Any, ...], Any]]) -> str:
    doc: Any = yaml.safe_load(yaml.safe_dump(_SCALER))
    for path, value in changes:
        node = doc
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = value
    return yaml.safe_dump(doc)


_SCALER_TEXT = st.one_of(
    st.lists(st.tuples(st.sampled_from(_SCALER_PATHS), _ODD_VALUES), max_size=3).map(
        _mutated_scaler
    ),
    _yaml_text(["apiVersion", "kind", "metadata", "spec", "targets", "GPUScaler"]),
)

_NUMBER = st.one_of(
    st.floats(), st.integers(-10, 10**12), st.sampled_from(["1e9", "nan", "inf", "-0", "", "x"])
)
_TRACE_TEXT = st.one_of(
    st.lists(st.tuples(_NUMBER, _NUMBER), min_size=0, max_size=6).map(
        lambda rows: "time_s,rps\n" + "".join(f"{t},{r}\n" for t, r in rows)
    ),
    st.text(max_size=200).map(lambda t: "time_s,rps\n" + t),
    st.text(max_size=200),
)

_FAULT_KINDS = [
    "gpu-lost", "xid", "thermal", "ecc-dbe", "row-remap", "straggler", "power-cap",
    "memory-full", "idle-allocated", "stale", "exporter-down",
]  # fmt: skip
_FAULT_KEYS = ["duration", "gpu", "replica", "code", "factor", "rise", "limit", "share"]
_FAULT_TEXT = st.one_of(
    st.tuples(
        st.one_of(st.sampled_from(_FAULT_KINDS), _NOISE),
        _NUMBER.map(str),
        st.lists(
            st.tuples(st.sampled_from(_FAULT_KEYS), _NUMBER.map(str)).map("=".join), max_size=3
        ),
    ).map(lambda p: f"{p[0]}@{p[1]}" + "".join(":" + kv for kv in p[2])),
    _NOISE,
)

_DEVICES_TEXT = st.one_of(
    st.tuples(
        st.sampled_from(["f", "g", "i", "x", ""]),
        st.lists(
            st.one_of(
                st.integers(0, 10**9).map(str),
                st.tuples(st.integers(0, 10**9), st.integers(0, 10**9)).map(
                    lambda r: f"{r[0]}-{r[1]}"
                ),
                _NOISE,
            ),
            max_size=4,
        ),
    ).map(lambda p: f"{p[0]}:{','.join(p[1])}"),
    _NOISE,
)

_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=10,
)
_SAMPLE = st.tuples(st.one_of(st.floats(), st.integers(), _NOISE), st.one_of(_NOISE, _JSON))
_PROM_BODY = st.one_of(
    st.fixed_dictionaries(
        {
            "status": st.sampled_from(["success", "error", "x"]),
            "data": st.fixed_dictionaries(
                {
                    "resultType": st.sampled_from(["vector", "matrix", "scalar", "string", "x"]),
                    "result": st.one_of(
                        st.lists(
                            st.fixed_dictionaries(
                                {
                                    "metric": st.one_of(
                                        st.dictionaries(st.text(max_size=5), _JSON), _JSON
                                    ),
                                    "value": st.one_of(_SAMPLE, _JSON),
                                    "values": st.one_of(st.lists(_SAMPLE, max_size=3), _JSON),
                                }
                            ),
                            max_size=3,
                        ),
                        _SAMPLE,
                        _JSON,
                    ),
                }
            ),
        }
    ),
    _JSON,
).map(lambda body: json.dumps(body).encode())
_PROM_BYTES = st.one_of(
    _PROM_BODY,
    st.fixed_dictionaries({"status": st.just("success"), "data": _JSON}).map(
        lambda body: json.dumps(body).encode()
    ),
    st.binary(max_size=200),
)


# --- calls --------------------------------------------------------------------------------------


def _in_file(directory: Path, name: str, read: Callable[[Path], Any]) -> Callable[[Any], Any]:
    path = directory / name

    def call(text: str | bytes) -> Any:
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_bytes(text.encode("utf-8", "surrogatepass"))
        return read(path)

    return call


def _finite_everywhere(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_finite_everywhere(getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return all(_finite_everywhere(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_finite_everywhere(v) for v in value)
    return True


def _scalers_valid(scalers: list[GPUScaler]) -> bool:
    for scaler in scalers:
        if not _finite_everywhere(scaler.model_dump()):
            return False
        names = [scaler.metadata.name] + [t.scale_target_ref.name for t in scaler.spec.targets]
        spaces = [scaler.metadata.namespace] + [
            t.scale_target_ref.namespace or "default" for t in scaler.spec.targets
        ]
        if not all(DNS1123_SUBDOMAIN.fullmatch(n) for n in names):
            return False
        if not all(DNS1123_LABEL.fullmatch(n) for n in spaces):
            return False
    return True


def _prometheus_call() -> Callable[[bytes], Any]:
    body = {"content": b""}
    transport = httpx.MockTransport(lambda _request: httpx.Response(200, content=body["content"]))
    source = PrometheusSource("http://127.0.0.1:9090", client=httpx.Client(transport=transport))
    signal = Signal("DCGM_FI_DEV_GPU_UTIL")

    def call(content: bytes) -> Any:
        body["content"] = content
        return source.instant(signal, 1_700_000_000.0)

    return call


def _pod_device(device_id: str) -> Any:
    return device_keys(device_id, pci_to_uuid={"0000:3b:00.0": "GPU-1"}), normalize_pci_bus_id(
        device_id
    )


def targets(directory: Path) -> list[Target]:
    """The parsers, each with its inputs, call and validity check.

    Returns:
        One ``Target`` per parser.
    """
    return [
        Target(
            "counters CSV",
            _counters_text(),
            lambda text: parse_counters(text, "fuzz.csv"),
            valid=lambda rows: all(c.field.name in DCGM_FIELDS for c in rows),
        ),
        Target(
            "web-config",
            _yaml_text(_WEB_KEYS),
            _in_file(directory, "web.yml", load_web_config),
        ),
        Target(
            "GPUScaler",
            _SCALER_TEXT,
            _in_file(directory, "scaler.yaml", load),
            valid=_scalers_valid,
        ),
        Target(
            "alert settings",
            _yaml_text(["alerts", "slos", "labels", "interval", "severity", "for", "threshold"]),
            _in_file(directory, "rules.yml", load_config),
        ),
        Target(
            "rate trace",
            _TRACE_TEXT,
            _in_file(directory, "trace.csv", lambda p: read_rate_file(p, service_s=1.0)),
            valid=lambda w: w.duration_s <= MAX_TRACE_S and _finite_everywhere(list(w.arrivals)),
        ),
        Target("fault spec", _FAULT_TEXT, parse_sim_fault, valid=_finite_everywhere),
        Target(
            "device ranges",
            _DEVICES_TEXT,
            parse_devices,
            valid=lambda spec: all(0 <= i <= MAX_INDEX for i in spec.indices or ()),
        ),
        Target(
            "Prometheus API answer",
            _PROM_BYTES,
            _prometheus_call(),
            refusals=(MetricsUnavailable,),
            valid=lambda values: all(
                all(isinstance(k, str) and isinstance(v, str) for k, v in lv.labels.items())
                for lv in values
            ),
        ),
        Target("kubelet device id", st.text(max_size=60), _pod_device, refusals=()),
    ]


def fuzz(target: Target, examples: int, seed: int = 0) -> Tally:
    """Feed ``examples`` inputs to one parser.

    Returns:
        The parser's tally.
    """

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=True,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def run(data: st.DataObject) -> None:
        target.run(data.draw(target.strategy))

    del seed  # derandomize: the same inputs on every run, so results compare
    run()
    return target.tally


def main() -> int:
    """Fuzz every parser and print a table.

    Returns:
        0 when no parser misbehaved, else 1.
    """
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="inputs per parser")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # parsers' own warnings (a repeated row) are not findings
    header = f"{'parser':24} {'inputs':>6} {'accepted':>8} {'refused':>8} {'traceback':>9}"
    header += f" {'hangs':>7} {'invalid':>7} {'multiline':>9}  seconds"
    print(header)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for target in targets(Path(tmp)):
            start = time.perf_counter()
            t = fuzz(target, args.examples)
            took = time.perf_counter() - start
            print(
                f"{target.name:24} {t.inputs:6d} {t.accepted:8d} {t.refused:8d} {t.tracebacks:9d}"
                f" {t.hangs:7d} {t.invalid:7d} {t.multiline:9d}  {took:7.1f}"
            )
            if t.first_problem:
                print(f"    first: {t.first_problem}")
            bad += t.tracebacks + t.hangs + t.invalid + t.multiline
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
