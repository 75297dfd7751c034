"""README is a front page: what it is, why, how to start, on the first screen."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()
FIRST_SCREEN = "\n".join(README.splitlines()[:60])


def test_the_readme_is_a_front_page_not_a_notebook():
    assert len(README.splitlines()) < 250


def test_the_first_screen_holds_pitch_why_commands_and_quick_starts():
    assert FIRST_SCREEN.startswith("# gpuscale\n\ngpuscale monitors GPU fleets")
    assert "| against dcgm-exporter + HPA or KEDA | the usual stack | gpuscale |" in FIRST_SCREEN
    for command in ("./scripts/gpuscale exporter", "./scripts/test"):
        assert command in FIRST_SCREEN
    for start in ("# 1. A drop-in for dcgm-exporter", "# 2. The autoscaler", "# 3. Compare"):
        assert start in FIRST_SCREEN


def test_no_internal_issue_numbers_in_user_facing_text():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        found = re.search(r"\bissue[ -]?#?\d+", page.read_text(), re.IGNORECASE)
        assert found is None, f"{page.name}: {found.group(0) if found else ''}"


def test_every_relative_link_of_readme_and_docs_resolves():
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            assert (page.parent / target).exists(), f"{page.name} links to {target}"
