"""`inspect commitlog --verify`: check a whole store, the log against itself and the queues
against the log, and report every problem found (never raise on the first one).

The commit log is walked file by file as the broker's recovery walks it: a bad magic code or
a size that runs past the file leaves no way to find the next record, so the rest of that
file is skipped and the walk goes on with the next file. A CRC mismatch leaves the framing
intact, so the walk goes on with the next record.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import (
    RECORD_HEAD,
    body_crc,
    check_message_bounds,
    decode_message,
)
from rmqdelay.formats.constants import (
    BLANK_MAGIC_CODE,
    CQ_PRE_BLANK_SIZE,
    PROPERTY_DELAY_TIME_LEVEL,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.propcrc import CRC32_RESERVED_LEN
from rmqdelay.formats.propcrc import check_record as check_record_crc
from rmqdelay.store import Store
from rmqdelay.store.commitlog import first_nonzero
from rmqdelay.store.fileio import map_for_read, release_pages
from rmqdelay.store.logfile import DLEDGER, LogFile
from rmqdelay.store.mappedfiles import MappedFile
from rmqdelay.store.problems import FILE_SIZE, GAP, NOT_A_DIRECTORY, UNREADABLE, Problem
from rmqdelay.store.recovery import schedule_delay_ok
from rmqdelay.store.verify_dledger import DLedgerWalk

__all__ = ["Problem", "VerifyCounts", "iter_problems", "verify_store", "verify_total",
           "FILE_SIZE", "GAP", "NOT_A_DIRECTORY", "UNREADABLE"]

# Problem kinds, as shown to the user and in --json.
MAGIC = "magic"
SIZE = "size"
CRC = "crc"
PHYSICAL_OFFSET = "physicalOffset"
BLANK = "blank"
MISSING_BLANK = "missingBlank"
TAIL = "tail"
CQ_FILE = "cqFile"
CQ_PAST_LOG = "cqPastLog"
CQ_NO_MESSAGE = "cqNoMessage"
CQ_SIZE = "cqSize"
CQ_QUEUE = "cqQueue"
CQ_QUEUE_OFFSET = "cqQueueOffset"
CQ_UNREADABLE = "cqUnreadable"
UNDISPATCHED = "undispatched"
DELAY = "delay"
PROP_CRC = "propCrc"  # the __CRC32# property of enabledAppendPropCRC


@dataclass(slots=True)
class VerifyCounts:
    """How much was checked: filled in by ``iter_problems`` as it goes."""

    files: int = 0
    messages: int = 0
    queues: int = 0
    units: int = 0
    # Commit log files after the end of the data that hold nothing but zeros: the next file a
    # running broker preallocates (AllocateMappedFileService). Not a problem: on recovery the
    # broker deletes them (truncateDirtyFiles).
    preallocated: list[str] = field(default_factory=list)
    # A DLedger log's entries: how many, the committed and last index, what lies past the
    # committed one (verify_dledger.DLedgerWalk.summary); None for a plain log.
    dledger: dict | None = None


class _Messages:
    """What the queue check needs of every message, in compact columns."""

    def __init__(self) -> None:
        self.offsets = array("q")
        self.sizes = array("q")
        self.queue_keys = array("l")
        self.queue_offsets = array("q")
        self.dispatched = array("b")  # the broker builds a CQ unit for it (not prepared/rollback)
        self.keys: dict[tuple[str, int], int] = {}
        # [start, end) of the commit log left unread after a framing problem.
        self.skipped: list[tuple[int, int]] = []

    def add(self, offset: int, size: int, topic: str, queue_id: int, queue_offset: int, sys_flag: int,
            dispatchable: bool = True) -> None:
        key = self.keys.setdefault((topic, queue_id), len(self.keys))
        tran = sys_flag & TRANSACTION_TYPE_MASK
        self.offsets.append(offset)
        self.sizes.append(size)
        self.queue_keys.append(key)
        self.queue_offsets.append(queue_offset)
        self.dispatched.append(dispatchable and tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE))


Advance = Callable[[int], None]


def verify_total(store: Store) -> int:
    """The amount of work ``iter_problems`` reports through ``advance``: commit log bytes
    plus consume queue bytes."""
    total = sum(mf.size for mf in store.commitlog.files)
    for topic, ids in store.topics().items():
        for qid in ids:
            try:
                total += store.consume_queue(topic, qid).byte_size
            except StoreError:
                pass  # reported as a problem by iter_problems
    return total


def iter_problems(store: Store, advance: Advance | None = None,
                  counts: VerifyCounts | None = None) -> Iterator[Problem]:
    """Every problem of the store: what listing it found (a lenient Store notes those in
    ``store.problems``), then the commit log, then each consume queue."""
    advance = advance or (lambda n: None)
    counts = counts if counts is not None else VerifyCounts()
    layout = _LayoutProblems(store)
    yield from layout.new()
    messages = _Messages()
    log = store.commitlog
    end = log.min_offset
    files = log.files
    dledger = DLedgerWalk(log) if any(f.framing == DLEDGER for f in files) else None
    # A file whose data ends in zeros without a closing BLANK is the broker's current file
    # when nothing but zeros follows it; it is a problem only when a later file holds data.
    missing_blank: Problem | None = None
    for index, mf in enumerate(files):
        if missing_blank is not None:
            if _all_zeros(mf):
                counts.preallocated.append(str(mf.path))
                counts.files += 1
                advance(mf.size)
                continue
            yield missing_blank
            missing_blank = None
        end, zeros_at = yield from _check_file(mf, messages, dledger)
        if zeros_at is not None and index < len(files) - 1:
            closing = "a DLedger end mark" if mf.framing == DLEDGER else "a BLANK record"
            missing_blank = Problem(MISSING_BLANK, str(mf.path), zeros_at - mf.start,
                                    f"{closing} closing the file, found zeros", zeros_at)
        advance(mf.size)
        counts.files += 1
    counts.messages = len(messages.offsets)
    if dledger is not None:
        # Entries past the committed index are not served: the log ends at the committed one.
        end = min(end, log.committed_pos)
        counts.dledger = dledger.summary()
    yield from _check_queues(store, messages, end, advance, counts, layout)


class _LayoutProblems:
    """The problems a lenient Store noted while listing, each yielded once, as they appear
    (a consume queue's files are listed when the queue is opened)."""

    def __init__(self, store: Store) -> None:
        self.found = store.problems if store.problems is not None else []
        self.done = 0

    def new(self) -> Iterator[Problem]:
        while self.done < len(self.found):
            self.done += 1
            yield self.found[self.done - 1]


def _all_zeros(mf: MappedFile) -> bool:
    if mf.size == 0:
        return True
    try:
        return first_nonzero(map_for_read(mf.path), 0) is None
    except StoreError:
        return False  # _check_file names what is wrong with it


def verify_store(store: Store, advance: Advance | None = None,
                 counts: VerifyCounts | None = None) -> list[Problem]:
    return list(iter_problems(store, advance, counts))


def _check_file(mf: LogFile, messages: _Messages, dledger: DLedgerWalk | None = None) -> Iterator[Problem]:
    """The records of one commit log file; returns the physical offset where its readable
    data ends (the file's end when it closes with a BLANK), and that offset again when the
    data ends in zeros (None otherwise: a BLANK, or a problem)."""
    name = str(mf.path)
    if mf.size == 0:
        return mf.start, None
    try:
        view = map_for_read(mf.path)
    except StoreError as exc:
        yield Problem(UNREADABLE, name, None, exc.expected)
        messages.skipped.append((mf.start, mf.end))
        return mf.start, None
    try:
        if mf.framing == DLEDGER:
            return (yield from dledger.walk(view, mf, messages, check_record))
        return (yield from _walk(view, mf, messages))
    finally:
        try:
            view.release()
        except BufferError:
            pass  # arrays still point into the map; it is unmapped when they are gone


_RELEASE_EVERY = 64 << 20  # bytes of a commit log file walked between two releases of its pages


def _walk(view: memoryview, mf: MappedFile, messages: _Messages) -> Iterator[Problem]:
    name = str(mf.path)
    size = len(view)
    pos = 0
    released = 0
    while pos < size:
        if pos - released >= _RELEASE_EVERY:
            # The pages passed leave this process: a verify holds a window of the file, not all of it.
            release_pages(view, pos)
            released = pos
        physical = mf.start + pos
        if pos + 8 > size:
            if any(view[pos:]):
                yield Problem(SIZE, name, pos, f"a record head of 8 bytes, found {size - pos}", physical)
                return physical, None
            return physical, physical
        total, magic = RECORD_HEAD.unpack_from(view, pos)
        if total == 0 and magic == 0:
            # The data ends here: what follows must be the zeros of the preallocated file.
            nonzero = first_nonzero(view, pos)
            if nonzero is not None:
                yield Problem(TAIL, name, nonzero, f"zeros after the end of the data at byte {pos}, "
                                                   "found non-zero bytes", mf.start + nonzero)
                return physical, None
            return physical, physical
        if magic == BLANK_MAGIC_CODE:
            if total != size - pos:
                yield Problem(BLANK, name, pos, f"a BLANK record filling the rest of the file "
                                                f"({size - pos} bytes), found totalSize {total}", physical)
                messages.skipped.append((physical, mf.end))
                return physical, None
            return mf.end, None
        msg = yield from check_record(view, pos, size, physical, name, messages)
        if msg is None:
            messages.skipped.append((physical, mf.end))
            return physical, None
        total = msg.storeSize
        pos += total
    return mf.end, None


def check_record(view: memoryview, pos: int, limit: int, physical: int, name: str,
                 messages: _Messages) -> Iterator[Problem]:
    """The checks of one message record at ``pos`` (its bytes end by ``limit``); returns the
    message (added to ``messages``), or None when its framing is broken."""
    try:
        total = check_message_bounds(view, pos, limit)
    except FormatError as exc:
        kind = SIZE if exc.offset == pos else MAGIC
        yield Problem(kind, name, exc.offset, exc.expected, physical)
        return None
    try:
        msg = decode_message(view, pos, limit)
    except FormatError as exc:
        yield Problem(SIZE, name, exc.offset, exc.expected, physical)
        return None
    if msg.commitLogOffset != physical:
        yield Problem(PHYSICAL_OFFSET, name, pos + 28,
                      f"physicalOffset {physical} (where the record is), found {msg.commitLogOffset}", physical)
    crc = body_crc(msg.body)
    if crc != msg.bodyCRC:
        yield Problem(CRC, name, pos + 8, f"bodyCRC {crc} of the {len(msg.body)}-byte body, "
                                          f"found {msg.bodyCRC}", physical)
    dispatched = schedule_delay_ok(msg)
    if not dispatched:
        yield Problem(DELAY, name, pos, f"a {msg.topic} record with a DELAY the broker can read, found "
                                        f"{msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)!r}: it dispatches no "
                                        f"unit for it, and its recovery ends the commit log here", physical)
    prop = check_record_crc(view[pos:pos + total], msg.properties)
    if prop is not None and prop[0] != prop[1]:
        yield Problem(PROP_CRC, name, pos + total - CRC32_RESERVED_LEN,
                      f"__CRC32# {prop[1]} (the record's CRC), found {prop[0]}", physical)
    messages.add(physical, msg.storeSize, msg.topic, msg.queueId, msg.queueOffset, msg.sysFlag, dispatched)
    return msg


def _check_queues(store: Store, messages: _Messages, end: int, advance: Advance,
                  counts: VerifyCounts, layout: _LayoutProblems) -> Iterator[Problem]:
    cols = _Columns(messages)
    queue_min: dict[int, int] = {}
    queue_max: dict[int, int] = {}
    # A live store (its lock held: a broker or a writer appends) dispatches behind its log, and
    # its queues are read after its log and one after another while it does.
    live = store.lock_holder() is not None
    for topic, ids in store.topics().items():
        yield from layout.new()
        for qid in ids:
            try:
                cq = store.consume_queue(topic, qid)
                yield from layout.new()
                lo, hi = cq.min_offset, cq.max_offset
                # Queue files that do not follow each other (a lost file) are checked run by
                # run, each unit at the logical offset its file gives it.
                runs = [cq.units(max(lo, first), min(hi, stop)) for first, stop in cq.runs()]
            except StoreError as exc:
                yield Problem(CQ_FILE, str(exc.path), exc.offset, exc.expected)
                continue
            counts.queues += 1
            key = messages.keys.get((topic, qid))
            if key is not None:
                queue_min[key], queue_max[key] = lo, hi
            for (first, _), units in zip(cq.runs(), runs):
                counts.units += len(units)
                yield from _check_units(cq, max(lo, first), units, cols, key, store.commitlog.min_offset, end, live)
            advance(cq.byte_size)
    yield from layout.new()
    # Queues that could not be listed were not checked: their messages are not "undispatched".
    unlisted = {Path(p.file) for p in layout.found if p.kind in (UNREADABLE, NOT_A_DIRECTORY)}
    queue_path = store.queues.queue_path
    unchecked = [key for (topic, qid), key in messages.keys.items()
                 if {queue_path(topic, qid), queue_path(topic, qid).parent, queue_path(topic, qid).parent.parent} & unlisted]
    yield from _check_undispatched(store, cols, queue_min, unchecked, queue_max if live else None)


class _Columns:
    """The message columns as arrays sorted by physical offset (the walk's order)."""

    def __init__(self, messages: _Messages) -> None:
        self.offsets = np.frombuffer(messages.offsets, dtype=np.int64)
        self.sizes = np.frombuffer(messages.sizes, dtype=np.int64)
        self.queue_keys = np.frombuffer(messages.queue_keys, dtype=np.dtype(f"i{messages.queue_keys.itemsize}"))
        self.queue_offsets = np.frombuffer(messages.queue_offsets, dtype=np.int64)
        self.dispatched = np.frombuffer(messages.dispatched, dtype=np.int8).astype(bool)
        self.skipped = messages.skipped
        self.names = {key: f"{topic}/{qid}" for (topic, qid), key in messages.keys.items()}
        # Set for each message a consume queue unit points back at correctly.
        self.covered = np.zeros(len(self.offsets), dtype=bool)


def _unit_location(cq, logical: int) -> tuple[str, int]:
    path, byte = cq.locate(logical)
    return str(path), byte


def _check_units(cq, lo: int, units: np.ndarray, cols: _Columns, key: int | None,
                 log_start: int, end: int, live_store: bool = False) -> Iterator[Problem]:
    if len(units) == 0:
        return
    phys = units["commitLogOffset"].astype(np.int64)
    size = units["size"].astype(np.int64)
    logical = np.arange(lo, lo + len(units), dtype=np.int64)
    # Pre-blank units stand for nothing; units below the log's first file point at data the
    # broker has already deleted.
    live = (size != CQ_PRE_BLANK_SIZE) & (phys >= log_start)
    # A unit into a part of the log already reported as unreadable is one problem per part,
    # not one per unit.
    where = f"{cq.topic}/{cq.queue_id}"
    for start, stop in cols.skipped:
        inside = live & (phys >= start) & (phys < stop)
        if inside.any():
            live &= ~inside
            first = int(np.flatnonzero(inside)[0])
            path, byte = _unit_location(cq, int(logical[first]))
            yield Problem(CQ_UNREADABLE, path, byte,
                          f"{int(inside.sum())} unit(s) of {where} from unit {int(logical[first])} pointing at "
                          f"messages in [{start}, {stop}) of the commit log, which could not be read", int(phys[first]))
    past = live & (phys + size > end)
    if live_store:  # units of records written after the log was read: not checked
        live &= ~past
        past[:] = False
    n_msgs = len(cols.offsets)
    idx = np.minimum(np.searchsorted(cols.offsets, phys), max(n_msgs - 1, 0))
    if n_msgs:
        found = live & ~past & (cols.offsets[idx] == phys)
        bad_size = found & (cols.sizes[idx] != size)
        bad_queue = found & ~bad_size & (cols.queue_keys[idx] != (-1 if key is None else key))
        bad_qoff = found & ~bad_size & ~bad_queue & (cols.queue_offsets[idx] != logical)
        cols.covered[idx[found & ~bad_size & ~bad_queue & ~bad_qoff]] = True
    else:
        found = bad_size = bad_queue = bad_qoff = np.zeros(len(units), dtype=bool)
    missing = live & ~past & ~found
    for row in np.flatnonzero(past | missing | bad_size | bad_queue | bad_qoff):
        p, s, n, m = int(phys[row]), int(size[row]), int(logical[row]), int(idx[row])
        path, byte = _unit_location(cq, n)
        unit = f"unit {n} of {where}"
        if past[row]:
            yield Problem(CQ_PAST_LOG, path, byte, f"{unit} pointing inside the commit log "
                                                    f"(data ends at {end}), found offset {p} size {s}", p)
        elif missing[row]:
            yield Problem(CQ_NO_MESSAGE, path, byte, f"{unit} pointing at the start of a readable "
                                                      f"message, found offset {p}", p)
        elif bad_size[row]:
            yield Problem(CQ_SIZE, path, byte, f"{unit} with the size of the message at {p} "
                                                f"({int(cols.sizes[m])}), found size {s}", p)
        elif bad_queue[row]:
            yield Problem(CQ_QUEUE, path, byte, f"{unit} pointing at a message of {where}, found one "
                                                 f"of {cols.names[int(cols.queue_keys[m])]}", p)
        else:
            yield Problem(CQ_QUEUE_OFFSET, path, byte, f"{unit} pointing at the message with queueOffset "
                                                        f"{n}, found queueOffset {int(cols.queue_offsets[m])}", p)


def _check_undispatched(store: Store, cols: _Columns, queue_min: dict[int, int],
                        unchecked: list[int], queue_max: dict[int, int] | None = None) -> Iterator[Problem]:
    """Messages no unit points at, though the broker would have built one. A message below
    its queue's first unit is not one: its units were deleted with old queue files. With
    ``queue_max`` (a live store), nor is one past its queue's last unit as read: the writer
    has not dispatched it yet."""
    if not len(cols.offsets):
        return
    lows = np.array([queue_min.get(k, 0) for k in range(len(cols.names))], dtype=np.int64)
    orphan = cols.dispatched & ~cols.covered & (cols.queue_offsets >= lows[cols.queue_keys])
    if queue_max is not None:
        highs = np.array([queue_max.get(k, 0) for k in range(len(cols.names))], dtype=np.int64)
        orphan &= cols.queue_offsets < highs[cols.queue_keys]
    if unchecked:
        orphan &= ~np.isin(cols.queue_keys, unchecked)
    for row in np.flatnonzero(orphan):
        p = int(cols.offsets[row])
        index = store.commitlog.file_index(p)
        mf = store.commitlog.files[index]
        yield Problem(UNDISPATCHED, str(mf.path), p - mf.start,
                      f"a consume queue unit of {cols.names[int(cols.queue_keys[row])]} at queueOffset "
                      f"{int(cols.queue_offsets[row])} pointing at this message, found none", p)
