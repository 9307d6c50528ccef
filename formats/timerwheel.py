"""The timer wheel (file ``timerwheel``): slots of 32 bytes (Slot.SIZE), TimerWheel.putSlot.

``long time / precisionMs | long firstPos | long lastPos | int num | int magic``

The wheel holds ``2 * slotsTotal`` slots, where TimerMessageStore fixes slotsTotal at
``TIMER_WHEEL_TTL_DAY * DAY_SECS`` = 604800 whatever the precision, so the file is always
1,209,600 * 32 = 38,707,200 bytes. A time's slot is ``(timeMs / precisionMs) % (2 * slotsTotal)``;
the slot holds the time it was last written for, and TimerWheel.getSlot reads a slot whose
stored time differs from the asked one as empty, ``Slot(-1, -1, -1)``. Slots are never cleared
after delivery: the timer checkpoint says which are done.

``SLOT`` is the construct definition and the reference; ``decode_wheel`` / ``non_empty_slots``
are the fast path over the whole file (numpy), held to identical values by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from construct import Int32sb, Int64sb, Struct

from .constants import DAY_SECS, TIMER_WHEEL_TTL_DAY
from .errors import FormatError

SLOT_SIZE = 32  # Slot.SIZE
SLOTS_TOTAL = TIMER_WHEEL_TTL_DAY * DAY_SECS  # TimerMessageStore.slotsTotal
WHEEL_SLOTS = 2 * SLOTS_TOTAL
WHEEL_FILE_SIZE = WHEEL_SLOTS * SLOT_SIZE  # 38,707,200
BLANK = -1  # TimerWheel.BLANK: no unit (firstPos / lastPos of an empty slot as getSlot returns it)

SLOT = Struct(
    "timeSlot" / Int64sb,  # timeMs / precisionMs
    "firstPos" / Int64sb,
    "lastPos" / Int64sb,
    "num" / Int32sb,
    "magic" / Int32sb,
)
assert SLOT.sizeof() == SLOT_SIZE

SLOT_DTYPE = np.dtype([("timeSlot", ">i8"), ("firstPos", ">i8"), ("lastPos", ">i8"), ("num", ">i4"), ("magic", ">i4")])
assert SLOT_DTYPE.itemsize == SLOT_SIZE

# Non-empty slots as they leave formats/: native order, with their index.
SLOTS_DTYPE = np.dtype([("index", "i8"), ("timeSlot", "i8"), ("firstPos", "i8"), ("lastPos", "i8"),
                        ("num", "i4"), ("magic", "i4")])


@dataclass(slots=True, frozen=True)
class Slot:
    """One wheel slot. ``timeMs`` is the stored time times the precision (Slot.timeMs)."""

    index: int
    timeSlot: int  # as stored: timeMs / precisionMs
    firstPos: int
    lastPos: int
    num: int
    magic: int
    precisionMs: int

    @property
    def timeMs(self) -> int:
        return self.timeSlot * self.precisionMs

    @property
    def is_empty(self) -> bool:
        """As TimerWheel.getSlot answers: nothing at this time (firstPos/lastPos -1)."""
        return self.lastPos == BLANK and self.firstPos == BLANK


def slot_index(time_ms: int, precision_ms: int, wheel_slots: int = WHEEL_SLOTS) -> int:
    """TimerWheel.getSlotIndex: Java's int arithmetic on a non-negative time."""
    return (time_ms // precision_ms) % wheel_slots


def wheel_slots_of(file_size: int) -> int:
    """How many slots a wheel file of ``file_size`` bytes has (its size must be whole slots)."""
    if file_size <= 0 or file_size % SLOT_SIZE:
        raise FormatError(file_size, f"a timer wheel of whole {SLOT_SIZE}-byte slots, found {file_size} bytes")
    return file_size // SLOT_SIZE


# -- reference (construct) ---------------------------------------------------------------------
def parse_slot(data, index: int, precision_ms: int) -> Slot:
    if len(data) < SLOT_SIZE:
        raise FormatError(0, f"a timer wheel slot of {SLOT_SIZE} bytes, found {len(data)}")
    p = SLOT.parse(bytes(data[:SLOT_SIZE]))
    return Slot(index, p.timeSlot, p.firstPos, p.lastPos, p.num, p.magic, precision_ms)


def build_slot(slot: Slot) -> bytes:
    """The 32 bytes TimerWheel.putSlot writes."""
    return SLOT.build(dict(timeSlot=slot.timeSlot, firstPos=slot.firstPos, lastPos=slot.lastPos,
                           num=slot.num, magic=slot.magic))


def raw_slot(wheel, index: int, precision_ms: int) -> Slot:
    """TimerWheel.getRawSlot by index: the slot as stored."""
    pos = index * SLOT_SIZE
    if index < 0 or pos + SLOT_SIZE > len(wheel):
        raise FormatError(pos, f"a slot index inside the wheel of {len(wheel) // SLOT_SIZE} slots, found {index}")
    return parse_slot(wheel[pos:pos + SLOT_SIZE], index, precision_ms)


def get_slot(wheel, time_ms: int, precision_ms: int) -> Slot:
    """TimerWheel.getSlot: the slot of ``time_ms``, or an empty one (-1, -1, -1) when the slot
    was last written for another time."""
    wheel_slots = len(wheel) // SLOT_SIZE
    index = slot_index(time_ms, precision_ms, wheel_slots)
    slot = raw_slot(wheel, index, precision_ms)
    if slot.timeSlot * precision_ms != time_ms // precision_ms * precision_ms:
        return Slot(index, time_ms // precision_ms, BLANK, BLANK, 0, 0, precision_ms)
    return slot


def non_empty_slots_construct(wheel, precision_ms: int) -> list[Slot]:
    """Every slot with a non-zero byte, through construct (slow: for tests and small wheels)."""
    result = []
    for index in range(len(wheel) // SLOT_SIZE):
        chunk = bytes(wheel[index * SLOT_SIZE:(index + 1) * SLOT_SIZE])
        if any(chunk):
            result.append(parse_slot(chunk, index, precision_ms))
    return result


# -- fast path (numpy) -----------------------------------------------------------------------------
def decode_wheel(wheel) -> np.ndarray:
    """The whole wheel as a structured array of SLOT_DTYPE (a view: no copy)."""
    return np.frombuffer(wheel, dtype=SLOT_DTYPE, count=len(wheel) // SLOT_SIZE)


def non_empty_slots(wheel) -> np.ndarray:
    """The slots with any non-zero byte, as SLOTS_DTYPE rows in index order."""
    # The non-zero words, then the slots they fall in (a mostly empty wheel: faster than
    # any() over each slot's words).
    index = np.flatnonzero(np.frombuffer(wheel, dtype=np.uint64, count=len(wheel) // SLOT_SIZE * (SLOT_SIZE // 8)))
    index //= SLOT_SIZE // 8
    if len(index):
        index = index[np.concatenate(([True], index[1:] != index[:-1]))]
    raw = decode_wheel(wheel)[index]
    out = np.empty(len(index), dtype=SLOTS_DTYPE)
    out["index"] = index
    for name in SLOT_DTYPE.names:
        out[name] = raw[name]
    return out


def slot_from_row(row, precision_ms: int) -> Slot:
    return Slot(int(row["index"]), int(row["timeSlot"]), int(row["firstPos"]), int(row["lastPos"]),
                int(row["num"]), int(row["magic"]), precision_ms)
