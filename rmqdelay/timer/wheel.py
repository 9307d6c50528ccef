"""The timer wheel file (``timerwheel``), read-only, mapped.

The broker refuses a wheel whose length is neither 0 nor 2 * slotsTotal * 32 bytes
("Timer wheel length ... != expected"); a 0-byte (or missing) wheel reads as all empty, as
the broker would create it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.timerwheel import (
    SLOT_SIZE,
    SLOTS_DTYPE,
    WHEEL_FILE_SIZE,
    WHEEL_SLOTS,
    Slot,
    get_slot,
    non_empty_slots,
    raw_slot,
    slot_from_row,
    slot_index,
)
from rmqdelay.store.fileio import not_regular, read_snapshot


def way_out(path: Path, kind: str | None) -> str:
    """What to run for a wheel the broker would refuse: the repair rebuilds it from the timer
    log and keeps the old one as timerwheel.bak; a directory it cannot rename over goes first."""
    repair = f"run `rmqdelay timer repair {path.parent} --execute`, which rebuilds the wheel from the timer log"
    if kind == "a directory":
        return f"move it out of the store, then {repair}"
    return f"{repair} (keeping this one as {path.name}.bak)"


class TimerWheel:
    def __init__(self, path: Path, precision_ms: int, *, lenient: bool = False) -> None:
        """``lenient``: a file of the wrong size, or something not a file (a FIFO, a symlink to
        nothing), reads as no wheel (``wrong_size`` says its size, ``not_regular`` what it is)."""
        self.path = Path(path)
        self.wrong_size: int | None = None
        self.not_regular: str | None = None
        self.precision_ms = precision_ms
        self._view: memoryview | bytes = b""
        # Never opened to find out: a FIFO would block a reader (and reads as 0 bytes).
        kind = not_regular(self.path)
        if kind is not None:
            if not lenient:
                raise StoreError(self.path, None, f"a timer wheel (a regular file), found {kind}: "
                                                  f"{way_out(self.path, kind)}")
            self.not_regular = kind
        try:
            size = 0 if kind is not None else self.path.stat().st_size
        except FileNotFoundError:
            size = 0
        except OSError as exc:
            raise StoreError(self.path, None, f"a readable file ({exc.strerror})") from None
        if size not in (0, WHEEL_FILE_SIZE) and lenient:
            self.wrong_size, size = size, 0
        if size not in (0, WHEEL_FILE_SIZE):
            raise StoreError(self.path, size, f"a timer wheel of {WHEEL_FILE_SIZE} bytes ({WHEEL_SLOTS} slots of "
                                              f"{SLOT_SIZE}; the broker refuses any other length), found {size} bytes: "
                                              f"{way_out(self.path, None)}")
        self.size = size
        if size:
            # A copy of its data extents (the wheel is mostly holes): a run or a broker
            # rewrites slots in place while this reads, and a reader must see one wheel.
            self._view = read_snapshot(self.path)

    @property
    def replaceable(self) -> bool:
        """Whether `timer repair --execute` can put a wheel in this one's place (a rename
        replaces anything but a directory)."""
        return self.not_regular != "a directory"

    @property
    def exists(self) -> bool:
        return self.size > 0

    def close(self) -> None:
        # Arrays taken from the view may still point into it; the map goes with the last of them.
        self._view = b""

    def __enter__(self) -> "TimerWheel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def slot_index(self, time_ms: int) -> int:
        return slot_index(time_ms, self.precision_ms)

    def slot(self, time_ms: int) -> Slot:
        """TimerWheel.getSlot: empty (-1, -1) when the slot was last written for another time."""
        if not self.exists:
            index = self.slot_index(time_ms)
            return Slot(index, time_ms // self.precision_ms, -1, -1, 0, 0, self.precision_ms)
        return get_slot(self._view, time_ms, self.precision_ms)

    def raw_slot(self, index: int) -> Slot:
        """TimerWheel.getRawSlot by index."""
        if not self.exists:
            return Slot(index, 0, 0, 0, 0, 0, self.precision_ms)
        return raw_slot(self._view, index, self.precision_ms)

    def non_empty(self) -> np.ndarray:
        """Every slot with a non-zero byte (SLOTS_DTYPE), in index order."""
        if not self.exists:
            return np.empty(0, dtype=SLOTS_DTYPE)
        return non_empty_slots(self._view)

    def non_empty_slots(self) -> list[Slot]:
        return [slot_from_row(row, self.precision_ms) for row in self.non_empty()]

    def live(self, slots: np.ndarray, from_ms: int) -> np.ndarray:
        """Which of ``slots`` TimerWheel.getAllNum(from_ms) counts: those holding a time in
        [from_ms, from_ms + the wheel's span), each in its own index (stored time matches)."""
        start = from_ms // self.precision_ms
        return (slots["timeSlot"] >= start) & (slots["timeSlot"] < start + WHEEL_SLOTS) & \
            (slots["timeSlot"] % WHEEL_SLOTS == slots["index"])
