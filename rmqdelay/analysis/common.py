"""What the analyses share: reading narrow commit log columns from many stores, nearest-rank
percentiles, folding partial results, sorting result tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.scan import MESSAGE_SCHEMA
from rmqdelay.store.logfile import LogFile
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
    parts = [batch for ref in stores for file in commitlog_files(ref.path)
             for batch, _ in scan_selected(ref, file, columns, keep, keep_going, skipped)]
    return pa.Table.from_batches(parts, schema=schema)


def commitlog_walk(stores: list[StoreRef]) -> Iterator[tuple[StoreRef, LogFile, int, int]]:
    """(store, commit log file, the bytes of the files before it, the bytes of all) of every
    commit log file of ``stores``, in order: how far a scan is, for a projection of its rows."""
    files = [(ref, file) for ref in stores for file in commitlog_files(ref.path)]
    total = max(1, sum(file.size for _, file in files))
    before = 0
    for ref, file in files:
        yield ref, file, before, total
        before += file.size


def scan_stores(stores: list[StoreRef], columns: list[str], keep: Callable[[pa.RecordBatch], pa.Array],
                keep_going: bool, skipped: list[Skipped]) -> Iterator[tuple[pa.Table, float]]:
    """(the rows ``keep`` selects of a batch, only ``columns``; how much of the input is read,
    0..1) of every commit log file of ``stores``."""
    for ref, file, before, total in commitlog_walk(stores):
        for batch, read in scan_selected(ref, file, columns, keep, keep_going, skipped):
            yield pa.Table.from_batches([batch]), (before + read) / total


def scan_selected(ref: StoreRef, file: LogFile, columns: list[str], keep: Callable[[pa.RecordBatch], pa.Array] | None,
                  keep_going: bool, skipped: list[Skipped]) -> Iterator[tuple[pa.RecordBatch, int]]:
    """(the rows ``keep`` selects of a batch (all when None), only ``columns``, where in the
    file the batch ends) of one commit log file of ``ref``; batches with no row selected are
    left out. ``keep`` reads only ``columns``, and only they are decoded."""
    start = file.start
    read = list(dict.fromkeys([*columns, "commitlog_offset", "store_size"]))
    for batch in scan_commitlog_file(file, ref.name, keep_going=keep_going, skipped=skipped, columns=read):
        selected = (batch if keep is None else batch.filter(keep(batch))).select(columns)
        if selected.num_rows:
            offsets = batch.column("commitlog_offset")
            yield selected, offsets[-1].as_py() + batch.column("store_size")[-1].as_py() - start


def fold(table: pa.Table, keys: list[str], schema: pa.Schema) -> pa.Table:
    """Partial results summed by ``keys`` (columns ending in ``_ms``: the smallest), cast to
    ``schema``. Folding folded tables again gives the same table, so parts fold in any grouping."""
    values = [f.name for f in schema if f.name not in keys]
    aggs = [(v, "min" if v.endswith("_ms") else "sum") for v in values]
    out = table.group_by(keys).aggregate(aggs)
    names = {f"{v}_{how}": v for v, how in aggs}
    return out.rename_columns([names.get(c, c) for c in out.column_names]).select(schema.names).cast(schema)


def starts_with(array: pa.Array, prefix: str) -> pa.Array:
    return pc.fill_null(pc.starts_with(array, prefix), False)


def reduce_by(ufunc: np.ufunc, key: np.ndarray, values: np.ndarray, n: int, empty: int) -> np.ndarray:
    """``ufunc`` (np.maximum, np.minimum) of ``values`` per key (0..n-1); ``empty`` for a key
    with none."""
    out = np.full(n, np.iinfo(np.int64).min if ufunc is np.maximum else np.iinfo(np.int64).max, dtype=np.int64)
    ufunc.at(out, key, values)
    return np.where(np.bincount(key, minlength=n) > 0, out, empty)


def nearest_rank_counted(values: np.ndarray, counts: np.ndarray, num: int, den: int) -> int | None:
    """The nearest-rank percentile ceil(num/den · n) (exact, in integers) of ascending
    ``values`` each seen ``counts`` times (n in all); None when there are none."""
    n = int(counts.sum())
    if n == 0:
        return None
    return int(values[np.searchsorted(np.cumsum(counts), -(-num * n // den))])


def sort_table(table: pa.Table, keys: list[str]) -> pa.Table:
    return table.sort_by([(k, "ascending") for k in keys])


def row_codes(table: pa.Table, names: list[str], *, dense: bool = True) -> tuple[np.ndarray, int]:
    """A code per row of ``table`` for its tuple of values of the columns ``names`` (equal
    tuples, equal codes; a null is a value like any other), and a bound on the codes: each
    column's values dictionary-encoded and the codes combined positionally. ``dense``:
    numbered 0..n-1, and the bound is n, how many tuples there are."""
    code = np.zeros(table.num_rows, dtype=np.int64)
    span = 1
    for name in names:
        encoded = pc.dictionary_encode(table.column(name).combine_chunks())
        values = len(encoded.dictionary) + 1  # and the null
        indices = pc.fill_null(encoded.indices, values - 1).to_numpy(zero_copy_only=False)
        if span > (1 << 62) // values:
            found, code = np.unique(code, return_inverse=True)  # dense again, to stay in 64 bits
            span = len(found)
        code = code.reshape(-1) * values + indices
        span *= values
    if dense:
        found, code = np.unique(code, return_inverse=True)
        return code.reshape(-1), len(found)
    return code, span


def groups(table: pa.Table, names: list[str]) -> dict[tuple, np.ndarray]:
    """Row indices (ascending) of ``table`` per distinct tuple of its columns ``names`` (a
    null is a value like any other), found on integer codes, not Python objects."""
    if table.num_rows == 0:
        return {}
    code, _ = row_codes(table, names)
    order = np.argsort(code, kind="stable")
    ordered = code[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    keys = table.select(names).take(pa.array(order[starts])).to_pylist()
    return {tuple(key[name] for name in names): rows
            for key, rows in zip(keys, np.split(order, starts[1:]))}
