"""Regenerate the committed dashboards: ``python -m gpuscale.grafana [DIRECTORY]``.

A maintainer's tool for after a change to the builders (default directory:
deploy/grafana under the current directory); operators import the JSON files.
"""

import logging
import sys
from pathlib import Path

from gpuscale.grafana import write

logger = logging.getLogger("gpuscale.grafana")


def main(argv: list[str]) -> int:
    """Write the dashboards into ``argv[0]`` or ``deploy/grafana``.

    Returns:
        The exit status: 0, or 2 for a usage error.
    """
    if len(argv) > 1:
        sys.stderr.write("usage: python -m gpuscale.grafana [DIRECTORY]\n")
        return 2
    for path in write(Path(argv[0] if argv else "deploy/grafana")):
        logger.info("wrote %s", path)
    return 0


if __name__ == "__main__":
    logging.basicConfig(format="%(message)s", level=logging.INFO)
    sys.exit(main(sys.argv[1:]))
