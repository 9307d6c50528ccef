"""Pending timer log units the wheel does not reach: what `run` refuses to start with.

The dequeue reads a slot through the wheel (TimerWheel.getSlot: a slot holding another
time reads as empty) and walks its chain back from lastPos. A wheel slot that was wiped
(its 32 bytes zeroed) or holds another time while the timer log still has units for that
time not yet read, or one whose lastPos is older than some of its time's units (an older
wheel file restored over a newer log), strands those messages: neither the broker nor `run`
ever delivers them, and neither says so. ``scan_timer_log`` finds them in the one pass `run` makes over the timer
log anyway (to find where its units end), as columns: no Python loop per unit.

Only non-delete units count (a delete unit puts nothing whether it is read or not; rmqdelay's
own neutral and marker units are delete units), and only units below the published end (the
units a killed run left past it are adopted into the wheel by the replay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import TIMER_MAGIC_DELETE
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.timerlog import UNIT_SIZE, unit_columns
from rmqdelay.formats.timerwheel import SLOT_SIZE

from .files import WheelFile
from .timerlog import TimerLog

SHOWN_POSITIONS = 5


@dataclass(slots=True, frozen=True)
class StrandedSlot:
    """A slot time with pending units whose wheel slot does not lead to them."""

    timeMs: int
    index: int  # the wheel slot's index (its byte offset is index * 32)
    heldTimeMs: int  # the time the slot holds (0 when zeroed)
    heldLastPos: int
    positions: tuple[int, ...]  # the pending units' global offsets, in log order

    @property
    def byte(self) -> int:
        return self.index * SLOT_SIZE


@dataclass(slots=True, frozen=True)
class BrokenLink:
    """A pending unit whose prevPos is not the unit before it of its slot time: the chain walked
    back from the slot's lastPos leaves it there, and the units before it are never read (or
    the walk goes on into another slot's units and puts them twice)."""

    file: Path
    byte: int  # of the unit's prevPos field in its file
    offset: int  # the unit's global offset
    timeMs: int  # its slot time
    expected: int  # the unit before it of its slot time (-1: none)
    found: int
    positions: tuple[int, ...]  # the pending units before it of its slot time, never reached


@dataclass(slots=True, frozen=True)
class DeferredSlot:
    """A slot time whose wheel index still holds an earlier time not read yet, its units one
    chain from -1 in log order (the broker's doEnqueue links them so: getSlot reads another
    time as empty). When the dequeue has read the earlier time, the wheel comes round to it:
    it is put there as putSlot would have (firstPos, lastPos, num), then read in its turn."""

    timeMs: int
    firstPos: int
    lastPos: int
    num: int


@dataclass(slots=True)
class TimerLogScan:
    end: int | None  # where the units end (TimerLog.end_offset); None when the last file does not decode
    stranded: list[StrandedSlot]
    broken: list[BrokenLink] = field(default_factory=list)
    deferred: list[DeferredSlot] = field(default_factory=list)


def scan_timer_log(log: TimerLog, wheel: WheelFile, read_ms: int, until: int | None = None) -> TimerLogScan:
    """One pass over the timer log: where its units end, and the pending units (slot time at or
    after ``read_ms``, below ``until`` when given) that the wheel does not reach."""
    times: list[np.ndarray] = []
    offsets: list[np.ndarray] = []
    links: list[tuple[np.ndarray, ...]] = []  # every unit of a pending slot time: time, offset, prevPos, magic
    end: int | None = None
    last = len(log.files) - 1
    for index, mf in enumerate(log.files):
        if until is not None and mf.start >= until:
            break
        view = log.view(index)
        try:
            cols = unit_columns(view, mf.start)
            if index == last:
                end = mf.end if cols.blank is not None else cols.end
        except FormatError as exc:
            # Reported by whoever reads there (verify, the tail scan of a replay); the units
            # before the bad one still count here.
            usable = exc.offset - exc.offset % UNIT_SIZE
            try:
                cols = unit_columns(view[:usable], mf.start)
            except FormatError:
                continue
        if not cols.count:
            continue
        magic = cols.column("magic")
        slot = cols.column("currWriteTime") + cols.column("delayedTime").astype(np.int64)
        pending = slot >= read_ms
        if until is not None:
            pending &= cols.column("offset") < until
        if pending.any():
            links.append((slot[pending], cols.column("offset")[pending], cols.column("prevPos")[pending],
                          magic[pending]))
        keep = pending & ((magic & TIMER_MAGIC_DELETE) == 0)
        if keep.any():
            times.append(slot[keep])
            offsets.append(cols.column("offset")[keep])
    if not log.files:
        end = 0
    stranded: list[StrandedSlot] = []
    deferred: list[DeferredSlot] = []
    waiting: set[int] = set()  # wheel indexes with a deferred slot
    if times:
        slot_times = np.concatenate(times)
        unit_offsets = np.concatenate(offsets)
        unique, inverse = np.unique(slot_times, return_inverse=True)
        newest = np.full(len(unique), -1, dtype=np.int64)
        np.maximum.at(newest, inverse, unit_offsets)
        for k, t in enumerate(unique.tolist()):
            held = wheel.get(t)
            if held is not None and held.lastPos >= 0 and int(newest[k]) <= held.lastPos:
                continue
            index = wheel.index(t)
            raw = wheel.slots.get(index)
            if held is None and raw is not None and index not in waiting:
                chain = _own_chain(links, t, raw, wheel.precision_ms, read_ms)
                if chain is not None:
                    waiting.add(index)
                    deferred.append(chain)
                    continue
            mine = unit_offsets[inverse == k]
            if held is not None and held.lastPos >= 0:
                # The chain is walked back from lastPos: units written after it are never read.
                mine = mine[mine > held.lastPos]
            stranded.append(StrandedSlot(t, index, raw.timeSlot * wheel.precision_ms if raw is not None else 0,
                                         raw.lastPos if raw is not None else 0, tuple(np.sort(mine).tolist())))
    return TimerLogScan(end, stranded, _broken_links(log, wheel, links), deferred)


def _own_chain(links: list[tuple[np.ndarray, ...]], t: int, raw, precision_ms: int,
               read_ms: int) -> DeferredSlot | None:
    """Slot time ``t`` as a DeferredSlot when its index holds an earlier time still to read
    (with a chain) and every unit of ``t`` links to the one before it, the first to -1."""
    held_ms = raw.timeSlot * precision_ms
    if raw.lastPos < 0 or not read_ms <= held_ms < t:
        return None
    slot, offset, prev, magic = (np.concatenate(c) for c in zip(*links))
    mine = slot == t
    order = np.argsort(offset[mine], kind="stable")
    offset, prev, magic = offset[mine][order], prev[mine][order], magic[mine][order]
    if not len(offset) or prev[0] != -1 or not np.array_equal(prev[1:], offset[:-1]):
        return None
    net = int(np.where((magic & TIMER_MAGIC_DELETE) != 0, -1, 1).sum())
    return DeferredSlot(t, int(offset[0]), int(offset[-1]), net)


def _broken_links(log: TimerLog, wheel: WheelFile, links: list[tuple[np.ndarray, ...]]) -> list[BrokenLink]:
    """In a slot that holds its time, the units up to its lastPos are linked in log order (the
    broker's enqueue takes prevPos from the slot's lastPos, -1 for a slot that holds another
    time): each unit's prevPos names the unit before it of its slot time, the first one -1 (or
    a unit in a file already deleted). The first link that is not so, per slot."""
    if not links:
        return []
    slot, offset, prev, magic = (np.concatenate(c) for c in zip(*links))
    order = np.lexsort((offset, slot))
    slot, offset, prev, magic = slot[order], offset[order], prev[order], magic[order]
    first = np.ones(len(slot), dtype=bool)
    first[1:] = slot[1:] != slot[:-1]
    expected = np.where(first, -1, np.concatenate(([-1], offset[:-1])))
    bad = (prev != expected) & ~(first & (prev >= 0) & (prev < log.min_offset))
    out: list[BrokenLink] = []
    seen: set[int] = set()
    for k in np.flatnonzero(bad).tolist():
        t = int(slot[k])
        if t in seen:
            continue
        held = wheel.get(t)
        if held is None or held.lastPos < int(offset[k]):
            continue  # the walk never starts above it: the stranded check reports the slot
        seen.add(t)
        group = np.flatnonzero((slot == t) & (offset < offset[k]) & ((magic & TIMER_MAGIC_DELETE) == 0))
        mf = log.files[max(0, int(np.searchsorted([f.start for f in log.files], int(offset[k]), "right")) - 1)]
        out.append(BrokenLink(mf.path, int(offset[k]) - mf.start + 4, int(offset[k]), t, int(expected[k]),
                              int(prev[k]), tuple(offset[group].tolist())))
    return out


def broken_chain_error(broken: list[BrokenLink], store_path) -> StoreError:
    """One line: the first broken link (file, byte of its prevPos, what it should be), what it
    strands, how many more, and the command that links the chains again."""
    first = broken[0]
    shown = ", ".join(map(str, first.positions[:SHOWN_POSITIONS]))
    if len(first.positions) > SHOWN_POSITIONS:
        shown += f", ... ({len(first.positions) - SHOWN_POSITIONS} more)"
    lost = f"{len(first.positions)} pending unit(s) before it at position(s) {shown} are never read" \
        if first.positions else "the walk goes on into units that are not its slot's"
    want = "-1 (the first unit of its slot time)" if first.expected == -1 else \
        f"{first.expected} (the unit before it of its slot time)"
    more = f" (and {len(broken) - 1} more slot(s) with a broken chain)" if len(broken) > 1 else ""
    return StoreError(first.file, first.byte,
                      f"the prevPos of the timer log unit at {first.offset} (slot {_iso(first.timeMs)}, timeMs "
                      f"{first.timeMs}) to be {want}, found {first.found}: the chain of its slot breaks there and "
                      f"{lost}{more}; nothing was delivered - run `rmqdelay timer repair {store_path} --execute` "
                      f"first (it links the chains again from the timer log's units)")


def stranded_error(wheel_path, stranded: list[StrandedSlot], store_path) -> StoreError:
    """One line: the first such slot (file, byte, what it holds and what the timer log holds),
    how many more, and what to do."""
    first = stranded[0]
    shown = ", ".join(map(str, first.positions[:SHOWN_POSITIONS]))
    if len(first.positions) > SHOWN_POSITIONS:
        shown += f", ... ({len(first.positions) - SHOWN_POSITIONS} more)"
    if first.heldTimeMs == first.timeMs and first.heldLastPos >= 0:
        held = f"holds timeMs {first.heldTimeMs} with lastPos {first.heldLastPos} (its chain starts before them)"
    elif first.heldTimeMs == first.timeMs:
        held = f"holds timeMs {first.heldTimeMs} with lastPos {first.heldLastPos} (no chain)"
    elif first.heldTimeMs == 0:
        held = "holds timeMs 0 (wiped)"
    else:
        held = f"holds timeMs {first.heldTimeMs} ({_iso(first.heldTimeMs)}, another time)"
    more = ""
    if len(stranded) > 1:
        more = f" (and {len(stranded) - 1} more slot(s) like it, {sum(len(s.positions) for s in stranded)} " \
               f"unit(s) in all)"
    return StoreError(wheel_path, first.byte,
                      f"the slot for {_iso(first.timeMs)} (timeMs {first.timeMs}) {held}, while the timer log holds "
                      f"{len(first.positions)} pending unit(s) for it at position(s) {shown}{more}: neither the "
                      f"broker nor `run` would deliver them; nothing was delivered - run `rmqdelay timer repair "
                      f"{store_path} --execute` first")


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"
