"""The one writer: append a message to the commit log and dispatch its consume-queue unit,
as the broker's putMessage and reput service do, crash-safely.

Nothing is published that is not durable: a unit, the checkpoint, the removal of ``abort``
and (in the scheduler) the offsets only ever describe records already written and flushed
(flush.py: in what order). A kill -9 at any point leaves whole records, units for a prefix
of them, and at most a torn tail, which recovery (recovery.py, run on every open) finishes.

Every system call is checked (fileio.py): a short write is continued, a failed one is an
error. The first error stops the writer for good: pending records and units are dropped,
nothing more is written or published, ``abort`` stays, and the error - file, byte, errno
text - reaches the caller. The store is then as a crash would leave it, and a rerun once
the fault is gone does the work exactly once.

Beside the writer: flush.py (its flush, a part of StoreWriter), writefiles.py (consume queue
files by pwrite, the journal that undoes a failed flush) and abortmark.py (the ``abort``
marker it keeps while it works).
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rmqdelay.errors import StoreError, StoreReadError, StoreWriteError, UsageError
from rmqdelay.formats.checkpoint import Checkpoint
from rmqdelay.formats.commitlog import BLANK, Message
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    CQ_STORE_UNIT_SIZE,
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CRC32,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.formats.properties import (
    delete_property,
)
from rmqdelay.store import Store, fileio
from rmqdelay.store.abortmark import AbortMark
from rmqdelay.store.commitlog import END_FILE_MIN_BLANK_LENGTH
from rmqdelay.store.directory import check_store_directory
from rmqdelay.store.encode import ENCODED_HEAD as _ENCODED_HEAD
from rmqdelay.store.encode import OFFSETS as _OFFSETS
from rmqdelay.store.encode import PutEncoder, PutResult
from rmqdelay.store.flush import Flush
from rmqdelay.store.index import IndexSettings, index_dir
from rmqdelay.store.indexer import MessageIndexer
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.layout import refuse_unwritable
from rmqdelay.store.lock import BrokerLock
from rmqdelay.store.lostqueues import log_queue_offsets
from rmqdelay.store.recovery import (
    RecoveryReport,
    TornTail,
    apply_recovery,
    plan_recovery,
)
from rmqdelay.store.topics import validate_topic
from rmqdelay.store.writefiles import OPEN_QUEUE_FILES, OpenFiles, QueueFiles
from rmqdelay.store.writeformat import WriteFormat, detect_write_format

if TYPE_CHECKING:
    from rmqdelay.store.batchencode import Gathered, PutBatch, StoredCopies

__all__ = ["DEFAULT_COMMITLOG_FILE_SIZE", "DEFAULT_CQ_FILE_SIZE", "NewMessage", "PutResult", "Puts", "RecoveryReport",
           "StoreWriter", "WriteFormat"]

FLUSH_BYTES = 4 * 1024 * 1024
PUT_BATCH_MIN = 16  # put_all: fewer messages go through put() one by one
LOCALHOST = (bytes([127, 0, 0, 1]), 10911)


@dataclass(slots=True)
class NewMessage:
    """A message to put (MessageExtBrokerInner before the store touches it)."""

    topic: str
    queueId: int
    body: bytes = b""
    properties: dict[str, str] = field(default_factory=dict)
    # When set, written as is: messageTimeup keeps the string it serialised (spec quirk).
    propertiesRaw: str | None = None
    flag: int = 0
    sysFlag: int = 0
    bornTimestamp: int = 0
    bornHost: tuple[bytes, int] = LOCALHOST
    storeHost: tuple[bytes, int] = LOCALHOST
    reconsumeTimes: int = 0
    preparedTransactionOffset: int = 0
    storeTimestamp: int | None = None  # None: the writer's clock at put time


@dataclass(slots=True, frozen=True)
class Puts:
    """What put_all did with each message, as lists (put()'s PutResult field by field)."""

    topics: list[str]
    queue_ids: list[int]
    queue_offsets: list[int]
    commit_log_offsets: list[int]
    store_timestamps: list[int]
    msg_ids: list[str]
    result: Callable[[int], PutResult]  # the whole PutResult of message i


def _now_ms() -> int:
    return time.time_ns() // 1_000_000



DAMAGED_INDEX_DIR = "index.damaged"  # index files set aside, outside index/


class StoreWriter(Flush):
    """Holds STORE/lock while open; every other writer of a store goes through this.

    Used as a context manager: a clean exit flushes, fsyncs, writes the checkpoint and
    removes ``abort`` (when this writer owns it); an exit by an exception abandons the
    pending work instead (``abandon``), as a crash would."""

    def __init__(
        self,
        path: Path | str,
        *,
        delay_levels: dict[int, int] | None = None,
        commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE,
        cq_file_size: int = DEFAULT_CQ_FILE_SIZE,
        clock: Callable[[], int] = _now_ms,
        sync: bool = True,
        create: bool = False,
        open_queue_files: int = OPEN_QUEUE_FILES,
        index: IndexSettings | None = None,
        broker_config: Path | None = None,
        write_format: WriteFormat | None = None,
        preflight: Callable[[Store, WriteFormat], None] | None = None,
    ) -> None:
        """``preflight``: the caller's own checks, run on the store as it is once recovery's plan
        is known and before recovery changes anything; what it raises is a refusal that leaves
        the store as it was (a run checks its offsets and the timer wheel there)."""
        self.path = Path(path)
        self._preflight = preflight
        # How this store's broker writes records (CRC property, V2): detected on open from the
        # store and broker_config unless given; ``write_format.notes`` says what was found.
        self._broker_config = broker_config
        self.write_format = write_format
        self.delay_levels = delay_levels or parse_delay_levels()
        self.max_level = max(self.delay_levels)
        self.clock = clock
        self.sync = sync
        self._create = create
        self._index_settings = index or IndexSettings()
        self._indexer: MessageIndexer | None = None
        self._commitlog_file_size = commitlog_file_size
        self._cq_file_size = cq_file_size
        self._lock = BrokerLock(self.path)
        self._abort = AbortMark(self.path)
        self._opened = False
        self._failed: StoreWriteError | None = None
        self._wrote = False  # any byte of the store written by this writer (abort aside)
        self._valid_topics: set[str] = set()  # checked once each: put() is a hot path
        self._queue_fds = OpenFiles(open_queue_files)
        self._cl_fd: int | None = None
        self._cp_fd: int | None = None
        self.recovery = RecoveryReport()

    # -- open / close --------------------------------------------------------------------
    def open(self) -> "StoreWriter":
        refuse_unwritable(self.path)  # before commitlog/ and consumequeue/ are made
        if not self.path.is_dir():
            if not self._create:
                check_store_directory(self.path)  # says what it is instead: missing, a file, ...
            fileio.make_dirs(self.path)
        fileio.make_dirs(self.path / "commitlog")
        fileio.make_dirs(self.path / "consumequeue")
        self._lock.acquire()
        try:
            self._abort.take()
            self._load()
        except BaseException:
            self._close_files()
            self._abort.discard(self._wrote)  # nothing was changed: as it was before
            self._lock.release()
            raise
        self._opened = True
        return self

    def __enter__(self) -> "StoreWriter":
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abandon()

    def close(self) -> None:
        """Flush, fsync, write the checkpoint, then remove ``abort`` if this writer owns it."""
        if not self._opened:
            return
        try:
            self.sync_to_disk()
            if self._indexer is not None:
                self._indexer_call(self._indexer.close)
                self._indexer = None
                self._write_checkpoint()
            if self._abort.owned:
                self._abort.remove()
        except BaseException:
            self.abandon()
            raise
        self._close_files()
        self._lock.release()
        self._opened = False

    def abandon(self) -> None:
        """Stop without writing another byte: pending records and units are dropped, the
        checkpoint is not moved, ``abort`` stays (unless this writer made it and wrote
        nothing). What a crash leaves, and what the next open's recovery finishes."""
        if not self._opened:
            return
        self._pending.clear()
        self._pending_units.clear()
        self._close_files()
        self._abort.discard(self._wrote)
        self._lock.release()
        self._opened = False

    def _close_files(self) -> None:
        if self._indexer is not None:
            self._indexer.abandon()  # what it has not committed is indexed again on the next open
            self._indexer = None
        if self._cl_fd is not None:
            os.close(self._cl_fd)
            self._cl_fd = None
        self._queue_fds.close()
        if self._cp_fd is not None:
            os.close(self._cp_fd)
            self._cp_fd = None
        self._abort.close()

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
        self._queue_offsets: dict[tuple[str, int], int] = {}
        self._queues: dict[tuple[str, int], QueueFiles] = {}
        self._dirty_queue_files: set[str] = set()
        self._cl_file_start = -1
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_start = 0  # physical offset of the first pending byte
        self._pending_units: list[tuple[str, int, int, bytes]] = []
        self._unsynced_files: set[int] = set()  # commit log files written, not yet fsynced
        self._checkpoint_due = False
        self._last_store_ts = 0
        store = Store(self.path)
        try:
            files = store.commitlog.files
            if files:
                self._commitlog_file_size = files[0].size
            for topic, ids in store.topics().items():
                for qid in ids:
                    size = store.consume_queue(topic, qid).file_size
                    if size:
                        self._cq_file_size = size
                        break
            if self.write_format is None:
                self.write_format = detect_write_format(store, self._broker_config)
            # putMessage's rewrites and encoding for this store (put() and callers that append
            # records they built themselves, as samples generate does)
            self.encoder = PutEncoder(self.write_format, self.delay_levels, lambda: self.clock())
            cp = store.checkpoint()
            self._checkpoint = cp or Checkpoint(0, 0, 0)
            plan = plan_recovery(store)  # reads only; raises (a refusal) before any change
            if self._preflight is not None:
                self._preflight(store, self.write_format)
            self._abort.adopt(store, plan.end)  # left by an rmqdelay writer: finished below
            floor = self._abort.dispatch_floor
            if floor is not None and floor < plan.dispatch_from:
                # That writer's last units went a queue at a time: some before its floor's
                # records may be missing while a later one of another queue is there.
                plan.dispatch_from = max(floor, store.commitlog.min_offset)
            self._abort.mark(plan.end, plan.dispatch_from)  # kept until recovery's units are written
            self._queue_offsets = plan.queue_offsets  # moved on by the dispatch below
            self._end = plan.end
            self.recovery = apply_recovery(store, plan, _Recovery(self))
            # A queue the store has no directory for goes on after its records in the log
            # (lostqueues.py: a deleted queue directory never gives its offsets out again).
            self._queue_offsets = log_queue_offsets(self.path, self._queue_offsets, self._end)
            if self._index_settings.messageIndexEnable:
                # IndexService.buildIndex for every record appended: the index follows the log.
                self._indexer = self._open_indexer()
                self.recovery.indexed = self._indexer_call(self._indexer.catch_up, store.commitlog, self._end)
        finally:
            store.close()

    def _open_indexer(self) -> MessageIndexer:
        """The index, opened as the broker keeps serving over a damaged one: an index file
        that cannot be read as one (a zeroed or flipped header, truncated, empty) is set aside
        into index.damaged/ (kept, outside index/ where the broker would load it), said in one
        notice, and what it indexed is indexed again from the commit log (catch_up): derived
        data never stops a delivery. The system saying no (EACCES, EIO) still stops."""
        directory = index_dir(self.path)
        while True:
            try:
                return MessageIndexer(directory, self._index_settings, sync=self.sync)
            except (StoreReadError, StoreWriteError):
                raise
            except StoreError as exc:
                bad = Path(exc.path)
                if bad.parent != directory or not bad.is_file():
                    raise
                aside = self.path / DAMAGED_INDEX_DIR
                fileio.make_dirs(aside)
                os.replace(bad, aside / bad.name)
                fileio.fsync_dir(directory)
                fileio.fsync_dir(aside)
                self.recovery.notices.append(
                    f"index: {exc}; set aside into {DAMAGED_INDEX_DIR}/{bad.name}: the index is derived data, "
                    "what it held is indexed again from the commit log")

    def _indexer_call(self, call, *args):
        """The indexer fails like the rest of the writer: one StoreWriteError, writer stopped.
        Its entries count only once their header is written, so records and units stay."""
        try:
            return call(*args)
        except StoreWriteError as exc:
            raise self._fail(exc) from None
        except StoreError as exc:
            raise self._fail(StoreWriteError(exc.path, exc.offset, exc.expected)) from None
        except OSError as exc:
            raise self._fail(StoreWriteError(exc.filename or index_dir(self.path), None,
                                             f"index write failed: {exc.strerror}")) from None

    def _queue(self, topic: str, queue_id: int) -> QueueFiles:
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = QueueFiles(self.path / "consumequeue" / topic / str(queue_id), self._cq_file_size,
                            self._queue_fds, self._dirty_queue_files)
            self._queues[key] = q
        return q

    @property
    def end_offset(self) -> int:
        """The physical offset the next record will be written at (pending included)."""
        return self._end

    @property
    def flushed_end(self) -> int:
        """The physical offset up to which records are written (what flush() has done)."""
        return self._pending_start if self._pending else self._end

    @property
    def failed(self) -> StoreWriteError | None:
        return self._failed

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._queue_offsets.get((topic, queue_id), 0)

    def next_queue_offsets(self) -> dict[tuple[str, int], int]:
        """Every queue's next queue offset (a copy)."""
        return dict(self._queue_offsets)

    @property
    def commitlog_file_size(self) -> int:
        """Of this store's commit log files (read from the store on open)."""
        return self._commitlog_file_size

    def _tags_code(self, topic: str, properties, store_ts: int) -> int:
        return self.encoder.tags_code(topic, properties, store_ts)

    def _check_usable(self) -> None:
        if not self._opened:
            raise UsageError("the store writer is not open")
        if self._failed is not None:
            raise self._failed

    def _fail(self, error: StoreWriteError) -> StoreWriteError:
        self._failed = error
        return error

    # -- put -----------------------------------------------------------------------------
    def put(self, new: NewMessage) -> PutResult:
        """CommitLog.putMessage: delay rewrite, queue offset, encode, append; unit queued."""
        self._check_usable()
        e = self.encoder.encode(new)
        size = len(e.record)
        self._ensure_room(size)
        key = (e.topic, e.queue_id)
        queue_offset = self._queue_offsets.get(key, 0) if e.dispatch else 0
        offset = self._end
        record = e.place(queue_offset, offset)
        if not self._pending:
            self._pending_start = offset
        self._pending.append(record)
        self._end += size
        self._pending_bytes += size
        if self._indexer is not None:
            self._indexer.add(offset, e.store_ts, e.topic, e.keys, e.uniq, e.sys_flag)
        if e.dispatch:
            self._queue_offsets[key] = queue_offset + 1
            self._pending_units.append((e.topic, e.queue_id, queue_offset, _unit_bytes(offset, size, e.tags_code)))
        self._last_store_ts = max(self._last_store_ts, e.store_ts)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()
        return PutResult(e.topic, e.queue_id, queue_offset, offset, size, e.store_ts, e.tags_code,
                         create_message_id(new.storeHost[0], new.storeHost[1], offset), e.properties_raw)

    def put_batch(self, news: Sequence[NewMessage]) -> PutBatch:
        """put() of each message in turn, the same bytes in the same places, encoded a batch at
        a time (batchencode.py): the rewrites a column at a time, then records, queue offsets,
        CRCs, units and index entries as arrays, one pending chunk per commit log file. A message
        put() would refuse refuses the batch before any of it is pending. What each message
        became (put()'s PutResult, as columns) comes back."""
        # Imported here: the compiled loops (numba) load only in a writer that batches, not in
        # every command that imports this module (a read never loads numba).
        from rmqdelay.store.batchencode import gather

        self._check_usable()
        return self._put_gathered(gather(self.encoder, news))

    def put_stored(self, copies: StoredCopies) -> PutBatch:
        """put_batch of messages that carry their stored properties string (messageTimeup's
        copies, a ``NewMessage`` with ``propertiesRaw`` and no DELAY in its map), given as
        columns (``batchencode.StoredCopies``) instead of one object each: the same bytes as
        put() of each. Not for a store whose broker appends the CRC property (UsageError)."""
        from rmqdelay.store.batchencode import gather_stored

        self._check_usable()
        return self._put_gathered(gather_stored(self.encoder, copies))

    def _put_gathered(self, g: Gathered) -> PutBatch:
        from rmqdelay.formats import putloops
        from rmqdelay.store.batchencode import PutBatch

        batch = PutBatch(g)
        n = len(g)
        if not n:
            return batch
        fields = g.fields
        sizes = g.sizes
        next_offsets = np.array([self._queue_offsets.get(q, 0) for q in g.queues], dtype=np.int64)
        putloops.queue_offsets(g.queue_index, g.dispatch, next_offsets, fields[:, putloops.QUEUE_OFFSET])
        ends = np.cumsum(sizes)
        file_size = self._commitlog_file_size
        first = 0
        while first < n:
            before = int(ends[first - 1]) if first else 0
            room = file_size - self._end % file_size
            # The records that fit this file (with room left for the BLANK that closes it).
            stop = first + int(np.searchsorted(ends[first:] - before, room - END_FILE_MIN_BLANK_LENGTH, "right"))
            if stop == first:
                self._ensure_room(int(sizes[first]))  # the next file (or a message too big for any)
                continue
            self._place(g, batch, first, stop)
            first = stop
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()
        return batch

    def put_all(self, news: Sequence[NewMessage]) -> Puts:
        """The messages put in order, what each became as lists (``Puts``): a few by put()
        itself (a batch's fixed cost - its columns, the compiled loops' calls - is not repaid
        below PUT_BATCH_MIN messages), more by put_batch. The same bytes either way."""
        if len(news) < PUT_BATCH_MIN:
            rs = [self.put(new) for new in news]
            return Puts([r.topic for r in rs], [r.queueId for r in rs], [r.queueOffset for r in rs],
                        [r.commitLogOffset for r in rs], [r.storeTimestamp for r in rs], [r.msgId for r in rs],
                        rs.__getitem__)
        b = self.put_batch(news)
        return Puts(b.topics, b.queue_ids, b.queue_offsets.tolist(), b.commit_log_offsets.tolist(),
                    b.store_timestamps.tolist(), b.msg_ids(), b.result)

    def _place(self, g: Gathered, batch: PutBatch, first: int, stop: int) -> None:
        """Records ``first`` to ``stop`` of a batch (they fit the current file) pending, at the
        log's end, with their units and index entries."""
        from rmqdelay.formats import putloops
        from rmqdelay.store.batchencode import lay_out, unit_bytes

        fields = g.fields
        start = self._end
        seg = fields[first:stop]
        sizes = seg[:, putloops.SIZE]
        offsets = seg[:, putloops.PHYSICAL_OFFSET]
        np.cumsum(sizes, out=offsets)
        offsets += start - sizes
        records, crcs = lay_out(g, first, stop)
        if crcs is not None:
            batch.crcs[first:stop] = crcs
        if not self._pending:
            self._pending_start = start
        self._pending.append(records)
        self._end += len(records)
        self._pending_bytes += len(records)
        store_ts = seg[:, putloops.STORE_TS]
        if self._indexer is not None:
            lo, hi = np.searchsorted(g.index_records, (first, stop)).tolist()
            if hi > lo:
                rows = g.index_records[lo:hi]
                self._indexer_call(self._indexer.add_hashed, g.index_hashes[lo:hi],
                                   fields[rows, putloops.PHYSICAL_OFFSET], fields[rows, putloops.STORE_TS])
        dispatch = g.dispatch[first:stop]
        if dispatch.any():
            which = np.flatnonzero(dispatch)
            queue_index = g.queue_index[first:stop][which]
            queue_offsets = seg[which, putloops.QUEUE_OFFSET]
            codes = g.tags_codes[first:stop][which]
            pending = self._pending_units
            if self._abort.owned:
                # The flush writes a queue's units at once (its dispatch floor covers a kill part
                # way): one pending entry per queue, the queues in the order of their first unit,
                # so the first entry still starts with the first unit (the floor the flush marks).
                order = np.argsort(queue_index, kind="stable")
                ordered = queue_index[order]
                starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
                ends = np.append(starts[1:], len(order))
                units = unit_bytes(offsets[which][order], sizes[which][order], codes[order])
                for k in np.argsort(order[starts], kind="stable").tolist():
                    a, b = int(starts[k]), int(ends[k])
                    topic, queue_id = g.queues[int(ordered[a])]
                    pending.append((topic, queue_id, int(queue_offsets[order[a]]), units[20 * a:20 * b]))
            else:
                # One pending entry per run of consecutive units of one queue, in commit log order.
                units = unit_bytes(offsets[which], sizes[which], codes)
                runs = np.flatnonzero(np.diff(queue_index)) + 1
                bounds = [0, *runs.tolist(), len(which)]
                for a, b in zip(bounds, bounds[1:]):
                    topic, queue_id = g.queues[int(queue_index[a])]
                    pending.append((topic, queue_id, int(queue_offsets[a]), units[20 * a:20 * b]))
            last = np.full(len(g.queues), -1, dtype=np.int64)
            np.maximum.at(last, queue_index, queue_offsets)
            for q in np.flatnonzero(last >= 0).tolist():
                self._queue_offsets[g.queues[q]] = int(last[q]) + 1
        self._last_store_ts = max(self._last_store_ts, int(store_ts.max()))

    def put_encoded(self, topic: str, queue_id: int, record: bytearray, tags_code_value: int,
                    keys: str | None, uniq_key: str | None) -> tuple[int, int]:
        """Append a record the caller serialised as the broker stores it: putMessage's
        rewrites (the delay rewrite, the stored properties string) and the tagsCode of its
        unit are the caller's, and ``keys``/``uniq_key`` are the KEYS and UNIQ_KEY of its
        stored properties (for the index). The record's queueOffset and physicalOffset
        (bytes 20..36) are filled in here, in place. Returns (queueOffset, physicalOffset).

        For a caller that writes many records whose stored form it already knows (the
        sample generator): none of put()'s parsing, re-serialising or result object."""
        if not self._opened or self._failed is not None:
            self._check_usable()
        if topic not in self._valid_topics:
            validate_topic(topic)
            self._valid_topics.add(topic)
        size, magic, sys_flag = _ENCODED_HEAD.unpack_from(record)
        if size != len(record) or magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
            raise UsageError(f"an encoded record of {len(record)} bytes whose head says {size} bytes, "
                             f"magic code {magic:#x}")
        store_ts = _STORE_TS.unpack_from(record, 68 if sys_flag & BORNHOST_V6_FLAG else 56)[0]
        dispatch = sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        file_size = self._commitlog_file_size
        if self._end % file_size + size + END_FILE_MIN_BLANK_LENGTH > file_size:
            self._ensure_room(size)  # the next file (or a message too big for any)
        key = (topic, queue_id)
        queue_offset = self._queue_offsets.get(key, 0) if dispatch else 0
        offset = self._end
        _OFFSETS.pack_into(record, 20, queue_offset, offset)
        if not self._pending:
            self._pending_start = offset
        self._pending.append(record)
        self._end += size
        self._pending_bytes += size
        if self._indexer is not None:
            self._indexer.add(offset, store_ts, topic, keys, uniq_key, sys_flag)
        if dispatch:
            self._queue_offsets[key] = queue_offset + 1
            self._pending_units.append((topic, queue_id, queue_offset, _UNIT.pack(offset, size, tags_code_value)))
        if store_ts > self._last_store_ts:
            self._last_store_ts = store_ts
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()
        return queue_offset, offset

    def put_encoded_batch(self, records: bytes, entries: list[tuple]) -> None:
        """put_encoded for records serialised back to back, each already placed by the caller
        (the writer process's batches): ``entries`` holds, per record, (topic, queueId, size,
        tagsCode, KEYS, UNIQ_KEY, queueOffset, physicalOffset), with the offsets written in
        the record. A record the writer would place elsewhere is refused (UsageError) before
        anything of it is counted; the records before it are pending as put_encoded leaves
        them (the writer process then abandons the writer, as a crash would)."""
        if not self._opened or self._failed is not None:
            self._check_usable()
        view = memoryview(records)
        file_size = self._commitlog_file_size
        queue_offsets = self._queue_offsets
        units = self._pending_units
        indexer = self._indexer
        start = at = 0  # the records from ``start`` to ``at`` are counted, not yet pending
        try:
            for topic, queue_id, size, code, keys, uniq, queue_offset, offset in entries:
                if self._end % file_size + size + END_FILE_MIN_BLANK_LENGTH > file_size:
                    self._add_pending(view[start:at])
                    start = at
                    self._ensure_room(size)
                if topic not in self._valid_topics:
                    validate_topic(topic)
                    self._valid_topics.add(topic)
                head_size, magic, sys_flag = _ENCODED_HEAD.unpack_from(records, at)
                dispatch = sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_PREPARED_TYPE,
                                                                    TRANSACTION_ROLLBACK_TYPE)
                key = (topic, queue_id)
                expected = queue_offsets.get(key, 0) if dispatch else 0
                if head_size != size or magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) \
                        or offset != self._end or queue_offset != expected \
                        or _OFFSETS.unpack_from(records, at + 20) != (queue_offset, offset):
                    raise UsageError(f"{topic}/{queue_id}: a record announced at queue offset {queue_offset}, "
                                     f"physical offset {offset}, {size} bytes, where the writer is at "
                                     f"{expected}, {self._end} (its head: {head_size} bytes, magic {magic:#x})")
                store_ts = _STORE_TS.unpack_from(records, at + (68 if sys_flag & BORNHOST_V6_FLAG else 56))[0]
                if indexer is not None:
                    indexer.add(offset, store_ts, topic, keys, uniq, sys_flag)
                if dispatch:
                    queue_offsets[key] = queue_offset + 1
                    units.append((topic, queue_id, queue_offset, _UNIT.pack(offset, size, code)))
                if store_ts > self._last_store_ts:
                    self._last_store_ts = store_ts
                self._end += size
                at += size
        finally:
            self._add_pending(view[start:at])
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()

    def _add_pending(self, records) -> None:
        """Records counted in ``_end`` (their units and index entries queued) join the pending."""
        if records:
            if not self._pending:
                self._pending_start = self._end - len(records)
            self._pending.append(records)
            self._pending_bytes += len(records)

    def _ensure_room(self, size: int) -> None:
        """Roll over to a new file with a BLANK record when the message does not fit."""
        file_size = self._commitlog_file_size
        if size + END_FILE_MIN_BLANK_LENGTH > file_size:
            raise UsageError(f"a message of {size} bytes does not fit a commit log file of {file_size} bytes")
        file_start = self._end - self._end % file_size
        room = file_start + file_size - self._end
        if size + END_FILE_MIN_BLANK_LENGTH > room:
            if not self._pending:
                self._pending_start = self._end
            # Only the 8-byte head is written; the rest of the file stays zero.
            self._pending.append(BLANK.build(dict(totalSize=room)))
            self._end += room
            self.flush()


class _Recovery:
    """The writer's files, lent to recovery (recovery.RecoveryTarget)."""

    def __init__(self, writer: StoreWriter) -> None:
        self.writer = writer

    def wipe(self, tail: TornTail) -> int:
        w = self.writer
        w._wrote = True
        path = tail.file.path
        fd, _ = fileio.open_for_write(path, create=False)
        try:
            at = tail.start - tail.file.start
            length = tail.stop - tail.start
            fileio.write_all(fd, bytes(length), at, path)
            fileio.fsync(fd, path)
        finally:
            os.close(fd)
        return length

    def zero_units(self, topic: str, queue_id: int, first: int, count: int) -> None:
        self.writer._wrote = True
        self.writer._queue(topic, queue_id).write(first, bytes(count * CQ_STORE_UNIT_SIZE), appending=False)

    def write_unit(self, topic: str, queue_id: int, queue_offset: int, msg: Message) -> None:
        w = self.writer
        w._wrote = True
        unit = _unit_bytes(msg.commitLogOffset, msg.storeSize, w._tags_code(msg.topic, msg.properties,
                                                                             msg.storeTimestamp))
        w._queue(topic, queue_id).write(queue_offset, unit)

    def sync_queues(self) -> None:
        self.writer._sync_units()



def without_crc(properties_raw: str) -> str:
    """A stored properties string without its __CRC32# entry (what differs between two
    copies of one message written with and without enabledAppendPropCRC)."""
    return delete_property(properties_raw, PROPERTY_CRC32)


_UNIT = struct.Struct(">qiq")
_STORE_TS = struct.Struct(">q")


def _unit_bytes(offset: int, size: int, tags_code_value: int) -> bytes:
    return _UNIT.pack(offset, size, tags_code_value)
