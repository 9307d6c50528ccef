"""Timer log units (TimerLog.UNIT_SIZE = 52 bytes) and the BLANK that closes a timer log file.

A unit is appended by TimerMessageStore.doEnqueue for every message the timer enqueues; its
slot time is ``currWriteTime + delayedTime`` (a delta, not a time). TimerLog.append writes a
unit while ``52 + 16`` bytes still fit in the file, otherwise a 16-byte BLANK
(``int bytesLeft | long 0 | int 0xCBD43194``) and the unit goes to the next file. Units start
at multiples of 52 from the file's start, so the BLANK does too, and its magic code sits where
a unit's magic does (byte 12): the broker's recovery reads both the same way.

``TIMER_LOG_UNIT`` is the construct definition and the reference; ``decode_file`` is the fast
path over a whole file (numpy), held to identical values by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from construct import Const, Int32sb, Int64sb, Struct

from .constants import (
    BLANK_MAGIC_CODE,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from .errors import FormatError

UNIT_SIZE = 52  # TimerLog.UNIT_SIZE
MIN_BLANK_LEN = 4 + 8 + 4  # TimerLog.MIN_BLANK_LEN
UNIT_PRE_SIZE_FOR_MSG = 28  # where offsetPy starts in a unit

TIMER_LOG_UNIT = Struct(
    "size" / Int32sb,
    "prevPos" / Int64sb,
    "magic" / Int32sb,
    "currWriteTime" / Int64sb,
    "delayedTime" / Int32sb,
    "offsetPy" / Int64sb,
    "sizePy" / Int32sb,
    "hashCodeOfRealTopic" / Int32sb,
    "reservedValue" / Int64sb,
)
assert TIMER_LOG_UNIT.sizeof() == UNIT_SIZE

TIMER_LOG_BLANK = Struct(
    "size" / Int32sb,  # the bytes left in the file from here
    "zero" / Const(0, Int64sb),
    "magic" / Const(BLANK_MAGIC_CODE, Int32sb),
)
assert TIMER_LOG_BLANK.sizeof() == MIN_BLANK_LEN

UNIT_DTYPE = np.dtype([
    ("size", ">i4"), ("prevPos", ">i8"), ("magic", ">i4"), ("currWriteTime", ">i8"),
    ("delayedTime", ">i4"), ("offsetPy", ">i8"), ("sizePy", ">i4"), ("hashCodeOfRealTopic", ">i4"),
    ("reservedValue", ">i8"),
])
assert UNIT_DTYPE.itemsize == UNIT_SIZE

# The columns units leave formats/ with: native byte order, the unit's global offset first.
UNITS_DTYPE = np.dtype([
    ("offset", "i8"), ("prevPos", "i8"), ("magic", "i4"), ("currWriteTime", "i8"),
    ("delayedTime", "i4"), ("offsetPy", "i8"), ("sizePy", "i4"), ("hashCodeOfRealTopic", "i4"),
    ("reservedValue", "i8"),
])


def is_magic_ok(magic: int) -> bool:
    """TimerMessageStore.isMagicOK: only the low four bits may be set."""
    return (magic | 0xF) == 0xF


@dataclass(slots=True, frozen=True)
class TimerLogUnit:
    """One unit, with ``offset`` its position in the whole timer log."""

    offset: int
    prevPos: int
    magic: int
    currWriteTime: int
    delayedTime: int
    offsetPy: int
    sizePy: int
    hashCodeOfRealTopic: int
    reservedValue: int = 0
    size: int = UNIT_SIZE

    @property
    def slotTimeMs(self) -> int:
        """The time of the wheel slot the unit was put in (the message's TIMER_OUT_MS unless rolled)."""
        return self.currWriteTime + self.delayedTime

    @property
    def isRoll(self) -> bool:
        return bool(self.magic & TIMER_MAGIC_ROLL)

    @property
    def isDelete(self) -> bool:
        return bool(self.magic & TIMER_MAGIC_DELETE)


@dataclass(slots=True, frozen=True)
class TimerLogBlank:
    """The BLANK that ends a timer log file's units."""

    offset: int
    size: int  # bytes left in the file from the BLANK on


@dataclass(slots=True, frozen=True)
class TimerLogFile:
    """What one timer log file holds, as columns: its units, and how the file ends."""

    units: np.ndarray  # UNITS_DTYPE, offsets global
    blank: TimerLogBlank | None  # the closing BLANK, when there is one
    end: int  # global offset where the units stop (the BLANK's offset, or the zero tail's)


# -- reference (construct) ---------------------------------------------------------------------
def parse_unit(data, offset: int = 0) -> TimerLogUnit:
    """One unit through construct; ``offset`` is the unit's place in the whole timer log."""
    if len(data) < UNIT_SIZE:
        raise FormatError(0, f"a timer log unit of {UNIT_SIZE} bytes, found {len(data)}")
    p = TIMER_LOG_UNIT.parse(bytes(data[:UNIT_SIZE]))
    return TimerLogUnit(offset, p.prevPos, p.magic, p.currWriteTime, p.delayedTime, p.offsetPy, p.sizePy,
                        p.hashCodeOfRealTopic, p.reservedValue, p.size)


def build_unit(unit: TimerLogUnit) -> bytes:
    """The 52 bytes doEnqueue writes for ``unit``."""
    return TIMER_LOG_UNIT.build(dict(
        size=unit.size, prevPos=unit.prevPos, magic=unit.magic, currWriteTime=unit.currWriteTime,
        delayedTime=unit.delayedTime, offsetPy=unit.offsetPy, sizePy=unit.sizePy,
        hashCodeOfRealTopic=unit.hashCodeOfRealTopic, reservedValue=unit.reservedValue))


def build_blank(bytes_left: int) -> bytes:
    """The 16 bytes TimerLog.append writes when a unit no longer fits (zeros follow)."""
    return TIMER_LOG_BLANK.build(dict(size=bytes_left, zero=0, magic=BLANK_MAGIC_CODE))


def units_per_file(file_size: int) -> int:
    """How many units a timer log file of ``file_size`` bytes holds before its BLANK."""
    return max((file_size - MIN_BLANK_LEN) // UNIT_SIZE, 0)


def parse_file_construct(data, start: int = 0) -> TimerLogFile:
    """The reference reader of one file's bytes, unit by unit through construct."""
    size = len(data)
    units = []
    pos = 0
    blank = None
    while pos + UNIT_SIZE <= size:
        head = data[pos:pos + UNIT_SIZE]
        if _is_blank_head(head):
            blank = _check_blank(data, pos, start)
            break
        if not any(bytes(head)):
            break
        unit = parse_unit(head, start + pos)
        _check_unit(unit.size, unit.magic, pos)
        units.append(unit)
        pos += UNIT_SIZE
    else:
        if pos < size and _is_blank_head(data[pos:pos + MIN_BLANK_LEN]):
            blank = _check_blank(data, pos, start)
    _check_tail(data, pos if blank is None else pos + MIN_BLANK_LEN)
    array = np.array([tuple(getattr(u, name) for name in UNITS_DTYPE.names) for u in units], dtype=UNITS_DTYPE)
    return TimerLogFile(array, blank, start + pos)


# -- fast path (numpy) ---------------------------------------------------------------------------
def decode_file(data, start: int = 0) -> TimerLogFile:
    """All units of one timer log file's bytes at once, with the same checks and values as
    ``parse_file_construct``.

    The units run from byte 0 until the BLANK or the first all-zero unit; a unit whose size
    is not 52 or whose magic has bits above 0xF raises FormatError at that unit, as does
    anything but zeros after the units (and after the BLANK's 16 bytes).
    """
    columns = unit_columns(data, start)
    units = np.empty(columns.count, dtype=UNITS_DTYPE)
    units["offset"] = columns.column("offset")
    for name in UNIT_DTYPE.names:
        if name != "size":
            units[name] = columns.raw[name]
    return TimerLogFile(units, columns.blank, columns.end)


# The size and magic of a unit as stored, read as little-endian words (see unit_columns).
_AS_STORED = np.dtype({"names": ["size", "magic"], "formats": ["<u4", "<u4"], "offsets": [0, 12],
                       "itemsize": UNIT_SIZE})
_SIZE_AS_STORED = int.from_bytes(UNIT_SIZE.to_bytes(4, "big"), "little")
_MAGIC_HIGH_BITS_AS_STORED = int.from_bytes((0xFFFFFFF0).to_bytes(4, "big"), "little")


@dataclass(slots=True, frozen=True)
class UnitColumns:
    """The units of one file as columns, each decoded only when asked for: a pass that needs
    four of the nine fields of ten million units reads four columns, not whole rows."""

    raw: np.ndarray  # the units as stored (UNIT_DTYPE, big-endian), a view of the file
    start: int  # the file's global offset
    blank: TimerLogBlank | None
    end: int

    @property
    def count(self) -> int:
        return len(self.raw)

    def column(self, name: str) -> np.ndarray:
        """One field of every unit, native and contiguous (``offset``: each unit's global offset)."""
        if name == "offset":
            return self.start + np.arange(len(self.raw), dtype=np.int64) * UNIT_SIZE
        return self.raw[name].astype(UNITS_DTYPE[name])

    def rows(self, index: np.ndarray) -> np.ndarray:
        """The units at ``index`` as UNITS_DTYPE rows (for a few of them)."""
        picked = self.raw[index]
        rows = np.empty(len(picked), dtype=UNITS_DTYPE)
        rows["offset"] = self.start + np.asarray(index, dtype=np.int64) * UNIT_SIZE
        for name in UNIT_DTYPE.names:
            if name != "size":
                rows[name] = picked[name]
        return rows


def unit_columns(data, start: int = 0) -> UnitColumns:
    """The units of one timer log file's bytes, checked as ``decode_file`` checks them, as
    columns decoded on demand."""
    size = len(data)
    count = size // UNIT_SIZE
    raw = np.frombuffer(data, dtype=UNIT_DTYPE, count=count)
    sizes = raw["size"]
    magics = raw["magic"]
    # A unit slot that is not a unit: the BLANK, zeros, or garbage. The first one ends the units.
    # Compared as stored (the bytes read little-endian, no byte swap): size 52 is 34 00 00 00
    # read that way, and a magic of 0x0..0xF has only the low nibble of its last byte set.
    words = raw.view(_AS_STORED)
    not_unit = (words["size"] != _SIZE_AS_STORED) | ((words["magic"] & _MAGIC_HIGH_BITS_AS_STORED) != 0)
    stop = int(np.argmax(not_unit)) if count and not_unit.any() else count
    pos = stop * UNIT_SIZE
    blank = None
    if stop < count:
        head = data[pos:pos + UNIT_SIZE]
        if _is_blank_head(head):
            blank = _check_blank(data, pos, start)
        elif any(bytes(head)):
            _check_unit(int(sizes[stop]), int(magics[stop]), pos)
    elif pos < size and _is_blank_head(data[pos:pos + MIN_BLANK_LEN]):
        blank = _check_blank(data, pos, start)
    _check_tail(data, pos if blank is None else pos + MIN_BLANK_LEN)
    return UnitColumns(raw[:stop], start, blank, start + pos)


def unit_from_row(row) -> TimerLogUnit:
    """One row of a UNITS_DTYPE array as a TimerLogUnit."""
    return TimerLogUnit(*(int(row[name]) for name in UNITS_DTYPE.names))


def encode_units(units: np.ndarray) -> bytes:
    """Rows of UNITS_DTYPE (or anything with its fields) as unit bytes, back to back."""
    raw = np.zeros(len(units), dtype=UNIT_DTYPE)
    raw["size"] = UNIT_SIZE
    for name in UNIT_DTYPE.names:
        if name != "size":
            raw[name] = units[name]
    return raw.tobytes()


# -- checks shared by both paths -------------------------------------------------------------------
def _is_blank_head(head) -> bool:
    return len(head) >= MIN_BLANK_LEN and int.from_bytes(bytes(head[12:16]), "big", signed=True) == BLANK_MAGIC_CODE


def _check_blank(data, pos: int, start: int) -> TimerLogBlank:
    left = len(data) - pos
    size = int.from_bytes(bytes(data[pos:pos + 4]), "big", signed=True)
    if size != left:
        raise FormatError(pos, f"a timer log BLANK whose size is the {left} bytes left in the file, found {size}")
    if any(bytes(data[pos + 4:pos + 12])):
        raise FormatError(pos + 4, "a timer log BLANK with 8 zero bytes after its size")
    return TimerLogBlank(start + pos, size)


def _check_unit(size: int, magic: int, pos: int) -> None:
    if size != UNIT_SIZE:
        raise FormatError(pos, f"a timer log unit of size {UNIT_SIZE}, a BLANK or zeros, found size {size}")
    if not is_magic_ok(magic):
        raise FormatError(pos + 12, f"a timer log unit magic of bits 0x1|0x2|0x4 (0x0..0xF), found 0x{magic & 0xFFFFFFFF:X}")


def _check_tail(data, pos: int) -> None:
    rest = np.frombuffer(data, dtype=np.uint8, offset=min(pos, len(data)))
    hits = np.flatnonzero(rest)
    if len(hits) and not any(bytes(data[pos:pos + UNIT_SIZE])):  # (a unit there now: a writer appends)
        raise FormatError(pos + int(hits[0]), f"zeros after the end of the timer log data at byte {pos}, found data")
