"""Allows ``python -m gpuscale``."""

from gpuscale.cli import main

if __name__ == "__main__":
    main()
