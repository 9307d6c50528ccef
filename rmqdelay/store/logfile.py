"""One file of a store's log, as the layout found it: where it sits in the log's offset space
and how its records are framed.

A broker's commit log is one space of physical offsets laid over files named by their first
offset. The plain layout puts the records one after another (``PLAIN``); DLedger puts each
record inside an entry, behind a 48-byte header, so that a record's physical offset is its
entry's position + 48 (``DLEDGER``). A store migrated to DLedger has both: the old plain
files below ``dividedCommitlogOffset``, the DLedger data files above it. A ``LogFile`` says
which a file is, and how much of it the broker serves (DLedger serves up to the committed
entry), so a reader handed one file -- a Spark task, a scan -- needs nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PLAIN = "plain"  # CommitLog: records back to back, a BLANK record (size, 0xCBD43194) closing a full file
DLEDGER = "dledger"  # DLedgerMmapFileStore: entries (48-byte header + one record), a BLANK (-1, size) closing a file

# DLedgerEntry.BODY_OFFSET: the header before the record; the record's physical offset is the
# entry's pos + this (DLedgerCommitLog's append hook writes it into the record).
DLEDGER_ENTRY_HEADER = 48


@dataclass(slots=True, frozen=True)
class LogFile:
    path: Path
    start: int  # the physical offset of the file's first byte
    size: int
    framing: str = PLAIN
    served: int | None = None  # bytes from the file's start the broker serves; None: all of it

    @property
    def end(self) -> int:
        return self.start + self.size

    @property
    def limit(self) -> int:
        """How far into the file a reader goes: the served bytes, or the whole file."""
        return self.size if self.served is None else self.served

    @property
    def header(self) -> int:
        """The bytes before each record: 0 for a plain file, 48 for a DLedger data file."""
        return DLEDGER_ENTRY_HEADER if self.framing == DLEDGER else 0
