"""How times, durations and sizes read to a person (docs/cli.md, "Units"): instants as UTC
dates, durations in the two largest units, sizes in binary units. One definition for the terminal and the HTML report;
JSON and Parquet carry the milliseconds themselves. Light: the CLI imports it at start."""

from __future__ import annotations

from datetime import datetime, timezone


def format_time_ms(ms: int | None) -> str:
    """An instant in full, to the millisecond: ``2026-11-23 16:12:09.969Z``; one no date
    can hold (a damaged field: before year 1 or after 9999) as its milliseconds:
    ``-8095489983854422230 (not a date)``."""
    if ms is None:
        return "-"
    try:
        moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        return f"{ms} (not a date)"
    return f"{moment.year:04d}-{moment:%m-%d %H:%M:%S}.{ms % 1000:03d}Z"


def format_date_ms(ms: int | None) -> str:
    """An instant to the second, for tables: ``2026-11-23 16:12:09Z``."""
    if ms is None:
        return "-"
    text = format_time_ms(ms)
    return text[:19] + "Z" if text.endswith("Z") else text


_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def format_duration_ms(ms: int | float | None) -> str:
    """A duration as a person reads it: ``180 ms``, ``2.6 s``, ``42 s``, ``4m 12s``,
    ``3h 25m``, ``4d 15h``, ``2h`` (the two largest units, the smaller rounded down and left
    out when zero)."""
    if ms is None:
        return "-"
    ms = round(ms)
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms} ms"
    if ms < 10_000:
        return f"{sign}{ms // 100 / 10:g} s"
    if ms < 60_000:
        return f"{sign}{ms // 1000} s"
    for i, (name, size) in enumerate(_UNITS[:-1]):
        if ms >= size:
            small, small_size = _UNITS[i + 1]
            rest = ms % size // small_size
            return f"{sign}{ms // size}{name}" + (f" {rest}{small}" if rest else "")
    return f"{sign}{ms} ms"  # not reached


def format_relative_ms(ms: int | None, now_ms: int) -> str:
    """An instant against the clock: ``in 4m 12s``, ``3h 25m ago``, ``now``."""
    if ms is None:
        return "-"
    if ms == now_ms:
        return "now"
    return f"in {format_duration_ms(ms - now_ms)}" if ms > now_ms else f"{format_duration_ms(now_ms - ms)} ago"


def format_when_ms(ms: int | None, now_ms: int) -> str:
    """An instant and how far it is from the clock: ``2026-11-23 16:12:27Z (in 17 s)``, the
    date left out when it is the clock's (UTC) day: ``16:12:27Z (in 17 s)``."""
    if ms is None:
        return "-"
    date = format_date_ms(ms)
    if date[:10] == format_date_ms(now_ms)[:10]:
        date = date[11:]
    return f"{date} ({format_relative_ms(ms, now_ms)})"


def format_size(n: int) -> str:
    """A size in bytes as a person reads it, in binary units from a KiB on: ``512 bytes``,
    ``256 KiB``, ``36.9 MiB``, ``1 GiB`` (one decimal, left out when the size is whole)."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n // size} {unit}" if n % size == 0 else f"{n / size:.1f} {unit}"
    return f"{n} bytes"
