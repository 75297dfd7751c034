"""Fixtures for the controller's unit tests: the API double on a manual clock, the real
KubeActuator over it, and the real in-process MetricStore as the metrics source."""

import logging
import textwrap
from collections.abc import Callable

import pytest

from gpuscale.control.config import load
from gpuscale.control.controller import Controller
from gpuscale.control.kubernetes import KubeActuator
from gpuscale.control.seams import Settings
from gpuscale.control.targets import runtimes
from gpuscale.metrics.store import MetricStore
from tests.support.control import FAST, STATE
from tests.support.kubeapi import KubeApiDouble, ManualClock


@pytest.fixture
def kclock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def kapi(kclock):
    with KubeApiDouble(clock=kclock) as double:
        yield double


@pytest.fixture
def kact(kapi, kclock, tmp_path):
    act = KubeActuator.connect(
        str(kapi.write_kubeconfig(tmp_path / "kubeconfig")),
        retry=FAST,
        sleep=lambda _s: None,
        clock=kclock,
        state=STATE,
    )
    yield act
    act.close()


@pytest.fixture
def store() -> MetricStore:
    return MetricStore()


@pytest.fixture
def make_controller(tmp_path, kact, kclock, store) -> Callable[..., Controller]:
    def make(
        targets_yaml: str, *, source=None, dry_run: bool = False, actuator=None, workers: int = 1
    ) -> Controller:
        path = tmp_path / "scaler.yaml"
        path.write_text(
            "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\n"
            "metadata: {name: test, namespace: default}\nspec:\n  targets:\n"
            + textwrap.indent(textwrap.dedent(targets_yaml), "    ")
        )
        return Controller(
            runtimes(load(path)),
            source or store,
            actuator or kact,
            settings=Settings(sync_period_s=15.0, dry_run=dry_run, workers=workers),
            clock=kclock,
        )

    return make


@pytest.fixture
def decisions(caplog) -> Callable[[], list[dict]]:
    caplog.set_level(logging.DEBUG, logger="gpuscale.control.controller")

    def get() -> list[dict]:
        return [r.decision for r in caplog.records if hasattr(r, "decision")]

    return get
