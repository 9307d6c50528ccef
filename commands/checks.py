"""Checks that page someone: `--fail-if-*` thresholds for cron jobs, systemd timers and
Kubernetes probes. A check that is crossed prints one line on stderr naming what crossed which
threshold and exits 1; otherwise the command exits as it would (0); bad input stays 2.
Light: typer only, imported before the arguments are parsed."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import typer

from rmqdelay.errors import EXIT_PROBLEMS, UsageError

from .options import DURATION_HELP, parse_duration_ms


@dataclass(frozen=True, slots=True)
class Threshold:
    """A count (``100``) or a duration (``10m``)."""

    count: int | None = None
    ms: int | None = None


def parse_count_or_duration(text: str | None, option: str) -> Threshold | None:
    if text is None:
        return None
    raw = text.strip()
    if raw.isascii() and raw.isdigit():
        return Threshold(count=int(raw))
    try:
        return Threshold(ms=parse_duration_ms(raw, option))
    except UsageError:
        raise UsageError(f"{option}: a number of messages (100) or {DURATION_HELP}, found {text!r}") from None


def parse_count(text: str | None, option: str) -> int | None:
    if text is None:
        return None
    raw = text.strip()
    if not (raw.isascii() and raw.isdigit()):
        raise UsageError(f"{option}: a number of messages >= 0, found {text!r}")
    return int(raw)


def crossed(command: str, option: str, threshold: str, what: str) -> None:
    """One line on stderr, exit 1: ``rmqdelay: inspect delay --fail-if-overdue 10m: level 3: ...``."""
    sys.stderr.write(f"rmqdelay: {command} {option} {threshold}: {what}\n")
    sys.stderr.flush()
    raise typer.Exit(EXIT_PROBLEMS)


def fail_if_overdue_option(what: str) -> typer.models.OptionInfo:
    return typer.Option(None, "--fail-if-overdue", metavar="DURATION", show_default=False,
                        help=f"Exit 1 (one line on stderr saying what) when the oldest due {what} has been due "
                             f"longer than this: {DURATION_HELP}. For cron, systemd timers and probes.")
