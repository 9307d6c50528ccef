"""The one writer, run in a process of its own, for a caller that makes records as fast as one
core can: ``samples generate`` makes the records on one core while the StoreWriter writes
them (commit log, consume queues, index, checkpoint) on the other.

``WriterProcess`` answers ``put``/``put_encoded`` at once, as the writer would: the place of
each record (queue offset, physical offset, a new commit log file where the writer starts
one) is known from the sizes alone, so the caller goes on while the records travel in
batches to the child (through two slots of shared memory, the pipe carrying only which slot
is full and which is free again), whose StoreWriter appends them (``put_encoded_batch``) after checking
that each goes where it was announced. Everything the writer promises holds in the
child unchanged: the store's lock, write then publish, the first error stops it for good,
and a kill of either process leaves what a crash of the writer leaves. The child's first
error reaches the caller's next call (or ``sync_to_disk``/the close) as the same error.
"""

from __future__ import annotations

import marshal
import multiprocessing
import os
import traceback
from multiprocessing.shared_memory import SharedMemory
from pathlib import Path

from rmqdelay.errors import RmqDelayError, StoreWriteError, UsageError
from rmqdelay.formats.constants import (
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.store.commitlog import END_FILE_MIN_BLANK_LENGTH
from rmqdelay.store.encode import ENCODED_HEAD, OFFSETS, PutEncoder
from rmqdelay.store.writer import FLUSH_BYTES, NewMessage, PutResult, StoreWriter

SLOT_BYTES = 2 * FLUSH_BYTES + (1 << 20)  # a batch's records (FLUSH_BYTES and one more record) and its entries
SLOTS = 2


class _Abandon(Exception):
    """Leave the child's writer as a crash would (the caller stopped by an error)."""


class WriterProcess:
    """A StoreWriter in a child process, with put()/put_encoded() answered here. Takes the
    StoreWriter's keyword options (not ``clock``: every message must carry its store time)."""

    def __init__(self, path: Path | str, **options) -> None:
        self.path = Path(path)
        self._options = options
        self._conn = None
        self._process = None
        self._records: list = []
        self._meta: list[tuple] = []
        self._bytes = 0
        self._error: BaseException | None = None
        self._shm: SharedMemory | None = None
        self._busy = [False] * SLOTS  # sent to the child, not copied out yet
        self._next_slot = 0

    # -- open / close ----------------------------------------------------------------------
    def __enter__(self) -> "WriterProcess":
        context = multiprocessing.get_context("spawn")
        self._shm = SharedMemory(create=True, size=SLOTS * SLOT_BYTES)
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_serve, args=(child, str(self.path), self._options, self._shm.name),
                                        name="rmqdelay-writer", daemon=True)
        try:
            self._process.start()
        except BaseException:
            self._release_memory()
            raise
        child.close()
        try:
            state = self._reply("opened")
        except BaseException:
            self._join()
            raise
        self.write_format, delay_levels, self._file_size, self._end, queue_offsets = state
        self._queue_offsets = queue_offsets
        self.encoder = PutEncoder(self.write_format, delay_levels, _no_clock)  # put()'s, as the writer's
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self._ship()
            self._send(("close",))
            self._reply("closed")
            self._join()
        else:
            self.abandon()

    def abandon(self) -> None:
        """Stop the child's writer as a crash would: what is not shipped is dropped."""
        self._records.clear()
        self._meta.clear()
        if self._process is None:
            return
        try:
            self._conn.send(("abandon",))
        except OSError:
            pass
        self._join()

    def _join(self) -> None:
        self._process.join(60)
        if self._process.is_alive():
            self._process.kill()
            self._process.join()
        self._conn.close()
        self._process = None
        self._release_memory()

    def _release_memory(self) -> None:
        if self._shm is not None:
            self._shm.close()
            self._shm.unlink()
            self._shm = None

    # -- put -------------------------------------------------------------------------------
    @property
    def end_offset(self) -> int:
        return self._end

    def put(self, new: NewMessage) -> PutResult:
        """StoreWriter.put, answered here."""
        e = self.encoder.encode(new)
        size = len(e.record)
        queue_offset, offset = self._place(e.topic, e.queue_id, size, e.dispatch)
        record = e.place(queue_offset, offset)
        self._queue(record, (e.topic, e.queue_id, size, e.tags_code, e.keys, e.uniq, queue_offset, offset))
        return PutResult(e.topic, e.queue_id, queue_offset, offset, size, e.store_ts, e.tags_code,
                         create_message_id(new.storeHost[0], new.storeHost[1], offset), e.properties_raw)

    def put_encoded(self, topic: str, queue_id: int, record: bytearray, tags_code_value: int,
                    keys: str | None, uniq_key: str | None) -> tuple[int, int]:
        """StoreWriter.put_encoded, answered here (the record's offsets are filled in here).
        (``_place`` and ``_queue`` written out: this is the generator's hot path.)"""
        size, _magic, sys_flag = ENCODED_HEAD.unpack_from(record)
        if self._end % self._file_size + size + END_FILE_MIN_BLANK_LENGTH > self._file_size:
            self._next_file(size)
        queue_offset = 0
        if sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE):
            key = (topic, queue_id)
            queue_offset = self._queue_offsets.get(key, 0)
            self._queue_offsets[key] = queue_offset + 1
        offset = self._end
        self._end = offset + size
        OFFSETS.pack_into(record, 20, queue_offset, offset)
        self._records.append(record)
        self._meta.append((topic, queue_id, size, tags_code_value, keys, uniq_key, queue_offset, offset))
        self._bytes += size
        if self._bytes >= FLUSH_BYTES:
            self._ship()
        return queue_offset, offset

    def _next_file(self, size: int) -> None:
        """As StoreWriter._ensure_room: a record that does not fit the rest of its file (with
        the end-of-file BLANK) starts the next file."""
        file_size = self._file_size
        if size + END_FILE_MIN_BLANK_LENGTH > file_size:
            raise UsageError(f"a message of {size} bytes does not fit a commit log file of {file_size} bytes")
        self._end += file_size - self._end % file_size

    def _place(self, topic: str, queue_id: int, size: int, dispatch: bool) -> tuple[int, int]:
        """Where the writer will put a record of ``size`` bytes."""
        if self._end % self._file_size + size + END_FILE_MIN_BLANK_LENGTH > self._file_size:
            self._next_file(size)
        queue_offset = 0
        if dispatch:
            key = (topic, queue_id)
            queue_offset = self._queue_offsets.get(key, 0)
            self._queue_offsets[key] = queue_offset + 1
        offset = self._end
        self._end += size
        return queue_offset, offset

    def _queue(self, record, meta: tuple) -> None:
        self._records.append(record)
        self._meta.append(meta)
        self._bytes += meta[2]
        if self._bytes >= FLUSH_BYTES:
            self._ship()

    def _ship(self) -> None:
        """Send what is queued to the child (after the child's error, if it had one)."""
        if self._error is not None:
            raise self._error
        self._take_replies(block=False)
        if not self._meta:
            return
        entries = marshal.dumps(self._meta)  # tuples of str, int, None: marshal is the fast way
        records = b"".join(self._records)
        self._meta, self._records, self._bytes = [], [], 0
        if len(records) + len(entries) > SLOT_BYTES:  # a record too big for a slot: through the pipe
            self._send(("pipe", None))
            self._send_bytes(records)
            self._send_bytes(entries)
            return
        slot = self._next_slot
        self._next_slot = (slot + 1) % SLOTS
        while self._busy[slot]:
            self._take_replies(block=True)
        at = slot * SLOT_BYTES
        buf = self._shm.buf
        buf[at:at + len(records)] = records
        buf[at + len(records):at + len(records) + len(entries)] = entries
        self._busy[slot] = True
        self._send(("slot", (slot, len(records), len(entries))))

    def sync_to_disk(self) -> None:
        """StoreWriter.sync_to_disk: everything put so far is durable when this returns."""
        self._ship()
        self._send(("sync",))
        self._reply("synced")

    def _take_replies(self, block: bool) -> None:
        """Note the slots the child has copied out (it says so unasked, as it says an error)."""
        while block or self._conn.poll():
            self._reply("free")
            block = False

    # -- the pipe --------------------------------------------------------------------------
    def _send(self, message: tuple) -> None:
        if self._error is not None:
            raise self._error
        try:
            self._conn.send(message)
        except OSError:
            self._lost()

    def _send_bytes(self, data: bytes) -> None:
        try:
            self._conn.send_bytes(data)
        except OSError:
            self._lost()

    def _reply(self, expected: str):
        """The child's next answer but the slots it freed meanwhile: ``expected``'s value."""
        while True:
            try:
                kind, value = self._conn.recv()
            except (EOFError, OSError):
                self._lost()
            if kind != "free":
                break
            self._busy[value] = False
            if expected == "free":
                return value
        if kind == "error":
            self._error = value
            raise value
        if kind == "crash":
            self._error = RuntimeError(f"the writer process failed:\n{value}")
            raise self._error
        if kind != expected:
            raise RuntimeError(f"the writer process answered {kind!r} where {expected!r} was due")
        return value

    def _lost(self):
        """The pipe broke: the child's error if it sent one before it ended, else how it ended."""
        if self._error is None:
            try:
                while self._conn.poll():
                    kind, value = self._conn.recv()
                    if kind in ("error", "crash"):
                        self._error = value if kind == "error" else RuntimeError(
                            f"the writer process failed:\n{value}")
                        break
            except (EOFError, OSError):
                pass
        if self._error is None:
            self._process.join(5)
            self._error = StoreWriteError(self.path, None, f"the writer process ended unexpectedly "
                                                           f"(exit code {self._process.exitcode}); nothing "
                                                           f"after its last flush is published")
        raise self._error


def _no_clock() -> int:
    raise UsageError("a message put through the writer process needs its store time")


def _serve(conn, path: str, options: dict, memory: str) -> None:
    """The child: one StoreWriter, fed from the slots until told to close (or the pipe ends,
    which leaves the store as a crash would)."""
    shm = SharedMemory(memory)  # made and removed by the caller (its resource tracker is this one's)
    try:
        with StoreWriter(path, **options) as writer:
            conn.send(("opened", (writer.write_format, writer.delay_levels, writer.commitlog_file_size,
                                  writer.end_offset, writer.next_queue_offsets())))
            while True:
                try:
                    message = conn.recv()
                except EOFError:
                    raise _Abandon() from None
                kind = message[0]
                if kind == "slot":
                    slot, records_len, entries_len = message[1]
                    at = slot * SLOT_BYTES
                    records = bytes(shm.buf[at:at + records_len])
                    entries = marshal.loads(shm.buf[at + records_len:at + records_len + entries_len])
                    conn.send(("free", slot))
                    writer.put_encoded_batch(records, entries)
                elif kind == "pipe":
                    records = conn.recv_bytes()
                    writer.put_encoded_batch(records, marshal.loads(conn.recv_bytes()))
                elif kind == "sync":
                    writer.sync_to_disk()
                    conn.send(("synced", None))
                elif kind == "close":
                    break
                else:
                    raise _Abandon()
        conn.send(("closed", None))
    except _Abandon:
        pass
    except RmqDelayError as exc:
        _send_quietly(conn, ("error", exc))
    except BaseException:
        _send_quietly(conn, ("crash", traceback.format_exc()))
    finally:
        shm.close()
        conn.close()


def _send_quietly(conn, message: tuple) -> None:
    try:
        conn.send(message)
    except (OSError, ValueError):
        os._exit(1)
