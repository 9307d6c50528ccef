"""The files the one writer writes besides the commit log: consume queue files, and the
journal that undoes a flush that failed half way.

Consume queue units are written with pwrite, not through maps: a store through a map into
a sparse file on a full disk ends in SIGBUS, while pwrite says ENOSPC. At most
``OPEN_QUEUE_FILES`` queue files stay open at once, whatever the number of queues, and at
most a quarter of the process's file limit (``ulimit -n``) when that is lower.
"""

from __future__ import annotations

import os
import resource
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.errors import StoreWriteError
from rmqdelay.formats.constants import CQ_PRE_BLANK_SIZE, CQ_STORE_UNIT_SIZE
from rmqdelay.store import fileio
from rmqdelay.store.mappedfiles import list_mapped_files

OPEN_QUEUE_FILES = 64
MIN_OPEN_QUEUE_FILES = 4
_PRE_BLANK_UNIT = struct.pack(">qiq", 0, CQ_PRE_BLANK_SIZE, 0)


@dataclass(slots=True)
class FlushJournal:
    """What one flush has written so far, to undo it when the flush fails: byte ranges
    (zeroed again: they were zeros before, appends into preallocated files) and the files
    it created (removed)."""

    ranges: list[tuple[Path | str, int, int]] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)

    def undo(self) -> None:
        """Best effort, last write first: units before the records they describe. At the
        first write that fails the rest stays, so no unit is left without its record; what
        is left is what a crash leaves, and the next open's recovery finishes it."""
        for path, at, length in reversed(self.ranges):
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                return
            try:
                os.pwrite(fd, bytes(length), at)
                os.fsync(fd)
            except OSError:
                return
            finally:
                os.close(fd)
        for path in reversed(self.created):
            unlink_quietly(path)
        for directory in dict.fromkeys(path.parent for path in self.created):
            try:
                fileio.fsync_dir(directory)
            except StoreWriteError:
                pass


def queue_files_allowed(wanted: int) -> int:
    """How many queue files may stay open: ``wanted``, or a quarter of the soft limit on open
    files when that is lower (the commit log, the index, the timer store, the directories
    fsynced and the interpreter's own need the rest), but never under
    ``MIN_OPEN_QUEUE_FILES``."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(MIN_OPEN_QUEUE_FILES, min(wanted, soft // 4))


class OpenFiles:
    """File descriptors of the consume queue files being written: at most ``capacity`` open
    (``queue_files_allowed``), the least recently used closed first (a closed file is opened
    again when written)."""

    def __init__(self, capacity: int = OPEN_QUEUE_FILES) -> None:
        self.capacity = queue_files_allowed(capacity)
        self._fds: OrderedDict[str, int] = OrderedDict()

    def get(self, path: str) -> int | None:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
        return fd

    def put(self, path: str, fd: int) -> None:
        self._fds[path] = fd
        while len(self._fds) > self.capacity:
            _, old = self._fds.popitem(last=False)
            os.close(old)

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()


class QueueFiles:
    """Write side of one consume queue: units at logical offsets, files made on demand.
    Paths are kept as strings: this is the hot path of every flush."""

    def __init__(self, directory: Path, file_size: int, files: OpenFiles, dirty: set[str]) -> None:
        self.directory = directory
        self._prefix = f"{directory}{os.sep}"
        existing = list_mapped_files(directory)
        # A file of 0 bytes is one a kill left between its creation and its ftruncate: it
        # tells no size, and it is grown to the queue's size when it is opened.
        sizes = [f.size for f in existing if f.size]
        self.file_size = sizes[0] if sizes else file_size
        self._has_files = bool(existing)
        self._files = files
        self._dirty = dirty
        self._path, self._path_start = "", -1  # the last file written, by its first byte

    def _open(self, path: str, first_at: int, journal: FlushJournal | None) -> int:
        fileio.make_dirs(self.directory)
        fd, created = fileio.open_for_write(path)
        try:
            if created or os.fstat(fd).st_size < self.file_size:
                fileio.ftruncate(fd, self.file_size, path)
            if created:
                if not self._has_files and first_at:
                    # The queue's first file starting past its first unit: the broker's
                    # fillPreBlank, so the units before are known not to exist.
                    fileio.write_all(fd, _PRE_BLANK_UNIT * (first_at // CQ_STORE_UNIT_SIZE), 0, path)
                fileio.fsync_dir(self.directory)
        except BaseException:
            os.close(fd)
            if created:
                unlink_quietly(path)
            raise
        self._has_files = True
        self._files.put(path, fd)
        if created and journal is not None:
            journal.created.append(Path(path))
        return fd

    def write(self, logical_offset: int, data: bytes, *, appending: bool = True,
              journal: FlushJournal | None = None) -> None:
        """Write whole units starting at ``logical_offset``, splitting at file ends."""
        pos = logical_offset * CQ_STORE_UNIT_SIZE
        size = self.file_size
        while data:
            file_start = pos - pos % size
            at = pos - file_start
            chunk = data[:file_start + size - pos]
            if file_start != self._path_start:
                self._path, self._path_start = f"{self._prefix}{file_start:020d}", file_start
            path = self._path
            fd = self._files.get(path)
            if fd is None:
                fd = self._open(path, at, journal)
            self._dirty.add(path)
            fileio.write_all(fd, chunk, at, path, zero_on_failure=appending)
            if journal is not None:
                journal.ranges.append((path, at, len(chunk)))
            pos += len(chunk)
            data = data[len(chunk):]


def unlink_quietly(path: Path | str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
