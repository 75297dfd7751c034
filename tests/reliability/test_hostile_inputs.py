"""Hostile inputs are refused quickly, in bounded memory, with one line and no content.

Each case runs in a fresh interpreter: the loader is imported first, then the
call is timed, then run again with its allocations traced (``tracemalloc``),
so the bounds speak of the parse alone. The bounds are the brief's (1 s, 100 MB): a parse of a
config file has no reason to come near either.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.servers import gpuscale_cmd

LIMIT_S = 1.0
LIMIT_BYTES = 100 * 1024 * 1024
SUBPROCESS_TIMEOUT_S = 60  # a hang fails the test instead of stalling the suite

_PROBE = textwrap.dedent(
    """
    import json, sys, time, tracemalloc
    from pathlib import Path
    from gpuscale.errors import ConfigError
    {imports}
    arg = sys.argv[1]

    def call():
        try:
            {call}
        except ConfigError as exc:
            return str(exc)
        return None

    start = time.perf_counter()
    message = call()
    elapsed = time.perf_counter() - start
    tracemalloc.start()  # a second run, traced: tracing slows Python several times
    call()
    peak = tracemalloc.get_traced_memory()[1]
    print(json.dumps({{"elapsed": elapsed, "peak": peak, "message": message}}))
    """
)

LOADERS = {
    "web-config": (
        "from gpuscale.exporter.webconfig import load_web_config",
        "load_web_config(Path(arg))",
    ),
    "rules": ("from gpuscale.alerts.config import load_config", "load_config(Path(arg))"),
    "gpuscaler": ("from gpuscale.control.config import load", "load(Path(arg))"),
    "counters": ("from gpuscale.fields.counters import read_counters", "read_counters(Path(arg))"),
    "trace": (
        "from gpuscale.sim.traces import read_rate_file",
        "read_rate_file(Path(arg), service_s=1.0)",
    ),
    "devices": ("from gpuscale.exporter.devices import parse_devices", "parse_devices(arg)"),
}


def _probe(loader: str, arg: str) -> dict:
    imports, call = LOADERS[loader]
    script = _PROBE.format(imports=imports, call=call)
    done = subprocess.run(
        [sys.executable, "-c", script, arg],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _laughs(levels: int, width: int = 9) -> str:
    """The YAML "billion laughs": each anchor repeats the one before ``width`` times."""
    lines = ["a0: &a0 [" + ",".join(["lol"] * width) + "]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _nested(depth: int) -> str:
    return "x: " + "[" * depth + "]" * depth + "\n"


CASES = [
    ("web-config", "aliases.yml", _laughs(9), "expands"),
    ("rules", "aliases.yml", _laughs(9), "expands"),
    ("gpuscaler", "aliases.yml", _laughs(9), "expands"),
    ("rules", "deep.yml", _nested(50_000), "nests deeper than"),
    ("web-config", "deep.yml", _nested(50_000), "nests deeper than"),
    ("rules", "nul.yml", "alerts:\n  gpu: {\0}\n", "NUL byte"),
    ("rules", "latin1.yml", "alerts: caf\xe9\n".encode("latin-1"), "is not UTF-8"),
    ("web-config", "big.yml", "# " + "x" * (2 << 20) + "\n", "larger than"),
    ("trace", "far.csv", "time_s,rps\n0,1\n1e9,2\n", "31 days"),
    ("counters", "self-loop.yml", "a: &a [*a]\n", "DCGM field"),  # a counters file is CSV
]


@pytest.mark.parametrize(("loader", "name", "content", "expected"), CASES)
def test_hostile_file_is_refused_fast_small_and_in_one_line(
    tmp_path, loader, name, content, expected
):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    result = _probe(loader, str(path))
    assert result["message"] is not None, "accepted"
    assert expected in result["message"]
    assert result["message"].startswith(str(path))
    assert "\n" not in result["message"]
    assert result["elapsed"] < LIMIT_S
    assert result["peak"] < LIMIT_BYTES


@pytest.mark.parametrize("loader", ["web-config", "rules", "gpuscaler", "counters"])
@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_fifo_is_refused_before_it_is_read(tmp_path, loader, special):
    path = special
    if special == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)
    result = _probe(loader, path)
    assert result["message"] == (
        f"{path}: is not a regular file; give --"
        f"{ {'web-config': 'web-config-file', 'counters': 'collectors'}.get(loader, 'config') }"
        " a file"
    )
    assert result["elapsed"] < LIMIT_S


def test_device_range_is_capped():
    result = _probe("devices", "g:0-99999999")
    assert result["message"] is not None
    assert "goes past index 4095" in result["message"]
    assert result["elapsed"] < LIMIT_S
    assert result["peak"] < LIMIT_BYTES


@pytest.mark.parametrize(
    "args",
    [
        ["-f", "/dev/zero"],
        ["--web-config-file", "/dev/zero"],
        ["-d", "g:0-99999999"],
    ],
)
def test_exporter_refuses_hostile_flags_with_exit_2_and_one_line(args):
    done = subprocess.run(
        [*gpuscale_cmd(), "exporter", "--source", "sim", "--address", "127.0.0.1:0", *args],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert "MemoryError" not in done.stderr


def test_a_secret_file_given_as_counters_is_not_quoted(tmp_path):
    secret = "root:$y$j9T$Kc2hFakeHashNotReal$Zm9vYmFyYmF6:19000:0:99999:7:::"
    shadow = tmp_path / "shadow"
    shadow.write_text(f"{secret}\ndaemon,*,19000\n")
    for text in (f"{secret}\n", f"daemon,*,19000\n{secret}\n"):
        shadow.write_text(text)
        done = subprocess.run(
            [*gpuscale_cmd(), "exporter", "--source", "sim", "-f", str(shadow)],
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 2
        for part in ("Kc2hFakeHash", "daemon", "19000", "99999", ":::"):
            assert part not in done.stderr
        assert str(shadow) in done.stderr


def test_scaler_file_path_name_with_dot_dot_is_refused_by_key(tmp_path):
    path = tmp_path / "scaler.yaml"
    path.write_text(
        "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\nmetadata: {name: s}\nspec:\n"
        "  targets:\n    - scaleTargetRef: {name: a/../../secrets/x}\n"
        "      maxReplicas: 2\n      policy: {name: hpa, targetAverageValue: .inf}\n"
    )
    result = _probe("gpuscaler", str(path))
    assert result["message"] == (
        f"{path}:6 spec.targets[0].scaleTargetRef.name: must be a DNS-1123 subdomain: lower-case"
        " letters, digits, '-' and '.', 253 at most; see docs/autoscaler.md for the schema"
    )


def test_a_flat_file_of_many_values_is_refused_at_the_value_limit(tmp_path):
    path = tmp_path / "flat.yml"
    path.write_text("x: [" + "1," * 400_000 + "]\n")  # 800 KiB, under the size limit
    result = _probe("rules", str(path))
    assert "expands (aliases written out) to more than 10000 values" in result["message"]
    assert result["elapsed"] < LIMIT_S


SCALER = (
    "apiVersion: gpuscale.io/v1alpha1\nkind: GPUScaler\nmetadata: {name: s}\nspec:\n"
    "  targets:\n    - scaleTargetRef: {name: a}\n"
    "      maxReplicas: 2\n      policy: {name: hpa, targetAverageValue: 50}\n"
)


@pytest.mark.parametrize("command", ["up", "autoscale"])
def test_up_and_autoscale_read_their_web_config_bounded(tmp_path, command):
    scaler = tmp_path / "scaler.yaml"
    scaler.write_text(SCALER)
    extra = ["--source", "sim"] if command == "up" else ["--config", str(scaler)]
    done = subprocess.run(
        [*gpuscale_cmd(), command, *extra, "--web-config-file", "/dev/zero"],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gpuscale: error: /dev/zero: is not a regular file; give --web-config-file a file"
    )
