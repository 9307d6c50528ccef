"""lateness: for every schedule record, when its delivered copy was stored compared with
the deliver time in its schedule unit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.store import Store
from rmqdelay.store.scan import SCHEDULE_UNIT_SCHEMA, Skipped, schedule_units

from . import AnalysisResult, StoreRef, timer
from .common import PERCENTILES, groups, nearest_rank_counted, read_messages, sort_table

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
_COLUMNS = ["store", "commitlog_offset", "topic", "store_timestamp", "reconsume_times", "uniq_key",
            "delay_level", "real_topic"]


def _is_schedule_or_copy(batch: pa.RecordBatch) -> pa.Array:
    topic = batch.column("topic")
    schedule = pc.equal(topic, RMQ_SYS_SCHEDULE_TOPIC)
    # 4.9.4 quirk: a delivered copy keeps DELAY, and REAL_TOPIC names its own topic.
    copy = pc.and_(pc.equal(batch.column("real_topic"), topic), pc.is_valid(batch.column("delay_level")))
    return pc.fill_null(pc.or_(schedule, copy), False)


def lateness(stores: list[StoreRef], at_ms: int, delay_levels: dict[int, int], *,
             keep_going: bool = False) -> AnalysisResult:
    skipped: list[Skipped] = []
    rows = read_messages(stores, _COLUMNS, _is_schedule_or_copy, keep_going=keep_going, skipped=skipped)
    units = []
    for ref in stores:
        with Store(ref.path) as store:
            units.append(schedule_units(store, ref.name).select(UNIT_COLUMNS))
    units = pa.concat_tables(units) if units else SCHEDULE_UNIT_SCHEMA.empty_table().select(UNIT_COLUMNS)
    schedule, copies = with_units(rows, units)
    messages = sort_table(match(schedule, copies), MESSAGES_ORDER)
    hist = histogram(messages, at_ms)
    tables = {
        "levels": summaries(hist, "level", LEVELS_SCHEMA, undelivered=True),
        "topics": summaries(hist, "real_topic", TOPICS_SCHEMA, undelivered=False),
    }
    # Timer messages (5.x stores with a timer store): a second pass over those stores' logs.
    timed = timer.timer_stores(stores)
    records = read_messages(timed, timer.COLUMNS, timer.is_timer_record, keep_going=keep_going, skipped=skipped)
    timer_tables, timer_messages = timer.lateness(timed, at_ms, records)
    return AnalysisResult("lateness", tables | timer_tables, messages, _unique(skipped), timer_messages)


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
    for (store, key), index in groups(list(zip(hist.column("store").to_pylist(), hist.column(by).to_pylist()))).items():
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
