"""The one writer: append a message to the commit log and dispatch its consume-queue unit,
as the broker's putMessage and reput service do, crash-safely.

Order of every batch: commit log records are written and fsynced, then their consume
queue units, then the checkpoint. A crash at any point leaves whole records, units for a
prefix of them, and a tail that ``recover`` (run on every open) finishes or wipes.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.errors import StoreError, UsageError
from rmqdelay.formats.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    Checkpoint,
    build_checkpoint,
)
from rmqdelay.formats.commitlog import (
    BLANK,
    Message,
    body_crc,
    encode_message,
    message_size,
)
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    CQ_STORE_UNIT_SIZE,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    RMQ_SYS_SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ,
)
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.formats.properties import format_properties, java_order, property_value
from rmqdelay.schedule.levels import parse_delay_levels
from rmqdelay.store import Store
from rmqdelay.store.commitlog import END_FILE_MIN_BLANK_LENGTH, Blank
from rmqdelay.store.directory import check_store_directory
from rmqdelay.store.durable import fsync_dir
from rmqdelay.store.index import IndexSettings, index_dir
from rmqdelay.store.indexer import MessageIndexer
from rmqdelay.store.lock import BrokerLock
from rmqdelay.store.mappedfiles import list_mapped_files
from rmqdelay.store.topics import validate_topic

DEFAULT_COMMITLOG_FILE_SIZE = 1024 * 1024 * 1024  # mappedFileSizeCommitLog
DEFAULT_CQ_FILE_SIZE = 300_000 * CQ_STORE_UNIT_SIZE  # mappedFileSizeConsumeQueue
FLUSH_BYTES = 4 * 1024 * 1024
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
class PutResult:
    topic: str
    queueId: int
    queueOffset: int
    commitLogOffset: int
    storeSize: int
    storeTimestamp: int
    tagsCode: int
    msgId: str
    propertiesRaw: str = ""  # as stored (after the delay rewrite)


@dataclass(slots=True)
class RecoveryReport:
    valid_end: int = 0
    wiped_bytes: int = 0
    redispatched: int = 0
    truncated_units: int = 0
    indexed: int = 0  # records the index lacked (a lost batch, or appended by an older rmqdelay)

    @property
    def changed(self) -> bool:
        return bool(self.wiped_bytes or self.redispatched or self.truncated_units)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _QueueFiles:
    """Write side of one consume queue: units at logical offsets, files made on demand.

    Units go through a shared memory map of each file, as the broker writes them: a unit is a
    20-byte store, not a system call, and a killed process leaves in the file every unit it
    stored, in the order it stored them. ``sync`` makes them durable (msync + fsync)."""

    def __init__(self, directory: Path, file_size: int) -> None:
        self.directory = directory
        existing = list_mapped_files(directory)
        self.file_size = existing[0].size if existing else file_size
        self._fds: dict[int, int] = {}
        self._maps: dict[int, mmap.mmap] = {}
        self.dirty: set[int] = set()

    def _fd(self, file_start: int) -> int:
        fd = self._fds.get(file_start)
        if fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            path = self.directory / f"{file_start:020d}"
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if created or os.fstat(fd).st_size < self.file_size:
                os.ftruncate(fd, self.file_size)
            if created:
                fsync_dir(self.directory)
            self._fds[file_start] = fd
        return fd

    def _map(self, file_start: int) -> mmap.mmap:
        mapped = self._maps.get(file_start)
        if mapped is None:
            fd = self._fd(file_start)
            mapped = mmap.mmap(fd, os.fstat(fd).st_size)
            self._maps[file_start] = mapped
        return mapped

    def write(self, logical_offset: int, data: bytes) -> None:
        """Write whole units starting at ``logical_offset``, splitting at file ends."""
        pos = logical_offset * CQ_STORE_UNIT_SIZE
        view = memoryview(data)
        while view:
            file_start = pos - pos % self.file_size
            room = file_start + self.file_size - pos
            chunk = view[:room]
            at = pos - file_start
            self._map(file_start)[at:at + len(chunk)] = chunk
            self.dirty.add(file_start)
            pos += len(chunk)
            view = view[len(chunk):]

    def sync(self) -> None:
        for start in self.dirty:
            self._maps[start].flush()
            os.fsync(self._fds[start])
        self.dirty.clear()

    def close(self) -> None:
        for mapped in self._maps.values():
            mapped.close()
        self._maps.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class StoreWriter:
    """Holds STORE/lock while open; every other writer of a store goes through this."""

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
        index: IndexSettings | None = None,
    ) -> None:
        self.path = Path(path)
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
        self._created_abort = False
        self._opened = False
        self._valid_topics: set[str] = set()  # checked once each: put() is a hot path
        self.recovery = RecoveryReport()

    # -- open / close --------------------------------------------------------------------
    def open(self) -> "StoreWriter":
        if not self.path.is_dir():
            if not self._create:
                check_store_directory(self.path)  # says what it is instead: missing, a file, ...
            self.path.mkdir(parents=True)
        (self.path / "commitlog").mkdir(exist_ok=True)
        (self.path / "consumequeue").mkdir(exist_ok=True)
        self._lock.acquire()
        try:
            if not (self.path / "abort").exists():
                # The broker's own crash marker: present while writing, gone after a clean close.
                (self.path / "abort").touch()
                fsync_dir(self.path)
                self._created_abort = True
            self._load()
        except BaseException:
            self._lock.release()
            raise
        self._opened = True
        return self

    def __enter__(self) -> "StoreWriter":
        return self.open()

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close()

    def close(self) -> None:
        if not self._opened:
            return
        self.flush()
        if self._indexer is not None:
            self._indexer.close()
            self._write_checkpoint()
        if self._cl_fd is not None:
            os.close(self._cl_fd)
            self._cl_fd = None
        for q in self._queues.values():
            q.close()
        self._cp_fd and os.close(self._cp_fd)
        if self._created_abort:
            (self.path / "abort").unlink(missing_ok=True)
            fsync_dir(self.path)
        self._lock.release()
        self._opened = False

    # -- state ---------------------------------------------------------------------------
    def _load(self) -> None:
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
            self._queue_offsets: dict[tuple[str, int], int] = {}
            self._queues: dict[tuple[str, int], _QueueFiles] = {}
            self._cl_fd: int | None = None
            self._cl_file_start = -1
            self._pending: list[bytes] = []
            self._pending_bytes = 0
            self._pending_start = 0  # physical offset of the first pending byte
            self._pending_units: list[tuple[str, int, int, bytes]] = []
            self._unsynced_files: set[int] = set()  # commit log files written with sync=False
            self._last_store_ts = 0
            cp = store.checkpoint()
            self._checkpoint = cp or Checkpoint(0, 0, 0)
            self._cp_fd: int | None = None
            self.recovery = self._recover(store)
            if self._index_settings.messageIndexEnable:
                # IndexService.buildIndex for every record appended: the index follows the log.
                self._indexer = MessageIndexer(index_dir(self.path), self._index_settings, sync=self.sync)
                self.recovery.indexed = self._indexer.catch_up(store.commitlog, self._end)
        finally:
            store.close()

    def _recover(self, store: Store) -> RecoveryReport:
        """Finish what a crash left: wipe a torn tail, dispatch undispatched records,
        drop units that point past the log. What the broker's recovery would do, up front."""
        report = RecoveryReport()
        for info in store.queue_infos():
            self._queue_offsets[(info.topic, info.queueId)] = info.maxOffset
        start = self._scan_start(store)
        valid_end = start
        undispatched: list[Message] = []
        try:
            for record in store.commitlog.records(start, include_blanks=True):
                if isinstance(record, Blank):
                    valid_end = record.physicalOffset + record.totalSize
                    continue
                if not record.bodyCrcOk:
                    break
                undispatched.append(record)
                valid_end = record.commitLogOffset + record.storeSize
        except StoreError:
            pass  # a torn or corrupt record: the log ends before it
        report.valid_end = valid_end
        report.wiped_bytes = self._wipe_after(valid_end)
        for msg in undispatched:
            report.redispatched += self._redispatch(msg)
        report.truncated_units = self._truncate_units(store, valid_end)
        for q in self._queues.values():
            q.sync()
        self._end = valid_end
        return report

    def _scan_start(self, store: Store) -> int:
        """Where the undispatched tail begins: after the last unit's message when that
        message is whole, else the start of its file (the queues ran ahead of the log)."""
        commitlog = store.commitlog
        if not commitlog.files:
            return 0
        best = None
        for info in store.queue_infos():
            if best is None or info.maxPhysicOffset > best[0]:
                best = (info.maxPhysicOffset, info.topic, info.queueId, info.maxOffset)
        if best is None or best[0] <= commitlog.min_offset:
            return commitlog.min_offset
        end, topic, qid, max_offset = best
        unit = store.consume_queue(topic, qid).unit(max_offset - 1)
        try:
            msg = commitlog.read_message(unit.commitLogOffset, unit.size)
            if msg.bodyCrcOk:
                return end
        except StoreError:
            pass
        index = commitlog.file_index(unit.commitLogOffset)
        return commitlog.files[index].start if index >= 0 else commitlog.files[-1].start

    def _wipe_after(self, valid_end: int) -> int:
        """Zero whatever follows the last whole record in its file; drop later files."""
        files = list_mapped_files(self.path / "commitlog")
        wiped = 0
        for mf in files:
            if mf.end <= valid_end:
                continue
            if mf.start > valid_end or (mf.start == valid_end and mf is not files[0]):
                wiped += mf.size
                mf.path.unlink()
                continue
            fd = os.open(mf.path, os.O_RDWR)
            try:
                pos = valid_end - mf.start
                chunk = 1 << 20
                while pos < mf.size:
                    data = os.pread(fd, min(chunk, mf.size - pos), pos)
                    if not data.strip(b"\0"):
                        break  # the rest was never written
                    os.pwrite(fd, bytes(len(data)), pos)
                    wiped += len(data)
                    pos += len(data)
                if wiped:
                    os.fsync(fd)
            finally:
                os.close(fd)
        if wiped:
            fsync_dir(self.path / "commitlog")
        return wiped

    def _redispatch(self, msg: Message) -> int:
        key = (msg.topic, msg.queueId)
        if _tran_type(msg.sysFlag) in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            return 0
        if msg.queueOffset < self._queue_offsets.get(key, 0):
            return 0  # already has its unit
        unit = _unit_bytes(msg.commitLogOffset, msg.storeSize,
                           self._tags_code(msg.topic, msg.properties, msg.storeTimestamp))
        self._queue(msg.topic, msg.queueId).write(msg.queueOffset, unit)
        self._queue_offsets[key] = msg.queueOffset + 1
        return 1

    def _truncate_units(self, store: Store, valid_end: int) -> int:
        truncated = 0
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                max_offset = self._queue_offsets.get((topic, qid), cq.max_offset)
                units = cq.units(max(cq.min_offset, max_offset - 4096), max_offset)
                ends = units["commitLogOffset"] + units["size"]
                bad = int((ends > valid_end).sum())
                if bad:
                    first_bad = max_offset - bad
                    self._queue(topic, qid).write(first_bad, bytes(bad * CQ_STORE_UNIT_SIZE))
                    self._queue_offsets[(topic, qid)] = first_bad
                    truncated += bad
        return truncated

    def _queue(self, topic: str, queue_id: int) -> _QueueFiles:
        key = (topic, queue_id)
        q = self._queues.get(key)
        if q is None:
            q = _QueueFiles(self.path / "consumequeue" / topic / str(queue_id), self._cq_file_size)
            self._queues[key] = q
        return q

    @property
    def end_offset(self) -> int:
        """The physical offset the next record will be written at (pending included)."""
        return self._end

    def next_queue_offset(self, topic: str, queue_id: int) -> int:
        return self._queue_offsets.get((topic, queue_id), 0)

    def _tags_code(self, topic: str, properties: dict[str, str], store_ts: int) -> int:
        """CommitLog.checkMessageAndReturnSize: the deliver time for SCHEDULE_TOPIC_XXXX."""
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            t = java_parse_int(properties.get(PROPERTY_DELAY_TIME_LEVEL, ""))
            if t is not None:
                level = min(t, self.max_level)
                if level > 0:
                    return store_ts + self.delay_levels[level]
        return tags_code(properties.get(PROPERTY_TAGS))

    # -- put -----------------------------------------------------------------------------
    def put(self, new: NewMessage) -> PutResult:
        """CommitLog.putMessage: delay rewrite, queue offset, encode, append; unit queued."""
        if not self._opened:
            raise UsageError("the store writer is not open")
        topic, queue_id = new.topic, new.queueId
        if topic not in self._valid_topics:
            validate_topic(topic)
            self._valid_topics.add(topic)
        props = new.properties
        props_raw = new.propertiesRaw
        tran = _tran_type(new.sysFlag)
        if tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            level = _int_or_zero(props.get(PROPERTY_DELAY_TIME_LEVEL))
            if level > 0:
                props = dict(props)
                if level > self.max_level:
                    props[PROPERTY_DELAY_TIME_LEVEL] = str(self.max_level)
                    level = self.max_level
                props[PROPERTY_REAL_TOPIC] = topic
                props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
                props_raw = None
                topic, queue_id = RMQ_SYS_SCHEDULE_TOPIC, level - 1
        if props_raw is None:
            props_raw = format_properties(java_order(props))
        store_ts = new.storeTimestamp if new.storeTimestamp is not None else self.clock()
        sys_flag = new.sysFlag
        sys_flag = (sys_flag | BORNHOST_V6_FLAG) if len(new.bornHost[0]) == 16 else (sys_flag & ~BORNHOST_V6_FLAG)
        sys_flag = (sys_flag | STOREHOSTADDRESS_V6_FLAG) if len(new.storeHost[0]) == 16 else (sys_flag & ~STOREHOSTADDRESS_V6_FLAG)
        topic_bytes = topic.encode("utf-8")
        props_bytes = props_raw.encode("utf-8", "surrogateescape")
        if len(props_bytes) > 32767:
            raise UsageError(f"properties of {len(props_bytes)} bytes; a record holds at most 32767")
        size = message_size(sys_flag, len(new.body), len(topic_bytes), len(props_bytes))
        self._ensure_room(size)
        key = (topic, queue_id)
        dispatch = tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)
        queue_offset = self._queue_offsets.get(key, 0) if dispatch else 0
        offset = self._end
        msg = Message(size, MESSAGE_MAGIC_CODE, body_crc(new.body), queue_id, new.flag, queue_offset,
                      offset, sys_flag, new.bornTimestamp, new.bornHost[0], new.bornHost[1], store_ts,
                      new.storeHost[0], new.storeHost[1], new.reconsumeTimes,
                      new.preparedTransactionOffset, new.body, topic, props_raw)
        if not self._pending:
            self._pending_start = offset
        self._pending.append(encode_message(msg))
        self._end += size
        self._pending_bytes += size
        code = self._tags_code(topic, props if new.propertiesRaw is None else _props_of(props_raw), store_ts)
        if self._indexer is not None:
            if new.propertiesRaw is None and props_raw.count(PROPERTY_SEPARATOR) == len(props) - 1 \
                    and props_raw.count(NAME_VALUE_SEPARATOR) == len(props):
                # One pair per segment: the map reads back as it is (less empty values).
                self._indexer.add(offset, store_ts, topic, props.get(PROPERTY_KEYS) or None,
                                  props.get(PROPERTY_UNIQ) or None, sys_flag)
            else:
                self._indexer.add_stored(offset, store_ts, topic, props_raw, sys_flag)
        if dispatch:
            self._queue_offsets[key] = queue_offset + 1
            self._pending_units.append((topic, queue_id, queue_offset, _unit_bytes(offset, size, code)))
        self._last_store_ts = max(self._last_store_ts, store_ts)
        if self._pending_bytes >= FLUSH_BYTES:
            self.flush()
        return PutResult(topic, queue_id, queue_offset, offset, size, store_ts, code,
                         create_message_id(new.storeHost[0], new.storeHost[1], offset), props_raw)

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

    # -- flush ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Write pending records, fsync, then their units, fsync, then the checkpoint."""
        if self._pending:
            data = b"".join(self._pending)
            start = self._pending_start
            self._pending.clear()
            self._pending_bytes = 0
            view = memoryview(data)
            while view:
                file_start = start - start % self._commitlog_file_size
                room = file_start + self._commitlog_file_size - start
                chunk = view[:room]
                fd = self._commitlog_fd(file_start)
                os.pwrite(fd, chunk, start - file_start)
                if self.sync:
                    os.fsync(fd)
                else:
                    self._unsynced_files.add(file_start)
                start += len(chunk)
                view = view[len(chunk):]
        if self._pending_units:
            # Units are written in commit log order (consecutive units of one queue in one
            # write), so a kill -9 part way leaves dispatched a prefix of the records, which
            # is what recovery's scan start (the highest unit's message end) assumes.
            runs: list[tuple[tuple[str, int], int, list[bytes]]] = []
            for topic, qid, qoff, unit in self._pending_units:
                if runs and runs[-1][0] == (topic, qid):
                    runs[-1][2].append(unit)
                else:
                    runs.append(((topic, qid), qoff, [unit]))
            self._pending_units.clear()
            touched = {}
            for key, first, units in runs:
                q = touched.get(key) or self._queue(*key)
                touched[key] = q
                q.write(first, b"".join(units))
            if self.sync:
                for q in touched.values():
                    q.sync()
            if self._indexer is not None:
                self._indexer.flush()
            self._write_checkpoint()

    def sync_to_disk(self) -> None:
        """fsync what flush() wrote with sync=False (commit log, then queues, then the
        checkpoint): after this, everything flushed so far survives a power loss."""
        self.flush()
        for file_start in sorted(self._unsynced_files):
            if file_start == self._cl_file_start and self._cl_fd is not None:
                os.fsync(self._cl_fd)
            else:
                fd = os.open(self.path / "commitlog" / f"{file_start:020d}", os.O_RDWR)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        self._unsynced_files.clear()
        for q in self._queues.values():
            q.sync()
        if self._indexer is not None:
            self._indexer.sync_to_disk()
            self._write_checkpoint()
        if self._cp_fd is not None:
            os.fsync(self._cp_fd)

    def _commitlog_fd(self, file_start: int) -> int:
        if self._cl_file_start != file_start:
            if self._cl_fd is not None:
                os.close(self._cl_fd)
            directory = self.path / "commitlog"
            path = directory / f"{file_start:020d}"
            created = not path.exists()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size < self._commitlog_file_size:
                os.ftruncate(fd, self._commitlog_file_size)  # preallocated, zero-filled
            if created:
                fsync_dir(directory)
            self._cl_fd, self._cl_file_start = fd, file_start
        return self._cl_fd

    def _write_checkpoint(self) -> None:
        cp = self._checkpoint
        # indexMsgTimestamp: index files that end by then are whole (IndexService.load keeps
        # them after a crash); the indexer moves it only past entries it has committed.
        index_ts = self._indexer.end_timestamp if self._indexer is not None else 0
        if self._last_store_ts <= 0 and index_ts <= cp.indexMsgTimestamp:
            return
        cp.physicMsgTimestamp = max(cp.physicMsgTimestamp, self._last_store_ts)
        cp.logicsMsgTimestamp = max(cp.logicsMsgTimestamp, self._last_store_ts)
        cp.indexMsgTimestamp = max(cp.indexMsgTimestamp, index_ts)
        if self._cp_fd is None:
            path = self.path / "checkpoint"
            created = not path.exists()
            self._cp_fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            if created:
                os.ftruncate(self._cp_fd, CHECKPOINT_FILE_SIZE)
        os.pwrite(self._cp_fd, build_checkpoint(cp)[:24], 0)
        if self.sync:
            os.fsync(self._cp_fd)


def _tran_type(sys_flag: int) -> int:
    return sys_flag & TRANSACTION_TYPE_MASK


def _int_or_zero(text: str | None) -> int:
    # Message.getDelayTimeLevel reads it with Integer.parseInt; a non-number is no delay.
    value = java_parse_int(text) if text is not None else None
    return 0 if value is None else value


_UNIT = struct.Struct(">qiq")


def _unit_bytes(offset: int, size: int, tags_code_value: int) -> bytes:
    return _UNIT.pack(offset, size, tags_code_value)


class _StoredProperties:
    """The few properties put() reads (TAGS, DELAY) straight from a stored string, without
    parsing all of it: same answers as parse_properties(raw).get(key)."""

    __slots__ = ("raw",)

    def __init__(self, raw: str) -> None:
        self.raw = raw

    def get(self, key: str, default: str | None = None) -> str | None:
        value = property_value(self.raw, key)
        return default if value is None else value


def _props_of(raw: str) -> _StoredProperties:
    return _StoredProperties(raw)
