"""Random rules settings files, and a batched ``promtool check rules`` of what they render to.

A settings file either renders rules the real Prometheus accepts, or is refused
with one ``ConfigError`` line; nothing in between (a traceback, or a file
promtool rejects). The strategy mixes every key of the settings with values
chosen to break PromQL, YAML, Go templates and RE2: quotes, braces,
backslashes, control characters, lookarounds, NaN and infinities, durations
just outside Prometheus's grammar. ``tests/unit/alerts/test_settings_fuzz.py``
runs a few dozen; ``bench/fuzz_rules_settings.py`` runs thousands.
"""

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from hypothesis import strategies as st

from gpuscale.alerts.catalogue import build_catalogue
from gpuscale.alerts.config import parse_config
from gpuscale.alerts.render import render
from gpuscale.errors import ConfigError

_DURATIONS = (
    *("0", "0s", "30s", "5m", "1h30m", "1d", "1w", "1y", "2000ms", "1500ms", "5m1h"),
    *("-5m", "", "1h 30m", "5M", "366d", "0.5m", "1e3s", "999999999999999999999s"),
)
_PATTERNS = (
    *("a|b", ".+-dcgm-exporter", "(?=x)", "(?!x)y", "(?<=a)b", "(a)\\1", "(?P<n>a)(?P=n)"),
    *('a"} or vector(1) #', "\\", "[", "x{2,1}", "(?i)gpu", "\\pL", "\\Z", "a**", "a++"),
    *("[[:alpha:]]", "\\x{41}", "(?s).", "\\Q.\\E", "a{,3}", "[\\b]", "a{1001}", "(?x) a"),
    *("(?#c)a", "\\u0041", "\\N{DASH}", "a)|(b", "(?>a)", "(?(1)a|b)", "é", "\\é", "\x00"),
)
_SELECTORS = (
    *('x{a="b"}', "x", "x) or vector(1", "x offset 5m", "x @ 100", "rate(x[5m])", "{}"),
    *('{__name__="x"}', 'x{a=~"(?=y)"}', 'x{a="b" or c="d"}', "x{a='b'}", "x{a=`b`}"),
    *('x{a="\\x41"}', 'x{"a"="b"}', 'x{a-b="c"}', "1", '"x"', "x[5m]"),
)
_TEXT = (
    *("{{ $value }}", "}}", "{{", "a\nb", 'a"b', "a\\b", "\t", "\x7f", "\u2028", "%s"),
    *("https://example.com/docs", "http://x", "ftp://x", "https://a b", "gpu", ""),
    *("__name__", "severity", "xid", "team", "Team_1", "1team", "a-b", "a.b", "a/b"),
    *("app.kubernetes.io/name", "release", "kube-prometheus-stack", "-x", "x" * 64),
)
_ALERTS = (
    *("GpuFellOffBus", "GpuXidError", "GpuEccDoubleBitError", "GpuRowRemapFailure"),
    *("GpuThermalThrottling", "GpuPowerCapped", "GpuTemperatureHigh", "GpuMemoryNearFull"),
    *("GpuIdleWhileAllocated", "GpuStraggler", "GpuTemperatureAnomaly"),
    *("GpuTemperatureRisingFast", "GpuExporterDown", "GpuMetricsStale", "GpuOnFire"),
)
_ALERT_KEYS = (
    *("enabled", "for", "severity", "threshold", "window", "dip_window", "vanished_window"),
    *("exclude_codes", "critical_codes", "min_utilization", "min_rise_c", "recent", "gap"),
    *("slowdown_c",),
)

_text = st.one_of(st.sampled_from(_TEXT), st.text(max_size=12))
_number = st.one_of(
    st.floats(),
    st.sampled_from([0.0, 0.5, 1.0, -1.0, 1e300, 5e-324, 85.0]),
    st.integers(-(10**20), 10**20),
)
_duration = st.one_of(st.sampled_from(_DURATIONS), _text)
_scalar = st.one_of(st.none(), st.booleans(), _number, _duration, _text)
_codes = st.lists(st.one_of(st.integers(-5, 200), _scalar), max_size=4)
_alert = st.dictionaries(
    st.sampled_from(_ALERT_KEYS),
    st.one_of(_scalar, _codes, st.sampled_from(["critical", "warning", "info"])),
    max_size=4,
)
_slo = st.dictionaries(
    st.sampled_from(["name", "objective", "good", "total", "by"]),
    st.one_of(st.sampled_from(_SELECTORS), _number, _text, st.lists(_text, max_size=3), st.none()),
)
_burn = st.dictionaries(
    st.sampled_from(["long", "short", "factor", "severity", "for"]),
    st.one_of(_duration, _number, st.sampled_from(["critical", "info"])),
)
_resource = st.dictionaries(
    st.sampled_from(["name", "namespace", "labels", "annotations"]),
    st.one_of(_text, st.dictionaries(_text, _text, max_size=3)),
)
_VALID_DURATIONS = ("0s", "15s", "30s", "1m", "5m", "1h30m", "2000ms", "1w")
_window = st.sampled_from(_VALID_DURATIONS[1:])
_long = st.sampled_from(["1h", "60m", "6h"])  # few, so burn windows repeat one
_label_name = st.sampled_from(["team", "route", "Team_1", "_x", "cluster"])
_safe_text = st.text(st.characters(codec="utf-8", exclude_characters="{}"), max_size=12)


def _mostly(valid: st.SearchStrategy[object], hostile: st.SearchStrategy[object]) -> object:
    """Three draws in four from ``valid``: a mapping of all-hostile values is refused at once."""
    return st.one_of(valid, valid, valid, hostile)


_valid_slo = st.fixed_dictionaries(
    {
        "name": st.sampled_from(["ttft", "avail"]),  # two, so lists repeat a name
        "objective": st.floats(0.001, 0.999),
        "good": st.sampled_from(['x{a="b"}', "x", "x{a='b'}", 'x{a=~"b|c"}']),
        "total": st.sampled_from(['x_total{code!~"5.."}', "y", '{__name__="z"}']),
    },
    optional={"by": st.lists(_label_name, max_size=2)},
)
_valid_burn = st.fixed_dictionaries(
    {"long": _long, "short": _window, "factor": st.floats(0.01, 100.0)},
    optional={"for": st.sampled_from(_VALID_DURATIONS), "severity": st.just("warning")},
)
_valid_resource = st.fixed_dictionaries(
    {},
    optional={
        "name": st.sampled_from(["gpuscale", "gpu-alerts", "a.b"]),
        "namespace": st.sampled_from(["monitoring", "m-1"]),
        "labels": st.dictionaries(
            st.sampled_from(["release", "example.com/team", "a_b.c"]),
            st.sampled_from(["kube-prometheus-stack", "", "v1.2_3"]),
        ),
        "annotations": st.dictionaries(st.sampled_from(["note", "a/b"]), _text),
    },
)
_valid_alert = st.fixed_dictionaries(
    {},
    optional={
        "for": st.sampled_from(_VALID_DURATIONS),
        "threshold": st.floats(0.0, 1.0),
        "window": _window,
        "severity": st.sampled_from(["critical", "warning", "info"]),
        "enabled": st.booleans(),
    },
)
_TOP = {
    "exporter_job": st.one_of(st.sampled_from(_PATTERNS), _text),
    "violation_unit": st.sampled_from(["ns", "us", "ms", 1]),
    "runbook_url": _mostly(
        st.sampled_from(["https://wiki.example.com/gpu", "http://r.local/a.md?x=%20&y='z'"]),
        _text,
    ),
    "labels": _mostly(
        st.dictionaries(_label_name, _safe_text, max_size=3),
        st.dictionaries(_text, st.one_of(_text, _number), max_size=3),
    ),
    "interval": _mostly(st.sampled_from(_VALID_DURATIONS), _duration),
    "alerts": st.dictionaries(
        st.sampled_from(_ALERTS[:-1]), _mostly(_valid_alert, _alert), min_size=1, max_size=6
    ),
    "slos": st.lists(_mostly(_valid_slo, _slo), max_size=3),
    "burn_windows": st.lists(_mostly(_valid_burn, _burn), max_size=3),
    "prometheus_rule": _mostly(_valid_resource, _resource),
}


@st.composite
def settings_mappings(draw: st.DrawFn) -> dict[str, object]:
    """A settings mapping: some of the file's keys, each with a plausible or hostile value."""
    keys = draw(st.lists(st.sampled_from(sorted(_TOP)), unique=True, max_size=5))
    return {key: draw(_TOP[key]) for key in keys}


@dataclass(frozen=True)
class Outcome:
    """What became of one settings mapping: refused (with the message) or rendered (a file)."""

    refused: str | None
    rendered: Path | None


def try_settings(mapping: dict[str, object], workdir: Path, index: int) -> Outcome:
    """Write ``mapping`` as a settings file, load it and render it, as ``gpuscale rules render``.

    Returns:
        The ConfigError's message, or the path of the rendered rules file. Any
        other exception propagates: that is the failure being looked for.
    """
    settings = workdir / f"settings-{index}.yml"
    settings.write_text(yaml.safe_dump(mapping, allow_unicode=True), encoding="utf-8")
    try:
        config = parse_config(settings.read_text(encoding="utf-8"), settings)
    except ConfigError as exc:
        return Outcome(str(exc), None)
    rules = workdir / f"rules-{index}.yml"
    rules.write_text(render(build_catalogue(config)), encoding="utf-8")
    return Outcome(None, rules)


def promtool_rejections(paths: Sequence[Path]) -> dict[Path, str]:
    """Run one ``promtool check rules`` over ``paths``.

    Returns:
        Each file promtool rejected, with its complaint.
    """
    promtool = shutil.which("promtool")
    if promtool is None:
        msg = "promtool is not installed: run ./scripts/test, which installs it"
        raise RuntimeError(msg)
    if not paths:
        return {}
    # One stream, so each complaint follows the "Checking <file>" line of its file;
    # a lint failure (duplicate rules) says FAILED but leaves the exit status 0.
    run = subprocess.run(
        [promtool, "check", "rules", *map(str, paths)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=600,
        check=False,
    )
    rejected: dict[Path, str] = {}
    by_name = {str(p): p for p in paths}
    current: Path | None = None
    for line in run.stdout.splitlines():
        text = line.strip()
        if text.startswith("Checking ") and text[9:] in by_name:
            current = by_name[text[9:]]
        elif current is not None and text and not text.startswith("SUCCESS"):
            rejected[current] = (rejected.get(current, "") + " " + text).strip()
    if run.returncode != 0 and not rejected:
        rejected[Path("?")] = run.stdout[-2000:]
    return rejected
