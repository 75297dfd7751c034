"""The overlays under deploy/overlays, rendered once per session."""

import pytest

from tests.support.manifests import DEPLOY, OVERLAYS, render


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict]]:
    return {name: render(DEPLOY / "overlays" / name) for name in OVERLAYS}
