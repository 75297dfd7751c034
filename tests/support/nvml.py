"""Fresh copies of the GPU library fakes per test, installed as ``pynvml`` and ``amdsmi``."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def _install_fake(monkeypatch: pytest.MonkeyPatch, file: str, name: str) -> ModuleType:
    """Load ``tests/fakes/FILE`` anew (no state leaks) and put it in ``sys.modules`` as ``name``."""
    spec = importlib.util.spec_from_file_location(f"_gpuscale_{file[:-3]}", FAKES / file)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Load tests/fakes/fake_pynvml.py anew and put it in ``sys.modules`` as ``pynvml``."""
    return _install_fake(monkeypatch, "fake_pynvml.py", "pynvml")


def fake_amdsmi(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Load tests/fakes/fake_amdsmi.py anew and put it in ``sys.modules`` as ``amdsmi``."""
    return _install_fake(monkeypatch, "fake_amdsmi.py", "amdsmi")
