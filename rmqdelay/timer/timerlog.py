"""The timer log (``timerlog/``), read-only: units across files, look-ups by offset.

Files are named by their 20-digit global offset like the commit log's, all of
``mappedFileSizeTimerLog`` bytes. A unit's ``offset`` (what prevPos and the wheel's
firstPos/lastPos hold) is global; TimerLog.getWholeBuffer finds its file by that offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.timerlog import (
    UNIT_SIZE,
    UNITS_DTYPE,
    TimerLogBlank,
    TimerLogFile,
    TimerLogUnit,
    UnitColumns,
    decode_file,
    is_magic_ok,
    parse_file_construct,
    parse_unit,
    unit_columns,
)
from rmqdelay.store.mappedfiles import MappedFile, MappedFileReader, list_mapped_files, usual_size
from rmqdelay.store.problems import Problems


@dataclass(slots=True, frozen=True)
class TimerLogEnd:
    """Where the units stop: the offset after the last unit of the last file with units."""

    offset: int


class TimerLog:
    def __init__(self, directory: Path, *, lenient: bool = False) -> None:
        """``lenient``: files of the wrong size and gaps between files are noted in
        ``damage`` instead of raised (what `timer repair` reads: it lays the log out again)."""
        self.directory = Path(directory)
        self.damage = Problems()
        self.files: list[MappedFile] = list_mapped_files(self.directory, self.damage if lenient else None)
        self._reader = MappedFileReader(self.files)
        self._decoded: dict[int, TimerLogFile] = {}

    @property
    def min_offset(self) -> int:
        return self.files[0].start if self.files else 0

    @property
    def file_size(self) -> int | None:
        """The size of the log's files (the one most of them have: a damaged file may differ)."""
        return usual_size(self.files)

    @property
    def size(self) -> int:
        """Bytes of all files together."""
        return sum(mf.size for mf in self.files)

    def close(self) -> None:
        self._decoded.clear()
        self._reader.close()

    def __enter__(self) -> "TimerLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- whole files ------------------------------------------------------------------------
    def file(self, index: int, *, reference: bool = False) -> TimerLogFile:
        """The units, BLANK and end of one file (decoded once; ``reference`` through construct)."""
        mf = self.files[index]
        if reference:
            return self._decode(mf, self._reader.view(index), parse_file_construct)
        decoded = self._decoded.get(index)
        if decoded is None:
            decoded = self._decode(mf, self._reader.view(index), decode_file)
            if len(self._decoded) > 4:  # a few files at a time: a log can be gigabytes
                self._decoded.pop(next(iter(self._decoded)))
            self._decoded[index] = decoded
        return decoded

    @staticmethod
    def _decode(mf: MappedFile, view, decode):
        try:
            return decode(view, mf.start)
        except FormatError as exc:
            raise StoreError(mf.path, exc.offset, exc.expected) from None

    def columns(self, index: int) -> UnitColumns:
        """The units of file ``index`` as columns decoded on demand (not kept: one pass over a
        large log holds one file's columns at a time)."""
        return self._decode(self.files[index], self._reader.view(index), unit_columns)

    def iter_columns(self) -> Iterator[tuple[MappedFile, UnitColumns]]:
        for index, mf in enumerate(self.files):
            yield mf, self.columns(index)

    def iter_files(self, *, reference: bool = False) -> Iterator[tuple[MappedFile, TimerLogFile]]:
        for index, mf in enumerate(self.files):
            yield mf, self.file(index, reference=reference)

    def units(self, *, reference: bool = False) -> np.ndarray:
        """Every unit of every file as one UNITS_DTYPE array (for small logs and tests; the
        analyses go file by file)."""
        parts = [f.units for _, f in self.iter_files(reference=reference)]
        return np.concatenate(parts) if parts else np.empty(0, dtype=UNITS_DTYPE)

    def blanks(self) -> list[TimerLogBlank]:
        return [f.blank for _, f in self.iter_files() if f.blank is not None]

    def end_offset(self) -> int:
        """Where the units end: TimerLog's write position after recovery (the start of the
        zero tail of the last file, or its BLANK's end when it is full)."""
        if not self.files:
            return 0
        last = self.columns(len(self.files) - 1)
        return self.files[-1].end if last.blank is not None else last.end

    def view(self, index: int) -> memoryview:
        """The mapped bytes of file ``index``."""
        return self._reader.view(index)

    # -- single units -------------------------------------------------------------------------
    def file_index(self, offset: int) -> int:
        return self._reader.index_of(offset)

    def unit_at(self, offset: int) -> TimerLogUnit:
        """The unit at a global offset, checked like a unit: StoreError when the offset is
        outside the log, not at a unit boundary of its file, or not a unit."""
        index = self._reader.index_of(offset)
        if index < 0:
            end = self.files[-1].end if self.files else 0
            raise StoreError(self.directory, offset, f"a timer log offset inside [{self.min_offset}, {end})")
        mf = self.files[index]
        pos = offset - mf.start
        if pos % UNIT_SIZE or pos + UNIT_SIZE > mf.size:
            raise StoreError(mf.path, pos, f"a timer log unit boundary (a multiple of {UNIT_SIZE}), found {pos}")
        unit = parse_unit(self._reader.view(index)[pos:pos + UNIT_SIZE], offset)
        if unit.size != UNIT_SIZE or not is_magic_ok(unit.magic):
            raise StoreError(mf.path, pos, f"a timer log unit (size {UNIT_SIZE}, magic 0x1..0xF), found size "
                                           f"{unit.size} magic 0x{unit.magic & 0xFFFFFFFF:X}")
        return unit

    def location(self, offset: int) -> tuple[str, int]:
        """(file path, byte in the file) of a global offset, for messages."""
        index = self._reader.index_of(offset)
        if index < 0:
            return str(self.directory), offset
        return str(self.files[index].path), offset - self.files[index].start
