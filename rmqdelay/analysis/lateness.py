"""lateness: for every schedule record, when its delivered copy was stored compared with
the deliver time in its schedule unit."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.store import Store
from rmqdelay.store.scan import Skipped, schedule_units

from . import AnalysisResult, StoreRef
from .common import PERCENTILES, nearest_rank, read_messages, sort_table

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
    is_schedule = pc.equal(rows.column("topic"), RMQ_SYS_SCHEDULE_TOPIC)
    schedule = rows.filter(is_schedule)
    copies = rows.filter(pc.invert(is_schedule))
    units = []
    for ref in stores:
        with Store(ref.path) as store:
            units.append(schedule_units(store, ref.name).select(["store", "commitlog_offset", "level", "deliver_ms"]))
    units = pa.concat_tables(units)
    # A schedule record's level and intended time come from its unit.
    schedule = schedule.join(units, ["store", "commitlog_offset"], join_type="inner")
    delivered = copies.filter(pc.is_valid(copies.column("uniq_key"))).group_by(_KEY).aggregate(
        [("store_timestamp", "min"), ("store_timestamp", "count")])
    delivered = delivered.rename_columns([{"store_timestamp_min": "actual_ms",
                                          "store_timestamp_count": "deliveries"}.get(c, c)
                                         for c in delivered.column_names])
    matched = schedule.join(delivered, _KEY, join_type="left outer")
    deliveries = pc.fill_null(matched.column("deliveries"), 0)
    # A null uniq_key never matches: the join leaves those rows without copies already.
    actual = matched.column("actual_ms")
    messages = pa.table({
        "store": matched.column("store"),
        "level": matched.column("level"),
        "real_topic": matched.column("real_topic"),
        "uniq_key": matched.column("uniq_key"),
        "reconsume_times": matched.column("reconsume_times"),
        "schedule_offset": matched.column("commitlog_offset"),
        "intended_ms": matched.column("deliver_ms"),
        "actual_ms": actual,
        "deliveries": pc.cast(deliveries, pa.int64()),
        "lateness_ms": pc.subtract(actual, matched.column("deliver_ms")),
    }, schema=MESSAGES_SCHEMA)
    messages = sort_table(messages, ["store", "level", "schedule_offset"])
    tables = {
        "levels": _summaries(messages, "level", at_ms, LEVELS_SCHEMA, undelivered=True),
        "topics": _summaries(messages, "real_topic", at_ms, TOPICS_SCHEMA, undelivered=False),
    }
    return AnalysisResult("lateness", tables, messages, skipped)


def _summaries(messages: pa.Table, by: str, at_ms: int, schema: pa.Schema, *, undelivered: bool) -> pa.Table:
    stores = messages.column("store").to_pylist()
    keys = messages.column(by).to_pylist()
    late = messages.column("lateness_ms").to_numpy(zero_copy_only=False)
    has_copy = messages.column("actual_ms").is_valid().to_numpy(zero_copy_only=False)
    deliveries = messages.column("deliveries").to_numpy()
    intended = messages.column("intended_ms").to_numpy()
    index: dict[tuple, list[int]] = {}
    for i, key in enumerate(zip(stores, keys)):
        index.setdefault(key, []).append(i)
    out = []
    for (store, key), rows in index.items():
        rows = np.asarray(rows, dtype=np.int64)
        got = rows[has_copy[rows]]
        values = np.sort(late[got].astype(np.int64))
        row = {"store": store, by: key, "delivered": len(got),
               **{p: nearest_rank(values, *frac) for p, frac in PERCENTILES.items()},
               "max": int(values[-1]) if len(values) else None,
               "min": int(values[0]) if len(values) else None,
               "early": int((values < 0).sum()),
               "duplicates": int((deliveries[got] - 1).sum())}
        if undelivered:
            missing = rows[~has_copy[rows] & (intended[rows] < at_ms)]
            row["undelivered_overdue"] = len(missing)
            row["oldest_undelivered_ms"] = int(intended[missing].min()) if len(missing) else None
        out.append(row)
    return sort_table(pa.Table.from_pylist(out, schema=schema), ["store", by])
