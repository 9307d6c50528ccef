"""Rows split by a hash of their key into Arrow IPC blocks: moved between Spark tasks, or
spilled to disk by the embedded engine when they do not fit its memory (spill.py).

A Spark task with rows to send on splits them by a 64-bit hash of their key
(keycodes.key_hash) over ``partitions`` buckets and hands on each bucket as one Arrow IPC
stream: the shuffle moves a few large values per task (a block per bucket) instead of a
Spark row per row, and the rows stay in Arrow from the task that decodes them to the task
that matches them (no conversion to Spark rows and back). Bucket ``b`` of every sender goes to partition ``b`` (``partition_of``), so
all the rows of a key meet in one task, which holds 1/``partitions`` of them.

The hash only places rows; the tasks match rows on their full keys (strings compared), so two
keys that share a hash merely share a task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

def partition_of(bucket: int) -> int:
    """The partitioner of the blocks' shuffle: bucket b goes to partition b."""
    return bucket


def split(table: pa.Table, bucket: np.ndarray, partitions: int) -> Iterator[tuple[int, bytes]]:
    """(bucket, block) for each non-empty bucket of ``table``'s rows; a row of bucket -1 is
    left out."""
    bucket = np.asarray(bucket, dtype=np.int64)
    keep = bucket >= 0
    if not keep.all():
        table = table.filter(pa.array(keep))
        bucket = bucket[keep]
    if not len(bucket):
        return
    order = np.argsort(bucket, kind="stable")
    counts = np.bincount(bucket, minlength=partitions)
    ordered = table.take(pa.array(order))
    start = 0
    for b in np.flatnonzero(counts):
        n = int(counts[b])
        yield int(b), block(ordered.slice(start, n))
        start += n


def block(table: pa.Table) -> bytes:
    """``table`` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def table(blocks: Iterable[bytes], schema: pa.Schema) -> pa.Table:
    """The rows of ``blocks`` (each of ``schema``) as one table."""
    parts = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blocks]
    return pa.concat_tables(parts) if parts else schema.empty_table()
