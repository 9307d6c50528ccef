"""`rmqdelay analyze` on a terminal: a headline per analysis that counts what its tables show,
then a screenful of each table (the first rows and how to get the rest), with words for
headers, durations as durations and instants as dates (docs/cli.md, "Units"); no table a
store cannot have. JSON and Parquet keep every row and the names of analysis/names.py.

Imported by the command after its arguments are parsed (pyarrow is loaded by then)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from rich.text import Text

from rmqdelay.analysis.names import DURATION, INSTANT, RATE, TEXT, VIEWS

from .common import console, format_duration_ms, format_relative_ms, format_when_ms
from .tables import Column, hidden_note, print_table

# Tables only a store with a timer wheel can fill (docs/analyze.md, "The timer wheel").
TIMER_TABLES = frozenset({"timer", "timerDrain", "timerTopics", "timerRolls", "timerCancellations"})

# Tables whose rows with nothing pending say nothing on a terminal (--json has them all).
_ONLY_PENDING = frozenset({"backlog: levels"})

# The drain tables on a terminal: pending messages by when they fall due (docs/analyze.md:
# minute 0 = due now, minute m >= 1 = due in ((m-1) min, m min]), in windows.
_WINDOWS = (("due now", 0, 0), ("<1m", 1, 1), ("1-10m", 2, 10), ("10m-1h", 11, 60), ("1-3h", 61, 180),
            (">3h", 181, None))


def _cell(value, kind: str, now_ms: int) -> str | Text:
    from rich.text import Text

    if value is None:
        return "-"
    if kind == DURATION:
        return format_duration_ms(value)
    if kind == INSTANT:
        return format_when_ms(value, now_ms)
    if kind == RATE:
        return f"{100 * value:.1f}%"
    if kind == TEXT:
        return Text(str(value))
    return str(value)


def _columns(names: Sequence[str]) -> list[Column]:
    return [Column(VIEWS[n].header, "left" if VIEWS[n].kind in (TEXT, INSTANT) else "right", VIEWS[n].drop,
                   fold=VIEWS[n].kind == TEXT) for n in names]


def drain_windows(table: pa.Table) -> tuple[list[str], list[list]]:
    """A drain table (store, [level,] minute, due) as one row per store (and level): the
    pending messages of each window, and their total."""
    from rich.text import Text

    keys = [n for n in table.column_names if n not in ("minute", "due")]
    rows: dict[tuple, list[int]] = {}
    for row in table.to_pylist():
        counts = rows.setdefault(tuple(row[k] for k in keys), [0] * len(_WINDOWS))
        for i, (_, lo, hi) in enumerate(_WINDOWS):
            if row["minute"] >= lo and (hi is None or row["minute"] <= hi):
                counts[i] += row["due"]
    return keys, [[*(Text(str(k)) for k in key), *map(str, counts), str(sum(counts))] for key, counts in rows.items()]


@dataclass(slots=True)
class Screen:
    """What the terminal shows of the results."""

    limit: int
    wide: bool
    now_ms: int
    hidden: list[str]
    more: int = 0  # rows left out of the tables shown

    def table(self, title: str, table: pa.Table) -> None:
        from rich.text import Text

        if table.num_rows == 0:
            console.print(Text(f"{title}: no rows", style="dim"))
            return
        if title.lower().endswith("drain"):
            keys, rows = drain_windows(table)
            columns = _columns(keys) + [Column(w) for w, _, _ in _WINDOWS] + [Column("pending")]
            title += " (pending by when they fall due; per minute in --json, --output, --report)"
            total = len(rows)
        else:
            if title in _ONLY_PENDING:
                table = table.filter(pc.greater(table.column("pending"), 0))
                title += " (those with pending messages)"
                if table.num_rows == 0:
                    console.print(Text(f"{title}: none", style="dim"))
                    return
            names = table.column_names
            columns = _columns(names)
            rows = [[_cell(row[n], VIEWS[n].kind, self.now_ms) for n in names]
                    for row in table.slice(0, self.limit).to_pylist()]
            total = table.num_rows
        shown = rows[:self.limit]
        console.print(Text(title + (f": the first {len(shown)} of {total} rows" if total > len(shown) else ""),
                           style="bold"))
        self.hidden += print_table(console, columns, shown, wide=self.wide)
        if total > len(shown):
            self.more += total - len(shown)
            console.print(Text(f"... {total - len(shown)} more rows: --limit {total} shows them; --json, --output "
                               "DIR or --report FILE.html give every table whole", style="dim"))

    def close(self) -> None:
        from rich.text import Text

        note = hidden_note(self.hidden)
        if note:
            console.print(Text(note, style="dim"))


def _sum(table: pa.Table | None, column: str) -> int:
    if table is None or table.num_rows == 0:
        return 0
    return sum(v for v in table.column(column).to_pylist() if v is not None)


def _oldest(table: pa.Table | None, column: str) -> int | None:
    if table is None or table.num_rows == 0:
        return None
    values = [v for v in table.column(column).to_pylist() if v is not None]
    return min(values) if values else None


def headline(kind: str, tables: dict[str, pa.Table], now_ms: int, restart_skipped: int = 0) -> Text:
    """One line an operator reads first: the totals of the analysis's tables, and for the
    backlog the timer messages a broker restarting now would skip (``inspect timer``'s
    horizon), in red."""
    line = Text(_totals(kind, tables, now_ms), style="bold")
    if kind == "backlog" and restart_skipped:
        line.append(f"; a restart now skips {restart_skipped} timer message(s)", style="bold red")
    return line


def restart_warnings(skipped: dict[str, int], paths: dict[str, object]) -> list[str]:
    """The warning under the first headline, per store whose timer messages a restart now skips."""
    return [f"warning: a broker of {name} starting now SKIPS {count} pending timer message(s) in slots it never "
            f"reads: they are never delivered (`rmqdelay inspect timer {paths.get(name, name)}` says where)"
            for name, count in skipped.items()]


def _totals(kind: str, tables: dict[str, pa.Table], now_ms: int) -> str:
    t = tables
    if kind == "backlog":
        oldest = _oldest(t["levels"], "oldest_due_ms")
        line = (f"backlog: delay levels {_sum(t['levels'], 'pending')} pending, {_sum(t['levels'], 'due_now')} due now"
                + (f" (oldest due {format_relative_ms(oldest, now_ms)})" if oldest is not None else ""))
        if t.get("timer") is not None and t["timer"].num_rows:
            line += (f"; timer wheel {_sum(t['timer'], 'pending')} pending, {_sum(t['timer'], 'due_now')} due now, "
                     f"{_sum(t['timer'], 'rolling')} rolling")
        return line + f"; retry lag {_sum(t['retryLag'], 'lag')}"
    if kind == "lateness":
        line = (f"lateness: {_sum(t['levels'], 'delivered')} delay message(s) delivered, {_sum(t['levels'], 'early')} "
                f"early, {_sum(t['levels'], 'duplicates')} duplicate(s), {_sum(t['levels'], 'undelivered_overdue')} "
                f"overdue and undelivered")
        if t.get("timerTopics") is not None and t["timerTopics"].num_rows:
            tt = t["timerTopics"]
            line += (f"; timer {_sum(tt, 'delivered')} delivered, {_sum(tt, 'early')} early, "
                     f"{_sum(tt, 'undelivered_overdue')} overdue and undelivered")
        return line
    g = t["groups"]
    chains, dlq = _sum(g, "messages"), _sum(g, "dlq")
    rate = f" ({100 * dlq / chains:.1f}%)" if chains else ""
    return (f"retries: {chains} chain(s) in {g.num_rows} group(s), {dlq} in the DLQ{rate}, {_sum(g, 'pending')} "
            f"pending, {t['anomalies'].num_rows} anomal{'y' if t['anomalies'].num_rows == 1 else 'ies'}")
