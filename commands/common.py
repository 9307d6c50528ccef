"""What every command shares: consoles, JSON lines, progress, time arguments, and how times
and durations read on a terminal (docs/cli.md, "Units"). (How the process's streams write
what they cannot encode: streams.py; tables that fit the terminal: tables.py.)"""

from __future__ import annotations

import contextlib
import json
import math
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from rmqdelay.formats.constants import MAX_DELIVER_MS
from rmqdelay.formats.javanum import java_parse_int, java_parse_long

from rmqdelay.errors import UsageError
from rmqdelay.units import (  # noqa: F401 (the commands take them from here)
    format_date_ms,
    format_duration_ms,
    format_relative_ms,
    format_size,
    format_time_ms,
    format_when_ms,
)

if TYPE_CHECKING:
    from rich.console import Console


class _Deferred:
    """A rich Console made when first used, not when a command's module is imported: a
    command's --help needs none, and rich is a good part of its time."""

    def __init__(self, make: Callable[[], Console]) -> None:
        object.__setattr__(self, "_make", make)
        object.__setattr__(self, "_console", None)

    def made(self) -> Console:
        """The Console, made now if it is not yet."""
        if self._console is None:
            object.__setattr__(self, "_console", self._make())
        return self._console

    def __getattr__(self, name: str):
        return getattr(self.made(), name)

    def __setattr__(self, name: str, value) -> None:
        setattr(self.made(), name, value)


def _stdout_console() -> Console:
    from rich.console import Console

    made = Console()
    if not made.is_terminal:
        # A pipe or a file gets whole rows rather than columns squeezed into 80 characters.
        made = Console(width=max(made.width, 240))
    return made


def _stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True)


console = _Deferred(_stdout_console)
err_console = _Deferred(_stderr_console)


# Store text that is not UTF-8 (a topic, a property, a directory name) reaches Python as
# surrogate escapes (U+DC80..U+DCFF, one per byte).
_SURROGATES = range(0xD800, 0xE000)


def json_text(text: str) -> str:
    """Text for a JSON line: every character a valid one. Bytes of the store that were not
    UTF-8 (surrogate escapes) become U+FFFD, as in the analyses' Arrow tables."""
    if text.isascii() or not any(ord(ch) in _SURROGATES for ch in text):
        return text
    return "".join("\ufffd" if ord(ch) in _SURROGATES else ch for ch in text)


def emit_json(obj: dict) -> None:
    """One object per line (NDJSON), valid UTF-8: non-ASCII characters as they are when the
    output is UTF-8, as \\u escapes otherwise; store bytes that were not UTF-8 replaced
    (docs/cli.md)."""
    line = json_text(json.dumps(obj, ensure_ascii=False, separators=(",", ":")))
    if not line.isascii() and (getattr(sys.stdout, "encoding", None) or "").replace("-", "").lower() != "utf8":
        line = _NON_ASCII.sub(_json_escape, line)  # non-ASCII occurs only inside JSON strings
    sys.stdout.write(line + "\n")


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


from rmqdelay.jsonnames import camel, camel_keys  # noqa: E402,F401 (the commands' names for them)


def _json_escape(match: re.Match) -> str:
    code = ord(match.group())
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


# Instants a time argument may name: years 1 to 9999, the dates there are.
_MIN_TIME_MS = -62135596800000


def parse_time_ms(text: str, option: str) -> int:
    """An instant as epoch milliseconds: an integer is epoch ms, anything else ISO 8601
    (a time without a zone is UTC); either within years 1 to 9999."""
    text = text.strip()
    number = java_parse_long(text)
    digits = text.lstrip("+-")
    if number is None and digits.isascii() and digits.isdigit():
        number = _MIN_TIME_MS - 1  # digits beyond a Java long: out of range below
    if number is not None:
        if not _MIN_TIME_MS <= number <= MAX_DELIVER_MS:
            raise UsageError(f"{option}: an instant between years 1 and 9999 (epoch milliseconds "
                             f"{_MIN_TIME_MS} to {MAX_DELIVER_MS}), found {text}")
        return number
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{option}: a time as ISO 8601 or epoch milliseconds, found {text!r}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    try:
        ms = int(moment.timestamp() * 1000)
    except (OverflowError, ValueError, OSError):
        ms = _MIN_TIME_MS - 1
    if not _MIN_TIME_MS <= ms <= MAX_DELIVER_MS:  # a zone pushing year 1 or 9999 over the edge
        raise UsageError(f"{option}: an instant between years 1 and 9999, found {text!r}")
    return ms


def clock_ms(now: str | None) -> int:
    """The instant a command judges by: ``--now`` when given, else the wall clock."""
    return parse_time_ms(now, "--now") if now else time.time_ns() // 1_000_000


def int_option(option: str, text: str) -> int:
    """An integer option, read as the broker reads its numbers (Integer.parseInt)."""
    value = java_parse_int(text)
    if value is None:
        raise UsageError(f"{option}: an integer from -2147483648 to 2147483647 (a Java int), found {text!r}")
    return value


MOST_SECONDS = 1_000_000_000  # about 31 years: a longer interval is a typo, and overflows milliseconds


def finite_seconds(value: float, option: str) -> float:
    """A number of seconds >= 0 that is a number (not nan, not inf) and fits in milliseconds."""
    if not math.isfinite(value) or not 0 <= value <= MOST_SECONDS:
        raise UsageError(f"{option}: a number of seconds from 0 to {MOST_SECONDS}, found {value}")
    return value


def require_store(store: Path, *, create_option: bool = False) -> None:
    """A writing command's STORE must already be a broker store (it has commitlog/): a
    mistyped path must not become a new store. One line naming what is there and how a new
    store is made. A path that is not a directory is left to the store's own one-line error.
    A store laid out so that no offline writer may append to it (DLedger, RocksDB) is refused
    first, naming its layout and why."""
    from rmqdelay.store.layout import refuse_unwritable

    store = Path(store)
    refuse_unwritable(store)
    if (store / "commitlog").is_dir() or (store.exists() and not store.is_dir()):
        return
    what = "a directory without commitlog/" if store.is_dir() else "nothing"
    how = "--create makes a new store" if create_option else \
        "`rmqdelay send STORE --create` or `rmqdelay samples generate` makes a new store"
    raise UsageError(f"STORE {store}: a broker store directory (with commitlog/), found {what} ({how})")


def lock_store(store: Path):
    """The door of a command that rewrites a store's config files: the store must be there
    (its own one-line error), be a broker store of a layout rmqdelay writes (require_store),
    and no broker or other rmqdelay may hold it (exit 3). The taken BrokerLock: release it."""
    from rmqdelay.store import Store
    from rmqdelay.store.lock import BrokerLock

    if not Path(store).is_dir():
        Store(store)  # the one-line error for a missing store
    require_store(store)  # a typo must not become a new store
    lock = BrokerLock(store)
    lock.acquire()
    return lock


def writable_directory(path: Path, option: str) -> None:
    """Make ``path`` a directory (with its parents) and prove a file can be written there,
    or say why not in one line."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if isinstance(exc, FileExistsError) or (path.exists() and not path.is_dir()):
            reason = "it is a file"
        raise UsageError(f"{option} {path}: a directory to write into ({reason})") from None


@contextlib.contextmanager
def progress(description: str, total: int | None) -> Iterator:
    """A rich progress bar on a terminal; nothing at all in a pipe.

    Yields ``advance(n)``.
    """
    if not err_console.is_terminal:
        yield lambda n=1: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                  TimeRemainingColumn(), console=err_console.made(), transient=True) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n=1: bar.advance(task, n)
