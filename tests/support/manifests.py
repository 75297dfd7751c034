"""Rendering deploy/'s kustomizations with the real kustomize (``kubectl kustomize``) and
picking objects out of the result."""

import re
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


DOCUMENTED_OVERLAY = "from-file"
"""The overlay docs/deploy.md spells out for running the controller from a file."""


def documented_overlay(workdir: Path) -> Path:
    """docs/deploy.md's "Running from a file" overlay, written under ``workdir``.

    Each YAML block of the guide whose first line is ``# from-file/NAME`` becomes the
    file NAME, and the example GPUScaler is its ``gpuscaler.yaml``; ``workdir/deploy``
    points at this repository's deploy/, so the overlay's ``../deploy/...`` bases
    resolve as they would in a user's checkout. Returns the overlay's directory.
    """
    text = (ROOT / "docs" / "deploy.md").read_text()
    block = r"^```yaml\n# " + DOCUMENTED_OVERLAY + r"/(\S+)\n(.*?)^```$"
    blocks = re.findall(block, text, re.MULTILINE | re.DOTALL)
    assert {name for name, _ in blocks} >= {"kustomization.yaml"}, "docs/deploy.md lost its blocks"
    overlay = workdir / DOCUMENTED_OVERLAY
    overlay.mkdir(parents=True)
    (workdir / "deploy").symlink_to(DEPLOY)
    for name, body in blocks:
        (overlay / name).write_text(body)
    shutil.copy(DEPLOY / "examples" / "gpuscaler.yaml", overlay / "gpuscaler.yaml")
    return overlay
