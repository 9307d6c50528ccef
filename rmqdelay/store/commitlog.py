"""The commit log of a store, read-only: records across files, look-ups by offset."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import (
    RECORD_HEAD,
    Blank,
    Message,
    decode_message,
    parse_message_construct,
    torn_tail,
)
from rmqdelay.formats.constants import BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rmqdelay.formats.errors import FormatError
from rmqdelay.store.logfile import LogFile
from rmqdelay.store.mappedfiles import MappedFile, MappedFileReader, list_mapped_files
from rmqdelay.store.problems import Problems

# CommitLog.END_FILE_MIN_BLANK_LENGTH: a message must leave room for a BLANK head.
END_FILE_MIN_BLANK_LENGTH = 8
_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


@dataclass(slots=True, frozen=True)
class End:
    """Where the data stops: the first zero record head, or (``torn``) a last record cut
    short, as a writer appending leaves it while it writes (formats.commitlog.torn_tail)."""

    physicalOffset: int
    torn: bool = False


class CommitLog:
    """The log source of a plain store (layout.py has the contract every log source keeps)."""

    def __init__(self, directory: Path, problems: Problems | None = None) -> None:
        self.directory = directory
        self.files: list[LogFile] = [LogFile(mf.path, mf.start, mf.size) for mf in list_mapped_files(directory, problems)]
        self._reader = MappedFileReader(self.files)

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    @property
    def file_size(self) -> int | None:
        return self.files[0].size if self.files else None

    def close(self) -> None:
        self._reader.close()

    def view(self, index: int) -> memoryview:
        """The bytes of ``files[index]``, mapped read-only."""
        return self._reader.view(index)

    def file_index(self, offset: int) -> int:
        """The index in ``files`` of the file holding ``offset``, or -1."""
        return self._reader.index_of(offset)

    def message_spots(self, offsets: list[int], sizes: list[int]) -> Iterator[tuple[memoryview | None, int, int, int]]:
        """Where the message of each unit (commit log offset, size) is, for a batch of units that
        mostly lie one after another: (the mapped file, the record's position in it, the file's
        size, the record's magic code), the file looked up once for a run of units. The view is
        None where no message record of the unit's size starts there and ends inside its file
        (outside the files, another record, another size): ``read_message`` says why."""
        file_start = file_end = limit = -1
        view = None
        for offset, size in zip(offsets, sizes):
            if not file_start <= offset < file_end:
                index = self._reader.index_of(offset)
                if index < 0:
                    yield None, 0, 0, 0
                    continue
                mf = self.files[index]
                file_start, file_end, limit, view = mf.start, mf.end, mf.size, self._reader.view(index)
            pos = offset - file_start
            if pos + 8 > limit:
                yield None, 0, 0, 0
                continue
            total, magic = RECORD_HEAD.unpack_from(view, pos)
            if total != size or magic not in _MESSAGE_MAGICS or pos + total > limit:
                yield None, 0, 0, 0
                continue
            yield view, pos, limit, magic

    def _locate(self, offset: int) -> tuple[int, MappedFile, memoryview, int]:
        index = self._reader.index_of(offset)
        if index < 0:
            raise StoreError(self.directory, offset,
                             f"a physical offset inside the commit log [{self.min_offset}, "
                             f"{self.files[-1].end if self.files else 0})")
        mf = self.files[index]
        return index, mf, self._reader.view(index), offset - mf.start

    def read_record(self, offset: int, *, reference: bool = False) -> Message | Blank | End:
        """The record at a physical offset. ``reference`` decodes with construct."""
        _, mf, view, pos = self._locate(offset)
        return self._decode_at(mf, view, pos, reference)

    def _decode_at(self, mf: MappedFile, view: memoryview, pos: int, reference: bool) -> Message | Blank | End:
        if pos + 8 > len(view):
            if view[pos:].tobytes().strip(b"\0") == b"":
                return End(mf.start + pos)
            raise StoreError(mf.path, pos, f"a record head of 8 bytes, found {len(view) - pos}")
        total, magic = RECORD_HEAD.unpack_from(view, pos)
        if total == 0 and magic == 0:
            return End(mf.start + pos)
        if magic == BLANK_MAGIC_CODE:
            if total != mf.size - pos:
                raise StoreError(mf.path, pos, f"a BLANK record filling the rest of the file "
                                               f"({mf.size - pos} bytes), found totalSize {total}")
            return Blank(mf.start + pos, total)
        try:
            if reference:
                return parse_message_construct(view, pos, mf.size)
            return decode_message(view, pos, mf.size)
        except FormatError as exc:
            if torn_tail(view, pos, mf.size):
                return End(mf.start + pos, torn=True)
            try:  # written in full since: a writer appends while this reads
                return decode_message(view, pos, mf.size)
            except FormatError:
                pass
            raise StoreError(mf.path, exc.offset, exc.expected) from None

    def read_message(self, offset: int, size: int | None = None) -> Message:
        record = self.read_record(offset)
        if not isinstance(record, Message):
            index = self._reader.index_of(offset)
            raise StoreError(self.files[index].path, offset - self.files[index].start,
                             "a message record (found " + ("a BLANK record" if isinstance(record, Blank) else "no data") + ")")
        if size is not None and record.storeSize != size:
            index = self._reader.index_of(offset)
            raise StoreError(self.files[index].path, offset - self.files[index].start,
                             f"a message of {size} bytes, found totalSize {record.storeSize}")
        return record

    def records(self, start: int | None = None, *, reference: bool = False,
                include_blanks: bool = False) -> Iterator[Message | Blank]:
        """Every record from ``start`` (a record boundary) to the end of the data."""
        if not self.files:
            return
        offset = self.min_offset if start is None else start
        index = self._reader.index_of(offset)
        while 0 <= index < len(self.files):
            mf = self.files[index]
            view = self._reader.view(index)
            pos = offset - mf.start
            while pos < mf.size:
                record = self._decode_at(mf, view, pos, reference)
                if isinstance(record, End):
                    following = self._reader.view(index + 1)[:8] if index + 1 < len(self.files) else b""
                    if record.torn:
                        if any(following):
                            raise StoreError(mf.path, pos, f"a whole record (the log goes on in "
                                                           f"{self.files[index + 1].path.name}), found one cut short")
                        return
                    after = data_after_end(view, pos, following, self.files[index + 1].path.name if following else "")
                    if after and not any(view[pos:pos + 8]):
                        raise StoreError(mf.path, pos, after)
                    return  # (a head written since the end was found: a writer appends)
                if isinstance(record, Blank):
                    if include_blanks:
                        yield record
                    break
                yield record
                pos += record.storeSize
            index += 1
            if index < len(self.files):
                offset = self.files[index].start

    def end_offset(self, hint: int | None = None) -> int:
        """The physical offset where the data ends (the broker's max offset)."""
        if not self.files:
            return 0
        last = self.files[-1]
        start = last.start
        if hint is not None and last.start <= hint < last.end:
            start = hint
        end = start
        for record in self.records(start, include_blanks=True):
            if isinstance(record, Blank):
                end = record.physicalOffset + record.totalSize
            else:
                end = record.commitLogOffset + record.storeSize
        return end


# How far past the end of the data a scan looks for more data (a hole of zeros inside the
# log). Bounded: the rest of a 1 GiB file is zeros on every healthy store, and reading it all
# would cost seconds on each scan; --verify reads every byte anyway.
HOLE_WINDOW = 1 << 20


def first_nonzero(buf, pos: int, limit: int | None = None) -> int | None:
    """The position of the first non-zero byte of ``buf`` in [pos, pos + limit), or None."""
    end = len(buf) if limit is None else min(len(buf), pos + limit)
    start = pos
    while start < end:  # in chunks, so data soon after ``pos`` is found without reading on
        stop = min(start + (1 << 24), end)
        chunk = np.frombuffer(buf, dtype=np.uint8, count=stop - start, offset=start)
        if chunk.any():
            return start + int(np.argmax(chunk != 0))
        start = stop
    return None


def data_after_end(buf, pos: int, next_head: bytes = b"", next_name: str = "") -> str | None:
    """Where a commit log file's data ends (a zero record head at ``pos``), what follows must
    be zeros: the next HOLE_WINDOW bytes of the file, and the head of the next file
    (``next_head``, its first bytes; a file the broker preallocated is all zeros). Otherwise
    the data ends too early -- a hole of zeros inside the log -- and this says so; the
    broker's recovery would stop there too, and drop the rest. None when the end looks true."""
    nonzero = first_nonzero(buf, pos, HOLE_WINDOW)
    if nonzero is not None:
        where = f"at byte {nonzero} of this file"
    elif any(next_head):
        where = f"in the next file {next_name}"
    else:
        return None
    return (f"a record head or the end of the data, found zeros with more data after them ({where}); "
            f"reading stopped here, where the broker's recovery would end the log")
