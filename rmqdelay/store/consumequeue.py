"""One consume queue (consumequeue/TOPIC/QUEUEID/...), read-only."""

from __future__ import annotations

from bisect import bisect_right
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import CQ_PRE_BLANK_SIZE, CQ_STORE_UNIT_SIZE, MAX_DELIVER_MS
from rmqdelay.formats.consumequeue import CQ_EXT_MAX_ADDR, CqUnit, decode_units
from rmqdelay.store.fileio import release_pages
from rmqdelay.store.mappedfiles import MappedFile, MappedFileReader, list_mapped_files
from rmqdelay.store.problems import FILE_SIZE, Problems, report

# Where tagsCode sits in a unit (commitLogOffset 8 bytes, size 4 bytes, tagsCode 8 bytes).
_TAGS_CODE_AT = 12


def _valid(units: np.ndarray) -> np.ndarray:
    """Which ``units`` are written ones (ConsumeQueue.recover: offset >= 0 and size > 0)."""
    return (units["commitLogOffset"] >= 0) & (units["size"] > 0)


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, problems: Problems | None = None) -> None:
        """``problems``: note what is wrong with the queue's files there instead of raising
        (a partial unit at the end of a file is then left unread)."""
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.files: list[MappedFile] = list_mapped_files(directory, problems)
        for mf in self.files:
            if mf.start % CQ_STORE_UNIT_SIZE or mf.size % CQ_STORE_UNIT_SIZE:
                report(problems, FILE_SIZE, mf.path, None,
                       f"a consume queue file of whole {CQ_STORE_UNIT_SIZE}-byte units "
                       f"({mf.size} bytes, starting at {mf.start})")
        self._reader = MappedFileReader(self.files)
        self._starts = [mf.start for mf in self.files]  # the files in order: where a read begins, by bisection
        self._max_offset: int | None = None

    def close(self) -> None:
        self._reader.close()

    @property
    def file_size(self) -> int | None:
        return self.files[0].size if self.files else None

    def file_units(self, index: int) -> np.ndarray:
        return decode_units(self._reader.view(index))

    def release(self, stop: int) -> None:
        """Let go of the mapped pages of the units before logical offset ``stop`` (a reader
        that walks the queue keeps only what it reads now resident; fileio.release_pages)."""
        for index, mf in enumerate(self.files):
            first = mf.start // CQ_STORE_UNIT_SIZE
            if first >= stop:
                break
            release_pages(self._reader.view(index), (stop - first) * CQ_STORE_UNIT_SIZE)

    @property
    def max_offset(self) -> int:
        """The logical offset after the last written unit (ConsumeQueue.recover's rule:
        the first unit with offset < 0 or size <= 0 ends the queue)."""
        if self._max_offset is None:
            end = self.files[0].start // CQ_STORE_UNIT_SIZE if self.files else 0
            for index in range(len(self.files) - 1, -1, -1):
                first_invalid = self._first_invalid(index)
                if first_invalid == 0 and index > 0 and not _valid(self.file_units(index)).any():
                    continue
                end = self.files[index].start // CQ_STORE_UNIT_SIZE + first_invalid
                break
            self._max_offset = end
        return self._max_offset

    def _first_invalid(self, index: int) -> int:
        """The first unit of file ``index`` that is not a written one (its unit count when
        all are), read from the start in growing chunks: a queue's last file is mostly
        the zeros after its end."""
        units = self.file_units(index)
        start, step = 0, 4096
        while start < len(units):
            valid = _valid(units[start:start + step])
            if not valid.all():
                return start + int(np.argmin(valid))
            start, step = start + step, step * 2
        return len(units)

    @property
    def min_offset(self) -> int:
        """The first logical offset with a real unit (pre-blank units are skipped)."""
        if not self.files:
            return 0
        for index in range(len(self.files)):
            units = self.file_units(index)
            if len(units) and 0 < units["size"][0] != 0x7FFFFFFF:
                return self.files[index].start // CQ_STORE_UNIT_SIZE  # the usual case: the file's first unit
            real = (units["size"] > 0) & (units["size"] != 0x7FFFFFFF)
            if real.any():
                return self.files[index].start // CQ_STORE_UNIT_SIZE + int(np.argmax(real))
        return self.max_offset

    def units(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Units [start, stop) as one structured array (stop defaults to max_offset)."""
        stop = self.max_offset if stop is None else min(stop, self.max_offset)
        parts = []
        # From the file holding ``start`` (a queue of small files has thousands: not each looked at).
        at = max(bisect_right(self._starts, start * CQ_STORE_UNIT_SIZE) - 1, 0)
        for index in range(at, len(self.files)):
            mf = self.files[index]
            first = mf.start // CQ_STORE_UNIT_SIZE
            last = first + mf.size // CQ_STORE_UNIT_SIZE
            if first >= stop:
                break
            if last <= start:
                continue
            units = self.file_units(index)
            parts.append(units[max(start, first) - first:min(stop, last) - first])
        if not parts:
            return decode_units(b"")
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def unit(self, offset: int) -> CqUnit | None:
        units = self.units(offset, offset + 1)
        if len(units) == 0:
            return None
        u = units[0]
        return CqUnit(int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"]))

    @property
    def max_physic_offset(self) -> int:
        """The commit log offset just after the last unit's message (ConsumeQueue.maxPhysicOffset)."""
        if self.max_offset == 0 or self.max_offset <= (self.files[0].start // CQ_STORE_UNIT_SIZE if self.files else 0):
            return -1
        u = self.unit(self.max_offset - 1)
        return u.commitLogOffset + u.size

    def check_deliver_times(self, units: np.ndarray, first: int, *, ext_ok: bool = False) -> None:
        """For SCHEDULE_TOPIC_XXXX, where tagsCode is the deliver time: a StoreError naming the
        first of ``units`` (which start at logical offset ``first``) whose tagsCode is no
        time -- past year 9999, or (unless ``ext_ok``, for a listing that shows them as such)
        an address into ConsumeQueueExt, which rmqdelay does not read. Pre-blank units are no
        messages and are not checked."""
        bad = first_bad_deliver_time(units, ext_ok=ext_ok)
        if bad is None:
            return
        row, code, what = bad
        path, byte = self.locate(first + row)
        raise StoreError(path, byte + _TAGS_CODE_AT,
                         f"a deliver time (tagsCode of unit {first + row} of {self.topic}/{self.queue_id}) in "
                         f"epoch milliseconds, found {code}: {what}")

    def runs(self) -> list[tuple[int, int]]:
        """[first, stop) logical offsets of each run of files that follow each other (a lost
        file splits the queue in two runs)."""
        runs: list[tuple[int, int]] = []
        for mf in self.files:
            first, stop = mf.start // CQ_STORE_UNIT_SIZE, (mf.start + mf.size) // CQ_STORE_UNIT_SIZE
            if runs and runs[-1][1] == first:
                runs[-1] = (runs[-1][0], stop)
            else:
                runs.append((first, stop))
        return runs

    @property
    def byte_size(self) -> int:
        """The bytes of the queue's files (what a verify reads of it)."""
        return sum(mf.size for mf in self.files)

    def locate(self, logical: int) -> tuple[Path, int]:
        """The file holding unit ``logical`` and the unit's byte offset in it."""
        byte = logical * CQ_STORE_UNIT_SIZE
        for mf in self.files:
            if mf.start <= byte < mf.end:
                return mf.path, byte - mf.start
        return self.directory, byte


def first_bad_deliver_time(units: np.ndarray, *, ext_ok: bool = False) -> tuple[int, int, str] | None:
    """(row, tagsCode, why) of the first of SCHEDULE_TOPIC_XXXX ``units`` whose tagsCode is no
    deliver time (past year 9999, or -- unless ``ext_ok`` -- a ConsumeQueueExt address), pre-blank
    units passed over; None when every one is a time."""
    codes = units["tagsCode"]
    bad = (codes > MAX_DELIVER_MS) if ext_ok else ((codes <= CQ_EXT_MAX_ADDR) | (codes > MAX_DELIVER_MS))
    bad &= units["size"] != CQ_PRE_BLANK_SIZE
    if not bad.any():
        return None
    row = int(np.argmax(bad))
    code = int(codes[row])
    what = ("a ConsumeQueueExt address (the broker then takes the message's store time plus the level's "
            "delay; rmqdelay reads no consumequeue_ext)" if code <= CQ_EXT_MAX_ADDR else "past year 9999")
    return row, code, what
