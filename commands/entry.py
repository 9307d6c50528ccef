"""The console script's entry point. `rmqdelay --version` answers here, before the
command-line library (Typer, Click, Rich: most of the start-up) is imported; every other
command line goes on to main.main."""

from __future__ import annotations

import sys


def print_version() -> None:
    """What --version prints, here and in main.py (given with other arguments)."""
    import rmqdelay

    # rmqdelay.__version__, not importlib.metadata, whose import alone would slow this down by
    # a good part: tests/test_cli_usage.py holds the two to pyproject.toml's.
    sys.stdout.write(f"rmqdelay {rmqdelay.__version__}\n")


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        print_version()
        sys.exit(0)
    from .main import main as run

    run()
