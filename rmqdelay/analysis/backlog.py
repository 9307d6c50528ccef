"""backlog: what waits in each delay level as of ``at_ms``, when it falls due, and the
consumer lag of every %RETRY% queue."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.schedule.status import corrected_offset
from rmqdelay.store import Store
from rmqdelay.store.consumers import consumer_lag, read_consumer_offsets
from rmqdelay.store.scan import UNIT_CHUNK, delay_offsets, schedule_unit_chunks

from . import AnalysisResult, StoreRef
from . import timer as timer_backlog
from .common import sort_table
from .spill import Messages, memory_budget

OVERDUE = {"overdue_1s": 1_000, "overdue_1m": 60_000, "overdue_1h": 3_600_000}
MINUTE_MS = 60_000

LEVELS_SCHEMA = pa.schema([
    ("store", pa.string()), ("level", pa.int32()), ("delay_ms", pa.int64()), ("offset", pa.int64()),
    ("max_offset", pa.int64()), ("pending", pa.int64()), ("due_now", pa.int64()),
    ("overdue_1s", pa.int64()), ("overdue_1m", pa.int64()), ("overdue_1h", pa.int64()),
    ("oldest_due_ms", pa.int64()),
])
DRAIN_SCHEMA = pa.schema([("store", pa.string()), ("level", pa.int32()), ("minute", pa.int64()), ("due", pa.int64())])
RETRY_LAG_SCHEMA = pa.schema([
    ("store", pa.string()), ("group", pa.string()), ("topic", pa.string()), ("queue_id", pa.int32()),
    ("max_offset", pa.int64()), ("consumer_offset", pa.int64()), ("lag", pa.int64()),
])
MESSAGES_SCHEMA = pa.schema([
    ("store", pa.string()), ("level", pa.int32()), ("queue_offset", pa.int64()),
    ("commitlog_offset", pa.int64()), ("deliver_ms", pa.int64()), ("effective_ms", pa.int64()),
])
MESSAGES_ORDER = ["store", "level", "queue_offset"]


def effective_deliver_ms(deliver_ms: np.ndarray, at_ms: int, delay_ms: int) -> np.ndarray:
    """ScheduleMessageService.correctDeliverTimestamp: a deliver time further ahead than one
    delay from now is taken as now."""
    return np.where(deliver_ms > at_ms + delay_ms, at_ms, deliver_ms)


def level_bounds(store: Store, delay_levels: dict[int, int]) -> list[tuple[int, int, int, int]]:
    """(level, delay_ms, offset, max_offset) of every level: pending units are those with
    queue offsets in [offset, max_offset). The offset is delayOffset.json's (0 when absent)
    clamped into the queue as the broker's correctDelayOffset does, as `inspect delay` shows it."""
    offsets = delay_offsets(store)
    on_disk = set(store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []))
    bounds = []
    for level in sorted(delay_levels):
        offset, hi = offsets.get(level, 0), 0
        if (level - 1) in on_disk:  # correctDelayOffset leaves a level without a queue alone
            cq = store.schedule_queue(level)
            hi = cq.max_offset
            offset = corrected_offset(offset, cq.min_offset, hi)
        bounds.append((level, delay_levels[level], offset, hi))
    return bounds


# Bytes a pending unit takes while a chunk of them is worked on (its columns, the per-message
# rows and the temporaries): a chunk holds UNIT_CHUNK units, fewer if the budget asks.
_UNIT_BYTES = 256


def backlog(stores: list[StoreRef], at_ms: int, delay_levels: dict[int, int], *,
            keep_going: bool = False, memory: int | None = None, messages: Messages | None = None) -> AnalysisResult:
    """What waits in each level, from its pending units read in chunks of UNIT_CHUNK units (fewer
    if ``memory`` asks): the counts and the drain minutes are summed over the chunks, nothing else is
    held. ``messages``: where the per-message table goes (collected by default)."""
    chunk = max(1, min(UNIT_CHUNK, memory_budget(memory) // _UNIT_BYTES))
    sink = messages or Messages(MESSAGES_SCHEMA, MESSAGES_ORDER)
    levels_rows, drain_rows, lag_rows = [], [], []
    for ref in stores:
        with Store(ref.path) as store:
            for level, delay, offset, max_offset in level_bounds(store, delay_levels):
                row = {"store": ref.name, "level": level, "delay_ms": delay, "offset": offset,
                       "max_offset": max_offset, "pending": 0, "due_now": 0, **dict.fromkeys(OVERDUE, 0),
                       "oldest_due_ms": None}
                drain: dict[int, int] = {}
                chunks = schedule_unit_chunks(store, ref.name, level, offset, max_offset, chunk) \
                    if offset < max_offset else ()
                for units in chunks:
                    _count(units, row, drain, at_ms, delay, sink)
                levels_rows.append(row)
                drain_rows += [{"store": ref.name, "level": level, "minute": minute, "due": count}
                               for minute, count in drain.items()]
            lag_rows.extend(retry_lag(store, ref.name))
    tables = {
        "levels": sort_table(pa.Table.from_pylist(levels_rows, schema=LEVELS_SCHEMA), ["store", "level"]),
        "drain": sort_table(pa.Table.from_pylist(drain_rows, schema=DRAIN_SCHEMA), ["store", "level", "minute"]),
        "retryLag": sort_table(pa.Table.from_pylist(lag_rows, schema=RETRY_LAG_SCHEMA),
                                ["store", "group", "queue_id", "topic"]),
    }
    msgs = sink.table() if messages is None else MESSAGES_SCHEMA.empty_table()
    timer_tables, pending = timer_backlog.backlog(stores, at_ms)
    return AnalysisResult("backlog", tables | timer_tables, msgs, [], pending)


def _count(units: pa.Table, row: dict, drain: dict[int, int], at_ms: int, delay: int, sink: Messages) -> None:
    """One chunk of a level's pending units added to its ``row`` of the levels table, its
    ``drain`` minutes and the per-message table."""
    deliver = units.column("deliver_ms").to_numpy()
    effective = effective_deliver_ms(deliver, at_ms, delay)
    due = effective <= at_ms
    late = at_ms - effective
    row["pending"] += len(units)
    row["due_now"] += int(due.sum())
    for name, ms in OVERDUE.items():
        row[name] += int((late > ms).sum())
    if due.any():
        oldest = int(effective[due].min())
        row["oldest_due_ms"] = oldest if row["oldest_due_ms"] is None else min(row["oldest_due_ms"], oldest)
    # minute 0: due now; minute m: effective in (at + (m-1) min, at + m min].
    minutes = np.where(due, 0, -((at_ms - effective) // MINUTE_MS))
    for minute, count in zip(*np.unique(minutes, return_counts=True)):
        drain[int(minute)] = drain.get(int(minute), 0) + int(count)
    sink.add(pa.table({
        "store": units.column("store"), "level": units.column("level"),
        "queue_offset": units.column("queue_offset"), "commitlog_offset": units.column("commitlog_offset"),
        "deliver_ms": units.column("deliver_ms"), "effective_ms": pa.array(effective.astype(np.int64)),
    }, schema=MESSAGES_SCHEMA))


def retry_lag(store: Store, name: str, now_ms: int = 0) -> list[dict]:
    """Per group's %RETRY% queue: the committed offset against the max offset, read as
    `inspect consumers` reads them (store/consumers.py: one reader, one lag)."""
    rows = []
    for q in consumer_lag(store, read_consumer_offsets(store), now_ms):
        if q.kind == "retry":
            rows.append({"store": name, "group": q.group, "topic": q.topic, "queue_id": q.queueId,
                         "max_offset": q.maxOffset, "consumer_offset": q.consumerOffset or 0, "lag": q.lag})
    return rows
