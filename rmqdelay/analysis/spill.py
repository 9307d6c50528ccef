"""The embedded engine's memory: rows held for a join by key, within a budget, and where the
per-message table goes.

Lateness meets each schedule record with its delivered copies, retries each chain with all its
records: joins by key, whose state grows with the store. ``KeyedRows`` holds the rows in memory
while they fit the budget (the common case: one partition, as if nothing were split); past it,
it splits them by a hash of their key over as many partitions as the projected total needs
(the same split the Spark engine shuffles by: blocks.py) and appends each partition to a file
in a temporary directory, then hands the partitions back one at a time. Every key meets in one
partition, so each is matched on its own and only small partial results (histograms, counts)
are kept and folded, exactly: nothing is approximated.

The budget: ``RMQDELAY_ANALYZE_MEMORY`` (bytes, or with K, M, G), 256 MiB by default, for the
rows held and the work of matching them: each analysis holds the budget over what matching
takes per byte of rows (lateness 4, retries 8), and a partition is half of that. The process
takes besides the libraries and one scan batch (docs/scale.md has the measured figures).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqdelay.errors import UsageError

from .arrowfiles import ParquetParts, arrow_file
from .common import sort_table
from .names import public_table

MEMORY_ENV = "RMQDELAY_ANALYZE_MEMORY"
DEFAULT_MEMORY = 256 << 20
# Files open at once while spilling (one a partition), well within the usual limit of 1024
# descriptors; a store that needs more holds more than the budget a partition.
MAX_PARTITIONS = 512
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def memory_budget(memory: int | None = None) -> int:
    """``memory`` when given, else RMQDELAY_ANALYZE_MEMORY, else the default (bytes)."""
    if memory is not None:
        return max(1, memory)
    text = os.environ.get(MEMORY_ENV, "").strip()
    if not text:
        return DEFAULT_MEMORY
    found = re.fullmatch(r"(\d+)\s*([KMG]?)i?B?", text, re.IGNORECASE)
    if not found or int(found.group(1)) == 0:
        raise UsageError(f"{MEMORY_ENV}={text!r}: a size in bytes such as 268435456, 256M or 1G")
    return int(found.group(1)) * _UNITS[found.group(2).upper()]


class KeyedRows:
    """Rows of ``schema`` added as they are read, handed back partition by partition
    (``partitions()``): one partition in memory while they fit ``budget`` bytes; past it,
    split by ``bucket_of(rows, partitions)`` (a partition per row, -1 to leave it out) into
    files, as many as ``add``'s projection of the total over the budget asks. A context
    manager: the files go when it closes."""

    def __init__(self, schema: pa.Schema, bucket_of: Callable[[pa.Table, int], np.ndarray], budget: int) -> None:
        self.schema = schema
        self._bucket_of = bucket_of
        self._budget = budget
        self._held: list[pa.Table] = []
        self._held_bytes = 0
        self._dir: Path | None = None
        self._writers: list[pa.ipc.RecordBatchStreamWriter] = []

    def __enter__(self) -> KeyedRows:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def add(self, rows: pa.Table, done: float) -> None:
        """Rows read when ``done`` (0..1] of the input has been read: the projection of the
        total, if they overflow the budget."""
        if not rows.num_rows:
            return
        if not rows.schema.equals(self.schema):
            rows = rows.cast(self.schema)
        if not self._writers:
            self._held.append(rows)
            self._held_bytes += rows.nbytes
            if self._held_bytes <= self._budget:
                return
            # Half the budget a partition, so that the projection may be short by half.
            projected = self._held_bytes / max(done, 1e-9)
            self._spill_to(min(MAX_PARTITIONS, max(2, math.ceil(projected / (self._budget / 2)))))
            return
        self._write(rows)

    def _spill_to(self, partitions: int) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="rmqdelay-analyze-"))
        for i in range(partitions):
            sink = arrow_file(self._dir / f"{i:05d}.arrows", "wb")
            self._writers.append(pa.ipc.new_stream(sink, self.schema))
        held, self._held, self._held_bytes = self._held, [], 0
        for rows in held:
            self._write(rows)

    def _write(self, rows: pa.Table) -> None:
        bucket = np.asarray(self._bucket_of(rows, len(self._writers)), dtype=np.int64)
        order = np.argsort(bucket, kind="stable")
        counts = np.bincount(bucket[bucket >= 0], minlength=len(self._writers))
        ordered = rows.take(pa.array(order[bucket[order] >= 0]))
        start = 0
        for b in np.flatnonzero(counts):
            self._writers[b].write_table(ordered.slice(start, int(counts[b])))
            start += int(counts[b])

    def partitions(self) -> Iterator[pa.Table]:
        """Each partition's rows, one at a time (every row of a key in one of them)."""
        if not self._writers:
            held, self._held, self._held_bytes = self._held, [], 0
            yield pa.Table.from_batches([b for t in held for b in t.to_batches()], schema=self.schema)
            return
        for writer in self._writers:
            writer.close()
        for i in range(len(self._writers)):
            path = self._dir / f"{i:05d}.arrows"
            with arrow_file(path, "rb") as source:
                table = pa.ipc.open_stream(source).read_all()
            path.unlink()
            yield table

    def close(self) -> None:
        if self._dir is not None:
            for writer in self._writers:
                try:
                    writer.close()
                except (OSError, pa.ArrowException):
                    pass
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._held = []


class Messages:
    """Where the per-message table goes: collected (``to`` None: ``table()`` gives it sorted by
    ``order``), written as Parquet to ``to`` part by part, each part sorted (under the public
    column names, as --output writes them), or nowhere (``wanted`` false)."""

    def __init__(self, schema: pa.Schema, order: list[str], to: Path | None = None, wanted: bool = True) -> None:
        self.schema = schema
        self.order = order
        self._to = to if wanted else None
        self._wanted = wanted
        self._parts: list[pa.Table] = []
        self._writer: ParquetParts | None = None

    def add(self, table: pa.Table) -> None:
        if not self._wanted:
            return
        if self._to is None:
            self._parts.append(table)
            return
        part = public_table(sort_table(table.cast(self.schema), self.order))
        if self._writer is None:
            self._writer = ParquetParts(self._to, part.schema)
        self._writer.write_table(part)

    def discard(self) -> None:
        """A run that failed: the file begun is removed, nothing half written is left."""
        if self._writer is not None:
            try:
                self._writer.close()
            except (OSError, pa.ArrowException):
                pass
            self._writer = None
        if self._to is not None:
            self._to.unlink(missing_ok=True)
        self._parts = []

    def table(self) -> pa.Table:
        """The collected table (sorted), or an empty one when the rows went to a file or nowhere;
        closes the file (written, with no rows, when none came)."""
        if self._to is not None:
            if self._writer is None:
                self._writer = ParquetParts(self._to, public_table(self.schema.empty_table()).schema)
            self._writer.close()
            return self.schema.empty_table()
        if not self._parts:
            return self.schema.empty_table()
        return sort_table(pa.concat_tables([p.cast(self.schema) for p in self._parts]), self.order)
