"""What the analyses share: reading narrow commit log columns from many stores, nearest-rank
percentiles, sorting result tables."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.scan import MESSAGE_SCHEMA
from rmqdelay.store.scan import Skipped, commitlog_files, scan_commitlog_file

from . import StoreRef

# p -> (numerator, denominator): ceil(p*n) computed exactly, never through a float.
PERCENTILES = {"p50": (1, 2), "p90": (9, 10), "p99": (99, 100), "p999": (999, 1000)}


def read_messages(stores: list[StoreRef], columns: list[str],
                  keep: Callable[[pa.RecordBatch], pa.Array], *, keep_going: bool,
                  skipped: list[Skipped]) -> pa.Table:
    """The rows ``keep`` selects, only ``columns``, of every commit log file of every store.

    Batches stream through: only the selected narrow rows are held, never a whole file.
    """
    schema = pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])
    parts = []
    for ref in stores:
        for path in commitlog_files(ref.path):
            for batch in scan_commitlog_file(path, ref.name, keep_going=keep_going, skipped=skipped):
                mask = keep(batch)
                selected = batch.filter(mask).select(columns)
                if selected.num_rows:
                    parts.append(selected)
    return pa.Table.from_batches(parts, schema=schema)


def starts_with(array: pa.Array, prefix: str) -> pa.Array:
    return pc.fill_null(pc.starts_with(array, prefix), False)


def nearest_rank_counted(values: np.ndarray, counts: np.ndarray, num: int, den: int) -> int | None:
    """The nearest-rank percentile ceil(num/den · n) (exact, in integers) of ascending
    ``values`` each seen ``counts`` times (n in all); None when there are none."""
    n = int(counts.sum())
    if n == 0:
        return None
    return int(values[np.searchsorted(np.cumsum(counts), -(-num * n // den))])


def sort_table(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def groups(keys: list[tuple], values: np.ndarray | None = None) -> dict[tuple, np.ndarray]:
    """Row indices (or values) per key tuple, in row order."""
    index: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        index.setdefault(key, []).append(i)
    if values is None:
        return {k: np.asarray(v, dtype=np.int64) for k, v in index.items()}
    return {k: values[np.asarray(v, dtype=np.int64)] for k, v in index.items()}
