"""README's headline table and docs/results.md are generated from bench/results.json."""

import copy
import json
from pathlib import Path

import pytest

from tests.support.bench import load_bench

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def results_doc():
    return load_bench("results_doc")


@pytest.fixture(scope="module")
def results():
    return json.loads((ROOT / "bench" / "results.json").read_text())


def test_readme_and_results_page_regenerate_byte_identical(results_doc, results):
    readme = (ROOT / "README.md").read_text()
    assert results_doc.readme_with(readme, results_doc.headline(results)) == readme
    assert results_doc.results_page(results) == (ROOT / "docs" / "results.md").read_text()


def test_the_check_fails_when_a_figure_changes(results_doc, results):
    changed = copy.deepcopy(results)
    entry = next(e for e in changed["hybrid"]["traces"] if not e["faults"])
    entry["policies"]["hybrid"]["x_oracle_at_target"] += 0.5
    assert results_doc.headline(changed) != results_doc.headline(results)
    assert results_doc.results_page(changed) != results_doc.results_page(results)


def test_the_cheapest_baseline_is_chosen_among_baselines_only(results_doc):
    policies = {
        "oracle": {"gpu_hours_at_target": 1.0},
        "hybrid": {"gpu_hours_at_target": 2.0},
        "hpa": {"gpu_hours_at_target": 4.0},
        "static": {"gpu_hours_at_target": 3.0},
        "kpa": {"gpu_hours_at_target": None},
    }
    name, p = results_doc._cheapest_baseline(policies)
    assert (name, p["gpu_hours_at_target"]) == ("static", 3.0)
    assert results_doc._against_best(policies["hybrid"], p) == "-33 %"
