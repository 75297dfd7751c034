"""Regenerate the committed dashboards: ``python -m gpuscale.grafana [DIRECTORY]``.

A maintainer's tool for after a change to the builders (default directory:
deploy/grafana under the current directory); operators import the JSON files.
"""

import sys
from pathlib import Path

from gpuscale.grafana import write


def main(argv: list[str]) -> int:
    """Write the dashboards into ``argv[0]`` or ``deploy/grafana``.

    Returns:
        The exit status: 0, or 2 for a usage error.
    """
    if len(argv) > 1:
        print("usage: python -m gpuscale.grafana [DIRECTORY]", file=sys.stderr)
        return 2
    for path in write(Path(argv[0] if argv else "deploy/grafana")):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
