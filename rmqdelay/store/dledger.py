"""The log source of a DLedger store (``enableDLegerCommitLog=true``), read-only: the records
inside the entries of ``dledger-<selfId>/data/``, up to the committed entry, and a migrated
store's old ``commitlog/`` files below the divide, as one space of physical offsets.

What the broker serves (RocketMQ 4.9.4 DLedgerCommitLog over dledger 0.2.6's
DLedgerMmapFileStore):
- a record's physical offset is its entry's pos + 48; entries follow each other, each data
  file closed by an end mark (magic -1, the bytes left) when the next entry does not fit;
- the data ends at the committed position: the end of the entry ``committedIndex`` names in
  ``dledger-<selfId>/checkpoint`` (found through the index, unit i at byte i * 32), or of the
  last entry when the checkpoint names one past it (updateCommittedIndex); entries written
  past it are not served (getData returns nothing there) and are listed in ``uncommitted``;
- below ``dividedCommitlogOffset`` (the first data file's start) the old commit log serves.

``CommitLog`` (commitlog.py) is the plain source; layout.py has the contract both keep.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import RECORD_HEAD, Blank, Message, decode_message, parse_message_construct
from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rmqdelay.formats.dledger import (
    BODY_OFFSET,
    END_MARK_MAGIC,
    ENTRY_HEADER_FAST,
    ENTRY_MAGIC,
    INDEX_UNIT_SIZE,
    Checkpoint,
    EntryHeader,
    IndexUnit,
    Term,
    decode_index_unit,
    entry_problem,
    parse_checkpoint,
    parse_currterm,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.store.commitlog import CommitLog, End
from rmqdelay.store.fileio import read_file
from rmqdelay.store.logfile import DLEDGER, LogFile
from rmqdelay.store.mappedfiles import MappedFileReader, list_mapped_files
from rmqdelay.store.problems import UNREADABLE, Problems, report

DATA_DIR = "data"
INDEX_DIR = "index"
CHECKPOINT_FILE = "checkpoint"
CURRTERM_FILE = "currterm"

_MESSAGE_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)
_INT = struct.Struct(">i")


@dataclass(slots=True, frozen=True)
class Uncommitted:
    """Entries written past the committed one: [firstIndex, lastIndex], bytes [start, end)."""

    firstIndex: int
    lastIndex: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.lastIndex - self.firstIndex + 1

    def as_json(self) -> dict:
        return {"entries": self.count, "firstIndex": self.firstIndex, "lastIndex": self.lastIndex,
                "startOffset": self.start, "endOffset": self.end}


class DLedgerCommitLog:
    """The log source of a DLedger store (layout.py has the contract every log source keeps)."""

    def __init__(self, store_path: Path, dledger_dir: Path, old_dir: Path, problems: Problems | None = None) -> None:
        self.dledger_dir = Path(dledger_dir)
        self.directory = self.dledger_dir / DATA_DIR
        self.index_dir = self.dledger_dir / INDEX_DIR
        self.old = CommitLog(old_dir, problems)
        data = list_mapped_files(self.directory, problems)
        self.index_files = [LogFile(mf.path, mf.start, mf.size) for mf in list_mapped_files(self.index_dir, problems)]
        self._index_reader = MappedFileReader(self.index_files)
        # DLedgerCommitLog.recover: dividedCommitlogOffset is the first data file's start.
        self.divided = data[0].start if data else (self.old.files[-1].end if self.old.files else 0)
        self.checkpoint_text = _text(self.dledger_dir / CHECKPOINT_FILE)
        self.checkpoint: Checkpoint | None = None
        if self.checkpoint_text is not None:
            try:
                self.checkpoint = parse_checkpoint(self.checkpoint_text)
            except FormatError as exc:
                report(problems, UNREADABLE, self.dledger_dir / CHECKPOINT_FILE, None, exc.expected)
        currterm = _text(self.dledger_dir / CURRTERM_FILE)
        self.term: Term | None = None
        if currterm is not None:
            try:
                self.term = parse_currterm(currterm)
            except FormatError as exc:
                report(problems, UNREADABLE, self.dledger_dir / CURRTERM_FILE, None, exc.expected)
        data_files = [LogFile(mf.path, mf.start, mf.size, DLEDGER) for mf in data]
        self._data_reader = MappedFileReader(data_files)
        self.data_files = data_files
        self.first_index: int | None = None  # ledgerBeginIndex
        self.end_index: int | None = None  # ledgerEndIndex: the last entry written
        self.end_term: int | None = None
        self.write_pos = self.divided  # where the last entry written ends
        self.committed_index: int | None = None
        self.committed_pos = self.divided  # DLedgerCommitLog.getMaxOffset
        self.uncommitted: Uncommitted | None = None
        try:
            self._find_ends()
        except StoreError as exc:
            if problems is None:
                raise
            problems.add(UNREADABLE, exc.path, exc.offset, exc.expected)
        self.files: list[LogFile] = list(self.old.files) + [self._served(f) for f in data_files]
        self._reader = MappedFileReader(self.files)

    # -- what the broker serves ----------------------------------------------------------
    def _served(self, f: LogFile) -> LogFile:
        if self.committed_pos >= f.end:
            return f
        return LogFile(f.path, f.start, f.size, DLEDGER, max(0, self.committed_pos - f.start))

    def _find_ends(self) -> None:
        """The first and last entries, the committed one and what lies past it."""
        files = self.data_files
        first = next((i for i, f in enumerate(files) if f.size >= BODY_OFFSET), None)
        if first is None:
            return
        head = self._header(first, 0)
        if head is None:
            return
        self.first_index = head.index
        committed = None
        wanted = self.checkpoint.committedIndex if self.checkpoint is not None else None
        if wanted is not None and wanted >= head.index:
            committed = self._entry_by_index(wanted)
        # Walk the entries from the committed one to the last (from the first when the index
        # did not find the committed one: a damaged index, or a checkpoint ahead of the data).
        if committed is not None:
            last, start_file = committed, self._data_reader.index_of(committed.pos)
        else:
            last, start_file = head, first
        for header in self._walk_headers(start_file, last.pos - files[start_file].start):
            last = header
            if header.index == wanted:
                committed = header
        self.end_index, self.end_term, self.write_pos = last.index, last.term, last.end
        if committed is None and wanted is not None and wanted >= last.index:
            committed = last  # the checkpoint is ahead of the data: the broker commits what it has
        if committed is not None:
            self.committed_index, self.committed_pos = committed.index, committed.end
            if last.index > committed.index:
                self.uncommitted = Uncommitted(committed.index + 1, last.index, committed.end, last.end)
        elif last is not None:
            self.uncommitted = Uncommitted(head.index, last.index, head.pos, last.end)

    def _header(self, file_index: int, pos: int) -> EntryHeader | None:
        """The entry header at ``pos`` of data file ``file_index`` if a good one is there."""
        f = self.data_files[file_index]
        if pos + BODY_OFFSET > f.size:
            return None
        view = self._data_reader.view(file_index)
        header = EntryHeader(*ENTRY_HEADER_FAST.unpack_from(view, pos))
        return header if entry_problem(header, f.start + pos, f.size - pos) is None else None

    def _walk_headers(self, file_index: int, pos: int) -> Iterator[EntryHeader]:
        """The good entry headers from ``pos`` of a data file on, across files, as recovery
        walks them (an end mark moves to the next file; anything else ends the walk)."""
        last_index = None
        while file_index < len(self.data_files):
            f = self.data_files[file_index]
            view = self._data_reader.view(file_index)
            while pos + 8 <= f.size:
                magic = _INT.unpack_from(view, pos)[0]
                if magic == END_MARK_MAGIC:
                    break
                header = self._header(file_index, pos)
                if header is None or (last_index is not None and header.index != last_index + 1):
                    return
                last_index = header.index
                yield header
                pos += header.size
            else:
                return
            file_index += 1
            pos = 0

    def index_unit(self, index: int) -> IndexUnit | None:
        """The index unit of entry ``index`` (None where the index has no file for it)."""
        at = index * INDEX_UNIT_SIZE
        i = self._index_reader.index_of(at)
        if i < 0 or at - self.index_files[i].start + INDEX_UNIT_SIZE > self.index_files[i].size:
            return None
        return decode_index_unit(self._index_reader.view(i), at - self.index_files[i].start)

    def _entry_by_index(self, index: int) -> EntryHeader | None:
        """The entry ``index`` as DLedgerMmapFileStore.get finds it: its index unit's pos,
        the header there agreeing with the unit. None when either is missing or disagrees."""
        unit = self.index_unit(index)
        if unit is None or unit.magic != ENTRY_MAGIC or unit.index != index:
            return None
        i = self._data_reader.index_of(unit.pos)
        if i < 0:
            return None
        header = self._header(i, unit.pos - self.data_files[i].start)
        if header is None or (header.index, header.size, header.term) != (unit.index, unit.size, unit.term):
            return None
        return header

    # -- the log source ------------------------------------------------------------------
    @property
    def min_offset(self) -> int:
        """DLedgerCommitLog.getMinOffset: the old commit log's first offset, else the data's."""
        if self.old.files:
            return self.old.min_offset
        return self.data_files[0].start if self.data_files else 0

    @property
    def file_size(self) -> int | None:
        return self.files[0].size if self.files else None

    def end_offset(self, hint: int | None = None) -> int:
        """Where the data the broker serves ends: the committed position."""
        return self.committed_pos

    def close(self) -> None:
        self._reader.close()
        self._data_reader.close()
        self._index_reader.close()
        self.old.close()

    def view(self, index: int) -> memoryview:
        return self._reader.view(index)

    def file_index(self, offset: int) -> int:
        return self._reader.index_of(offset)

    def _not_served(self, offset: int) -> StoreError:
        where = self.files[self.file_index(offset)] if self.file_index(offset) >= 0 else None
        past = ""
        if self.uncommitted is not None and self.uncommitted.start <= offset < self.uncommitted.end:
            past = (f"; the entries {self.uncommitted.firstIndex}..{self.uncommitted.lastIndex} there are past "
                    f"the committed index {self.committed_index}: written, not committed, not served")
        return StoreError(where.path if where else self.directory, offset - where.start if where else offset,
                          f"a physical offset the broker serves, in [{self.min_offset}, {self.committed_pos}){past}")

    def _entry_of(self, index: int, pos: int) -> tuple[EntryHeader, int]:
        """The entry whose record is at ``pos`` of ``files[index]``, or whose header starts
        there; returns it and the record's position."""
        f = self.files[index]
        view = self._reader.view(index)
        if pos + 8 <= f.size and _INT.unpack_from(view, pos)[0] == ENTRY_MAGIC:
            at = pos
        elif pos >= BODY_OFFSET:
            at = pos - BODY_OFFSET
        else:
            raise StoreError(f.path, pos, f"a record inside a DLedger entry ({BODY_OFFSET} bytes after the entry's "
                                          f"pos) or an entry's pos")
        header = EntryHeader(*ENTRY_HEADER_FAST.unpack_from(view, at))
        problem = entry_problem(header, f.start + at, f.size - at)
        if problem is not None:
            if at != pos:
                problem = (f"a record inside a DLedger entry, the entry's header {BODY_OFFSET} bytes before it; "
                           f"found there: {problem}")
            raise StoreError(f.path, at, problem)
        return header, at + BODY_OFFSET

    def read_record(self, offset: int, *, reference: bool = False) -> Message | Blank | End:
        """The record at a physical offset: a record's (entry pos + 48) or an entry's pos (the
        record inside it). At the committed position, End; past it, a StoreError."""
        if offset < self.divided:
            return self.old.read_record(offset, reference=reference)
        if offset == self.committed_pos:
            return End(offset)
        if offset > self.committed_pos:
            raise self._not_served(offset)
        index = self.file_index(offset)
        f = self.files[index]
        pos = offset - f.start
        view = self._reader.view(index)
        if pos + 8 <= f.size and _INT.unpack_from(view, pos)[0] == END_MARK_MAGIC:
            size = _INT.unpack_from(view, pos + 4)[0]
            if size != f.size - pos:
                raise StoreError(f.path, pos, f"a DLedger end mark (magic -1) filling the rest of the file "
                                              f"({f.size - pos} bytes), found size {size}")
            return Blank(offset, size)
        header, at = self._entry_of(index, pos)
        return self._decode(f, view, header, at, reference)

    def _decode(self, f: LogFile, view: memoryview, header: EntryHeader, at: int, reference: bool) -> Message:
        end = header.pos - f.start + header.size
        try:
            total = RECORD_HEAD.unpack_from(view, at)[0]
            if total != header.bodyLen:
                raise FormatError(at, f"a record of the entry's bodyLen {header.bodyLen} bytes, found totalSize {total}")
            return parse_message_construct(view, at, end) if reference else decode_message(view, at, end)
        except FormatError as exc:
            raise StoreError(f.path, exc.offset, exc.expected) from None

    def read_message(self, offset: int, size: int | None = None) -> Message:
        record = self.read_record(offset)
        if not isinstance(record, Message):
            index = self.file_index(offset)
            raise StoreError(self.files[index].path if index >= 0 else self.directory,
                             offset - self.files[index].start if index >= 0 else offset,
                             "a message record (found " + ("a BLANK record" if isinstance(record, Blank) else "no data") + ")")
        if size is not None and record.storeSize != size:
            index = self.file_index(offset)
            raise StoreError(self.files[index].path, offset - self.files[index].start,
                             f"a message of {size} bytes, found totalSize {record.storeSize}")
        return record

    def records(self, start: int | None = None, *, reference: bool = False,
                include_blanks: bool = False) -> Iterator[Message | Blank]:
        """Every record from ``start`` (a record's offset, an entry's pos or a file's start)
        to the committed position."""
        offset = self.min_offset if start is None else start
        if offset < self.divided:
            yield from self.old.records(offset, reference=reference, include_blanks=include_blanks)
            offset = self.divided
        index = self.file_index(offset)
        if index < 0:
            return
        first = True
        while index < len(self.files) and self.files[index].start < self.committed_pos:
            f = self.files[index]
            view = self._reader.view(index)
            pos = offset - f.start
            if first and pos:
                pos = self._entry_of(index, pos)[1] - BODY_OFFSET
            first = False
            while f.start + pos < self.committed_pos:
                if pos + 8 <= f.size and _INT.unpack_from(view, pos)[0] == END_MARK_MAGIC:
                    record = self.read_record(f.start + pos)
                    if include_blanks:
                        yield record
                    break
                header = EntryHeader(*ENTRY_HEADER_FAST.unpack_from(view, pos)) if pos + BODY_OFFSET <= f.size else None
                problem = "a DLedger entry header" if header is None else \
                    entry_problem(header, f.start + pos, f.size - pos)
                if problem is not None:
                    raise StoreError(f.path, pos, f"{problem} (before the committed position {self.committed_pos})")
                yield self._decode(f, view, header, pos + BODY_OFFSET, reference)
                pos += header.size
            index += 1
            if index < len(self.files):
                offset = self.files[index].start

    def message_spots(self, offsets: list[int], sizes: list[int]) -> Iterator[tuple[memoryview | None, int, int, int]]:
        """As CommitLog.message_spots, a DLedger record also checked to sit in its entry
        (magic 1 and its bodyLen 48 bytes before it) and to be served."""
        file_start = file_end = limit = -1
        header = 0
        view = None
        for offset, size in zip(offsets, sizes):
            if not file_start <= offset < file_end:
                index = self._reader.index_of(offset)
                if index < 0:
                    yield None, 0, 0, 0
                    continue
                f = self.files[index]
                file_start, file_end, limit, header, view = f.start, f.end, f.limit, f.header, self._reader.view(index)
            pos = offset - file_start
            if pos + 8 > limit:
                yield None, 0, 0, 0
                continue
            total, magic = RECORD_HEAD.unpack_from(view, pos)
            if total != size or magic not in _MESSAGE_MAGICS or pos + total > limit or \
                    header and (pos < header or _INT.unpack_from(view, pos - header)[0] != ENTRY_MAGIC
                                or _INT.unpack_from(view, pos - 4)[0] != size):
                yield None, 0, 0, 0
                continue
            yield view, pos, limit, magic

    # -- what `inspect store` shows ------------------------------------------------------
    def facts(self) -> dict:
        """The DLedger facts of the store, as `inspect store --json` names them."""
        cp = self.checkpoint
        return {
            "selfId": self.dledger_dir.name[len("dledger-"):],
            "directory": str(self.dledger_dir),
            "currTerm": self.term.currTerm if self.term else None,
            "voteLeader": self.term.voteLeader if self.term else None,
            "checkpointCommittedIndex": cp.committedIndex if cp else None,
            "checkpointEndIndex": cp.endIndex if cp else None,
            "firstIndex": self.first_index,
            "committedIndex": self.committed_index,
            "endIndex": self.end_index,
            "endTerm": self.end_term,
            "committedPosition": self.committed_pos,
            "writePosition": self.write_pos,
            "dividedCommitlogOffset": self.divided,
            "oldCommitLogFiles": [{"file": f.path.name, "size": f.size} for f in self.old.files],
            "dataFiles": [{"file": f.path.name, "size": f.size} for f in self.data_files],
            "indexFiles": [{"file": f.path.name, "size": f.size} for f in self.index_files],
            "uncommitted": self.uncommitted.as_json() if self.uncommitted else None,
        }


def _text(path: Path) -> str | None:
    data = read_file(path)
    if data is None:
        return None
    return data.decode("latin-1")
