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

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.rdd import RDD
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from rmqdelay.analysis import AnalysisResult, StoreRef, blocks, check_stores, checked_request
from rmqdelay.analysis import backlog as embedded_backlog
from rmqdelay.analysis import lateness as embedded_lateness
from rmqdelay.analysis import retries as embedded_retries
from rmqdelay.analysis import timer as embedded_timer
from rmqdelay.analysis.arrowfiles import write_parquet
from rmqdelay.analysis.common import fold, sort_table
from rmqdelay.analysis.names import public_name, public_table
from rmqdelay.store import Store

from . import source
from .session import get_session

MINUTE_MS = 60_000


def analyze(kind: str, stores: list[StoreRef], at_ms: int, *, delay_levels: dict[int, int] | None = None,
            keep_going: bool = False, master: str | None = None, spark: SparkSession | None = None,
            messages_to: Path | None = None, with_messages: bool = True) -> AnalysisResult:
    """Run one analysis on Spark. ``messages_to``: write the per-message table there as Parquet
    from the executors (result.messages is then empty) instead of collecting it to the driver;
    ``with_messages`` false: compute the summary tables only (no per-message table at all)."""
    levels = checked_request(kind, stores, delay_levels)
    # Executors open the stores by path, from a working directory of their own: a path the
    # user typed relative to theirs must reach them whole.
    stores = [StoreRef(s.name, s.path.absolute()) for s in stores]
    check_stores(stores)  # a bad store fails here, in one line, not in a task on an executor
    spark = spark or get_session(master)
    job = {"backlog": _backlog, "lateness": _lateness, "retries": _retries}[kind]
    return job(spark, stores, at_ms, levels, keep_going, messages_to if with_messages else _NO_MESSAGES)


# -- shared ----------------------------------------------------------------------------------
# messages_to when no per-message table is wanted at all (the summary tables only).
_NO_MESSAGES = Path("/dev/null/no-messages")


def _arrow(df: DataFrame, schema: pa.Schema, keys: list[str]) -> pa.Table:
    table = df.select(*schema.names).toArrow()
    return sort_table(table.cast(schema), keys)


def _messages_out(df: DataFrame, schema: pa.Schema, keys: list[str], messages_to: Path | None) -> pa.Table:
    if messages_to == _NO_MESSAGES:
        return schema.empty_table()
    if messages_to is None:
        return _arrow(df, schema, keys)
    # Each task sorts and writes its own part (no global sort: a shuffle of every row for an
    # order the directory's readers can have for the asking).
    df.select(*schema.names).sortWithinPartitions(*keys).select(*_public_columns(schema)).write \
        .mode("overwrite").parquet(str(messages_to))
    return schema.empty_table()


def _public_columns(schema: pa.Schema) -> list[Column]:
    """The columns under the names the Parquet files go out with (analysis/names.py)."""
    return [F.col(name).alias(public_name(name)) for name in schema.names]


def _count_if(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0))


def _fold(df: DataFrame, keys: list[str], schema: pa.Schema) -> pa.Table:
    """common.fold on Spark: partial results summed by ``keys`` (``_ms`` columns: the
    smallest), so only the folded rows reach the driver."""
    values = [f.name for f in schema if f.name not in keys]
    folded = df.groupBy(*keys).agg(*[(F.min(v) if v.endswith("_ms") else F.sum(v)).alias(v) for v in values])
    return _arrow(folded, schema, keys)


def _timer_messages_to(messages_to: Path | None, kind: str) -> Path | None:
    if messages_to in (None, _NO_MESSAGES):
        return messages_to
    return messages_to.with_name(f"{kind}_timer_messages.parquet")


# What the tasks of lateness and retries give back besides their partial results.
_HISTOGRAM, _MESSAGES = "histogram", "messages"


# The commit log bytes whose rows one match task holds at most: a commit log file of the
# broker's default size (mappedFileSizeCommitLog, 1 GiB).
MATCH_BYTES = 1 << 30


def _partitions(spark: SparkSession, stores: list[StoreRef]) -> int:
    """How many tasks the rows are split over by key: spark.sql.shuffle.partitions where it
    is set (a local master sets it to its cores; spark-submit's --conf or the session may),
    else a task per core of the executors: Spark's default of 200 is for big clusters, and on
    a small one 200 tasks over a few stores cost minutes more than their rows. At least one
    per MATCH_BYTES of commit log, so a task that matches holds no more rows than a task that
    decodes a full file of the broker's default size, however large the stores."""
    data = sum(file.size for _, file in source.commitlog_tasks(stores))
    given = spark.conf.getAll.get("spark.sql.shuffle.partitions")
    wanted = int(given) if given is not None else spark.sparkContext.defaultParallelism
    return max(wanted, -(-data // MATCH_BYTES), 1)


def _gather(results: RDD, schema: pa.Schema, order: list[str]) -> tuple[dict[str, list[bytes]], pa.Table]:
    """The tasks' partial results (name -> blocks) on the driver, and the per-message table
    the tasks gave back, sorted by ``order`` (empty when they wrote it or made none)."""
    partials: dict[str, list[bytes]] = {}
    for name, part in results.collect():
        partials.setdefault(name, []).append(part)
    return partials, sort_table(blocks.table(partials.pop(_MESSAGES, []), schema), order)


def _messages_part(partition: int, messages: pa.Table, messages_to: Path | None, schema: pa.Schema,
                   order: list[str]) -> Iterator[tuple[str, bytes]]:
    """What a task does with its share of the per-message table: nothing (none wanted),
    give it back to the driver (``messages_to`` None), or write it as its own Parquet part of
    the directory ``messages_to``, sorted by ``order`` (each part sorted, the directory in no
    global order): under a hidden temporary name first, then renamed, so a task that runs
    again replaces its part whole and a reader never sees half of one."""
    if messages_to == _NO_MESSAGES:
        return
    if messages_to is None:
        yield _MESSAGES, blocks.block(messages)
        return
    final = messages_to / f"part-{partition:05d}.parquet"
    temporary = messages_to / f".{final.name}.{os.getpid()}-{uuid.uuid4().hex}.tmp"
    write_parquet(public_table(sort_table(messages.cast(schema), order)), temporary)
    os.replace(temporary, final)


def _messages_directory(messages_to: Path | None) -> None:
    """Before a job that writes the per-message table: ``messages_to`` an empty directory
    (what was there is replaced, as Spark's own writer's overwrite does)."""
    if messages_to in (None, _NO_MESSAGES):
        return
    if messages_to.is_dir():
        shutil.rmtree(messages_to)
    elif messages_to.exists():
        messages_to.unlink()
    messages_to.mkdir(parents=True)


def _messages_written(messages_to: Path | None) -> None:
    """After the job: the temporary files of task attempts that did not finish go, and
    ``_SUCCESS`` says the directory is whole."""
    if messages_to in (None, _NO_MESSAGES):
        return
    for leftover in messages_to.glob(".part-*.tmp"):
        leftover.unlink(missing_ok=True)
    (messages_to / "_SUCCESS").touch()


def _fold_blocks(parts: list[bytes], schema: pa.Schema, keys: list[str]) -> pa.Table:
    """Partial results (blocks of ``schema``) folded by ``keys`` (common.fold), sorted by ``keys``."""
    return sort_table(fold(blocks.table(parts, schema), keys, schema), keys)


def _no_messages(schema: pa.Schema, messages_to: Path | None) -> pa.Table:
    """An empty per-message table; written where one was asked for, so it is always there."""
    if messages_to not in (None, _NO_MESSAGES):
        write_parquet(public_table(schema.empty_table()), messages_to)
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
        "retryLag": sort_table(pa.Table.from_pylist(lag_rows, schema=embedded_backlog.RETRY_LAG_SCHEMA),
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
        "store string, path binary, source string, index int, read_ms bigint, master_offset bigint")

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
def _lateness(spark: SparkSession, stores: list[StoreRef], at_ms: int, levels: dict[int, int],
              keep_going: bool, messages_to: Path | None) -> AnalysisResult:
    problems = source.Problems(spark)
    partitions = _partitions(spark, stores)
    # Where each file is decoded, its schedule records meet their units; then the rows are
    # split by UNIQ_KEY, so all the copies of a record meet it in one task, which matches
    # them as the embedded engine does and folds its share into the histogram. Only the
    # histograms (small: a row per distinct lateness) go to the driver, which folds them and
    # takes the exact percentiles from them.
    def match(partition: int, rows: pa.Table) -> Iterator[tuple[str, bytes]]:
        messages = embedded_lateness.match_rows(rows)
        yield _HISTOGRAM, blocks.block(embedded_lateness.histogram(messages, at_ms))
        yield from _messages_part(partition, messages, messages_to, embedded_lateness.MESSAGES_SCHEMA,
                                  embedded_lateness.MESSAGES_ORDER)

    _messages_directory(messages_to)
    matched = source.keyed_rows(spark, stores, embedded_lateness._COLUMNS, None, problems,
                                lambda rows: embedded_lateness.buckets(rows, partitions), partitions,
                                embedded_lateness.ROWS_SCHEMA, match, join=embedded_lateness.records_with_units)
    partials, messages = _gather(matched, embedded_lateness.MESSAGES_SCHEMA, embedded_lateness.MESSAGES_ORDER)
    _messages_written(messages_to)
    hist = _fold_blocks(partials.get(_HISTOGRAM, []), embedded_lateness.HISTOGRAM_SCHEMA,
                        embedded_lateness.HISTOGRAM_KEYS)
    tables = {
        "levels": embedded_lateness.summaries(hist, "level", embedded_lateness.LEVELS_SCHEMA, undelivered=True),
        "topics": embedded_lateness.summaries(hist, "real_topic", embedded_lateness.TOPICS_SCHEMA, undelivered=False),
    }
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
def _retries(spark: SparkSession, stores: list[StoreRef], at_ms: int, levels: dict[int, int],
             keep_going: bool, messages_to: Path | None) -> AnalysisResult:
    problems = source.Problems(spark)
    partitions = _partitions(spark, stores)
    # Split by chain, so each task follows whole chains as the embedded engine does, and
    # gives back its share of the group figures: counts, a histogram of the spans (for exact
    # medians), the attempts per chain and the anomalies, which the driver folds.
    def follow(partition: int, rows: pa.Table) -> Iterator[tuple[str, bytes]]:
        chains, anomalies = embedded_retries.follow_chains(rows)
        for name, table in embedded_retries.partials(chains, anomalies).items():
            if table.num_rows:
                yield name, blocks.block(table)
        yield from _messages_part(partition, chains.select(embedded_retries.MESSAGES_SCHEMA.names), messages_to,
                                  embedded_retries.MESSAGES_SCHEMA, embedded_retries.MESSAGES_ORDER)

    _messages_directory(messages_to)
    followed = source.keyed_rows(spark, stores, embedded_retries._COLUMNS, embedded_retries._on_retry_path,
                                 problems, lambda rows: embedded_retries.buckets(rows, partitions), partitions,
                                 embedded_retries.ROWS_SCHEMA, follow)
    partials, messages = _gather(followed, embedded_retries.MESSAGES_SCHEMA, embedded_retries.MESSAGES_ORDER)
    _messages_written(messages_to)
    schemas = {name: schema for name, (_, schema) in embedded_retries.PARTIALS.items()}
    schemas["anomalies"] = embedded_retries.ANOMALIES_SCHEMA
    tables = embedded_retries.tables_of({name: [blocks.table(parts, schemas[name])] for name, parts in partials.items()})
    skipped = problems.resolve(stores, keep_going)
    return AnalysisResult("retries", tables, messages, skipped)
