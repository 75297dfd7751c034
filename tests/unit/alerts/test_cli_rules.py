"""``gpuscale rules`` help: every option whole at 80 columns, with its environment variable."""

import pytest

from gpuscale.cli.app import main
from gpuscale.cli.commands import load_subcommand


@pytest.mark.parametrize("sub", ["render", "backtest", "defaults"])
def test_rules_help_at_80_columns_shows_every_option_whole(capsys, monkeypatch, sub):
    monkeypatch.setenv("COLUMNS", "80")
    command = load_subcommand("rules").commands[sub]
    code = 0
    try:
        main(["rules", sub, "--help"])
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    for param in command.params:
        for name in (*param.opts, *param.secondary_opts):
            assert f" {name}" in out or f"{name}," in out, name
        if param.envvar:
            assert str(param.envvar) in out.replace("\n", "").replace(" ", "")
    assert max(len(line) for line in out.splitlines()) <= 80
