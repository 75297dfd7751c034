"""bench/bench_deploy.py: the cases it runs, its rows and its comparison with an earlier run."""

import json
import subprocess
import sys

import pytest

from tests.support.bench import load_bench
from tests.support.servers import gpuscale_cmd


@pytest.fixture(scope="module")
def bench():
    load_bench("bench_robust")  # bench_deploy imports its history layout
    return load_bench("bench_deploy")


def test_a_shape_of_hours_runs_twice_over_and_scores_its_second_pass(bench):
    # the layout bench_robust gives gpuscale evaluate, so both read the same runs
    assert bench.shape_case("flash-single-h3-w120", 2.0) == (
        "shape:flash-single-h3-w120",
        2.0,
        14400,
        7200.0,
    )


def test_a_two_day_shape_runs_once_with_its_first_day_not_scored(bench):
    assert bench.shape_case("shape:diurnal-a0.8-n0.15", 2.0) == (
        "shape:diurnal-a0.8-n0.15",
        2.0,
        172800,
        86400.0,
    )


def test_trace_specs_name_scale_length_and_warmup_with_a_path_allowed(bench):
    # no warm-up given: gpuscale evaluate's default, which depends on the run's length
    assert bench.trace_case("gentd26:0.13:21600") == ("gentd26", 0.13, 21600, None)
    assert bench.trace_case("out/lora.csv:40::172800") == ("out/lora.csv", 40.0, None, 172800.0)
    assert bench.trace_case("azure-conv") == ("azure-conv", 1.0, None, None)
    assert bench.trace_case("ramp:1:1800:0") == ("ramp", 1.0, 1800, 0.0)


def test_a_malformed_trace_spec_is_one_line_naming_it(bench):
    with pytest.raises(SystemExit) as exc:
        bench.trace_case("gentd26:many")
    assert str(exc.value).startswith("--trace gentd26:many: use NAME:SCALE")


def seed(attainment: float | None, gpu_hours: float) -> dict[str, object]:
    return {"attainment": attainment, "gpu_hours": gpu_hours, "seconds": 1.0}


def test_a_row_counts_the_seeds_at_the_target_and_averages_them(bench):
    case = ("shape:x", 2.0, 14400, 7200.0)
    row = bench.summarise("x", case, [seed(0.995, 10.0), seed(0.989, 14.0), seed(0.99, 12.0)])
    assert row["seeds_at_target"] == 2  # 0.99 counts, 0.989 does not
    assert row["attainment"] == pytest.approx((0.995 + 0.989 + 0.99) / 3)
    assert row["gpu_hours"] == pytest.approx(12.0)


def test_the_comparison_reads_only_a_row_of_the_same_layout_and_seeds(bench):
    case = ("shape:x", 2.0, 14400, 7200.0)
    before = bench.summarise("x", case, [seed(0.99, 10.0), seed(0.99, 10.0)])
    after = bench.summarise("x", case, [seed(0.995, 11.0), seed(0.995, 11.0)])
    assert bench.compare(after, {"x": before}) == (
        "attainment was 0.9900 (2 at target), GPU-hours +10.0 %"
    )
    fewer = bench.summarise("x", case, [seed(0.995, 11.0)])
    assert bench.compare(fewer, {"x": before}) == ""  # other seeds: no comparison
    longer = bench.summarise("x", ("shape:x", 2.0, 28800, 7200.0), [seed(0.99, 10.0)] * 2)
    assert bench.compare(longer, {"x": before}) == ""


def test_a_real_run_repeated_reads_the_same_and_compares_at_no_change(
    bench, tmp_path, monkeypatch, capsys
):
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    argv = ["bench_deploy", "--shape", "flash-single-h3-w120", "--seeds", "1", "--jobs", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(first)])
    bench.main()
    monkeypatch.setattr(sys, "argv", [*argv, "--json", str(second), "--compare", str(first)])
    bench.main()
    rows = [json.loads(p.read_text())["rows"][0] for p in (first, second)]
    assert rows[0]["per_seed"][0]["gpu_hours"] > 0
    assert 0.0 <= rows[0]["attainment"] <= 1.0
    for key in ("attainment", "gpu_hours"):  # the simulator is deterministic per seed
        assert rows[0][key] == rows[1][key]
    assert "GPU-hours +0.0 %" in capsys.readouterr().out


@pytest.mark.parametrize(("placement", "scale"), [(False, 1), (True, 3)])
def test_a_trace_without_a_warmup_scores_as_gpuscale_evaluate_scores_its_fair_run(
    bench, tmp_path, placement, scale
):
    # evaluate leaves a fifth of a run shorter than 3000 s unscored: the bench must read
    # the same attainment and GPU-hours from the same seed, or its column is not evaluate's;
    # with --placement both mark each scale-in's pods the same way (at x3 bursty's
    # scale-ins take other pods with placement than without, so a dropped flag shows)
    proc = subprocess.run(
        [
            *gpuscale_cmd(),
            "evaluate",
            "--placement" if placement else "--no-placement",
            "--trace",
            "bursty",
            "--scale",
            str(scale),
            "--duration",
            "1200",
            "--policy",
            "hybrid-deploy",
            "--seeds",
            "1",
            "--knob-values",
            "0",
            "--jobs",
            "1",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    fair = json.loads((tmp_path / "results.json").read_text())["policies"]["hybrid-deploy"]
    case = bench.trace_case(f"bursty:{scale}:1200")
    ours = bench.run_case(case, 0, "hybrid-deploy", None, placement)
    assert ours["attainment"] == pytest.approx(fair["slo_attainment"], rel=1e-12)
    assert ours["gpu_hours"] == pytest.approx(fair["gpu_hours"], rel=1e-12)
    if placement:
        unplaced = bench.run_case(case, 0, "hybrid-deploy", None, False)
        assert unplaced["attainment"] != pytest.approx(ours["attainment"], rel=1e-12)
        return
    scored_from_start = bench.run_case(
        bench.trace_case("bursty:1:1200:0"), 0, "hybrid-deploy", None
    )
    assert scored_from_start["attainment"] != ours["attainment"]  # the warm-up is read


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--no-shapes", "--trace", "out/no-such-rates.csv:40"],
            "--trace out/no-such-rates.csv: no such file: out/no-such-rates.csv; check the"
            " path to the time_s,rps CSV",
        ),
        (
            ["--shape", "ramp-cliff-x3", "--compare", "{not_json}"],
            "--compare {not_json}: not an earlier --json of this bench (JSONDecodeError);"
            " rerun one",
        ),
    ],
)
def test_a_wrong_trace_or_comparison_is_one_line_before_any_run(
    bench, monkeypatch, tmp_path, argv, line
):
    not_json = tmp_path / "notes.txt"
    not_json.write_text("a note, not JSON")
    argv = [a.format(not_json=not_json) for a in argv]
    line = line.format(not_json=not_json)
    monkeypatch.setattr(sys, "argv", ["bench_deploy", *argv, "--seeds", "1", "--jobs", "1"])
    monkeypatch.setattr(bench, "RunPool", None)  # reaching the runs would fail otherwise
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert str(exc.value) == line
