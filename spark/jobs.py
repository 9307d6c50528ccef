"""The analyses on Spark: backlog, lateness and retries over many stores in one job.

Same inputs, same rules and same result tables as the embedded engine (rmqdelay.analysis;
docs/analyze.md describes every figure): the rows come from the same columnar scan, selected by
the same predicates, and the results are cast to the same Arrow schemas and sorted the same
way, so the two can be compared table by table. Lateness and retries split their rows by key
(a record with its copies, a chain with all its records) and run the embedded engine's own
matching on each partition in Arrow. Percentiles are nearest rank, computed exactly (ceil(p·n)
in integers), never approximated, from histograms of (group, value, count) that both engines
fold the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from rmqdelay.formats.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.scan import MESSAGE_SCHEMA

from rmqdelay.analysis import AnalysisResult, StoreRef, check_stores, checked_request
from rmqdelay.analysis import backlog as embedded_backlog
from rmqdelay.analysis import lateness as embedded_lateness
from rmqdelay.analysis import retries as embedded_retries
from rmqdelay.analysis import timer as embedded_timer
from rmqdelay.analysis.common import sort_table
from rmqdelay.store import Store

from . import source
from .session import get_session

MINUTE_MS = 60_000


def analyze(kind: str, stores: list[StoreRef], at_ms: int, *, delay_levels: dict[int, int] | None = None,
            keep_going: bool = False, master: str | None = None, spark: SparkSession | None = None,
            messages_to: Path | None = None) -> AnalysisResult:
    """Run one analysis on Spark. ``messages_to``: write the per-message table there as Parquet
    from the executors (result.messages is then empty) instead of collecting it to the driver."""
    levels = checked_request(kind, stores, delay_levels)
    check_stores(stores)  # a bad store fails here, in one line, not in a task on an executor
    spark = spark or get_session(master)
    job = {"backlog": _backlog, "lateness": _lateness, "retries": _retries}[kind]
    return job(spark, stores, at_ms, levels, keep_going, messages_to)


# -- shared ----------------------------------------------------------------------------------
def _arrow(df: DataFrame, schema: pa.Schema, keys: list[str]) -> pa.Table:
    table = df.select(*schema.names).toArrow()
    return sort_table(table.cast(schema), keys)


def _messages_out(df: DataFrame, schema: pa.Schema, keys: list[str], messages_to: Path | None) -> pa.Table:
    if messages_to is None:
        return _arrow(df, schema, keys)
    df.select(*schema.names).orderBy(*keys).write.mode("overwrite").parquet(str(messages_to))
    return schema.empty_table()


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def _fold(df: DataFrame, keys: list[str], schema: pa.Schema) -> pa.Table:
    """embedded_timer.fold on Spark: partial results summed by ``keys`` (``_ms`` columns: the
    smallest), so only the folded rows reach the driver."""
    values = [f.name for f in schema if f.name not in keys]
    folded = df.groupBy(*keys).agg(*[(F.min(v) if v.endswith("_ms") else F.sum(v)).alias(v) for v in values])
    return _arrow(folded, schema, keys)


def _timer_messages_to(messages_to: Path | None, kind: str) -> Path | None:
    return None if messages_to is None else messages_to.with_name(f"{kind}_timer_messages.parquet")


def _no_messages(schema: pa.Schema, messages_to: Path | None) -> pa.Table:
    """An empty per-message table; written where one was asked for, so it is always there."""
    if messages_to is not None:
        import pyarrow.parquet as pq

        pq.write_table(schema.empty_table(), messages_to)
    return schema.empty_table()


# -- backlog ---------------------------------------------------------------------------------
def _backlog(spark: SparkSession, stores: list[StoreRef], at_ms: int, levels: dict[int, int],
             keep_going: bool, messages_to: Path | None) -> AnalysisResult:
    bounds, lag_rows = [], []
    for ref in stores:
        with Store(ref.path) as store:
            bounds += [(ref.name, *b) for b in embedded_backlog.level_bounds(store, levels)]
            lag_rows += embedded_backlog.retry_lag(store, ref.name)
    info = spark.createDataFrame(bounds, "store string, level int, delay_ms bigint, offset bigint, max_offset bigint")
    at = F.lit(at_ms)
    pending = (source.schedule_unit_rows(spark, stores).join(info, ["store", "level"])
               .where((F.col("queue_offset") >= F.col("offset")) & (F.col("queue_offset") < F.col("max_offset")))
               .withColumn("effective_ms", F.when(F.col("deliver_ms") > at + F.col("delay_ms"), at)
                           .otherwise(F.col("deliver_ms")))
               .cache())
    due = F.col("effective_ms") <= at
    late = at - F.col("effective_ms")
    counts = pending.groupBy("store", "level").agg(
        F.count(F.lit(1)).alias("pending"), _count_if(due).alias("due_now"),
        *[_count_if(late > ms).alias(name) for name, ms in embedded_backlog.OVERDUE.items()],
        F.min(F.when(due, F.col("effective_ms"))).alias("oldest_due_ms"))
    count_names = ["pending", "due_now", *embedded_backlog.OVERDUE]
    level_table = info.join(counts, ["store", "level"], "left").fillna(0, subset=count_names)
    minute = F.when(due, 0).otherwise(F.floor((F.col("effective_ms") - at + (MINUTE_MS - 1)) / MINUTE_MS))
    drain = pending.withColumn("minute", minute).groupBy("store", "level", "minute").agg(F.count(F.lit(1)).alias("due"))
    tables = {
        "levels": _arrow(level_table, embedded_backlog.LEVELS_SCHEMA, ["store", "level"]),
        "drain": _arrow(drain, embedded_backlog.DRAIN_SCHEMA, ["store", "level", "minute"]),
        "retry_lag": sort_table(pa.Table.from_pylist(lag_rows, schema=embedded_backlog.RETRY_LAG_SCHEMA),
                                ["store", "group", "queue_id", "topic"]),
    }
    messages = _messages_out(pending, embedded_backlog.MESSAGES_SCHEMA, ["store", "level", "queue_offset"], messages_to)
    pending.unpersist()
    timer_tables, timer_messages = _timer_backlog(spark, stores, at_ms, _timer_messages_to(messages_to, "backlog"))
    return AnalysisResult("backlog", tables | timer_tables, messages, [], timer_messages)


_PART_COLUMNS = ["store", "path", "source", "index", "read_ms", "master_offset"]


def _timer_backlog(spark: SparkSession, stores: list[StoreRef], at_ms: int,
                   messages_to: Path | None) -> tuple[dict[str, pa.Table], pa.Table]:
    """What waits in the wheels: one task per timer log file (and one per store for the
    queue not yet enqueued), each reading its part with the embedded engine's code."""
    pos = embedded_timer.positions(stores, at_ms)
    cancelled = embedded_timer.cancelled_units(pos)
    parts = embedded_timer.pending_parts(pos)
    if not parts:
        hist = embedded_timer.PENDING_HIST_SCHEMA.empty_table()
        return embedded_timer.backlog_tables(hist, pos, at_ms), _no_messages(embedded_timer.PENDING_SCHEMA, messages_to)
    frame = spark.sparkContext.parallelize(parts, len(parts)).toDF(
        "store string, path string, source string, index int, read_ms bigint, master_offset bigint")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for part in zip(*(batch.column(c).to_pylist() for c in _PART_COLUMNS)):
                yield from embedded_timer.pending_part(*part, cancelled[part[0]]).to_batches()

    def histogram(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = pa.Table.from_batches(list(batches), schema=embedded_timer.PENDING_SCHEMA)
        yield from embedded_timer.pending_histogram(rows).to_batches()

    pending = frame.mapInArrow(read, source.spark_schema(embedded_timer.PENDING_SCHEMA)).cache()
    hist = _fold(pending.mapInArrow(histogram, source.spark_schema(embedded_timer.PENDING_HIST_SCHEMA)),
                 embedded_timer.PENDING_HIST_KEYS, embedded_timer.PENDING_HIST_SCHEMA)
    messages = _messages_out(pending, embedded_timer.PENDING_SCHEMA, embedded_timer.PENDING_ORDER, messages_to)
    pending.unpersist()
    return embedded_timer.backlog_tables(hist, pos, at_ms), messages


# -- lateness --------------------------------------------------------------------------------
# The rows behind lateness, as they leave the tasks that decode the commit log files:
# schedule records already joined with their units, and delivered copies.
_LATENESS_ROWS = pa.schema([
    ("store", pa.string()), ("is_schedule", pa.bool_()), ("commitlog_offset", pa.int64()),
    ("store_timestamp", pa.int64()), ("reconsume_times", pa.int32()), ("uniq_key", pa.string()),
    ("real_topic", pa.string()), ("level", pa.int32()), ("deliver_ms", pa.int64()),
])


def _records_with_units(rows: pa.Table, units: pa.Table) -> pa.Table:
    schedule, copies = embedded_lateness.with_units(rows, units)

    def part(table: pa.Table, is_schedule: bool) -> pa.Table:
        n = table.num_rows
        columns = {name: table.column(name) if name in table.column_names else pa.nulls(n, field.type)
                   for name, field in zip(_LATENESS_ROWS.names, _LATENESS_ROWS)}
        columns["is_schedule"] = pa.array([is_schedule] * n, type=pa.bool_())
        return pa.table(columns, schema=_LATENESS_ROWS)

    return pa.concat_tables([part(schedule, True), part(copies, False)])


def _match_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """All rows of one key hash: the embedded engine's match, on this partition's share."""
    rows = pa.Table.from_batches(list(batches), schema=_LATENESS_ROWS)
    is_schedule = rows.column("is_schedule")
    yield from embedded_lateness.match(rows.filter(is_schedule), rows.filter(pc.invert(is_schedule))).to_batches()


def _lateness(spark: SparkSession, stores: list[StoreRef], at_ms: int, levels: dict[int, int],
              keep_going: bool, messages_to: Path | None) -> AnalysisResult:
    problems = source.Problems(spark)
    # Where each file is decoded, its schedule records meet their units; then the rows are
    # split by key (store, UNIQ_KEY), so all the copies of a record meet it in one task, which
    # matches them as the embedded engine does. Nothing else is shuffled but the summaries'
    # histogram, which is small: exact percentiles come from it on the driver.
    rows = source.schedule_records_and_copies(
        spark, stores, embedded_lateness._COLUMNS, embedded_lateness._is_schedule_or_copy, _records_with_units,
        _LATENESS_ROWS, problems)
    matched = (rows.repartition("store", "uniq_key")
               .mapInArrow(_match_partition, source.spark_schema(embedded_lateness.MESSAGES_SCHEMA))
               .cache())
    has_copy = F.col("actual_ms").isNotNull()
    overdue = ~has_copy & (F.col("intended_ms") < at_ms)
    hist = _arrow(matched.groupBy(*embedded_lateness.HISTOGRAM_KEYS).agg(
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(has_copy, F.col("deliveries") - 1).otherwise(0)).alias("duplicates"),
        _count_if(overdue).alias("overdue"),
        F.min(F.when(overdue, F.col("intended_ms"))).alias("oldest_overdue_ms")),
        embedded_lateness.HISTOGRAM_SCHEMA, embedded_lateness.HISTOGRAM_KEYS)
    tables = {
        "levels": embedded_lateness.summaries(hist, "level", embedded_lateness.LEVELS_SCHEMA, undelivered=True),
        "topics": embedded_lateness.summaries(hist, "real_topic", embedded_lateness.TOPICS_SCHEMA, undelivered=False),
    }
    messages = _messages_out(matched, embedded_lateness.MESSAGES_SCHEMA, embedded_lateness.MESSAGES_ORDER, messages_to)
    matched.unpersist()
    timer_tables, timer_messages = _timer_lateness(spark, stores, at_ms, problems,
                                                   _timer_messages_to(messages_to, "lateness"))
    skipped = problems.resolve(stores, keep_going)
    return AnalysisResult("lateness", tables | timer_tables, messages, skipped, timer_messages)


def _timer_lateness(spark: SparkSession, stores: list[StoreRef], at_ms: int, problems: source.Problems,
                    messages_to: Path | None) -> tuple[dict[str, pa.Table], pa.Table]:
    """Timer messages: the timer records of each file read where it is decoded, split by
    message (store, real topic, UNIQ_KEY) so every record of a message -- parked, rolled,
    delivered, cancelled -- meets in one task, which matches them with the embedded engine's
    code; the summaries fold small partial results."""
    timed = embedded_timer.timer_stores(stores)
    read_ms = embedded_timer.read_positions(timed, at_ms)
    if not timed:
        keys = embedded_timer.KEYS_SCHEMA.empty_table()
        return (embedded_timer.lateness_tables(embedded_timer.partials(keys, at_ms)),
                _no_messages(embedded_timer.MESSAGES_SCHEMA, messages_to))
    def rows_of(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield from embedded_timer.timer_rows(pa.Table.from_batches([batch])).to_batches()

    def match(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        rows = pa.Table.from_batches(list(batches), schema=embedded_timer.ROWS_SCHEMA)
        yield from embedded_timer.match(rows, read_ms).to_batches()

    records = source.messages(spark, timed, embedded_timer.COLUMNS, embedded_timer.is_timer_record, problems)
    keys = (records.mapInArrow(rows_of, source.spark_schema(embedded_timer.ROWS_SCHEMA))
            .repartition(*embedded_timer.KEY)
            .mapInArrow(match, source.spark_schema(embedded_timer.KEYS_SCHEMA))
            .cache())
    folded = {}
    for name, (fold_keys, schema) in embedded_timer.PARTIAL_SCHEMAS.items():
        def partial(batches: Iterator[pa.RecordBatch], name: str = name) -> Iterator[pa.RecordBatch]:
            table = pa.Table.from_batches(list(batches), schema=embedded_timer.KEYS_SCHEMA)
            yield from embedded_timer.partials(table, at_ms)[name].to_batches()

        folded[name] = _fold(keys.mapInArrow(partial, source.spark_schema(schema)), fold_keys, schema)
    messages = _messages_out(keys.where(F.col("out_ms").isNotNull()), embedded_timer.MESSAGES_SCHEMA,
                             embedded_timer.MESSAGES_ORDER, messages_to)
    keys.unpersist()
    return embedded_timer.lateness_tables(folded), messages


# -- retries ---------------------------------------------------------------------------------
# What the tasks that follow the chains give back: a row per chain (``is_anomaly`` false) or
# per anomaly of a chain (true; only store, group, chain, kind and detail set).
_CHAIN_ROWS = pa.schema([*embedded_retries.CHAINS_SCHEMA, ("is_anomaly", pa.bool_()),
                         ("kind", pa.string()), ("detail", pa.string())])


def _chains_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """All rows of some chains: the embedded engine's chain following, on this partition."""
    rows = pa.Table.from_batches(list(batches), schema=_RETRY_ROWS)
    chains, anomalies = embedded_retries.follow_chains(rows)
    if chains.num_rows:
        yield from _with_columns(chains, is_anomaly=False).to_batches()
    if anomalies.num_rows:
        yield from _with_columns(anomalies, is_anomaly=True).to_batches()


def _with_columns(table: pa.Table, *, is_anomaly: bool) -> pa.Table:
    n = table.num_rows
    columns = {f.name: table.column(f.name) if f.name in table.column_names else pa.nulls(n, f.type)
               for f in _CHAIN_ROWS}
    columns["is_anomaly"] = pa.array([is_anomaly] * n, type=pa.bool_())
    return pa.table(columns, schema=_CHAIN_ROWS)


# The retry-path rows as Spark hands them over (every column nullable).
_RETRY_ROWS = pa.schema([(c, MESSAGE_SCHEMA.field(c).type) for c in embedded_retries._COLUMNS])


def _retries(spark: SparkSession, stores: list[StoreRef], at_ms: int, levels: dict[int, int],
             keep_going: bool, messages_to: Path | None) -> AnalysisResult:
    problems = source.Problems(spark)
    rows = source.messages(spark, stores, embedded_retries._COLUMNS, embedded_retries._on_retry_path, problems)
    # Split by chain (store, group, ORIGIN_MESSAGE_ID or UNIQ_KEY, as follow_chains keys it),
    # so each task follows whole chains as the embedded engine does; the group summaries
    # come from small aggregates (counts, and a histogram of the spans for exact medians).
    topic = F.col("topic")
    retry_len, dlq_len = len(RETRY_GROUP_TOPIC_PREFIX), len(DLQ_GROUP_TOPIC_PREFIX)
    group = (F.when(topic == RMQ_SYS_SCHEDULE_TOPIC, F.substring("real_topic", retry_len + 1, 1 << 20))
             .when(topic.startswith(DLQ_GROUP_TOPIC_PREFIX), F.substring("topic", dlq_len + 1, 1 << 20))
             .otherwise(F.substring("topic", retry_len + 1, 1 << 20)))
    followed = (rows.repartition("store", group, F.coalesce("origin_message_id", "uniq_key"))
                .mapInArrow(_chains_partition, source.spark_schema(_CHAIN_ROWS))
                .cache())
    chains = followed.where(~F.col("is_anomaly"))
    gkeys = ["store", "group"]
    counts = chains.groupBy(*gkeys).agg(
        F.count(F.lit(1)).alias("messages"), _count_if(F.col("in_dlq")).alias("dlq"),
        _count_if(F.col("pending")).alias("pending"))
    spans = None
    for name, end in (("to_last_attempt", "last_attempt_ms"), ("to_dlq", "dlq_ms")):
        span = chains.select(*gkeys, F.lit(name).alias("kind"), (F.col(end) - F.col("first_failure_ms")).alias("span"))
        span = span.where(F.col("span").isNotNull())
        spans = span if spans is None else spans.unionByName(span)
    spans = spans.groupBy(*gkeys, "kind", "span").agg(F.count(F.lit(1)).alias("chains"))
    tables = {
        "groups": embedded_retries.groups_table(
            _arrow(counts, embedded_retries.COUNTS_SCHEMA, gkeys),
            _arrow(spans, embedded_retries.SPANS_SCHEMA, [*gkeys, "kind", "span"])),
        "attempts": _arrow(chains.groupBy(*gkeys, "attempts").agg(F.count(F.lit(1)).alias("chains")),
                           embedded_retries.ATTEMPTS_SCHEMA, [*gkeys, "attempts"]),
        "anomalies": _arrow(followed.where(F.col("is_anomaly")), embedded_retries.ANOMALIES_SCHEMA,
                            ["store", "group", "chain", "kind", "detail"]),
    }
    messages = _messages_out(chains, embedded_retries.MESSAGES_SCHEMA, ["store", "group", "chain"], messages_to)
    followed.unpersist()
    skipped = problems.resolve(stores, keep_going)
    return AnalysisResult("retries", tables, messages, skipped)
