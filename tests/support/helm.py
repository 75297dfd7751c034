"""Render the env block of dcgm-exporter's Helm DaemonSet template, as Helm would.

Only what that block uses: ``{{- if X }}``/``{{- if or X Y}}`` ... ``{{- end }}`` on their
own lines, and ``{{ .Values.a.b }}`` / ``{{ .Values.a | join "," | quote }}`` inside values.
Anything else fails loudly, so a new construct in the chart cannot be skipped silently.
"""

import json
import re
from typing import Any

import yaml

_IF = re.compile(r"^\s*\{\{-? if (.+?)\s*\}\}\s*$")
_END = re.compile(r"^\s*\{\{-? end \}\}\s*$")
_EXPR = re.compile(r"\{\{\s*(.+?)\s*\}\}")


def _lookup(values: dict[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.removeprefix("$").removeprefix(".Values.").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def _truth(values: dict[str, Any], cond: str) -> bool:
    words = cond.split()
    if words[0] == "or":
        return any(_truth(values, w) for w in words[1:])
    assert len(words) == 1, f"unsupported condition {cond!r}"
    return bool(_lookup(values, words[0]))


def _expr(values: dict[str, Any], expr: str) -> str:
    parts = [p.strip() for p in expr.split("|")]
    value = _lookup(values, parts[0])
    for fn in parts[1:]:
        if fn.startswith("join "):
            value = json.loads(fn.removeprefix("join ")).join(value)
        elif fn == "quote":
            value = json.dumps(str(value))
        else:
            raise AssertionError(f"unsupported function {fn!r}")
    return str(value)


def render_env(template: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """The container's env list for the given chart values."""
    out: list[str] = []
    stack: list[bool] = []
    for line in template.splitlines():
        if match := _IF.match(line):
            stack.append(_truth(values, match[1]))
        elif _END.match(line):
            stack.pop()
        elif all(stack):
            assert "toYaml" not in line, "extraEnv is not supported: leave it empty"
            out.append(_EXPR.sub(lambda m: _expr(values, m[1]), line))
    assert not stack, "unbalanced if/end"
    return yaml.safe_load("\n".join(out))["env"]
