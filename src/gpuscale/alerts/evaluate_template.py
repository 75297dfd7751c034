"""The subset of Prometheus's alert templates (Go text/template) the catalogue writes.

Alertmanager and ``/api/v1/alerts`` show annotations expanded, so the in-process
evaluator expands them as Prometheus does: ``{{ $labels.NAME }}``, ``{{ $value }}``,
pipes into ``humanizePercentage``, ``humanize`` and ``printf``, ``eq``, and
``if``/``else if``/``else``/``end``. A template outside this subset expands to
``<error expanding template: ...>`` as Prometheus writes for a failing one, so
it shows rather than passing for text.
"""

import math
import re
import shlex
from collections.abc import Mapping

_ACTION = re.compile(r"{{-?\s*(.*?)\s*-?}}", re.DOTALL)


class TemplateError(ValueError):
    """The template uses something outside the supported subset."""


def go_float(v: float) -> str:
    """``v`` as Go's ``%v`` prints a float64 (shortest form, ``e+XX`` exponents).

    Returns:
        The text.
    """
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v == int(v) and abs(v) < 1e21:
        return str(int(v))
    text = repr(v)
    if "e" in text:
        mantissa, exp = text.split("e")
        sign = "-" if exp.startswith("-") else "+"
        return f"{mantissa}e{sign}{exp.lstrip('+-').zfill(2)}"
    return text


def _humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return f"{v:.4g}"
    prefixes = ("", "k", "M", "G", "T", "P", "E", "Z", "Y")
    small = ("", "m", "u", "n", "p", "f", "a", "z", "y")
    i = 0
    if abs(v) >= 1:
        while abs(v) >= 1000 and i < len(prefixes) - 1:
            v, i = v / 1000, i + 1
        return f"{v:.4g}{prefixes[i]}"
    while abs(v) < 1 and i < len(small) - 1:
        v, i = v * 1000, i + 1
    return f"{v:.4g}{small[i]}"


def _value(token: str, labels: Mapping[str, str], value: float) -> object:
    if token.startswith('"'):
        return shlex.split(token)[0]
    if token in ("$value", ".Value"):
        return value
    for prefix in ("$labels.", ".Labels."):
        if token.startswith(prefix):
            return labels.get(token[len(prefix) :], "")
    raise TemplateError(f"unsupported term {token!r}")


def _pipeline(text: str, labels: Mapping[str, str], value: float) -> object:
    stages = [s.strip() for s in text.split("|")]
    current: object = None
    for i, stage in enumerate(stages):
        words = shlex.split(stage, posix=False)
        head, args = words[0], [_value(w, labels, value) for w in words[1:]]
        if i > 0:
            args.append(current)
        if head == "eq":
            current = any(args[0] == a for a in args[1:])
        elif head == "humanizePercentage":
            current = f"{float(args[0]) * 100:.4g}%"  # type: ignore[arg-type]
        elif head == "humanize":
            current = _humanize(float(args[0]))  # type: ignore[arg-type]
        elif head == "printf":
            fmt = str(args[0]).replace("%v", "%s")
            current = fmt % tuple(args[1:])
        elif i == 0 and not args:
            current = _value(head, labels, value)
        else:
            raise TemplateError(f"unsupported function {head!r}")
    return current


def _text(value: object) -> str:
    if isinstance(value, float):
        return go_float(value)
    return str(value)


def _truthy(value: object) -> bool:
    return bool(value) if not isinstance(value, float) else value != 0


def expand(template: str, labels: Mapping[str, str], value: float) -> str:
    """Expand an annotation or label template for one alert.

    Returns:
        The text, or ``<error expanding template: ...>`` outside the supported subset.
    """
    if "{{" not in template:
        return template
    try:
        return _render(template, labels, value)
    except (TemplateError, ValueError, TypeError, IndexError) as exc:
        return f"<error expanding template: {exc}>"


def _render(template: str, labels: Mapping[str, str], value: float) -> str:
    out: list[str] = []
    # A stack of (emitting now, some branch already taken) for if/else chains.
    stack: list[tuple[bool, bool]] = []
    pos = 0
    for match in _ACTION.finditer(template):
        emitting = all(e for e, _ in stack)
        if emitting:
            out.append(template[pos : match.start()])
        pos = match.end()
        action = match.group(1)
        outer = all(e for e, _ in stack[:-1]) if stack else True
        if action.startswith("if "):
            cond = emitting and _truthy(_pipeline(action[3:], labels, value))
            stack.append((cond, cond))
        elif action.startswith("else if "):
            _, taken = stack.pop()
            cond = outer and not taken and _truthy(_pipeline(action[8:], labels, value))
            stack.append((cond, taken or cond))
        elif action == "else":
            _, taken = stack.pop()
            stack.append((outer and not taken, True))
        elif action == "end":
            if not stack:
                raise TemplateError("unexpected {{end}}")
            stack.pop()
        elif emitting:
            out.append(_text(_pipeline(action, labels, value)))
    if stack:
        raise TemplateError("unexpected EOF: an {{if}} without {{end}}")
    out.append(template[pos:])
    return "".join(out)
