"""The Spark data source over store directories: one task per commit log file.

Records never straddle commit log files, so a file is the unit of work. Each task maps its file
and decodes it with the columnar scan (``rmqdelay.store.scan.scan_commitlog_file``, the same one the
embedded engine uses) into Arrow batches; Spark never sees a Python object per row. Problems
in a file travel back to the driver in an accumulator, and the driver decides: fail with the
first one (file and byte), or keep going and report what was skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.accumulators import AccumulatorParam
from pyspark.sql import DataFrame, SparkSession
from rmqdelay.formats.scan import MESSAGE_SCHEMA

from rmqdelay.analysis import StoreRef
from rmqdelay.analysis.lateness import UNIT_COLUMNS
from rmqdelay.errors import StoreError
from rmqdelay.store import Store
from rmqdelay.store.scan import (
    SCHEDULE_UNIT_SCHEMA,
    Skipped,
    commitlog_files,
    scan_commitlog_file,
    schedule_units,
)

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


def commitlog_tasks(stores: list[StoreRef]) -> list[tuple[str, str]]:
    """(store name, file path) of every commit log file of every store, in order."""
    return [(ref.name, str(path)) for ref in stores for path in commitlog_files(ref.path)]


def messages(spark: SparkSession, stores: list[StoreRef], columns: list[str],
             keep: Callable[[pa.RecordBatch], pa.Array] | None, problems: Problems) -> DataFrame:
    """The commit log rows ``keep`` selects (all when None), only ``columns``, of every store:
    one partition, and one task, per commit log file."""
    tasks = commitlog_tasks(stores)
    schema = pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])
    files = spark.sparkContext.parallelize(tasks, max(len(tasks), 1)).toDF("store string, path string")

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for store, path in zip(batch.column("store").to_pylist(), batch.column("path").to_pylist()):
                try:
                    for records in scan_commitlog_file(path, store):
                        if keep is not None:
                            records = records.filter(keep(records))
                        if records.num_rows:
                            yield records.select(columns)
                except StoreError as exc:
                    # The rows before the bad record are kept (keep-going semantics); without
                    # keep-going the driver fails on the problem after the job.
                    size = _file_size(exc.path)
                    problems.add((store, path, exc.offset, size - (exc.offset or 0), exc.expected))

    return files.mapInArrow(decode, spark_schema(schema))


# What the tasks of schedule_records_and_copies are handed: a row per commit log file (path
# set) and a row per schedule unit (path null), both keyed by (store, file_start).
_WORK_SCHEMA = pa.schema([
    ("store", pa.string()), ("file_start", pa.int64()), ("path", pa.string()),
    ("commitlog_offset", pa.int64()), ("level", pa.int32()), ("deliver_ms", pa.int64()),
])


def schedule_records_and_copies(spark: SparkSession, stores: list[StoreRef], columns: list[str],
                                keep: Callable[[pa.RecordBatch], pa.Array],
                                join: Callable[[pa.Table, pa.Table], pa.Table],
                                schema: pa.Schema, problems: Problems) -> DataFrame:
    """Each commit log file's rows that ``keep`` selects (only ``columns``), passed with the
    schedule units that point into that file to ``join(rows, units)``, whose result (of
    ``schema``) are the rows of the frame.

    The units of each store are read once and sent to the task of the file each points into,
    so a schedule record meets its unit where its file is decoded: the decoded rows are not
    shuffled for that join, and a task holds one file's rows and units at a time.
    """
    tasks = commitlog_tasks(stores)
    starts: dict[str, list[int]] = {}
    for store, path in tasks:
        starts.setdefault(store, []).append(int(Path(path).name))
    work_ddl = spark_schema(_WORK_SCHEMA)
    files = spark.createDataFrame([(store, int(Path(path).name), path, None, None, None) for store, path in tasks],
                                  work_ddl)

    def read_units(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for name, path in zip(batch.column("store").to_pylist(), batch.column("path").to_pylist()):
                with Store(path) as store:
                    units = schedule_units(store, name).combine_chunks()
                file_starts = np.asarray(starts.get(name, []), dtype=np.int64)
                at = np.searchsorted(file_starts, units.column("commitlog_offset").to_numpy(), side="right") - 1
                inside = np.flatnonzero(at >= 0)  # a unit before the first file has no record to meet
                units = units.take(pa.array(inside))
                yield pa.RecordBatch.from_arrays(
                    [units.column("store").combine_chunks(), pa.array(file_starts[at[inside]], type=pa.int64()),
                     pa.nulls(units.num_rows, pa.string()), *(units.column(c).combine_chunks() for c in UNIT_COLUMNS[1:])],
                    schema=_WORK_SCHEMA)

    names = [(ref.name, str(ref.path)) for ref in stores]
    units = (spark.sparkContext.parallelize(names, max(len(names), 1)).toDF("store string, path string")
             .mapInArrow(read_units, work_ddl))
    unit_schema = pa.schema([_WORK_SCHEMA.field(c) for c in UNIT_COLUMNS])

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        work = pa.Table.from_batches(list(batches), schema=_WORK_SCHEMA)
        is_file = pc.is_valid(work.column("path"))
        unit_rows = work.filter(pc.invert(is_file))
        file_rows = work.filter(is_file)
        for store, start, path in zip(*(file_rows.column(c).to_pylist() for c in ("store", "file_start", "path"))):
            units = unit_rows.filter(pc.and_(pc.equal(unit_rows.column("store"), store),
                                             pc.equal(unit_rows.column("file_start"), start))).select(UNIT_COLUMNS)
            parts = []
            try:
                for records in scan_commitlog_file(path, store):
                    parts.append(records.filter(keep(records)).select(columns))
            except StoreError as exc:
                size = _file_size(exc.path)
                problems.add((store, path, exc.offset, size - (exc.offset or 0), exc.expected))
            rows = pa.Table.from_batches(parts, schema=pa.schema([MESSAGE_SCHEMA.field(c) for c in columns]))
            out = join(rows, units.cast(unit_schema))
            if out.num_rows:
                yield from out.to_batches()

    work = files.unionByName(units)
    # One partition per file: the hash spreads the files over as many tasks as there are files.
    return work.repartition(max(len(tasks), 1), "store", "file_start").mapInArrow(decode, spark_schema(schema))


def schedule_unit_rows(spark: SparkSession, stores: list[StoreRef]) -> DataFrame:
    """Every unit of SCHEDULE_TOPIC_XXXX of every store: one task per store."""
    names = [(ref.name, str(ref.path)) for ref in stores]
    frame = spark.sparkContext.parallelize(names, max(len(names), 1)).toDF("store string, path string")

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for name, path in zip(batch.column("store").to_pylist(), batch.column("path").to_pylist()):
                with Store(path) as store:
                    yield from schedule_units(store, name).to_batches()

    return frame.mapInArrow(read, spark_schema(SCHEDULE_UNIT_SCHEMA))


def spark_schema(schema: pa.Schema) -> str:
    """A DDL string for an Arrow schema of strings and integers."""
    names = {pa.string(): "string", pa.int32(): "int", pa.int64(): "bigint", pa.bool_(): "boolean"}
    return ", ".join(f"`{f.name}` {names[f.type]}" for f in schema)
