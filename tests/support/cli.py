"""Running ``gpuscale`` in the test process: a clean environment and its one-line errors."""

import logging
import os
from collections.abc import Iterator

import pytest

from gpuscale.cli.app import main


def clean_process(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Keep the root logger as it was and run without any GPUSCALE_* variable (a fixture body)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    for name in list(os.environ):
        if name.startswith("GPUSCALE_"):
            monkeypatch.delenv(name)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run ``gpuscale ARGS``.

    Returns:
        Its exit status and its standard error.
    """
    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def one_line(err: str) -> str:
    """The one error line of a failed command's standard error (and that there is no traceback)."""
    lines = [line for line in err.splitlines() if line.startswith("gpuscale: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]
