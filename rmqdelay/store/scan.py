"""Column readers of a store for the analyses: commit log files as Arrow batches, schedule
units, delay offsets and consumer offsets.

Both analysis engines read through here (Spark calls ``scan_commitlog_file`` once per commit
log file on its executors), so they see the same rows. The files come from the store's log
source (``commitlog_files``: ``LogFile``s, each saying how its records are framed and how much
of it the broker serves), so a scan reads every layout's log the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import BLANK_MAGIC_CODE, RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.scan import DEFAULT_BATCH_ROWS, MESSAGE_SCHEMA, decode_records
from rmqdelay.store.commitlog import data_after_end
from rmqdelay.store.consumers import consumer_offsets  # noqa: F401 (the one reader, re-exported)
from rmqdelay.store.directory import Store
from rmqdelay.store.fileio import map_for_read, release_pages
from rmqdelay.store.logfile import PLAIN, LogFile

__all__ = [
    "MESSAGE_SCHEMA", "SCHEDULE_UNIT_SCHEMA", "Skipped", "LogFile", "scan_commitlog_file", "commitlog_files",
    "UNIT_CHUNK", "schedule_units", "schedule_unit_chunks", "schedule_unit_arrays", "schedule_unit_ranges", "delay_offsets", "consumer_offsets"
]

SCHEDULE_UNIT_SCHEMA = pa.schema([
    pa.field("store", pa.string(), nullable=False),
    pa.field("level", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("commitlog_offset", pa.int64(), nullable=False),
    pa.field("size", pa.int32(), nullable=False),
    pa.field("deliver_ms", pa.int64(), nullable=False),
])

# Units a chunk of schedule_unit_chunks holds for a reader that wants its memory to stay
# small whatever the queue's length: as many as a scan batch has records (DEFAULT_BATCH_ROWS).
UNIT_CHUNK = DEFAULT_BATCH_ROWS

# No real unit read yet (below any offset: a pre-blank unit at the head takes it).
_NONE_YET = np.iinfo(np.int64).min

# ConsumeQueue.fillPreBlank units stand for nothing.
_PRE_BLANK_SIZE = 0x7FFFFFFF


@dataclass
class Skipped:
    """What keep-going left out: the rest of one commit log file from a bad record on."""

    store: str
    file: str  # path of the file
    offset: int  # byte in that file where the bad record starts
    bytes: int  # end of that file - offset
    reason: str


def commitlog_files(store_path: Path | str) -> list[LogFile]:
    """The files of a store's log in offset order (sizes checked to be contiguous), as its
    log source lists them."""
    with Store(store_path) as store:
        return list(store.commitlog.files)


def log_file(file: LogFile | Path | str) -> LogFile:
    """``file`` as a LogFile: a path alone is a plain commit log file named by its offset."""
    if isinstance(file, LogFile):
        return file
    path = Path(file)
    return LogFile(path, file_start(path), _size_or_zero(path), PLAIN)


def scan_commitlog_file(file: LogFile | Path | str, store_name: str, *, keep_going: bool = False,
                        skipped: list[Skipped] | None = None,
                        batch_rows: int = DEFAULT_BATCH_ROWS, columns: list[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Every message record of one file of a store's log as ``MESSAGE_SCHEMA`` batches of at
    most ``batch_rows`` rows; only ``columns`` of it, in that order, when given (what no
    column needs is not decoded). ``file``: a LogFile of ``commitlog_files`` (its framing and
    the bytes the broker serves are followed), or the path of a plain commit log file.

    The file is mapped, never read whole into Python objects. A bad record raises
    ``StoreError(path, offset, expected)`` after the rows before it were yielded; with
    ``keep_going`` the rest of the file is skipped instead and a ``Skipped`` is appended
    to ``skipped``.
    """
    lf = log_file(file)
    path = lf.path
    try:
        mapped = map_for_read(path)
    except StoreError as exc:
        if keep_going:
            if skipped is not None:
                skipped.append(Skipped(store_name, str(path), 0, _size_or_zero(path), exc.expected))
            return
        raise
    size = len(mapped)
    limit = min(size, lf.limit)
    if limit == 0:
        return
    try:
        end = 0  # where the records read so far end, in this file
        read = None if columns is None else list(dict.fromkeys([*columns, "commitlog_offset", "store_size"]))
        for batch in decode_records(mapped, store=store_name, file=path.name, limit=limit, batch_rows=batch_rows,
                                    columns=read, header=lf.header):
            if batch.num_rows:
                end = batch.column("commitlog_offset")[-1].as_py() + batch.column("store_size")[-1].as_py() \
                    - lf.start
            yield batch if columns is None else batch.select(columns)
            if batch.num_rows:
                # The caller is done with the batch: the pages behind it leave this process's
                # memory, so a scan holds a batch's worth of the file, not all of it.
                release_pages(mapped, end)
        # The scan stopped at a BLANK, at the end of the file, or at a zero record head; at
        # zeros, nothing may follow (scans that stop early must say so). A file the broker
        # serves only part of ends where it says.
        after = data_after_end(mapped, end, *_next_file_head(path, size)) if limit == size and \
            end + 8 <= size and not any(mapped[end:end + 8]) else None
        if after and not any(mapped[end:end + 8]):  # (a head there now: a writer appends)
            raise FormatError(end, after)
        if not lf.header and limit == size and end + 8 <= size and any(mapped[end:end + 8]) and \
                int.from_bytes(mapped[end + 4:end + 8], "big", signed=True) != BLANK_MAGIC_CODE and \
                any(_next_file_head(path, size)[0]):
            # Stopped at a record cut short (formats.commitlog.torn_tail): the end of the
            # data only in the last file; with the log going on in the next, damage.
            raise FormatError(end, f"a whole record (the log goes on in {_next_file_head(path, size)[1]}), "
                                   f"found one cut short")
    except FormatError as exc:
        if not keep_going:
            raise StoreError(path, exc.offset, exc.expected) from None
        if skipped is not None:
            skipped.append(Skipped(store_name, str(path), exc.offset, size - exc.offset, exc.expected))
    finally:
        try:
            mapped.release()
        except BufferError:
            pass  # a view is still alive somewhere; the map goes with it


def file_start(path: Path) -> int:
    """A commit log file's first offset, from its name (0 for a name that is not one)."""
    try:
        return int(path.name)
    except ValueError:
        return 0


def _next_file_head(path: Path, size: int) -> tuple[bytes, str]:
    """The first bytes and the name of the commit log file after ``path`` (b"" when there is none)."""
    following = path.with_name(f"{file_start(path) + size:020d}")
    try:
        with open(following, "rb") as fh:
            return fh.read(8), following.name
    except OSError:
        return b"", following.name


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def schedule_units(store: Store, store_name: str, ranges: dict[int, tuple[int, int]] | None = None) -> pa.Table:
    """Every unit of ``SCHEDULE_TOPIC_XXXX/*``: level = queue id + 1, deliver_ms = tagsCode.

    ``ranges``: only the units [first, stop) of the levels it names (within each queue's
    min and max offsets), as ``schedule_unit_ranges`` gives them."""
    parts = []
    for queue_id in store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []):
        if ranges is not None and queue_id + 1 not in ranges:
            continue
        first, stop = ranges[queue_id + 1] if ranges is not None else (0, None)
        parts.extend(schedule_unit_chunks(store, store_name, queue_id + 1, first, stop))
    if not parts:
        return SCHEDULE_UNIT_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def schedule_unit_chunks(store: Store, store_name: str, level: int, first: int = 0, stop: int | None = None,
                         rows: int | None = None) -> Iterator[pa.Table]:
    """The units [first, stop) of one level's queue (within its min and max offsets;
    ``SCHEDULE_UNIT_SCHEMA``, pre-blank units left out), ``rows`` units at a time (all at
    once when None), each chunk's deliver times checked."""
    for queue_offsets, units in schedule_unit_arrays(store, level, first, stop, rows):
        kept = len(units)
        yield pa.table({
            "store": pa.repeat(pa.scalar(store_name, pa.string()), kept),
            "level": pa.array(np.full(kept, level, dtype=np.int32)),
            "queue_offset": pa.array(queue_offsets),
            "commitlog_offset": pa.array(units["commitLogOffset"].astype(np.int64)),
            "size": pa.array(units["size"].astype(np.int32)),
            "deliver_ms": pa.array(units["tagsCode"].astype(np.int64)),
        }, schema=SCHEDULE_UNIT_SCHEMA)


def schedule_unit_arrays(store: Store, level: int, first: int = 0, stop: int | None = None,
                         rows: int | None = None) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """schedule_unit_chunks as numpy: (the units' logical offsets, the units) of each chunk."""
    cq = store.schedule_queue(level)
    first = max(first, cq.min_offset)
    stop = cq.max_offset if stop is None else min(stop, cq.max_offset)
    step = max(1, rows) if rows is not None else max(1, stop - first)
    for start in range(first, stop, step):
        end = min(start + step, stop)
        units = cq.units(start, end)
        cq.check_deliver_times(units, start)
        real = units["size"] != _PRE_BLANK_SIZE
        yield np.arange(start, start + len(units), dtype=np.int64)[real], units[real]
        if rows is not None:
            cq.release(end)


def schedule_unit_ranges(store: Store, file_starts: list[int]) -> list[dict[int, tuple[int, int]]]:
    """For each commit log file (``file_starts``, ascending), the units of each schedule level
    that may point into it, as {level: (first, stop)} logical ranges: a queue's units are
    appended in commit log order, so a file's units are one run of each queue, found by
    counting, chunk by chunk (UNIT_CHUNK units at a time), the units before each file's start;
    a queue whose offsets go back anywhere is given whole to every file. A reader still keeps
    only the units that point into its file."""
    out: list[dict[int, tuple[int, int]]] = [{} for _ in file_starts]
    bounds = np.asarray(file_starts[1:], dtype=np.int64)
    for queue_id in store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []):
        cq = store.schedule_queue(queue_id + 1)
        first, stop = cq.min_offset, cq.max_offset
        if first >= stop:
            continue
        before = np.zeros(len(bounds), dtype=np.int64)  # units pointing before each later file
        last = _NONE_YET  # the last real unit's offset so far
        ordered = True
        for start in range(first, stop, UNIT_CHUNK):
            units = cq.units(start, min(start + UNIT_CHUNK, stop))
            raw = units["commitLogOffset"].astype(np.int64)
            real = units["size"] != _PRE_BLANK_SIZE
            seen = raw[real] if last == _NONE_YET else np.concatenate([[last], raw[real]])
            if (np.diff(seen) < 0).any():
                ordered = False
                break
            # A pre-blank unit stands for nothing: it takes the offset before it.
            offsets = np.maximum.accumulate(np.where(real, raw, last))
            last = int(offsets[-1]) if len(offsets) else last
            before += np.searchsorted(offsets, bounds, side="left")
            cq.release(start + len(units))
        if not ordered:
            for ranges in out:
                ranges[queue_id + 1] = (first, stop)
            continue
        cuts = [first, *(first + before).tolist(), stop]
        for index, ranges in enumerate(out):
            if cuts[index] < cuts[index + 1]:
                ranges[queue_id + 1] = (int(cuts[index]), int(cuts[index + 1]))
    return out


def delay_offsets(store: Store) -> dict[int, int]:
    """config/delayOffset.json (with the broker's .bak fallback); {} when there is none."""
    offsets = store.delay_offsets()
    return dict(offsets.offsetTable) if offsets is not None else {}
