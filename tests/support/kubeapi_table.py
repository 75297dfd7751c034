"""The API double's server-side printing: a CRD's printer columns as a meta.k8s.io/v1 Table.

``kubectl get`` asks for ``application/json;as=Table;v=v1;g=meta.k8s.io`` and prints the
Table the server builds; for a custom resource the API server builds it from the CRD's
``additionalPrinterColumns`` (apiextensions-apiserver's table convertor): a ``Name``
column first, then each column's JSONPath evaluated against the object, the first
result only; a ``date`` column as the age since that time in Kubernetes' short form;
an absent value as an empty cell. The JSONPath subset here is what CRDs use: fields
(``.a.b``), indexes (``[0]``) and equality filters (``[?(@.type=="Ready")]``).
"""

import re
from datetime import UTC, datetime
from typing import Any

from tests.support.kubeapi_model import Obj, Resource

_STEP = re.compile(
    r"""\.([A-Za-z0-9_-]+)|\[(\d+)\]|\[\?\(@\.([A-Za-z0-9_]+)==["']([^"']*)["']\)\]"""
)


def jsonpath(obj: Any, path: str) -> list[Any]:
    """Every value ``path`` selects in ``obj`` (kubectl's JSONPath subset used by CRDs)."""
    found, pos = [obj], 0
    while pos < len(path):
        step = _STEP.match(path, pos)
        if step is None:
            raise ValueError(f"unsupported JSONPath {path!r} at {pos}")
        pos = step.end()
        field, index, key, value = step.groups()
        nxt: list[Any] = []
        for node in found:
            if field is not None and isinstance(node, dict) and field in node:
                nxt.append(node[field])
            elif index is not None and isinstance(node, list) and int(index) < len(node):
                nxt.append(node[int(index)])
            elif key is not None and isinstance(node, list):
                nxt += [i for i in node if isinstance(i, dict) and str(i.get(key)) == value]
        found = nxt
    return found


def human_duration(seconds: float) -> str:
    """Kubernetes' short age (``duration.HumanDuration``): 45s, 3m20s, 5h, 2d3h, 1y."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def _cell(kind: str, value: Any, now: float) -> Any:
    if kind == "date":
        try:
            at = datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        except ValueError:
            return "<invalid>"
        return human_duration(now - at.timestamp())
    if kind == "integer":
        return int(value) if isinstance(value, int | float) else None
    if kind == "number":
        return float(value) if isinstance(value, int | float) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else str(value)


def table(res: Resource, objects: list[Obj], version: str, now: float) -> Obj:
    """The Table the API server answers for ``objects`` of a custom resource."""
    columns: list[Obj] = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace.",
            "priority": 0,
        }
    ]
    columns += [
        {"name": n, "type": t, "format": "", "description": d, "priority": 0}
        for n, t, _p, d in res.printer_columns
    ]
    rows = []
    for obj in objects:
        cells: list[Any] = [obj["metadata"]["name"]]
        for _n, kind, path, _d in res.printer_columns:
            values = jsonpath(obj, path)
            cells.append(_cell(kind, values[0], now) if values else None)
        meta = {k: v for k, v in obj["metadata"].items() if k != "managedFields"}
        partial = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": meta,
        }
        rows.append({"cells": cells, "object": partial})
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": version},
        "columnDefinitions": columns,
        "rows": rows,
    }
