"""A fresh copy of the pynvml fake per test, installed as ``pynvml``."""

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

FAKES = Path(__file__).resolve().parents[1] / "fakes"


def fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Load tests/fakes/fake_pynvml.py anew (no state leaks) and put it in ``sys.modules``."""
    spec = importlib.util.spec_from_file_location("_gpuscale_fake_pynvml", FAKES / "fake_pynvml.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return module
