"""The timer store's files, write side: the timer log appended unit by unit as TimerLog.append
does (a BLANK and a new file when 52 + 16 bytes no longer fit), and the wheel's slots as
TimerWheel.putSlot writes them.

Appended units wait in one buffer (at most ``PENDING_LIMIT`` bytes) and go out with one pwrite
(fileio) per timer log file they fall in: when the buffer is full, before anything in them is
rewritten in place, and on ``sync`` (the engine also writes them at the end of each enqueue
pass). A unit still in the buffer is read from it, any other with pread. A kill before they
are written leaves the log as a kill before their appends did (the run's published state
never names them).

Wheel slots are kept in memory (every non-empty slot of the file, then the changes) and
written back, changed slots only (an array of them, a run of neighbouring ones in one write),
on ``flush``: the broker's own TimerWheel also works on a copy and writes back the bytes that
differ. Nothing here is fsynced until ``sync``: the engine publishes the timer checkpoint
only after it.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.timerlog import (
    MIN_BLANK_LEN,
    UNIT_SIZE,
    TimerLogUnit,
    build_blank,
    is_magic_ok,
)
from rmqdelay.formats.timerwheel import (
    SLOT_DTYPE,
    SLOT_SIZE,
    WHEEL_FILE_SIZE,
    WHEEL_SLOTS,
)
from rmqdelay.store import fileio
from rmqdelay.store.mappedfiles import list_mapped_files

_UNIT = struct.Struct(">iqiqiqiiq")
_TARGET_AT = 28  # offsetPy, sizePy, hashCodeOfRealTopic: 16 contiguous bytes
_MAGIC_AT = 12  # where a unit's magic is: 4 bytes, never across a 512-byte sector (52k + 12 is even)
PENDING_LIMIT = 1 << 18  # bytes of appended units held before they are written


class TimerLogFiles:
    """Append and read units of ``timerlog/``. ``end`` is where the next unit goes."""

    def __init__(self, directory: Path, file_size: int, end: int) -> None:
        self.directory = Path(directory)
        existing = list_mapped_files(self.directory) if self.directory.is_dir() else []
        self.file_size = existing[0].size if existing else file_size
        self.end = end
        self._fds: dict[int, int] = {}  # opened to write (and read)
        self._read_fds: dict[int, int] = {}  # opened to read only: a read (a dry run's) writes nothing
        self._dirty: set[int] = set()
        self._pending = bytearray()  # appended units (and BLANKs) not written yet, from _pending_at
        self._pending_at = end

    def close(self) -> None:
        for fds in (self._fds, self._read_fds):
            for fd in fds.values():
                os.close(fd)
            fds.clear()

    def _path(self, file_start: int) -> Path:
        return self.directory / f"{file_start:020d}"

    def _fd(self, file_start: int) -> int:
        fd = self._fds.get(file_start)
        if fd is not None:
            return fd
        path = self._path(file_start)
        fileio.make_dirs(self.directory)
        fd, created = fileio.open_for_write(path)
        try:
            if os.fstat(fd).st_size < self.file_size:
                fileio.ftruncate(fd, self.file_size, path)  # as the broker preallocates: zeros
            if created:
                fileio.fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            raise
        self._fds[file_start] = fd
        return fd

    def _write(self, offset: int, data: bytes, *, appending: bool = False) -> None:
        file_start = offset - offset % self.file_size
        fd = self._fd(file_start)
        self._dirty.add(file_start)
        # An append goes into zeros: what a failed one wrote is zeroed again (no torn unit).
        fileio.write_all(fd, data, offset - file_start, self._path(file_start), zero_on_failure=appending)

    def append(self, unit_fields: tuple) -> int:
        """Append one unit (TimerLog.append): its global offset. ``unit_fields`` are
        (prevPos, magic, currWriteTime, delayedTime, offsetPy, sizePy, hashCodeOfRealTopic).
        It is written with the units around it (``write_pending``)."""
        pending = self._pending
        if not pending:
            self._pending_at = self.end
        room = self.file_size - self.end % self.file_size
        if room < UNIT_SIZE + MIN_BLANK_LEN:
            blank = build_blank(room)
            pending += blank
            pending += bytes(max(room - len(blank), 0))  # zeros to the file's end, as it is
            self.end += room
        offset = self.end
        pending += _UNIT.pack(UNIT_SIZE, *unit_fields, 0)
        self.end += UNIT_SIZE
        if len(pending) >= PENDING_LIMIT:
            self.write_pending()
        return offset

    def write_pending(self) -> None:
        """The appended units not written yet: one write per timer log file they fall in."""
        data, at = self._pending, self._pending_at
        if not data:
            return
        self._pending = bytearray()
        self._pending_at = self.end
        view = memoryview(data)
        while view:
            stop = at - at % self.file_size + self.file_size
            chunk = view[:stop - at]
            self._write(at, chunk, appending=True)
            at += len(chunk)
            view = view[len(chunk):]

    def _before_rewrite(self, offset: int, stop: int) -> None:
        """Bytes [offset, stop) are about to be written in place: pending units there go first."""
        if self._pending and stop > self._pending_at and offset < self._pending_at + len(self._pending):
            self.write_pending()

    def read(self, offset: int) -> TimerLogUnit:
        """The unit at a global offset, checked (StoreError when it is none)."""
        file_start = offset - offset % self.file_size
        at = offset - self._pending_at
        if self._pending and 0 <= at <= len(self._pending) - UNIT_SIZE:
            data = self._pending[at:at + UNIT_SIZE]
        else:
            data = self._read_written(file_start, offset)
        if len(data) < UNIT_SIZE:
            raise StoreError(self._path(file_start), offset - file_start, f"a timer log unit of {UNIT_SIZE} bytes")
        size, prev, magic, cwt, delayed, offset_py, size_py, topic_hash, reserved = _UNIT.unpack(data)
        if size != UNIT_SIZE or not is_magic_ok(magic):
            raise StoreError(self._path(file_start), offset - file_start,
                             f"a timer log unit (size {UNIT_SIZE}, magic 0x1..0xF), "
                             f"found size {size} magic 0x{magic & 0xFFFFFFFF:X}")
        return TimerLogUnit(offset, prev, magic, cwt, delayed, offset_py, size_py, topic_hash, reserved)

    def _read_written(self, file_start: int, offset: int) -> bytes:
        path = self._path(file_start)
        try:
            fd = self._fds.get(file_start) or self._read_fds.get(file_start)
            if fd is None:
                fd = fileio.open_for_read(path)
                if fd is None:
                    raise StoreError(path, None, "a timer log file holding this offset")
                self._read_fds[file_start] = fd
            return os.pread(fd, UNIT_SIZE, offset - file_start)
        except OSError as exc:
            raise StoreError(self._path(file_start), offset - file_start,
                             f"a readable timer log ({exc.strerror})") from None

    def set_magic(self, offset: int, magic: int) -> None:
        """Rewrite one unit's magic in place (a 4-byte write inside one sector)."""
        self._before_rewrite(offset + _MAGIC_AT, offset + _MAGIC_AT + 4)
        self._write(offset + _MAGIC_AT, struct.pack(">i", magic))

    def set_target(self, offset: int, offset_py: int, size_py: int, topic_hash: int) -> None:
        """Rewrite one unit's offsetPy, sizePy and hashCodeOfRealTopic in place (16 bytes)."""
        self._before_rewrite(offset + _TARGET_AT, offset + _TARGET_AT + 16)
        self._write(offset + _TARGET_AT, struct.pack(">qii", offset_py, size_py, topic_hash))

    def zero(self, start: int, stop: int) -> None:
        """Zero [start, stop) of the last file: a torn unit this program left."""
        if stop > start:
            self._before_rewrite(start, stop)
            self._write(start, bytes(stop - start))

    def sync(self) -> None:
        self.write_pending()
        for file_start in sorted(self._dirty):
            fileio.fsync(self._fds[file_start], self._path(file_start))
        self._dirty.clear()


@dataclass(slots=True)
class SlotState:
    timeSlot: int
    firstPos: int
    lastPos: int
    num: int
    magic: int


class WheelFile:
    """The wheel's non-empty slots in memory, written back on ``flush``."""

    def __init__(self, path: Path, precision_ms: int, rows) -> None:
        self.path = Path(path)
        self.precision_ms = precision_ms
        columns = [rows[name].tolist() for name in ("index", "timeSlot", "firstPos", "lastPos", "num", "magic")]
        self.slots: dict[int, SlotState] = {index: SlotState(*fields) for index, *fields in zip(*columns)}
        self._dirty: set[int] = set()
        self._fd: int | None = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def index(self, time_ms: int) -> int:
        return (time_ms // self.precision_ms) % WHEEL_SLOTS

    def get(self, time_ms: int) -> SlotState | None:
        """TimerWheel.getSlot: None when the slot holds another time (or nothing)."""
        slot = self.slots.get(self.index(time_ms))
        if slot is None or slot.timeSlot != time_ms // self.precision_ms:
            return None
        return slot

    def put(self, time_ms: int, first: int, last: int, num: int, magic: int = 0) -> None:
        index = self.index(time_ms)
        self.slots[index] = SlotState(time_ms // self.precision_ms, first, last, num, magic)
        self._dirty.add(index)

    def touch(self, time_ms: int) -> None:
        self._dirty.add(self.index(time_ms))

    @property
    def dirty(self) -> bool:
        return bool(self._dirty)

    def flush(self) -> None:
        if not self._dirty:
            return
        if self._fd is None:
            fd, _ = fileio.open_for_write(self.path)
            try:
                if os.fstat(fd).st_size < WHEEL_FILE_SIZE:
                    fileio.ftruncate(fd, WHEEL_FILE_SIZE, self.path)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        indexes = sorted(self._dirty)
        slots = self.slots
        # The changed slots as TimerWheel.putSlot writes them, an array; a run of neighbouring
        # indexes is written at once.
        data = np.array([(s.timeSlot, s.firstPos, s.lastPos, s.num, s.magic) for s in map(slots.__getitem__, indexes)],
                        dtype=SLOT_DTYPE)
        at = np.asarray(indexes, dtype=np.int64)
        starts = [0, *(np.flatnonzero(np.diff(at) != 1) + 1).tolist()]
        for a, b in zip(starts, [*starts[1:], len(indexes)]):
            fileio.write_all(self._fd, data[a:b].tobytes(), indexes[a] * SLOT_SIZE, self.path)
        self._dirty.clear()

    def sync(self) -> None:
        self.flush()
        if self._fd is not None:
            fileio.fsync(self._fd, self.path)
