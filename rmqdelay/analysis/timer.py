"""The timer wheel of 5.x stores in the analyses: what waits in the wheel by due time (backlog)
and what happened to the timer messages the commit log holds -- delivered how late, rolled,
cancelled (lateness). docs/analyze.md describes every figure.

Both engines run the functions here: the embedded one over a whole store, Spark over its
parts (a timer log file, a partition of records split by key), and the partial results are
folded the same way (``fold``), so the two give the same tables.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import (
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.timerprops import (
    CANCEL,
    DELIVERED,
    DELIVERED_NEVER_ENQUEUED,
    PARKED,
    ROLLED,
    timer_columns,
    timer_info,
)
from rmqdelay.store import Store
from rmqdelay.store.kind import timer_files_present
from rmqdelay.store.ref import path_bytes
from rmqdelay.timer.status import cancelled_targets, restart_read_ms
from rmqdelay.timer.store import TimerStore, unit_slot_times

from . import StoreRef
from .common import PERCENTILES, fold, groups, nearest_rank_counted, sort_table

MINUTE_MS = 60_000
OVERDUE = {"overdue_1s": 1_000, "overdue_1m": 60_000, "overdue_1h": 3_600_000}

# Where a pending timer message waits: a unit of the timer log, or a record of the
# rmq_sys_wheel_timer queue the enqueue has not reached (no unit yet).
WHEEL = "wheel"
QUEUE = "queue"


def timer_stores(stores: list[StoreRef]) -> list[StoreRef]:
    """The stores with a timer store (a 5.x broker whose timer ran); the others have no timer rows."""
    return [ref for ref in stores if timer_files_present(ref.path)]


# -- backlog -----------------------------------------------------------------------------------
# What each store's timer says before any part is read: where dequeue reads next
# (lastReadTimeMs) and where enqueue reads next in the queue (masterTimerQueueOffset).
POSITIONS_SCHEMA = pa.schema([("store", pa.string()), ("path", pa.binary()), ("read_ms", pa.int64()),
                              ("checkpoint", pa.bool_()), ("master_offset", pa.int64()),
                              ("log_files", pa.int32())])
# The per-message table behind the timer backlog: one row per pending unit of the wheel
# (messages and cancellation markers; ``cancelled``: a message a pending marker in its slot
# will drop) and per record not yet enqueued.
PENDING_SCHEMA = pa.schema([
    ("store", pa.string()), ("source", pa.string()), ("position", pa.int64()), ("commitlog_offset", pa.int64()),
    ("slot_ms", pa.int64()), ("due_ms", pa.int64()), ("roll", pa.bool_()), ("cancel", pa.bool_()),
    ("cancelled", pa.bool_()),
])
PENDING_ORDER = ["store", "source", "position"]
# Pending rows folded: how many of each kind fall due at each time.
PENDING_HIST_KEYS = ["store", "source", "roll", "cancel", "cancelled", "due_ms"]
PENDING_HIST_SCHEMA = pa.schema([("store", pa.string()), ("source", pa.string()), ("roll", pa.bool_()),
                                 ("cancel", pa.bool_()), ("cancelled", pa.bool_()), ("due_ms", pa.int64()),
                                 ("rows", pa.int64())])
TIMER_SCHEMA = pa.schema([
    ("store", pa.string()), ("read_ms", pa.int64()), ("behind_ms", pa.int64()), ("pending", pa.int64()),
    ("due_now", pa.int64()), ("overdue_1s", pa.int64()), ("overdue_1m", pa.int64()), ("overdue_1h", pa.int64()),
    ("oldest_due_ms", pa.int64()), ("rolling", pa.int64()), ("not_enqueued", pa.int64()),
    ("cancel_markers", pa.int64()), ("cancelled", pa.int64()),
])
TIMER_DRAIN_SCHEMA = pa.schema([("store", pa.string()), ("minute", pa.int64()), ("due", pa.int64())])


def positions(stores: list[StoreRef], at_ms: int) -> pa.Table:
    """POSITIONS_SCHEMA, one row per store with a timer store. Without a checkpoint the broker
    starts reading where its recovery puts it (7 days before ``at_ms``) and enqueues from 0."""
    rows = []
    for ref in timer_stores(stores):
        with Store(ref.path) as store, TimerStore(store) as ts:
            cp = ts.checkpoint()
            read_ms = cp.lastReadTimeMs if cp is not None else restart_read_ms(0, at_ms, ts)
            rows.append({"store": ref.name, "path": path_bytes(ref.path), "read_ms": read_ms, "checkpoint": cp is not None,
                         "master_offset": cp.masterTimerQueueOffset if cp is not None else 0,
                         "log_files": len(ts.log.files)})
    return pa.Table.from_pylist(rows, schema=POSITIONS_SCHEMA)


def cancelled_units(pos: pa.Table) -> dict[str, frozenset[int]]:
    """Per store, the timer log offsets of the pending units a pending marker in the same slot
    will drop (rmqdelay.timer.status.cancelled_targets): they are not delivered."""
    found = {}
    for row in pos.to_pylist():
        with Store(Path(os.fsdecode(row["path"]))) as store, TimerStore(store) as ts:
            found[row["store"]] = frozenset(cancelled_targets(ts, row["read_ms"]))
    return found


def pending_parts(pos: pa.Table) -> list[tuple[str, str, str, int, int, int]]:
    """The parts a store's pending timer messages are read in: (store, path, source, index,
    read_ms, master_offset) -- each timer log file, and the queue after the enqueue position."""
    parts = []
    for row in pos.to_pylist():
        head = (row["store"], row["path"])
        tail = (row["read_ms"], row["master_offset"])
        parts += [(*head, WHEEL, index, *tail) for index in range(row["log_files"])]
        parts.append((*head, QUEUE, 0, *tail))
    return parts


def pending_part(store_name: str, path: bytes, source: str, index: int, read_ms: int, master_offset: int,
                 cancelled: frozenset[int] = frozenset()) -> pa.Table:
    """PENDING_SCHEMA rows of one part. A wheel unit is pending when its slot is at or after
    the read position; its due time is its slot time, or for a roll unit the TIMER_OUT_MS of
    its record (the roll re-puts it; it is delivered at that time). A record of the queue is
    pending from the enqueue position on, due at its TIMER_OUT_MS. ``cancelled``: the store's
    ``cancelled_units``. ``path``: the store's, as ``path_bytes`` gives it."""
    with Store(Path(os.fsdecode(path))) as store, TimerStore(store) as ts:
        if source == WHEEL:
            return _wheel_part(ts, store_name, index, read_ms, cancelled)
        return _queue_part(ts, store_name, master_offset)


def _wheel_part(ts: TimerStore, name: str, index: int, read_ms: int, cancelled: frozenset[int]) -> pa.Table:
    units = ts.log.file(index).units
    slot = unit_slot_times(units)
    rows = np.flatnonzero(slot >= read_ms)
    units, slot = units[rows], slot[rows]
    cancel = (units["magic"] & TIMER_MAGIC_DELETE) != 0
    roll = (units["magic"] & TIMER_MAGIC_ROLL) != 0
    due = slot.copy()
    for i in np.flatnonzero(roll & ~cancel):
        out_ms = _out_ms(ts, int(units["offsetPy"][i]), int(units["sizePy"][i]))
        if out_ms is not None:  # a unit pointing nowhere keeps its slot time: verify names it
            due[i] = out_ms
    n = len(units)
    return pa.table({
        "store": pa.array([name] * n, pa.string()), "source": pa.array([WHEEL] * n, pa.string()),
        "position": pa.array(units["offset"].astype(np.int64)),
        "commitlog_offset": pa.array(units["offsetPy"].astype(np.int64)),
        "slot_ms": pa.array(slot), "due_ms": pa.array(due), "roll": pa.array(roll), "cancel": pa.array(cancel),
        "cancelled": pa.array(np.isin(units["offset"], np.fromiter(cancelled, dtype=np.int64, count=len(cancelled)))),
    }, schema=PENDING_SCHEMA)


def _queue_part(ts: TimerStore, name: str, master_offset: int) -> pa.Table:
    cq = ts.timer_queue()
    rows = []
    if cq is not None and master_offset < cq.max_offset:
        start = max(master_offset, cq.min_offset)
        for i, unit in enumerate(cq.units(start, cq.max_offset)):
            try:
                msg = ts.store.commitlog.read_message(int(unit["commitLogOffset"]), int(unit["size"]))
            except StoreError:
                continue  # verify reports units that point nowhere
            info = timer_info(msg.topic, msg.properties)
            if info is None or info.outMs is None:
                continue
            rows.append({"store": name, "source": QUEUE, "position": start + i,
                         "commitlog_offset": int(unit["commitLogOffset"]), "slot_ms": None, "due_ms": info.outMs,
                         "roll": False, "cancel": info.isCancel, "cancelled": False})
    return pa.Table.from_pylist(rows, schema=PENDING_SCHEMA)


def _out_ms(ts: TimerStore, offset: int, size: int) -> int | None:
    try:
        msg = ts.store.commitlog.read_message(offset, size)
    except StoreError:
        return None
    info = timer_info(msg.topic, msg.properties)
    return None if info is None else info.outMs


def pending_histogram(pending: pa.Table) -> pa.Table:
    """Pending rows folded to PENDING_HIST_SCHEMA (one row per distinct due time and kind:
    at most one per slot of the wheel, whatever the number of messages)."""
    counted = pending.select(PENDING_HIST_KEYS).append_column(
        "one", pa.array(np.ones(pending.num_rows, dtype=np.int64)))
    return fold(counted.rename_columns([*PENDING_HIST_KEYS, "rows"]), PENDING_HIST_KEYS, PENDING_HIST_SCHEMA)


def backlog_tables(hist: pa.Table, pos: pa.Table, at_ms: int) -> dict[str, pa.Table]:
    """The ``timer`` and ``timer_drain`` tables from a folded histogram of every store's
    pending rows and the stores' positions."""
    due = hist.column("due_ms").to_numpy()
    count = hist.column("rows").to_numpy()
    cancel = hist.column("cancel").to_numpy(zero_copy_only=False)
    dropped = hist.column("cancelled").to_numpy(zero_copy_only=False)
    roll = hist.column("roll").to_numpy(zero_copy_only=False)
    queue = np.array([s == QUEUE for s in hist.column("source").to_pylist()], dtype=bool)
    by_store = groups(hist, ["store"])
    timer_rows, drain_rows = [], []
    for row in pos.to_pylist():
        index = by_store.get((row["store"],), np.empty(0, dtype=np.int64))
        markers = index[cancel[index]]
        gone = index[dropped[index]]
        msgs = index[~cancel[index] & ~dropped[index]]
        d, c = due[msgs], count[msgs]
        is_due = d <= at_ms
        timer_rows.append({
            "store": row["store"], "read_ms": row["read_ms"] if row["checkpoint"] else None,
            "behind_ms": at_ms - row["read_ms"], "pending": int(c.sum()), "due_now": int(c[is_due].sum()),
            **{name: int(c[at_ms - d > ms].sum()) for name, ms in OVERDUE.items()},
            "oldest_due_ms": int(d.min()) if len(d) and is_due.any() else None,
            "rolling": int(c[roll[msgs]].sum()), "not_enqueued": int(c[queue[msgs]].sum()),
            "cancel_markers": int(count[markers].sum()), "cancelled": int(count[gone].sum()),
        })
        # minute 0: due now; minute m: due in (at + (m-1) min, at + m min], as the levels' drain.
        minutes = np.where(is_due, 0, -((at_ms - d) // MINUTE_MS))
        per_minute: dict[int, int] = {}
        for minute, n in zip(minutes.tolist(), c.tolist()):
            per_minute[minute] = per_minute.get(minute, 0) + n
        drain_rows += [{"store": row["store"], "minute": m, "due": n} for m, n in sorted(per_minute.items())]
    return {
        "timer": sort_table(pa.Table.from_pylist(timer_rows, schema=TIMER_SCHEMA), ["store"]),
        "timerDrain": sort_table(pa.Table.from_pylist(drain_rows, schema=TIMER_DRAIN_SCHEMA), ["store", "minute"]),
    }


def backlog(stores: list[StoreRef], at_ms: int) -> tuple[dict[str, pa.Table], pa.Table]:
    """The embedded engine's timer backlog: (tables, per-message table)."""
    pos = positions(stores, at_ms)
    cancelled = cancelled_units(pos)
    parts = [pending_part(*part, cancelled[part[0]]) for part in pending_parts(pos)]
    pending = sort_table(pa.concat_tables(parts) if parts else PENDING_SCHEMA.empty_table(), PENDING_ORDER)
    return backlog_tables(pending_histogram(pending), pos, at_ms), pending


# -- lateness, rolls, cancellations ------------------------------------------------------------
# What is read of the commit log: the records of rmq_sys_wheel_timer (parked, rolled,
# cancellation markers) and the delivered copies (TIMER_OUT_MS and TIMER_DEQUEUE_MS set).
COLUMNS = ["store", "commitlog_offset", "topic", "store_timestamp", "properties_raw"]
# Those records with their timer properties read: what the match needs, keyed by
# (store, real_topic, uniq_key) -- for a marker, the message it cancels.
ROWS_SCHEMA = pa.schema([
    ("store", pa.string()), ("real_topic", pa.string()), ("uniq_key", pa.string()), ("stage", pa.string()),
    ("cancel", pa.bool_()), ("commitlog_offset", pa.int64()), ("store_timestamp", pa.int64()),
    ("out_ms", pa.int64()), ("dequeue_ms", pa.int64()), ("never_enqueued", pa.bool_()),
    ("roll_times", pa.int32()),
])
KEY = ["store", "real_topic", "uniq_key"]
# Per key: the message (parked, rolled, delivered) and what cancelled it. Cancellation
# states of a key with markers:
HONOURED = "honoured"  # not delivered, and the timer read past its time: the marker dropped it
MISSED = "missed"  # delivered all the same
PENDING = "pending"  # not delivered yet, its time not read yet
NO_TARGET = "noTarget"  # no record of the message it names (never sent, or gone with retention)
CANCEL_STATES = (HONOURED, MISSED, PENDING, NO_TARGET)
KEYS_SCHEMA = pa.schema([
    ("store", pa.string()), ("real_topic", pa.string()), ("uniq_key", pa.string()),
    ("parked_offset", pa.int64()), ("out_ms", pa.int64()), ("rolls", pa.int32()), ("markers", pa.int64()),
    ("cancel", pa.string()), ("deliveries", pa.int64()), ("actual_ms", pa.int64()), ("dequeue_ms", pa.int64()),
    ("never_enqueued", pa.bool_()), ("lateness_ms", pa.int64()), ("dequeue_lateness_ms", pa.int64()),
])
MESSAGES_SCHEMA = pa.schema([f for f in KEYS_SCHEMA if f.name != "markers"])
MESSAGES_ORDER = KEY

# The partial results both engines fold.
COUNTS_KEYS = ["store", "real_topic"]
COUNTS_SCHEMA = pa.schema([
    ("store", pa.string()), ("real_topic", pa.string()), ("messages", pa.int64()), ("delivered", pa.int64()),
    ("duplicates", pa.int64()), ("never_enqueued", pa.int64()), ("rolled", pa.int64()),
    ("undelivered_overdue", pa.int64()), ("oldest_undelivered_ms", pa.int64()),
])
LATENESS_KEYS = ["store", "real_topic", "measure", "value"]
LATENESS_HIST_SCHEMA = pa.schema([("store", pa.string()), ("real_topic", pa.string()), ("measure", pa.string()),
                                  ("value", pa.int64()), ("rows", pa.int64())])
STORED, DEQUEUED = "stored", "dequeued"
ROLLS_KEYS = ["store", "real_topic", "rolls"]
ROLLS_SCHEMA = pa.schema([("store", pa.string()), ("real_topic", pa.string()), ("rolls", pa.int32()),
                          ("messages", pa.int64()), ("delivered", pa.int64())])
CANCELLATIONS_KEYS = ["store", "real_topic", "state"]
CANCELLATIONS_SCHEMA = pa.schema([("store", pa.string()), ("real_topic", pa.string()), ("state", pa.string()),
                                  ("cancellations", pa.int64())])
_STATS = [(p, pa.int64()) for p in PERCENTILES] + [("max", pa.int64()), ("min", pa.int64()), ("early", pa.int64())]
TOPICS_SCHEMA = pa.schema([
    ("store", pa.string()), ("real_topic", pa.string()), ("messages", pa.int64()), ("delivered", pa.int64()),
    *_STATS, *[(f"dequeue_{name}", t) for name, t in _STATS],
    ("duplicates", pa.int64()), ("never_enqueued", pa.int64()), ("rolled", pa.int64()),
    ("undelivered_overdue", pa.int64()), ("oldest_undelivered_ms", pa.int64()),
])


def is_timer_record(batch: pa.RecordBatch) -> pa.Array:
    """Records of rmq_sys_wheel_timer, and delivered timer copies (they carry TIMER_OUT_MS and
    TIMER_DEQUEUE_MS; a plain message sent with timer properties carries neither)."""
    props = batch.column("properties_raw")
    delivered = pc.and_(pc.match_substring(props, PROPERTY_TIMER_DEQUEUE_MS + "\x01"),
                        pc.match_substring(props, PROPERTY_TIMER_OUT_MS + "\x01"))
    return pc.fill_null(pc.or_(pc.equal(batch.column("topic"), RMQ_SYS_WHEEL_TIMER_TOPIC), delivered), False)


def timer_rows(records: pa.Table) -> pa.Table:
    """ROWS_SCHEMA of records read with COLUMNS: their timer properties (formats.timerprops),
    keyed by the message. A marker's key is the one TIMER_DEL_UNIQKEY names (split at its last
    '+'); rows that name no message (no UNIQ_KEY or real topic) are left out."""
    cols = timer_columns(records.column("topic"), records.column("properties_raw"))
    stage = cols["stage"]
    cancel = pc.is_valid(cols["delUniqKey"])
    # Greedy '.*': the topic runs to the last '+' (topic names never hold one).
    target = pc.extract_regex(cols["delUniqKey"], r"(?s)^(?P<t>.*)\+(?P<k>[^+]*)$")
    named, key = pc.struct_field(target, "t"), pc.struct_field(target, "k")
    table = pa.table({
        "store": records.column("store"),
        "real_topic": pc.if_else(cancel, named, cols["realTopic"]),
        "uniq_key": pc.if_else(cancel, key, cols["uniqKey"]),
        "stage": stage, "cancel": cancel,
        "commitlog_offset": records.column("commitlog_offset"), "store_timestamp": records.column("store_timestamp"),
        "out_ms": cols["outMs"], "dequeue_ms": cols["dequeueMs"],
        "never_enqueued": pc.fill_null(pc.equal(stage, DELIVERED_NEVER_ENQUEUED), False),
        "roll_times": cols["rollTimes"],
    }, schema=ROWS_SCHEMA)
    keep = pc.and_(pc.and_(pc.is_valid(table.column("real_topic")), pc.is_valid(table.column("uniq_key"))),
                   pc.is_in(stage, pa.array([PARKED, ROLLED, CANCEL, DELIVERED, DELIVERED_NEVER_ENQUEUED])))
    return table.filter(pc.fill_null(keep, False))


def _grouped(table: pa.Table, aggregations: list[tuple[str, str]], names: dict[str, str]) -> pa.Table:
    out = table.group_by(KEY).aggregate(aggregations)
    return out.rename_columns([names.get(c, c) for c in out.column_names])


def match(rows: pa.Table, read_ms: dict[str, int]) -> pa.Table:
    """KEYS_SCHEMA (unsorted): each key's parked record, rolls, delivered copies and markers.
    ``rows`` (ROWS_SCHEMA) hold every record of each of their keys; ``read_ms``: each store's
    read position, which tells a honoured cancellation from a pending one. Both engines call
    this, the Spark one on each partition of rows split by key."""
    cancel = rows.column("cancel")
    plain = rows.filter(pc.invert(cancel))
    is_copy = pc.is_in(plain.column("stage"), pa.array([DELIVERED, DELIVERED_NEVER_ENQUEUED]))
    parked = _grouped(plain.filter(pc.equal(plain.column("stage"), PARKED)),
                      [("commitlog_offset", "min")], {"commitlog_offset_min": "parked_offset"})
    message = _grouped(plain, [("out_ms", "min"), ("roll_times", "max")],
                       {"out_ms_min": "out_ms", "roll_times_max": "rolls"})
    copies = _grouped(plain.filter(is_copy), [("store_timestamp", "min"), ("store_timestamp", "count"),
                                              ("dequeue_ms", "min"), ("never_enqueued", "any")],
                      {"store_timestamp_min": "actual_ms", "store_timestamp_count": "deliveries",
                       "dequeue_ms_min": "dequeue_ms", "never_enqueued_any": "never_enqueued"})
    markers = rows.filter(cancel)
    markers = _grouped(markers.append_column("original", pc.cast(pc.equal(markers.column("stage"), CANCEL), pa.int64())),
                       [("original", "sum")], {"original_sum": "markers"})
    keys = pa.concat_tables([t.select(KEY) for t in (message, markers)]).group_by(KEY).aggregate([])
    for part in (parked, message, copies, markers):
        keys = keys.join(part, KEY, join_type="left outer")
    n = keys.num_rows
    deliveries = pc.fill_null(keys.column("deliveries"), 0)
    # A key seen only through re-puts of its marker still had one.
    markers_col = pc.if_else(pc.is_valid(keys.column("markers")), pc.max_element_wise(keys.column("markers"), 1), 0)
    out_ms = keys.column("out_ms")
    has_message = pc.is_valid(out_ms)
    reads = pa.array([read_ms.get(s) for s in keys.column("store").to_pylist()], type=pa.int64())
    read_past = pc.fill_null(pc.less(out_ms, reads), False)
    state = pc.case_when(
        pc.make_struct(pc.greater(deliveries, 0), pc.invert(has_message), read_past, field_names=["a", "b", "c"]),
        pa.array([MISSED] * n, pa.string()), pa.array([NO_TARGET] * n, pa.string()),
        pa.array([HONOURED] * n, pa.string()), pa.array([PENDING] * n, pa.string()))
    state = pc.if_else(pc.greater(markers_col, 0), state, pa.nulls(n, pa.string()))
    actual = keys.column("actual_ms")
    return pa.table({
        "store": keys.column("store"), "real_topic": keys.column("real_topic"), "uniq_key": keys.column("uniq_key"),
        "parked_offset": keys.column("parked_offset"), "out_ms": out_ms,
        "rolls": pc.fill_null(keys.column("rolls"), 0), "markers": pc.cast(markers_col, pa.int64()),
        "cancel": state, "deliveries": pc.cast(deliveries, pa.int64()), "actual_ms": actual,
        "dequeue_ms": keys.column("dequeue_ms"),
        "never_enqueued": pc.fill_null(keys.column("never_enqueued"), False),
        "lateness_ms": pc.subtract(actual, out_ms), "dequeue_lateness_ms": pc.subtract(keys.column("dequeue_ms"), out_ms),
    }, schema=KEYS_SCHEMA)


def messages_of(keys: pa.Table) -> pa.Table:
    """The per-message table: keys of a message (a parked record or a delivered copy), not
    those only a marker names."""
    return keys.filter(pc.is_valid(keys.column("out_ms"))).select(MESSAGES_SCHEMA.names)


def partials(keys: pa.Table, at_ms: int) -> dict[str, pa.Table]:
    """What the summaries need from some keys (KEYS_SCHEMA), folded: per topic counts, the
    lateness histogram, rolls, cancellations."""
    msgs = keys.filter(pc.is_valid(keys.column("out_ms")))
    delivered = pc.greater(msgs.column("deliveries"), 0)
    undelivered = pc.and_(pc.and_(pc.invert(delivered), pc.equal(msgs.column("markers"), 0)),
                          pc.less(msgs.column("out_ms"), at_ms))
    one = pa.array(np.ones(msgs.num_rows, dtype=np.int64))
    counts = pa.table({
        "store": msgs.column("store"), "real_topic": msgs.column("real_topic"), "messages": one,
        "delivered": pc.cast(delivered, pa.int64()),
        "duplicates": pc.max_element_wise(pc.subtract(msgs.column("deliveries"), 1), 0),
        "never_enqueued": pc.cast(msgs.column("never_enqueued"), pa.int64()),
        "rolled": pc.cast(pc.greater(msgs.column("rolls"), 0), pa.int64()),
        "undelivered_overdue": pc.cast(undelivered, pa.int64()),
        "oldest_undelivered_ms": pc.if_else(undelivered, msgs.column("out_ms"), pa.scalar(None, pa.int64())),
    })
    got = msgs.filter(delivered)
    hist = pa.concat_tables([pa.table({
        "store": got.column("store"), "real_topic": got.column("real_topic"),
        "measure": pa.array([measure] * got.num_rows, pa.string()), "value": got.column(column),
        "rows": pa.array(np.ones(got.num_rows, dtype=np.int64)),
    }, schema=LATENESS_HIST_SCHEMA) for measure, column in ((STORED, "lateness_ms"), (DEQUEUED, "dequeue_lateness_ms"))])
    hist = hist.filter(pc.is_valid(hist.column("value")))
    rolls = pa.table({"store": msgs.column("store"), "real_topic": msgs.column("real_topic"),
                      "rolls": msgs.column("rolls"), "messages": one, "delivered": pc.cast(delivered, pa.int64())})
    marked = keys.filter(pc.is_valid(keys.column("cancel")))
    cancellations = pa.table({"store": marked.column("store"), "real_topic": marked.column("real_topic"),
                              "state": marked.column("cancel"),
                              "cancellations": pa.array(np.ones(marked.num_rows, dtype=np.int64))})
    return {
        "counts": fold(counts, COUNTS_KEYS, COUNTS_SCHEMA),
        "lateness": fold(hist, LATENESS_KEYS, LATENESS_HIST_SCHEMA),
        "rolls": fold(rolls, ROLLS_KEYS, ROLLS_SCHEMA),
        "cancellations": fold(cancellations, CANCELLATIONS_KEYS, CANCELLATIONS_SCHEMA),
    }


PARTIAL_SCHEMAS = {"counts": (COUNTS_KEYS, COUNTS_SCHEMA), "lateness": (LATENESS_KEYS, LATENESS_HIST_SCHEMA),
                   "rolls": (ROLLS_KEYS, ROLLS_SCHEMA), "cancellations": (CANCELLATIONS_KEYS, CANCELLATIONS_SCHEMA)}


def lateness_tables(folded: dict[str, pa.Table]) -> dict[str, pa.Table]:
    """``timer_topics``, ``timer_rolls``, ``timer_cancellations`` from the folded partials."""
    hist = folded["lateness"]
    values = hist.column("value").to_numpy()
    rows_of = hist.column("rows").to_numpy()
    stats: dict[tuple[str, str, str], dict] = {}
    for key, index in groups(hist, ["store", "real_topic", "measure"]).items():
        order = index[np.argsort(values[index], kind="stable")]
        v, c = values[order], rows_of[order]
        stats[key] = {**{p: nearest_rank_counted(v, c, *frac) for p, frac in PERCENTILES.items()},
                      "max": int(v[-1]), "min": int(v[0]), "early": int(c[v < 0].sum())}
    empty = {**{p: None for p in PERCENTILES}, "max": None, "min": None, "early": 0}
    topics = []
    for row in folded["counts"].to_pylist():
        stored = stats.get((row["store"], row["real_topic"], STORED), empty)
        dequeued = stats.get((row["store"], row["real_topic"], DEQUEUED), empty)
        topics.append({**row, **stored, **{f"dequeue_{k}": v for k, v in dequeued.items()}})
    return {
        "timerTopics": sort_table(pa.Table.from_pylist(topics, schema=TOPICS_SCHEMA), COUNTS_KEYS),
        "timerRolls": sort_table(folded["rolls"], ROLLS_KEYS),
        "timerCancellations": sort_table(folded["cancellations"], CANCELLATIONS_KEYS),
    }


def read_positions(stores: list[StoreRef], at_ms: int) -> dict[str, int]:
    return dict(zip(*(positions(stores, at_ms).column(c).to_pylist() for c in ("store", "read_ms"))))


def lateness(stores: list[StoreRef], at_ms: int, records: pa.Table) -> tuple[dict[str, pa.Table], pa.Table]:
    """The embedded engine's timer lateness from the records ``is_timer_record`` selected
    (COLUMNS): (tables, per-message table)."""
    rows = timer_rows(records) if records.num_rows else ROWS_SCHEMA.empty_table()
    keys = match(rows, read_positions(stores, at_ms))
    parts = partials(keys, at_ms)
    return lateness_tables(parts), sort_table(messages_of(keys), MESSAGES_ORDER)
