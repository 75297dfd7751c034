"""One dialect across the subcommands: -h and --version everywhere, one form for every
duration, environment variables that cannot collide, and help defaults that are true.

The walk reads the commands as the ``gpuscale`` group builds them, so a subcommand
added later is checked without a line here.
"""

import re
from collections import defaultdict

import pytest

from gpuscale.cli.app import main
from gpuscale.cli.commands import SUBCOMMANDS, load_subcommand, package_version

EXPORTER_DIALECT = {"exporter"}
"""Commands whose flags are dcgm-exporter's (its -c and -x are milliseconds, its variables
DCGM_EXPORTER_*): a drop-in keeps them as they are."""

TIME_WORDS = re.compile(r"duration|interval|period|timeout|deadline|delay|warmup|latency|time")


def walk():
    """(path, command) of every runnable command, groups' subcommands included."""
    out = []
    for name in SUBCOMMANDS:
        command = load_subcommand(name)
        subs = getattr(command, "commands", None)
        if subs:
            out += [((name, sub), c) for sub, c in subs.items()]
        else:
            out.append(((name,), command))
    return out


COMMANDS = walk()


def options(command):
    return [p for p in command.params if p.param_type_name == "option" and not p.hidden]


def run(capsys, *argv):
    try:
        main(list(argv))
        code = 0
    except SystemExit as exit_:
        code = exit_.code or 0
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_h_and_version_work_on_every_command(capsys, path, command):
    code, out, err = run(capsys, *path, "-h")
    assert code == 0, err
    assert out.startswith(f"Usage: gpuscale {' '.join(path)} ")
    code, out, err = run(capsys, *path, "--version")
    assert code == 0, err
    assert out.startswith(f"gpuscale {' '.join(path)} version {package_version()}")


def test_the_group_answers_h_and_version(capsys):
    assert run(capsys, "-h")[1].startswith("Usage: gpuscale ")
    assert run(capsys, "--version")[1] == f"gpuscale version {package_version()}\n"


def _time_options():
    for path, command in COMMANDS:
        if path[0] in EXPORTER_DIALECT:
            continue
        for p in options(command):
            flag = p.opts[-1]
            if TIME_WORDS.search(flag):
                yield path, command, p


TIME_OPTIONS = list(_time_options())


def test_every_time_option_is_found():
    # a regression check on the walk itself: these are the time options today
    flags = {(" ".join(path), p.opts[-1]) for path, _, p in TIME_OPTIONS}
    assert ("evaluate", "--duration") in flags
    assert ("up", "--scrape-interval") in flags
    assert ("autoscale", "--sync-period") in flags
    assert ("rules backtest", "--scrape-interval") in flags


@pytest.mark.parametrize(
    ("path", "command", "param"),
    TIME_OPTIONS,
    ids=[f"{' '.join(path)} {p.opts[-1]}" for path, _, p in TIME_OPTIONS],
)
def test_every_time_option_takes_seconds_and_prometheus_durations(path, command, param):
    assert param.metavar == "<duration>", f"{param.opts[-1]} is not a duration option"
    ctx = command.make_context(" ".join(path), [], resilient_parsing=True)
    assert param.process_value(ctx, "90") == 90
    assert param.process_value(ctx, "90s") == 90
    assert param.process_value(ctx, "2m") == 120
    assert param.process_value(ctx, "1h30m") == 5400
    with pytest.raises(Exception, match=r"is not seconds .* or a duration such as 15s"):
        param.process_value(ctx, "soon")


def test_a_duration_error_names_the_flag_and_the_forms(capsys):
    code, _, err = run(capsys, "up", "--scrape-interval", "fast")
    assert code == 2
    assert err.startswith(
        "gpuscale: error: --scrape-interval fast: 'fast' is not seconds (90, 0.5) or a "
        "duration such as 15s"
    )


def test_an_environment_variable_means_one_thing_in_every_subcommand():
    """Two subcommands may read one variable only for options of the same name."""
    readers = defaultdict(set)
    for _path, command in COMMANDS:
        for p in options(command):
            names = p.envvar if isinstance(p.envvar, list | tuple) else [p.envvar]
            for name in filter(None, names):
                readers[name].add(p.opts[-1])
    shared = {name: flags for name, flags in readers.items() if len(flags) > 1}
    assert shared == {}


def test_every_option_of_gpuscales_own_commands_has_a_namespaced_variable():
    for path, command in COMMANDS:
        if path[0] in EXPORTER_DIALECT:
            continue
        for p in options(command):
            if p.opts[-1] in ("--help", "--version"):
                continue
            given = p.envvar if isinstance(p.envvar, list | tuple) else [p.envvar]
            names = [n for n in given if n]
            assert names, f"{' '.join(path)} {p.opts[-1]} has no environment variable"
            # up's exporter options also read dcgm-exporter's names, as the exporter does
            assert any(n.startswith("GPUSCALE_") for n in names), (path, names)


def test_evaluate_and_up_read_their_own_duration_variables(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("GPUSCALE_UP_DURATION", "soon")
    code, _, err = run(capsys, "up")
    assert code == 2
    assert "GPUSCALE_UP_DURATION=soon" in err
    monkeypatch.delenv("GPUSCALE_UP_DURATION")
    monkeypatch.setenv("GPUSCALE_EVALUATE_DURATION", "1.5")
    code, _, err = run(capsys, "evaluate", "--out", str(tmp_path))
    assert code == 2
    assert "GPUSCALE_EVALUATE_DURATION=1.5" in err


def _help_defaults(path):
    """{flag: the default the help text states}, Click's and hand-written ones alike."""
    code_text = {}
    command = dict(COMMANDS)[path]
    for p in options(command):
        record = p.get_help_record(command.make_context(" ".join(path), [], resilient_parsing=True))
        if record is None:
            continue
        # Click's own rendering closes the help: [env var: X; default: Y] or [default: Y];
        # a hand-written one (show_default off) stands in the text: [default: Y].
        text = " ".join(record[1].split())
        found = re.search(r"\[(?:env var: [^;\]]+; )?default: ([^\]]+)\]$", text) or re.search(
            r"\[default: ([^\]]+)\]", text
        )
        if found:
            code_text[p.opts[-1]] = (p, found.group(1))
    return code_text


@pytest.mark.parametrize(("path", "command"), COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_shown_defaults_are_the_defaults_the_command_uses(path, command):
    """A default Click renders must be the parameter's default (a hand-written help text
    that says otherwise, with show_default off, is checked below)."""
    for flag, (p, text) in _help_defaults(path).items():
        if not p.show_default or isinstance(p.show_default, str):
            continue
        default = p.default.value if hasattr(p.default, "value") else p.default
        if isinstance(default, list | tuple):
            default = ", ".join(map(str, default))
        if p.is_flag and p.secondary_opts:  # Click names the flag that is on by default
            default = (p.opts[0] if p.default else p.secondary_opts[0]).lstrip("-")
        shown = text.split(";")[0].strip()  # a range follows the default: "8; 1<=x<=64"
        assert shown == str(default), f"{' '.join(path)} {flag}"


def test_evaluates_policy_default_is_the_set_it_runs():
    from gpuscale.evaluate import registry

    _, text = _help_defaults(("evaluate",))["--policy"]
    assert text == ", ".join(registry.default_names())
    assert registry.choose([]) == registry.default_names()
