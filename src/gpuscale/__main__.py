"""Allows ``python -m gpuscale``."""

from gpuscale.cli import main

main()
