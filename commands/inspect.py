"""`rmqdelay inspect ...`: read-only views of a broker store."""

from __future__ import annotations

import typer

app = typer.Typer(help="Read-only views of a broker store.", no_args_is_help=True)
