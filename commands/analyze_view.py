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

from .common import console, format_duration_ms, format_relative_ms, format_when_ms
from .tables import Column, hidden_note, print_table

# How a column reads: its header, what its values are, and when it goes on a narrow terminal
# (tables.Column.drop). Kinds: text, count, duration (ms), instant (epoch ms), rate, flag.
_TEXT, _COUNT, _DURATION, _INSTANT, _RATE, _FLAG = "text", "count", "duration", "instant", "rate", "flag"


@dataclass(frozen=True, slots=True)
class View:
    header: str
    kind: str = _COUNT
    drop: int = 0


VIEWS: dict[str, View] = {
    "store": View("store", _TEXT), "level": View("level"), "group": View("group", _TEXT),
    "topic": View("topic", _TEXT, 3), "real_topic": View("real topic", _TEXT), "queue_id": View("queue"),
    "state": View("state", _TEXT), "chain": View("chain", _TEXT), "kind": View("kind", _TEXT),
    "detail": View("detail", _TEXT), "attempts": View("attempts"), "chains": View("chains"),
    "delay_ms": View("delay", _DURATION, 4), "offset": View("offset", drop=6), "max_offset": View("max offset", drop=5),
    "pending": View("pending"), "due_now": View("due now"), "overdue_1s": View("overdue >1s", drop=3),
    "overdue_1m": View("overdue >1m", drop=2), "overdue_1h": View("overdue >1h"),
    "oldest_due_ms": View("oldest due", _INSTANT, 1),
    "consumer_offset": View("consumer offset", drop=1), "lag": View("lag"),
    "read_ms": View("read up to", _INSTANT, 6), "behind_ms": View("behind", _DURATION),
    "rolling": View("rolling", drop=4), "not_enqueued": View("not enqueued", drop=5),
    "cancel_markers": View("markers", drop=7), "cancelled": View("cancelled", drop=8),
    "delivered": View("delivered"), "messages": View("messages"),
    "p50": View("p50", _DURATION, 2), "p90": View("p90", _DURATION, 4), "p99": View("p99", _DURATION),
    "p999": View("p99.9", _DURATION, 3), "max": View("max", _DURATION, 1), "min": View("min", _DURATION, 5),
    "early": View("early", drop=6), "duplicates": View("dupes", drop=7),
    "undelivered_overdue": View("overdue undelivered"), "oldest_undelivered_ms": View("oldest undelivered", _INSTANT, 8),
    "dequeue_p50": View("dequeue p50", _DURATION, 9), "dequeue_p90": View("dequeue p90", _DURATION, 10),
    "dequeue_p99": View("dequeue p99", _DURATION, 11), "dequeue_p999": View("dequeue p99.9", _DURATION, 12),
    "dequeue_max": View("dequeue max", _DURATION, 13), "dequeue_min": View("dequeue min", _DURATION, 14),
    "dequeue_early": View("dequeue early", drop=15), "never_enqueued": View("never enqueued", drop=16),
    "rolled": View("rolled", drop=17), "rolls": View("rolls"), "cancellations": View("cancellations"),
    "dlq": View("in DLQ"), "dlq_rate": View("DLQ rate", _RATE),
    "to_last_attempt_p50": View("to last attempt p50", _DURATION, 2),
    "to_last_attempt_max": View("to last attempt max", _DURATION, 3),
    "to_dlq_p50": View("to DLQ p50", _DURATION, 1), "to_dlq_max": View("to DLQ max", _DURATION, 4),
}

# Tables only a store with a timer wheel can fill (docs/analyze.md, "The timer wheel").
TIMER_TABLES = frozenset({"timer", "timer_drain", "timer_topics", "timer_rolls", "timer_cancellations"})

# Tables whose rows with nothing pending say nothing on a terminal (--json has them all).
_ONLY_PENDING = frozenset({"backlog: levels"})

# The drain tables on a terminal: pending messages by when they fall due (docs/analyze.md:
# minute 0 = due now, minute m >= 1 = due in ((m-1) min, m min]), in windows.
_WINDOWS = (("due now", 0, 0), ("next 1m", 1, 1), ("1m-10m", 2, 10), ("10m-1h", 11, 60), ("1h-3h", 61, 180),
            ("later", 181, None))


def _cell(value, kind: str, now_ms: int) -> str | Text:
    if value is None:
        return "-"
    if kind == _DURATION:
        return format_duration_ms(value)
    if kind == _INSTANT:
        return format_when_ms(value, now_ms)
    if kind == _RATE:
        return f"{100 * value:.1f}%"
    if kind == _TEXT:
        return Text(str(value))
    return str(value)


def _columns(names: Sequence[str]) -> list[Column]:
    return [Column(VIEWS[n].header, "left" if VIEWS[n].kind in (_TEXT, _INSTANT) else "right", VIEWS[n].drop,
                   fold=VIEWS[n].kind == _TEXT) for n in names]


def drain_windows(table: pa.Table) -> tuple[list[str], list[list]]:
    """A drain table (store, [level,] minute, due) as one row per store (and level): the
    pending messages of each window, and their total."""
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
        if table.num_rows == 0:
            console.print(Text(f"{title}: no rows", style="dim"))
            return
        if title.endswith("drain"):
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


def headline(kind: str, tables: dict[str, pa.Table], now_ms: int) -> str:
    """One line an operator reads first: the totals of the analysis's tables."""
    t = tables
    if kind == "backlog":
        oldest = _oldest(t["levels"], "oldest_due_ms")
        line = (f"backlog: delay levels {_sum(t['levels'], 'pending')} pending, {_sum(t['levels'], 'due_now')} due now"
                + (f" (oldest due {format_relative_ms(oldest, now_ms)})" if oldest is not None else ""))
        if t.get("timer") is not None and t["timer"].num_rows:
            line += (f"; timer wheel {_sum(t['timer'], 'pending')} pending, {_sum(t['timer'], 'due_now')} due now, "
                     f"{_sum(t['timer'], 'rolling')} rolling")
        return line + f"; retry lag {_sum(t['retry_lag'], 'lag')}"
    if kind == "lateness":
        line = (f"lateness: {_sum(t['levels'], 'delivered')} delay message(s) delivered, {_sum(t['levels'], 'early')} "
                f"early, {_sum(t['levels'], 'duplicates')} duplicate(s), {_sum(t['levels'], 'undelivered_overdue')} "
                f"overdue and undelivered")
        if t.get("timer_topics") is not None and t["timer_topics"].num_rows:
            tt = t["timer_topics"]
            line += (f"; timer {_sum(tt, 'delivered')} delivered, {_sum(tt, 'early')} early, "
                     f"{_sum(tt, 'undelivered_overdue')} overdue and undelivered")
        return line
    g = t["groups"]
    chains, dlq = _sum(g, "messages"), _sum(g, "dlq")
    rate = f" ({100 * dlq / chains:.1f}%)" if chains else ""
    return (f"retries: {chains} chain(s) in {g.num_rows} group(s), {dlq} in the DLQ{rate}, {_sum(g, 'pending')} "
            f"pending, {t['anomalies'].num_rows} anomalie(s)")
