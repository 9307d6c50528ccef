"""The Spark data source over store directories: one task per commit log file.

Records never straddle commit log files, so a file is the unit of work: a ``LogFile`` of the
store's log source (its path, offset, framing and the bytes the broker serves of it; the same
in every layout's log), listed on the driver. Each task maps its file
and decodes it with the columnar scan (``rmqdelay.store.scan.scan_commitlog_file``, the same one the
embedded engine uses) into Arrow batches; Spark never sees a Python object per row. Problems
in a file travel back to the driver in an accumulator, and the driver decides: fail with the
first one (file and byte), or keep going and report what was skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.accumulators import AccumulatorParam
from pyspark.rdd import RDD
from pyspark.sql import DataFrame, SparkSession
from rmqdelay.formats.scan import MESSAGE_SCHEMA

from rmqdelay.analysis import StoreRef
from rmqdelay.analysis.lateness import UNIT_COLUMNS, file_units
from rmqdelay.errors import StoreError
from rmqdelay.store import Store
from rmqdelay.store.logfile import LogFile
from rmqdelay.store.ref import path_bytes
from rmqdelay.store.scan import (
    SCHEDULE_UNIT_SCHEMA,
    Skipped,
    commitlog_files,
    scan_commitlog_file,
    schedule_unit_ranges,
    schedule_units,
)

from rmqdelay.analysis import blocks

# (store, path, offset or None, bytes, expected) — what went wrong in one file.
Problem = tuple[str, str, "int | None", int, str]


class _ListParam(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, a: list, b: list) -> list:
        a.extend(b)
        return a


class Problems:
    """The problems the tasks met, gathered on the driver."""

    def __init__(self, spark: SparkSession) -> None:
        self._acc = spark.sparkContext.accumulator([], _ListParam())

    def add(self, problem: Problem) -> None:
        self._acc.add([problem])

    def resolve(self, stores: list[StoreRef], keep_going: bool) -> list[Skipped]:
        """Raise the first problem in store and file order, or list them as skipped.

        A re-run task reports again, so duplicates are dropped.
        """
        order = {ref.name: i for i, ref in enumerate(stores)}
        found = sorted(set(self._acc.value), key=lambda p: (order.get(p[0], len(order)), p[1], p[2] or 0))
        if found and not keep_going:
            store, path, offset, _, expected = found[0]
            raise StoreError(path, offset, expected)
        return [Skipped(store, path, offset or 0, size, expected) for store, path, offset, size, expected in found]


def _file_size(path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def commitlog_tasks(stores: list[StoreRef]) -> list[tuple[str, LogFile]]:
    """(store name, file) of every commit log file of every store, in order."""
    return [(ref.name, file) for ref in stores for file in commitlog_files(ref.path)]


_TASK_COLUMNS = "store string, path binary, start bigint, size bigint, framing string, served bigint"


def _task_row(store: str, file: LogFile) -> tuple:
    return store, path_bytes(file.path), file.start, file.size, file.framing, file.served


def _task_files(batch: pa.RecordBatch) -> Iterator[tuple[str, LogFile]]:
    for store, path, start, size, framing, served in zip(*(batch.column(i).to_pylist() for i in range(6))):
        yield store, LogFile(Path(os.fsdecode(path)), start, size, framing, served)


def messages(spark: SparkSession, stores: list[StoreRef], columns: list[str],
             keep: Callable[[pa.RecordBatch], pa.Array] | None, problems: Problems) -> DataFrame:
    """The commit log rows ``keep`` selects (all when None), only ``columns``, of every store:
    one partition, and one task, per commit log file."""
    tasks = [_task_row(store, file) for store, file in commitlog_tasks(stores)]
    schema = pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])
    files = spark.sparkContext.parallelize(tasks, max(len(tasks), 1)).toDF(_TASK_COLUMNS)

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for store, file in _task_files(batch):
                path = str(file.path)
                try:
                    for records in scan_commitlog_file(file, store, columns=columns):
                        if keep is not None:
                            records = records.filter(keep(records))
                        if records.num_rows:
                            yield records
                except StoreError as exc:
                    # The rows before the bad record are kept (keep-going semantics); without
                    # keep-going the driver fails on the problem after the job.
                    size = _file_size(exc.path)
                    problems.add((store, path, exc.offset, size - (exc.offset or 0), exc.expected))

    return files.mapInArrow(decode, spark_schema(schema))


def keyed_rows(spark: SparkSession, stores: list[StoreRef], columns: list[str],
               keep: Callable[[pa.RecordBatch], pa.Array] | None, problems: Problems,
               bucket_of: Callable[[pa.Table], np.ndarray], partitions: int, schema: pa.Schema,
               match: Callable[[int, pa.Table], Iterator], *,
               join: Callable[[pa.Table, pa.Table], pa.Table] | None = None) -> RDD:
    """What ``match(partition, rows)`` gives for each of ``partitions`` partitions of the rows
    of every commit log file that ``keep`` selects (all when None; only ``columns``, and only
    they are decoded), split by key: ``bucket_of`` gives each row its partition (-1 to leave
    it out), so all the rows of a key meet in one.

    A file is decoded by a task of its own, which splits its rows into Arrow blocks, one a
    partition, for the shuffle to route (``blocks.partition_of``). With one partition every
    row meets in it anyway: the files are decoded in the task that matches them, and nothing
    is shuffled. ``schema``: the rows' schema when a partition has none.

    With ``join``, the rows of a file first go with the schedule units that point into it
    to ``join(rows, units)``: the units of each store are ranged once on the driver and read
    where the file is decoded, so a schedule record meets its unit there, and a task holds one
    file's rows and units.
    """
    work = _file_work(stores, join is not None)

    def decoded(store: str, file: LogFile, where: tuple | None, ranges: dict | None) -> pa.Table:
        parts = []
        path = str(file.path)
        try:
            for records in scan_commitlog_file(file, store, columns=columns):
                parts.append(records if keep is None else records.filter(keep(records)))
        except StoreError as exc:
            # The rows before the bad record are kept (keep-going semantics); without
            # keep-going the driver fails on the problem after the job.
            size = _file_size(exc.path)
            problems.add((store, path, exc.offset, size - (exc.offset or 0), exc.expected))
        rows = pa.Table.from_batches(parts, schema=pa.schema([MESSAGE_SCHEMA.field(c) for c in columns]))
        if join is None:
            return rows
        store_path, start, end = where
        with Store(store_path) as opened:
            units = file_units(opened, store, ranges, start, end)
        return join(rows, units.cast(pa.schema([SCHEDULE_UNIT_SCHEMA.field(c) for c in UNIT_COLUMNS])))

    if partitions == 1:
        def one(items: Iterator[tuple]) -> Iterator:
            tables = [decoded(*item) for item in items]
            yield from match(0, pa.concat_tables(tables) if tables else schema.empty_table())

        return spark.sparkContext.parallelize(work, 1).mapPartitions(one)

    def split(items: Iterator[tuple]) -> Iterator[tuple[int, bytes]]:
        for item in items:
            rows = decoded(*item)
            if rows.num_rows:
                yield from blocks.split(rows, bucket_of(rows), partitions)

    def matched(partition: int, keyed: Iterator[tuple[int, bytes]]) -> Iterator:
        yield from match(partition, blocks.table((block for _, block in keyed), schema))

    return (spark.sparkContext.parallelize(work, max(len(work), 1)).mapPartitions(split)
            .partitionBy(partitions, blocks.partition_of).mapPartitionsWithIndex(matched))


def _file_work(stores: list[StoreRef], with_units: bool) -> list[tuple]:
    """(store, file (a LogFile), (store path, the file's first offset, the next file's), the
    schedule unit ranges that may point into it) of every commit log file; the last two
    None unless ``with_units``."""
    tasks = commitlog_tasks(stores)
    if not with_units:
        return [(store, file, None, None) for store, file in tasks]
    work = []
    paths = {ref.name: str(ref.path) for ref in stores}
    by_store: dict[str, list[LogFile]] = {}
    for store, file in tasks:
        by_store.setdefault(store, []).append(file)
    for store, files in by_store.items():
        starts = [file.start for file in files]
        with Store(paths[store]) as opened:
            ranges = schedule_unit_ranges(opened, starts)
        ends = [*starts[1:], None]
        work += [(store, file, (paths[store], start, end), ranges[i])
                 for i, (file, start, end) in enumerate(zip(files, starts, ends))]
    return work


def schedule_unit_rows(spark: SparkSession, stores: list[StoreRef]) -> DataFrame:
    """Every unit of SCHEDULE_TOPIC_XXXX of every store: one task per store."""
    names = [(ref.name, path_bytes(ref.path)) for ref in stores]
    frame = spark.sparkContext.parallelize(names, max(len(names), 1)).toDF("store string, path binary")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for name, path in zip(batch.column("store").to_pylist(), batch.column("path").to_pylist()):
                with Store(os.fsdecode(path)) as store:
                    yield from schedule_units(store, name).to_batches()

    return frame.mapInArrow(read, spark_schema(SCHEDULE_UNIT_SCHEMA))


def spark_schema(schema: pa.Schema) -> str:
    """A DDL string for an Arrow schema of strings and integers."""
    names = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.bool_(): "boolean"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)
