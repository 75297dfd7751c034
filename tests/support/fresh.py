"""Run Python code in a fresh interpreter: what a command imports, or how it fails, from scratch.

A test process has imported most of gpuscale already, so what a command loads,
or how it ends without a library, is seen only in a new process.
"""

import os
import subprocess
import sys
import textwrap


def run_fresh(code: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (dedented) with this interpreter; ``env`` is added to this environment."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
