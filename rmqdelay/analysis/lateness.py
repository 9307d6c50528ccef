"""lateness: for every schedule record, when its delivered copy was stored compared with
the deliver time in its schedule unit."""

from __future__ import annotations

from itertools import groupby

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.store import Store
from rmqdelay.store.scan import (
    SCHEDULE_UNIT_SCHEMA,
    Skipped,
    schedule_unit_arrays,
    schedule_unit_ranges,
)

from . import AnalysisResult, StoreRef, timer
from .common import (
    PERCENTILES,
    commitlog_walk,
    fold,
    groups,
    nearest_rank_counted,
    read_messages,
    reduce_by,
    row_codes,
    scan_selected,
    sort_table,
)
from .keycodes import key_codes, key_hash
from .spill import KeyedRows, Messages, memory_budget

MESSAGES_SCHEMA = pa.schema([
    ("store", pa.string()), ("level", pa.int32()), ("real_topic", pa.string()), ("uniq_key", pa.string()),
    ("reconsume_times", pa.int32()), ("schedule_offset", pa.int64()), ("intended_ms", pa.int64()),
    ("actual_ms", pa.int64()), ("deliveries", pa.int64()), ("lateness_ms", pa.int64()),
])
_STATS = [("delivered", pa.int64())] + [(p, pa.int64()) for p in PERCENTILES] + [
    ("max", pa.int64()), ("min", pa.int64()), ("early", pa.int64()), ("duplicates", pa.int64())]
LEVELS_SCHEMA = pa.schema([("store", pa.string()), ("level", pa.int32())] + _STATS + [
    ("undelivered_overdue", pa.int64()), ("oldest_undelivered_ms", pa.int64())])
TOPICS_SCHEMA = pa.schema([("store", pa.string()), ("real_topic", pa.string())] + _STATS)

MESSAGES_ORDER = ["store", "level", "schedule_offset"]
# What a schedule unit adds to its record.
UNIT_COLUMNS = ["store", "commitlog_offset", "level", "deliver_ms"]
# The messages folded for the summaries (see ``histogram``).
HISTOGRAM_KEYS = ["store", "level", "real_topic", "lateness_ms"]
HISTOGRAM_SCHEMA = pa.schema([
    ("store", pa.string()), ("level", pa.int32()), ("real_topic", pa.string()), ("lateness_ms", pa.int64()),
    ("rows", pa.int64()), ("duplicates", pa.int64()), ("overdue", pa.int64()), ("oldest_overdue_ms", pa.int64()),
])
_HISTOGRAM_NAMES = {"one_sum": "rows", "duplicates_sum": "duplicates", "overdue_sum": "overdue",
                    "overdue_ms_min": "oldest_overdue_ms"}

_KEY = ["store", "uniq_key", "real_topic", "reconsume_times"]
# Matching a partition takes about this many times its rows' bytes (the key codes, the sort,
# the joined table): the rows held are the budget over it.
_MATCH_FACTOR = 4
_COLUMNS = ["store", "commitlog_offset", "topic", "store_timestamp", "reconsume_times", "uniq_key",
            "delay_level", "real_topic"]


def _is_schedule_or_copy(batch: pa.RecordBatch) -> pa.Array:
    """Schedule records (every one, with or without REAL_TOPIC) and delivered copies."""
    schedule, copy = _kinds(batch)
    return pa.array(schedule | copy)


def _kinds(rows: pa.Table | pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """(which rows are schedule records, which are delivered copies)."""
    topic = rows.column("topic")
    schedule = pc.equal(topic, RMQ_SYS_SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    # 4.9.4 quirk: a delivered copy keeps DELAY, and REAL_TOPIC names its own topic.
    copy = pc.fill_null(pc.equal(rows.column("real_topic"), topic), False).to_numpy(zero_copy_only=False)
    copy &= rows.column("delay_level").is_valid().to_numpy(zero_copy_only=False) & ~schedule
    return schedule, copy


def lateness(stores: list[StoreRef], at_ms: int, delay_levels: dict[int, int], *,
             keep_going: bool = False, memory: int | None = None, messages: Messages | None = None) -> AnalysisResult:
    """Lateness over ``stores``. The rows held and their matching take about ``memory``
    (spill.py): the schedule records meet their units batch by batch, then they and the copies are matched
    by key, partition by partition when they do not fit, each partition folded into the
    histogram the summaries come from. ``messages``: where the per-message table goes
    (collected by default)."""
    skipped: list[Skipped] = []
    sink = messages or Messages(MESSAGES_SCHEMA, MESSAGES_ORDER)
    hists = []
    with KeyedRows(ROWS_SCHEMA, buckets, memory_budget(memory) // _MATCH_FACTOR) as rows:
        for units, batch, done in _records_and_units(stores, keep_going, skipped):
            rows.add(records_with_units(batch, units), done)
        for part in rows.partitions():
            matched = match_rows(part)
            hists.append(histogram(matched, at_ms))
            sink.add(matched)
    hist = fold(pa.concat_tables(hists) if hists else HISTOGRAM_SCHEMA.empty_table(), HISTOGRAM_KEYS, HISTOGRAM_SCHEMA)
    tables = {
        "levels": summaries(hist, "level", LEVELS_SCHEMA, undelivered=True),
        "topics": summaries(hist, "real_topic", TOPICS_SCHEMA, undelivered=False),
    }
    per_message = sink.table() if messages is None else MESSAGES_SCHEMA.empty_table()
    # Timer messages (5.x stores with a timer store): a second pass over those stores' logs.
    timed = timer.timer_stores(stores)
    records = read_messages(timed, timer.COLUMNS, timer.is_timer_record, keep_going=keep_going, skipped=skipped)
    timer_tables, timer_messages = timer.lateness(timed, at_ms, records)
    return AnalysisResult("lateness", tables | timer_tables, per_message, _unique(skipped), timer_messages)


def _records_and_units(stores: list[StoreRef], keep_going: bool, skipped: list[Skipped]):
    """(the schedule units that may point into the batch, a batch of records read with
    ``_COLUMNS``, how much of the input is read: 0..1) for each batch of every commit log file
    of ``stores``: a file's units are read once (file_units), sorted by offset, and each batch
    takes the run of them between its first and last offsets."""
    for ref, files in groupby(commitlog_walk(stores), key=lambda step: step[0]):
        files = list(files)
        starts = [file.start for _, file, _, _ in files]
        with Store(ref.path) as store:
            found = schedule_unit_ranges(store, starts)
            for (_, file, before, total), start, end, ranges in zip(files, starts, [*starts[1:], None], found):
                units = file_units(store, ref.name, ranges, start, end)
                unit_offsets = units.column("commitlog_offset").to_numpy()
                for batch, read in scan_selected(ref, file, _COLUMNS, None, keep_going, skipped):
                    offsets = batch.column("commitlog_offset").to_numpy()
                    lo = np.searchsorted(unit_offsets, offsets[0], side="left")
                    hi = np.searchsorted(unit_offsets, offsets[-1], side="right")
                    yield units.slice(lo, hi - lo), batch, (before + read) / total


def file_units(store: Store, name: str, ranges: dict[int, tuple[int, int]], start: int, end: int | None) -> pa.Table:
    """The schedule units (``UNIT_COLUMNS``) that point into the commit log file [start, end)
    of ``store``, read within ``ranges`` (schedule_unit_ranges), in offset order."""
    offsets, levels, deliver = [], [], []
    for queue_id in store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []):
        if queue_id + 1 in ranges:
            for _, units in schedule_unit_arrays(store, queue_id + 1, *ranges[queue_id + 1]):
                offsets.append(units["commitLogOffset"].astype(np.int64))
                levels.append(np.full(len(units), queue_id + 1, dtype=np.int32))
                deliver.append(units["tagsCode"].astype(np.int64))
    offsets, levels, deliver = (np.concatenate(parts) if parts else np.zeros(0, dtype)
                                for parts, dtype in ((offsets, np.int64), (levels, np.int32), (deliver, np.int64)))
    inside = (offsets >= start) & (offsets < end if end is not None else True)
    order = np.flatnonzero(inside)[np.argsort(offsets[inside], kind="stable")]
    return pa.table({"store": pa.repeat(pa.scalar(name, pa.string()), len(order)),
                     "commitlog_offset": offsets[order], "level": levels[order], "deliver_ms": deliver[order]},
                    schema=pa.schema([SCHEDULE_UNIT_SCHEMA.field(c) for c in UNIT_COLUMNS]))


def _unique(skipped: list[Skipped]) -> list[Skipped]:
    """A bad record met by both passes is one skip."""
    seen, out = set(), []
    for s in skipped:
        if (s.file, s.offset) not in seen:
            seen.add((s.file, s.offset))
            out.append(s)
    return out


def with_units(rows: pa.Table, units: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(schedule records joined with their units, delivered copies) of rows read with
    ``_COLUMNS``: a schedule record's level and intended time come from its unit, and one
    without a unit is left out."""
    is_schedule = pc.equal(rows.column("topic"), RMQ_SYS_SCHEDULE_TOPIC)
    schedule = rows.filter(is_schedule).join(units, ["store", "commitlog_offset"], join_type="inner")
    return schedule, rows.filter(pc.invert(is_schedule))


def match(schedule: pa.Table, copies: pa.Table) -> pa.Table:
    """The per-message table (unsorted): each schedule record (joined with its unit: ``level``,
    ``deliver_ms``) with the delivered copies of its key. Both engines call this, the Spark
    one on each partition of rows split by key."""
    delivered = copies.filter(pc.is_valid(copies.column("uniq_key"))).group_by(_KEY).aggregate(
        [("store_timestamp", "min"), ("store_timestamp", "count")])
    delivered = delivered.rename_columns([{"store_timestamp_min": "actual_ms",
                                          "store_timestamp_count": "deliveries"}.get(c, c)
                                         for c in delivered.column_names])
    matched = schedule.join(delivered, _KEY, join_type="left outer")
    deliveries = pc.fill_null(matched.column("deliveries"), 0)
    # A null uniq_key never matches: the join leaves those rows without copies already.
    return messages_table(matched, matched.column("actual_ms"), pc.cast(deliveries, pa.int64()))


def messages_table(schedule: pa.Table, actual, deliveries) -> pa.Table:
    """The per-message table of schedule records (with ``level`` and ``deliver_ms``), the
    store time of their first copy (``actual``, null for none) and how many copies there are."""
    return pa.table({
        "store": schedule.column("store"),
        "level": schedule.column("level"),
        "real_topic": schedule.column("real_topic"),
        "uniq_key": schedule.column("uniq_key"),
        "reconsume_times": schedule.column("reconsume_times"),
        "schedule_offset": schedule.column("commitlog_offset"),
        "intended_ms": schedule.column("deliver_ms"),
        "actual_ms": actual,
        "deliveries": deliveries,
        "lateness_ms": pc.subtract(actual, schedule.column("deliver_ms")),
    }, schema=MESSAGES_SCHEMA)


def histogram(messages: pa.Table, at_ms: int) -> pa.Table:
    """``messages`` folded to one row per (store, level, real_topic, lateness_ms) (null
    lateness: no copy yet), with what the summaries need: ``HISTOGRAM_SCHEMA``. Small next to
    the messages (few distinct lateness values per level), and the same whichever engine
    folds it, so the exact percentiles can be taken from it on one machine."""
    has_copy = pc.is_valid(messages.column("actual_ms"))
    overdue = pc.and_(pc.invert(has_copy), pc.less(messages.column("intended_ms"), at_ms))
    folded = pa.table({
        "store": messages.column("store"), "level": messages.column("level"),
        "real_topic": messages.column("real_topic"), "lateness_ms": messages.column("lateness_ms"),
        "duplicates": pc.if_else(has_copy, pc.subtract(messages.column("deliveries"), 1), 0),
        "overdue": pc.cast(overdue, pa.int64()),
        "overdue_ms": pc.if_else(overdue, messages.column("intended_ms"), pa.scalar(None, pa.int64())),
        "one": pa.array(np.ones(messages.num_rows, dtype=np.int64)),
    }).group_by(HISTOGRAM_KEYS).aggregate([("one", "sum"), ("duplicates", "sum"),
                                           ("overdue", "sum"), ("overdue_ms", "min")])
    return folded.rename_columns([_HISTOGRAM_NAMES.get(c, c) for c in folded.column_names]).select(
        HISTOGRAM_SCHEMA.names).cast(HISTOGRAM_SCHEMA)


def summaries(hist: pa.Table, by: str, schema: pa.Schema, *, undelivered: bool) -> pa.Table:
    """The summary table per (store, ``by``) from a histogram: delivered, nearest-rank
    percentiles, max, min, early, duplicates (and the undelivered overdue ones)."""
    late = hist.column("lateness_ms").to_numpy(zero_copy_only=False)
    has_copy = hist.column("lateness_ms").is_valid().to_numpy(zero_copy_only=False)
    rows_of = hist.column("rows").to_numpy()
    duplicates = hist.column("duplicates").to_numpy()
    overdue = hist.column("overdue").to_numpy()
    oldest = hist.column("oldest_overdue_ms")
    out = []
    for (store, key), index in groups(hist, ["store", by]).items():
        got = index[has_copy[index]]
        order = got[np.argsort(late[got], kind="stable")]
        values, counts = late[order].astype(np.int64), rows_of[order]
        delivered = int(counts.sum())
        row = {"store": store, by: key, "delivered": delivered,
               **{p: nearest_rank_counted(values, counts, *frac) for p, frac in PERCENTILES.items()},
               "max": int(values[-1]) if len(values) else None,
               "min": int(values[0]) if len(values) else None,
               "early": int(counts[values < 0].sum()),
               "duplicates": int(duplicates[got].sum())}
        if undelivered:
            row["undelivered_overdue"] = int(overdue[index].sum())
            ages = pc.drop_null(oldest.take(pa.array(index)))
            row["oldest_undelivered_ms"] = pc.min(ages).as_py() if len(ages) else None
        out.append(row)
    return sort_table(pa.Table.from_pylist(out, schema=schema), ["store", by])


# -- the keyed match (both engines) ------------------------------------------------------------
# The rows behind lateness, as they leave the tasks that decode the commit log files:
# schedule records already joined with their units, and delivered copies.
ROWS_SCHEMA = pa.schema([
    ("store", pa.string()), ("is_schedule", pa.bool_()), ("commitlog_offset", pa.int64()),
    ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()), ("uniq_key", pa.string()),
    ("real_topic", pa.string()), ("level", pa.int32()), ("deliver_ms", pa.int64()),
])


def records_with_units(rows: pa.Table | pa.RecordBatch, units: pa.Table) -> pa.Table:
    """with_units on the schedule records and copies (``_is_schedule_or_copy``) among one
    file's rows read with ``_COLUMNS`` (or a batch of them) and the units that point into
    it, as one table of ``ROWS_SCHEMA``: for rows of one store, joined by offset in numpy
    and each column taken once (the schedule records first, then the copies)."""
    stores = [rows.column("store"), units.column("store")]
    first = next((column[0] for column in stores if len(column)), None)
    if not all(_all_equal(column, first) for column in stores):
        schedule, copies = with_units(rows.filter(_is_schedule_or_copy(rows)), units)
        return pa.concat_tables([_rows_part(schedule, True), _rows_part(copies, False)])
    is_schedule, is_copy = _kinds(rows)
    schedule = np.flatnonzero(is_schedule)
    copies = np.flatnonzero(is_copy)
    # Every (record, unit) pair of one offset, as the inner join gives them.
    unit_offsets = units.column("commitlog_offset").to_numpy()
    order = np.argsort(unit_offsets, kind="stable")
    unit_offsets = unit_offsets[order]
    offsets = rows.column("commitlog_offset").to_numpy()[schedule]
    first = np.searchsorted(unit_offsets, offsets, side="left")
    count = np.searchsorted(unit_offsets, offsets, side="right") - first
    record = np.repeat(schedule, count)
    unit = order[np.repeat(first - np.cumsum(count) + count, count) + np.arange(int(count.sum()))]
    taken = np.concatenate([record, copies])
    index = pa.array(taken)
    joined, copied = len(record), len(copies)

    def unit_values(name: str, type_: pa.DataType) -> pa.Array:
        values = units.column(name).to_numpy()[unit]
        return pa.array(np.concatenate([values, np.zeros(copied, dtype=values.dtype)]), type=type_,
                        mask=np.concatenate([np.zeros(joined, dtype=bool), np.ones(copied, dtype=bool)]))

    columns = {name: rows.column(name).take(index)
               for name in ("store", "uniq_key", "real_topic", "commitlog_offset", "store_timestamp", "reconsume_times")}
    columns["is_schedule"] = pa.array(np.arange(len(taken)) < joined)
    columns["level"] = unit_values("level", pa.int32())
    columns["deliver_ms"] = unit_values("deliver_ms", pa.int64())
    return pa.table([columns[name] for name in ROWS_SCHEMA.names], schema=ROWS_SCHEMA)


def _all_equal(column: pa.ChunkedArray | pa.Array, value: pa.Scalar | None) -> bool:
    """Whether every value of ``column`` is ``value`` (so also: it has no null)."""
    if len(column) == 0:
        return True
    return column.null_count == 0 and pc.all(pc.equal(column, value)).as_py()


def _rows_part(table: pa.Table, is_schedule: bool) -> pa.Table:
    """Schedule records (joined with their units) or copies as rows of ``ROWS_SCHEMA``."""
    n = table.num_rows
    columns = {name: table.column(name) if name in table.column_names else pa.nulls(n, field.type)
               for name, field in zip(ROWS_SCHEMA.names, ROWS_SCHEMA)}
    columns["is_schedule"] = pa.array(np.full(n, is_schedule), type=pa.bool_())
    return pa.table(columns, schema=ROWS_SCHEMA)


def match_rows(rows: pa.Table) -> pa.Table:
    """match, the same rows (unsorted), on one partition of ``ROWS_SCHEMA`` rows (schedule
    records with their units, and copies): each row's key (store, UNIQ_KEY, real topic,
    reconsume times) coded exactly (keycodes.py), the copies folded by code and looked up
    in numpy. A key with a null never matches, as in the join."""
    is_schedule = rows.column("is_schedule").to_numpy(zero_copy_only=False)
    # The rest of the key (few values) as one integer, then the UNIQ_KEY with it.
    rest_of_key = [name for name in _KEY if name != "uniq_key"]
    rest, _ = row_codes(rows, rest_of_key, dense=False)
    valid = np.logical_and.reduce([rows.column(name).is_valid().to_numpy(zero_copy_only=False)
                                   for name in rest_of_key])
    key, distinct = key_codes(rows.column("uniq_key"), rest, valid)
    # Per code (one more, empty, for a key with a null): its copies and the first one's time.
    copy = ~is_schedule & (key >= 0)
    copies = np.bincount(key[copy], minlength=distinct + 1)
    earliest = reduce_by(np.minimum, key[copy], rows.column("store_timestamp").to_numpy()[copy], distinct + 1, 0)
    wanted = key[is_schedule]
    at = np.where(wanted >= 0, wanted, distinct)
    hit = copies[at] > 0
    actual, deliveries = np.where(hit, earliest[at], 0), copies[at].astype(np.int64)
    schedule = rows.filter(pa.array(is_schedule))
    return messages_table(schedule, pa.array(actual, mask=~hit, type=pa.int64()), pa.array(deliveries))


def buckets(rows: pa.Table, partitions: int) -> np.ndarray:
    """Where each row of ``ROWS_SCHEMA`` goes of ``partitions``: by its UNIQ_KEY, so a schedule
    record and its copies meet; a record without one by its offset (it has nothing to meet),
    and a copy without one nowhere, -1 (nothing can match it)."""
    uniq = rows.column("uniq_key")
    bucket = (key_hash(uniq) % np.uint64(partitions)).astype(np.int64)
    no_key = ~uniq.is_valid().to_numpy(zero_copy_only=False)
    if no_key.any():
        schedule = rows.column("is_schedule").to_numpy(zero_copy_only=False)
        offsets = rows.column("commitlog_offset").to_numpy(zero_copy_only=False)
        bucket[no_key] = np.where(schedule[no_key], offsets[no_key] % partitions, -1)
    return bucket
