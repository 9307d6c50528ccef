"""``abort``, the broker's crash marker, as the one writer keeps it: present while a writer works,
removed by its clean close. The writer marks in it the log end it is about to write up to, so
that a later writer can tell an abort left by an rmqdelay writer (whose work recovery finishes)
from one left by a broker (whose abnormal recovery does more than rmqdelay's, and which is never
touched).

Beside the log end, the mark holds the dispatch floor: the first record whose unit the writer
may not have written yet. Every record before it has its unit; a flush writes the units of
its records a queue at a time (one write per queue file region), so a kill -9 part way may
leave one queue's units past another's, and recovery redispatches from the floor instead of
from the highest unit (what the broker's reput start assumes: units written in log order)."""

from __future__ import annotations

import os
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Blank
from rmqdelay.store import Store, fileio
from rmqdelay.store.commitlog import END_FILE_MIN_BLANK_LENGTH
from rmqdelay.store.writefiles import unlink_quietly

ABORT_MARK = b"rmqdelay "  # + the log end this writer has written up to and its dispatch floor
ABORT_TEMP = "abort.rmqdelay-new"  # the abort file being made, before it is linked as abort


class AbortMark:
    """The abort file of one writer's store, and whether this writer owns it (may remove it)."""

    def __init__(self, store_path: Path) -> None:
        self.store_path = store_path
        self.path = store_path / "abort"
        self.owned = False
        self.created = False  # made by this writer
        self._fd: int | None = None
        self._inherited: int | None = None  # the mark an earlier rmqdelay writer left
        self._inherited_floor: int | None = None  # and its dispatch floor (None: an older mark)

    def take(self) -> None:
        """The broker's crash marker, present while a writer works. This writer owns it when
        it makes it, or when it was left by an rmqdelay writer that stopped before its
        clean close and nothing was appended after that writer (checked after recovery:
        the marker holds the log end that writer had reached). A marker left by a broker is
        never touched: the broker's abnormal recovery does more than rmqdelay's. A missing
        marker is made by the first ``mark``, with its mark already in it."""
        path = self.path
        unlink_quietly(self.store_path / ABORT_TEMP)  # a writer killed while making its abort left it
        if not path.exists():
            self.owned = True
            return
        fd, _ = fileio.open_for_write(path, create=False)
        self._fd = fd
        try:
            content = os.pread(fd, 64, 0)
        except OSError as exc:
            raise StoreError(path, None, f"a readable file ({exc.strerror})") from None
        self._inherited, self._inherited_floor = _parse_abort_mark(content)

    def adopt(self, store, end: int) -> None:
        """An abort left by an rmqdelay writer becomes this writer's when no other writer came
        after it (``end``: the log end recovery found); recovery then finishes that writer's work."""
        if not self.owned and self._inherited is not None and _mark_reaches(store, self._inherited, end):
            self.owned = True

    @property
    def dispatch_floor(self) -> int | None:
        """The dispatch floor an earlier rmqdelay writer left, once its abort is this writer's:
        recovery redispatches from there (or earlier)."""
        return self._inherited_floor if self.owned else None

    def mark(self, end: int, floor: int) -> None:
        """Record in ``abort`` the log end this writer is about to write up to (before the
        records: a marker at or past the log's end means no other writer came after) and its
        dispatch floor (before the units: every record before it has its unit). Made
        here when missing: written and fsynced under a temporary name, then linked as
        ``abort``, so that an ``abort`` without a mark is never this writer's (a kill
        between the two leaves only the temporary file, removed by the next open)."""
        if not self.owned:
            return
        mark = ABORT_MARK + b"%020d %020d\n" % (end, floor)
        path = self.path
        if self._fd is not None:
            fileio.write_all(self._fd, mark, 0, path)
            return
        temp = self.store_path / ABORT_TEMP
        fd, _ = fileio.open_for_write(temp)
        try:
            fileio.ftruncate(fd, 0, temp)
            fileio.write_all(fd, mark, 0, temp)
            fileio.fsync(fd, temp)
            fileio.link(temp, path)
        except BaseException:
            os.close(fd)
            unlink_quietly(temp)
            raise
        self._fd = fd
        self.created = True
        fileio.unlink(temp)
        fileio.fsync_dir(self.store_path)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def remove(self) -> None:
        """The clean close's last step: the marker goes (this writer owns it)."""
        self.close()
        fileio.unlink(self.path)
        fileio.fsync_dir(self.store_path)

    def discard(self, wrote: bool) -> None:
        """A writer stopping without its clean close: a marker it made itself goes when it
        wrote nothing, so the store is as it was before."""
        if self.created and not wrote:
            unlink_quietly(self.path)


def _parse_abort_mark(content: bytes) -> tuple[int | None, int | None]:
    """The log end and dispatch floor in an abort file an rmqdelay writer wrote (an older
    writer's mark has no floor: None); None, None for anything else (the broker leaves it
    empty)."""
    if not content.startswith(ABORT_MARK):
        return None, None
    numbers = content[len(ABORT_MARK):].split(b"\n", 1)[0].split()
    if len(numbers) not in (1, 2) or not all(n.isdigit() for n in numbers):
        return None, None
    return int(numbers[0]), int(numbers[1]) if len(numbers) == 2 else None


def _mark_reaches(store: Store, mark: int, end: int) -> bool:
    """An abort mark proves that no other writer came after the rmqdelay writer that left
    it when the recovered log end ``end`` is at or before the end it marked. Or when the
    mark ends the 8-byte head of a BLANK that closes the last file, at ``end``: an older
    writer marked that flush's bytes only, while recovery takes the log to end at the end
    of the file that BLANK closes (nothing was written after it, or that file would not be
    the last)."""
    if end <= mark:
        return True
    head = mark - END_FILE_MIN_BLANK_LENGTH
    if head < 0:
        return False
    try:
        record = store.commitlog.read_record(head)
    except StoreError:
        return False
    return isinstance(record, Blank) and record.physicalOffset == head and head + record.totalSize == end
