"""``gpuscale up``'s usage errors: one line naming the flag, exit status 2, no traceback."""

import pytest

from tests.unit.cli.test_cli_app import clean_process, run_main  # noqa: F401 - the fixture


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--alertmanager", "localhost:9093"], "--alertmanager 'localhost:9093'"),
        (["--prometheus", "prom"], "--prometheus 'prom'"),
        (["--api-address", "nowhere"], "--api-address 'nowhere'"),
        (["--source", "nvml", "--fault", "gpu-lost@5:gpu=1"], "--fault"),
        (["--fault", "melt@5"], "melt@5"),
    ],
)
def test_bad_flags_end_in_one_line_naming_the_flag(capsys, args, named):
    code, _, err = run_main(capsys, "up", "--address", "127.0.0.1:0", *args)
    assert code == 2
    assert named in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
