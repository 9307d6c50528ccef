"""What every command shares: consoles, JSON lines, progress, time arguments."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator
from datetime import datetime, timezone

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from rmqdelay.errors import UsageError

console = Console()
if not console.is_terminal:
    # A pipe or a file gets whole rows rather than columns squeezed into 80 characters.
    console = Console(width=max(console.width, 240))
err_console = Console(stderr=True)


def emit_json(obj: dict) -> None:
    """One object per line (NDJSON), UTF-8, no ASCII escaping."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")


def parse_time_ms(text: str) -> int:
    """An instant as epoch milliseconds: digits are epoch ms, anything else ISO 8601
    (a time without a zone is UTC)."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"a time as ISO 8601 or epoch milliseconds, found {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return int(moment.timestamp() * 1000)


def format_time_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def format_duration_ms(ms: int | None) -> str:
    if ms is None:
        return "-"
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{sign}{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{sign}{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours}h{minutes:02d}m"


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator:
    """A rich progress bar on a terminal; nothing at all in a pipe.

    Yields ``advance(n)``.
    """
    if not err_console.is_terminal:
        yield lambda n=1: None
        return
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeRemainingColumn(), console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
