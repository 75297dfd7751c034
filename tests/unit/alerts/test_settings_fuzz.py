"""Any settings mapping either renders rules the real promtool accepts, or is refused with one
ConfigError line: never a traceback, never a rules file Prometheus would reject.

Hypothesis draws the mappings (tests/support/settings_fuzz.py); promtool is slow to start, so
the rendered files of every example are checked in one ``promtool check rules`` call at the end.
bench/fuzz_rules_settings.py runs the same with thousands of examples.
"""

from pathlib import Path

from hypothesis import HealthCheck, given, settings

from tests.support.settings_fuzz import promtool_rejections, settings_mappings, try_settings


def test_settings_render_to_rules_promtool_accepts_or_are_refused_in_one_line(tmp_path):
    rendered: dict[Path, dict[str, object]] = {}
    refused: list[str] = []

    @settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(settings_mappings())
    def one(mapping: dict[str, object]) -> None:
        outcome = try_settings(mapping, tmp_path, len(rendered) + len(refused))
        if outcome.rendered is not None:
            rendered[outcome.rendered] = mapping
        else:
            assert outcome.refused is not None
            assert "\n" not in outcome.refused
            refused.append(outcome.refused)

    one()
    rejected = promtool_rejections(list(rendered))
    assert not rejected, {str(p): (rendered.get(p), why) for p, why in rejected.items()}
    # Both branches were exercised: the strategy is not all noise or all defaults.
    assert rendered
    assert refused
