"""Fuzz the rules settings file: every mapping renders rules promtool accepts, or is refused.

Draws ``--examples`` settings mappings (tests/support/settings_fuzz.py: every key, with values
built to break PromQL, YAML, Go templates and RE2), loads and renders each as ``gpuscale rules
render`` does, and checks every rendered file with the real ``promtool check rules`` (in
batches, as promtool is slow to start). It counts four outcomes: refused with a one-line
ConfigError, rendered and accepted, rendered but rejected by promtool, and any other
exception (a traceback a user would see). The last two must be 0.

Run: ``python bench/fuzz_rules_settings.py --examples 1000`` (a few minutes); ``--json``
prints the counts.
"""

import argparse
import json
import sys
import tempfile
import traceback
from collections import Counter
from pathlib import Path

from hypothesis import HealthCheck, given, seed, settings

sys.path.insert(0, str(Path(__file__).parents[1]))

from tests.support.settings_fuzz import (
    promtool_rejections,
    settings_mappings,
    try_settings,
)

BATCH = 200


def main() -> None:
    """Run the fuzz and print the counts; exit 1 if any rendering failed or was rejected."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=1000, help="mappings to draw")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed")
    parser.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = parser.parse_args()
    counts: Counter[str] = Counter()
    failures: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        rendered: dict[Path, dict[str, object]] = {}

        @seed(args.seed)
        @settings(
            max_examples=args.examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(settings_mappings())
        def one(mapping: dict[str, object]) -> None:
            counts["examples"] += 1
            try:
                outcome = try_settings(mapping, workdir, counts["examples"])
            except Exception:  # noqa: BLE001 - any other exception is what is counted
                counts["tracebacks"] += 1
                failures.append(f"{mapping!r}: {traceback.format_exc(limit=3)}")
                return
            if outcome.rendered is None:
                counts["refused"] += 1
                if "\n" in (outcome.refused or ""):
                    counts["refused_multiline"] += 1
                    failures.append(f"{mapping!r}: {outcome.refused!r}")
            else:
                rendered[outcome.rendered] = mapping

        one()
        paths = list(rendered)
        rejected: dict[Path, str] = {}
        for start in range(0, len(paths), BATCH):
            rejected |= promtool_rejections(paths[start : start + BATCH])
        counts["rendered"] = len(paths)
        counts["promtool_rejected"] = len(rejected)
        failures += [f"{rendered.get(p)!r}: {why}" for p, why in rejected.items()]
    result = {k: counts[k] for k in ("examples", "refused", "rendered")}
    result |= {k: counts[k] for k in ("promtool_rejected", "tracebacks", "refused_multiline")}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>20}: {value}")
    for failure in failures[:20]:
        print(failure, file=sys.stderr)
    bad = counts["promtool_rejected"] + counts["tracebacks"] + counts["refused_multiline"]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
