"""Rendering deploy/'s kustomizations with the real kustomize (``kubectl kustomize``) and
picking objects out of the result."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
OVERLAYS = ("prometheus-operator", "plain-prometheus", "gpu-operator")


def render(directory: Path) -> list[dict]:
    """The objects ``kubectl kustomize DIRECTORY`` prints; skips when kubectl is missing."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (scripts/test installs Debian's kubernetes-client)")
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    """Objects of ``kind`` (named ``name`` when given)."""
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objects: list[dict], kind: str, name: str) -> dict:
    """The single object of ``kind`` named ``name``."""
    found = find(objects, kind, name)
    assert len(found) == 1, f"{kind}/{name}: {len(found)} objects"
    return found[0]


def named(objects: list[dict], kind: str, prefix: str) -> dict:
    """The single object of ``kind`` whose name is ``prefix`` plus kustomize's hash suffix."""
    found = [o for o in find(objects, kind) if o["metadata"]["name"].startswith(prefix + "-")]
    assert len(found) == 1, f"{kind}/{prefix}-*: {len(found)} objects"
    return found[0]
