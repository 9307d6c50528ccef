"""Rows split by a hash of their key into Arrow IPC blocks: moved between Spark tasks, or
spilled to disk by the embedded engine when they do not fit its memory (spill.py).

A Spark task with rows to send on splits them by a 64-bit hash of their key over ``partitions``
buckets and hands on each bucket as one Arrow IPC stream: the shuffle moves a few large
values per task (a block per bucket) instead of a Spark row per row, and the rows stay in
Arrow from the task that decodes them to the task that matches them (no conversion to Spark
rows and back). Bucket ``b`` of every sender goes to partition ``b`` (``partition_of``), so
all the rows of a key meet in one task, which holds 1/``partitions`` of them.

The hash only places rows; the tasks match rows on their full keys (strings compared), so two
keys that share a hash merely share a task.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
from numba import njit

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@njit(cache=True, nogil=True)
def _fnv1a64(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:
    for i in range(out.shape[0]):
        h = _FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h ^= np.uint64(data[j])
            h *= _FNV_PRIME
        # Mix the high bits down (splitmix64's finaliser): FNV's low bits alone spread poorly.
        h ^= h >> np.uint64(30)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(27)
        h *= np.uint64(0x94D049BB133111EB)
        h ^= h >> np.uint64(31)
        out[i] = h


def key_hash(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash (uint64) of each string of ``array``: the same in every process (unlike
    Python's ``hash``). A null hashes as the empty string; callers treat nulls themselves."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    if array.type == pa.large_string():
        offset_type = np.int64
    elif array.type == pa.string():
        offset_type = np.int32
    else:
        raise TypeError(f"key_hash: a string array, not {array.type}")
    out = np.empty(len(array), dtype=np.uint64)
    if len(array) == 0:
        return out
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=offset_type)[array.offset:array.offset + len(array) + 1]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    _fnv1a64(offsets.astype(np.int64), data, out)
    return out


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
