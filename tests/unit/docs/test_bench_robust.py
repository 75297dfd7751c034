"""bench/bench_robust.py's figures: gap closure on the oracle's multiples, carried cells."""

import json
import sys
from pathlib import Path

import pytest

from tests.support.bench import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bench_robust")


def policy(x: float | None, bound: str | None = None) -> dict[str, object]:
    """One policy's entry of a results.json, as far as the bench reads it."""
    return {
        "x_oracle_at_target": x,
        "x_oracle_at_target_ci95": [None, None],
        "gpu_hours_at_target_bound": bound,
        "gpu_hours_at_target": None if x is None else 10.0 * x,
        "gpu_hours": 12.0,
        "slo_attainment": 0.995,
    }


def run(**policies: dict[str, object]) -> dict[str, object]:
    return {
        "trace": "shape:flash-double-h3-w600",
        "seeds": 3,
        "duration_s": 14400.0,
        "scale": 2.0,
        "target_attainment": 0.99,
        "policies": {"oracle": policy(1.0), **policies},
    }


def test_closure_is_the_share_of_the_cheapest_baselines_gap_to_the_oracle(bench):
    doc = run(static=policy(1.5), hpa=policy(2.0), **{"hybrid-deploy": policy(1.25)})
    row = bench.summarise(doc)
    # static is cheapest: (1.5 - 1.25) / (1.5 - 1)
    assert row["closure"]["hybrid-deploy"] == {
        "closure": pytest.approx(0.5),
        "best_baseline": "static",
        "bound": False,
    }
    assert row["deployable"] == {"attainment": 0.995, "x_oracle": pytest.approx(1.2)}
    assert row["carried"] == []


def test_a_rerun_of_one_policy_carries_the_others_from_the_same_settings_only(bench):
    earlier = bench.summarise(
        run(static=policy(1.5), kpa=policy(1.8, "upper"), **{"hybrid-deploy": policy(1.4)})
    )
    rerun = run(**{"hybrid-deploy": policy(1.25)})
    row = bench.summarise(rerun, [earlier])
    assert row["carried"] == ["static", "kpa"]
    assert row["x_oracle"]["hybrid-deploy"]["x"] == 1.25  # the rerun's, not the earlier one
    assert row["x_oracle"]["kpa"]["bound"] is True
    assert row["closure"]["hybrid-deploy"]["closure"] == pytest.approx(0.5)
    other_seeds = bench.summarise({**rerun, "seeds": 10}, [earlier])
    assert other_seeds["carried"] == []
    assert other_seeds["closure"]["hybrid-deploy"]["closure"] is None  # no baseline
    lines = bench.carried_lines([row, other_seeds])
    assert lines[0].startswith("Carried from the previous run of the same settings on 1 of 2")
    assert lines[0].endswith(": static, kpa.")


def test_the_page_counts_the_learnable_shapes_within_the_deploy_limit(bench):
    def row(x: float | None, learnable: bool | None) -> dict[str, object]:
        return {
            "trace": "shape:any",
            "learnable": learnable,
            "target_attainment": 0.99,
            "x_oracle": {},
            "closure": {},
            "deployable": {"attainment": 0.995, "x_oracle": x},
        }

    # two learnable shapes within 1.25 x, one over it, one with no oracle reading; an
    # unlearnable shape and a trace are not counted whatever they cost
    rows = [
        row(1.2, True),
        row(1.25, True),
        row(1.3, True),
        row(None, True),
        row(1.1, False),
        row(1.0, None),
    ]
    text = bench.page(rows, [])
    assert "costs at most 1.25 x the oracle on 2 of the 4 shapes with a pattern" in text
    assert "target attainment on 6 of 6" in text


def test_the_committed_page_is_the_one_its_committed_figures_generate(bench):
    # docs/robustness.md is generated (``bench_robust.py --rows FILE --doc PAGE``): a
    # text or figure changed without regenerating the page fails here.
    root = Path(__file__).resolve().parents[3]
    rows = json.loads((root / "bench" / "results-robust.json").read_text())["runs"]
    page = bench.page(rows, bench.table(rows))
    assert (root / "docs" / "robustness.md").read_text() == page


def test_a_trace_spec_gives_its_own_scale_and_length_or_the_defaults(bench):
    assert bench.trace_spec("gentd26:0.13:21600", 1.0, None) == ("gentd26", 0.13, 21600)
    assert bench.trace_spec("azure-conv:100", 1.0, 3000) == ("azure-conv", 100.0, 3000)
    assert bench.trace_spec("azure-code", 0.2, None) == ("azure-code", 0.2, None)
    assert bench.trace_spec("out/lora.csv:40", 1.0, None) == ("out/lora.csv", 40.0, None)


@pytest.mark.parametrize("spec", ["gentd26:many", "gentd26:0", "gentd26:0.13:-5", ":2"])
def test_a_malformed_trace_spec_is_one_line_naming_it(bench, spec):
    with pytest.raises(SystemExit) as exc:
        bench.trace_spec(spec, 1.0, None)
    assert str(exc.value) == (
        f"--trace {spec}: use NAME[:SCALE[:SECONDS]], e.g. gentd26:0.13:21600"
    )


def test_each_trace_spec_runs_in_a_folder_of_its_own_scale_and_length(bench, tmp_path):
    # a run whose results exist is read, not run again: two scales of one trace must not
    # share a folder, or the second would read the first's figures
    args = bench.argparse.Namespace(
        scale=2.0, duration=None, trace_scale=1.0, trace_duration=None, history=True
    )
    for spec, folder in [
        ("gentd26:0.13:21600", "gentd26-x0.13-21600s"),
        ("gentd26:0.5", "gentd26-x0.5"),
        ("out/lora.csv:40", "lora-x40"),
    ]:
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "results.json").write_text("{}")
        assert bench.run(spec, tmp_path, args) == tmp_path / folder / "results.json"


def test_a_run_that_fails_ends_the_bench_in_one_line_after_evaluates_own(
    bench, tmp_path, monkeypatch, capfd
):
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "bench_robust",
            "--out",
            str(tmp_path),
            "--no-shapes",
            "--seeds",
            "1",
            "--trace",
            "out/no-such-rates.csv:3",
        ],
    )
    with pytest.raises(SystemExit) as exc:
        bench.main()
    assert str(exc.value) == (
        "gpuscale evaluate on out/no-such-rates.csv exited 2; the runs before it are kept"
    )
    assert "no such file: out/no-such-rates.csv" in capfd.readouterr().err
    assert not list(tmp_path.rglob("results.json"))
