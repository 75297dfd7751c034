"""Settings values that end up inside PromQL or rule YAML, checked the way Prometheus checks them.

A settings file is pasted into expressions, labels and annotations. A value
Prometheus would refuse (a duration it cannot parse, a regular expression its
RE2 engine rejects, a label name outside its grammar, a Go template where a
literal is meant) must stop the render with a clear error here, not turn into
a rules file that ``promtool`` rejects, or worse, one it accepts with another
meaning. Each check raises ``ValueError`` with a message that names what is
wrong without repeating the value, which the settings loader turns into a
one-line ``ConfigError`` with file, line and key.
"""

import json
import math
import re
import warnings

import promql_parser as pp

# model.ParseDuration of prometheus/common: units in this order, each at most once.
_DURATION = re.compile(
    r"(?:(\d+)y)?(?:(\d+)w)?(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?"
)
_UNITS_MS = (365 * 86_400_000, 7 * 86_400_000, 86_400_000, 3_600_000, 60_000, 1_000, 1)
MAX_DURATION_S = 365 * 86_400
"""The longest duration a setting takes: a year (Prometheus's own limit is 292 years)."""

LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
"""Prometheus's label name grammar."""


def duration_seconds(text: str) -> int:
    """Seconds in a Prometheus duration such as ``5m``, ``1h30m`` or ``0``.

    The grammar is Prometheus's (``y w d h m s ms``, each at most once, in that
    order); the rules need whole seconds, and no duration longer than a year.

    Returns:
        Whole seconds, 0 for ``0s``.

    Raises:
        ValueError: ``text`` is not such a duration.
    """
    match = _DURATION.fullmatch(text)
    if text != "0" and (not text or match is None or not any(match.groups())):
        msg = "is not a duration such as 30s, 5m, 1h or 1h30m"
        raise ValueError(msg)
    groups = match.groups() if match is not None else ()
    total_ms = sum(int(part or 0) * unit for part, unit in zip(groups, _UNITS_MS, strict=False))
    if total_ms % 1000:
        msg = "is not a whole number of seconds"
        raise ValueError(msg)
    if total_ms > MAX_DURATION_S * 1000:
        msg = "is longer than a year"
        raise ValueError(msg)
    return total_ms // 1000


def check_duration(text: str) -> str:
    """A duration as the rules write it (``0`` becomes ``0s``, which PromQL also reads).

    Returns:
        The text.
    """
    duration_seconds(text)
    return "0s" if text == "0" else text


def check_window(text: str) -> str:
    """A range-selector window: a duration above zero.

    Returns:
        The text.

    Raises:
        ValueError: ``text`` is not a duration, or is zero.
    """
    if duration_seconds(text) == 0:
        msg = "must be longer than 0s (it is the range of a PromQL selector)"
        raise ValueError(msg)
    return text


def promql_string(value: str) -> str:
    r"""``value`` as a double-quoted PromQL string literal.

    PromQL reads Go's string escapes, and JSON's (``\\"``, ``\\\\``, ``\\n``,
    ``\\uXXXX``) are a subset of them, so a quote, backslash or newline in a
    setting cannot end the string early.

    Returns:
        The literal, quotes included.
    """
    return json.dumps(value, ensure_ascii=False)


def check_label_name(name: str) -> str:
    """A label name a user may set: Prometheus's grammar, without the reserved ``__`` prefix.

    Returns:
        The name.

    Raises:
        ValueError: Naming the rule broken.
    """
    if not LABEL_NAME.fullmatch(name):
        msg = "is not a label name: use letters, digits and _, not starting with a digit"
        raise ValueError(msg)
    if name.startswith("__"):
        msg = "starts with __, which Prometheus reserves for its own labels"
        raise ValueError(msg)
    return name


def check_template_free(text: str) -> str:
    """A label or annotation value Prometheus would expand as a Go template; literal text only.

    Returns:
        The text.

    Raises:
        ValueError: It holds ``{{`` or ``}}``.
    """
    if "{{" in text or "}}" in text:
        msg = "holds {{ or }}, which Prometheus would expand as a template"
        raise ValueError(msg)
    return text


# Escapes both Python's re and Go's regexp (RE2 syntax) read the same way.
_SHARED_ESCAPES = frozenset("dDsSwWbBAaftnrv")
_CLASS_ESCAPES = frozenset("dDsSwWaftnrv")
_GROUP_FLAGS = re.compile(r"\(\?[ims]*(?:-[ims]+)?[:)]")
_REPEAT = re.compile(r"\{(\d*)(?:,(\d*))?\}")
_RE2_MAX_REPEAT = 1000


def _re2_problem(pattern: str) -> str | None:
    """The first construct of ``pattern`` that Go's RE2 regexp rejects or reads otherwise."""
    # RE2 limits a repeat count, and nested counts multiplied, to 1000; counting every
    # count in the pattern, nested or not, refuses a little more than it must.
    counts = [int(n) for m in _REPEAT.finditer(pattern) for n in m.groups() if n]
    if math.prod(max(n, 1) for n in counts) > _RE2_MAX_REPEAT:
        return f"repeat counts over {_RE2_MAX_REPEAT} (nested counts multiply)"
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1 : i + 2]
            if nxt.isdigit():
                return "a backreference or octal escape (\\1 ...)"
            # Go reads no assertion (\b, \B, \A) inside a class; Python reads \b as backspace.
            shared = _CLASS_ESCAPES if in_class else _SHARED_ESCAPES
            if nxt == "x" or nxt in shared or (nxt.isascii() and not nxt.isalnum()):
                i += 2
                continue
            return f"the escape \\{nxt}" if nxt.isascii() else "a non-ASCII escape"
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            # A ']' right after '[' or '[^' is literal in both engines.
            i += 2 if pattern[i + 1 : i + 3] in ("^]",) else 1
            if pattern[i : i + 1] == "]":
                i += 1
            continue
        elif pattern.startswith("(?", i):
            if pattern.startswith("(?P<", i):
                i += 4
                continue
            if not _GROUP_FLAGS.match(pattern, i):
                return "a (?...) group other than (?:...), (?P<name>...) or the flags i, m, s"
        elif c in "*+?}" and pattern[i + 1 : i + 2] == "+":
            return "a possessive quantifier (*+, ++, ?+)"
        i += 1
    return None


def check_regex(pattern: str) -> str:
    """A regular expression Prometheus's matcher (Go's RE2 syntax) accepts with the same meaning.

    It must compile, and must avoid what RE2 lacks: lookarounds, backreferences,
    atomic groups, possessive quantifiers, conditionals, Python-only escapes.

    Returns:
        The pattern.

    Raises:
        ValueError: Naming the construct.
    """
    problem = _re2_problem(pattern)
    if problem is not None:
        msg = f"is not a regular expression Prometheus (RE2) accepts: {problem}"
        raise ValueError(msg)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "possible nested set" and the like
            re.compile(pattern)
    except re.error as exc:
        msg = f"is not a valid regular expression ({exc.msg})"
        raise ValueError(msg) from None
    return pattern


_MATCH_OPS = {"Equal": "=", "NotEqual": "!=", "Re": "=~", "NotRe": "!~"}
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def check_selector(text: str) -> str:
    """A PromQL vector selector such as ``http_requests_total{code!~"5.."}``, nothing more.

    The SLO settings are pasted into ``rate(<selector>[window])``, so an
    expression, an ``offset`` or an ``@`` would change the rule's meaning. The
    selector is written anew from its parsed parts (names checked, values
    quoted by ``promql_string``), so quoting that another PromQL dialect reads
    differently never reaches Prometheus.

    Returns:
        The selector as the rules write it.

    Raises:
        ValueError: It does not parse, or is more than one selector.
    """
    try:
        node = pp.parse(text)
    except (ValueError, RuntimeError):
        msg = 'is not a PromQL selector such as name{label="value"}'
        raise ValueError(msg) from None
    if not isinstance(node, pp.VectorSelector):
        msg = 'must be one PromQL selector such as name{label="value"}, not an expression'
        raise ValueError(msg)  # noqa: TRY004 - pydantic reports ValueError as the setting's error
    if node.offset is not None or node.at is not None:
        msg = "must be a selector without offset or @ (the rules add the window)"
        raise ValueError(msg)
    if node.matchers.or_matchers:
        msg = "must not use or inside the braces (Prometheus 2 does not read it)"
        raise ValueError(msg)
    if node.name is not None and not _METRIC_NAME.fullmatch(node.name):
        msg = "names a metric outside Prometheus's grammar"
        raise ValueError(msg)
    matchers = []
    for matcher in node.matchers.matchers:
        if not LABEL_NAME.fullmatch(matcher.name):
            msg = "names a label outside Prometheus's grammar"
            raise ValueError(msg)
        op = _MATCH_OPS[str(matcher.op).rpartition(".")[2]]
        if op in ("=~", "!~"):
            check_regex(matcher.value)
        matchers.append(f"{matcher.name}{op}{promql_string(matcher.value)}")
    braces = f"{{{', '.join(matchers)}}}" if matchers else ""
    return f"{node.name or ''}{braces}"
