"""`inspect commitlog --verify` of a DLedger data file: each entry's header as
DLedgerMmapFileStore.recover checks it (magic, size = 48 + bodyLen, pos where it is, index
one past the last, term not going back), its unit in the DLedger index (magic, pos, size,
index, term), the record inside it (verify.py's record checks, its physicalOffset = pos +
48), the end mark closing a full file and the zeros after the last entry.

Entries past the committed index are not data the broker serves: their headers are walked
(the framing goes on through them) but their records are not taken as messages, and
``DLedgerWalk.uncommitted`` says what lies there.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

from rmqdelay.formats.dledger import BODY_OFFSET, END_MARK_MAGIC, ENTRY_HEADER_FAST, EntryHeader, entry_problem
from rmqdelay.store.commitlog import first_nonzero
from rmqdelay.store.logfile import LogFile
from rmqdelay.store.problems import Problem

# Problem kinds of the DLedger framing (verify.py has the record's).
ENTRY = "dledgerEntry"
ENTRY_INDEX = "dledgerIndex"
END_MARK = "dledgerEndMark"
TAIL = "tail"

_HEAD = struct.Struct(">ii")


class DLedgerWalk:
    """The walk over the data files of one DLedger log, file after file (the entry index
    runs on across them)."""

    def __init__(self, log) -> None:
        self.log = log  # a DLedgerCommitLog
        self.last_index: int | None = None
        self.last_term: int | None = None
        self.entries = 0
        self.uncommitted = 0  # entries walked past the committed index

    def walk(self, view: memoryview, mf: LogFile, messages, check_record: Callable) -> Iterator[Problem]:
        """The problems of one data file; returns (where its readable data ends, that offset
        again when the data ends in zeros) as verify's plain walk does."""
        name = str(mf.path)
        size = len(view)
        committed = self.log.committed_index
        pos = 0
        while pos < size:
            physical = mf.start + pos
            if pos + 8 > size:
                if any(view[pos:]):
                    yield Problem(ENTRY, name, pos, f"a DLedger entry header of {BODY_OFFSET} bytes, "
                                                    f"found {size - pos}", physical)
                    return physical, None
                return physical, physical
            magic, length = _HEAD.unpack_from(view, pos)
            if magic == 0 and length == 0:
                nonzero = first_nonzero(view, pos)
                if nonzero is not None:
                    yield Problem(TAIL, name, nonzero, f"zeros after the last DLedger entry at byte {pos}, "
                                                       "found non-zero bytes", mf.start + nonzero)
                    return physical, None
                return physical, physical
            if magic == END_MARK_MAGIC:
                if length != size - pos:
                    yield Problem(END_MARK, name, pos, f"a DLedger end mark (magic -1) filling the rest of the "
                                                       f"file ({size - pos} bytes), found size {length}", physical)
                    messages.skipped.append((physical, mf.end))
                    return physical, None
                nonzero = first_nonzero(view, pos + 8)
                if nonzero is not None:
                    yield Problem(END_MARK, name, nonzero, f"zeros after the end mark at byte {pos}, found "
                                                           "non-zero bytes", mf.start + nonzero)
                return mf.end, None
            if pos + BODY_OFFSET > size:
                yield Problem(ENTRY, name, pos, f"a DLedger entry header of {BODY_OFFSET} bytes, "
                                                f"found {size - pos}", physical)
                messages.skipped.append((physical, mf.end))
                return physical, None
            header = EntryHeader(*ENTRY_HEADER_FAST.unpack_from(view, pos))
            problem = entry_problem(header, physical, size - pos)
            if problem is not None:
                yield Problem(ENTRY, name, pos, problem, physical)
                messages.skipped.append((physical, mf.end))
                return physical, None
            yield from self._check_order(header, name, pos)
            yield from self._check_index(header, name, pos)
            self.entries += 1
            if committed is None or header.index > committed:
                self.uncommitted += 1
            else:
                record = physical + BODY_OFFSET
                at = pos + BODY_OFFSET
                total = _HEAD.unpack_from(view, at)[0]
                if total != header.bodyLen:
                    yield Problem(ENTRY, name, at, f"a record of the entry's bodyLen {header.bodyLen} bytes, found "
                                                   f"totalSize {total}", record)
                msg = yield from check_record(view, at, pos + header.size, record, name, messages)
                if msg is None:
                    # The entry's size still frames the next one: the walk goes on.
                    messages.skipped.append((record, physical + header.size))
            pos += header.size
        return mf.end, None

    def _check_order(self, header: EntryHeader, name: str, pos: int) -> Iterator[Problem]:
        if self.last_index is not None and header.index != self.last_index + 1:
            yield Problem(ENTRY, name, pos + 8, f"entry index {self.last_index + 1} (one past the entry before), "
                                                f"found {header.index}", header.pos)
        if self.last_term is not None and header.term < self.last_term:
            yield Problem(ENTRY, name, pos + 16, f"a term of at least {self.last_term} (the entry before's), "
                                                 f"found {header.term}", header.pos)
        self.last_index, self.last_term = header.index, header.term

    def _check_index(self, header: EntryHeader, name: str, pos: int) -> Iterator[Problem]:
        unit = self.log.index_unit(header.index)
        want = (1, header.pos, header.size, header.index, header.term)
        if unit is None:
            yield Problem(ENTRY_INDEX, str(self.log.index_dir), header.index * 32,
                          f"a DLedger index unit for entry {header.index}, found no index file holding it", header.pos)
            return
        got = (unit.magic, unit.pos, unit.size, unit.index, unit.term)
        if got != want:
            yield Problem(ENTRY_INDEX, str(self.log.index_dir), header.index * 32,
                          f"the index unit of entry {header.index} (magic, pos, size, index, term) = {want}, "
                          f"found {got}", header.pos)

    def summary(self) -> dict:
        log = self.log
        return {"entries": self.entries, "committedIndex": log.committed_index, "endIndex": log.end_index,
                "uncommittedEntries": self.uncommitted,
                "uncommitted": log.uncommitted.as_json() if log.uncommitted else None}
