"""`rmqdelay timer repair`: put a 5.3.3 timer store back into a state the broker resumes from
without losing or delivering anything twice.

What is mended, all derived from the timer log and the commit log (never from the wheel):

- the timer log: whatever is not a unit (a torn tail, garbage in a file, a file without its
  BLANK) is cut; units that point outside the commit log (below its first offset after
  retention, past its end after a truncation), at no record or at a record of another topic
  are dropped, each reported with what it pointed at; fields that disagree with the unit's own
  timer message (sizePy, hashCodeOfRealTopic, the DELETE bit, the slot of a non-roll unit) are
  set from the message; every prevPos is relinked so each slot's units form one chain in log
  order. When units go, the units after them move up (the layout TimerLog.append would have
  written: 52-byte units back to back, a BLANK closing every full file), so no hole is left
  for the broker's recovery to stop at.
- the wheel (``timerwheel``) is rebuilt from the log: firstPos, lastPos and num of every slot
  (the broker's own recovery revises the positions but never the counts).
- ``config/timercheck`` is set to a point consistent with the data (see ``_checkpoint``).
- ``config/timermetrics`` gets the true pending counts when anything else changes (or when
  asked): 5.3.3's own counts drift, so drift alone is only reported.

Nothing is lost: every file replaced keeps its old bytes in a backup (``config/*.bak``,
``timerwheel.bak``, ``timerlog.bak/NAME`` - never inside ``timerlog/``, where the broker would
try to load a file of that name as part of the log).

Writing is a small transaction (``execute_repair``): every new file is written in full to
``.timer-repair/`` in the store and fsynced; a journal naming the renames is published by
rename; then each old file is linked to its backup and the new one renamed over it; the
journal goes last. A kill at any point leaves every file old or new, never torn, and the next
``--execute`` finishes the renames the journal names before it plans again.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqdelay.errors import ConfigFallbackWarning, StoreError, StoreReadError, StoreWriteError
from rmqdelay.formats.constants import (
    BLANK_MAGIC_CODE,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_MAGIC_DEFAULT,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.timercheck import (
    TIMER_CHECKPOINT_FILE_SIZE,
    TIMER_CHECKPOINT_SIZE,
    TimerCheckpoint,
    encode_timer_checkpoint,
)
from rmqdelay.formats.timerlog import (
    MIN_BLANK_LEN,
    UNIT_DTYPE,
    UNIT_SIZE,
    UNITS_DTYPE,
    build_blank,
    decode_file,
    encode_units,
    units_per_file,
)
from rmqdelay.formats.timermetrics import (
    TimerMetrics,
    TopicCount,
    format_timer_metrics,
    parse_timer_metrics,
)
from rmqdelay.formats.timerwheel import (
    SLOT_DTYPE,
    SLOT_SIZE,
    SLOTS_DTYPE,
    WHEEL_FILE_SIZE,
    WHEEL_SLOTS,
)
from rmqdelay.store import fileio
from rmqdelay.store.directory import load_config_file

from .store import TimerStore, unit_slot_times
from .verify import (
    NO_TIME,
    TimerRecords,
    check_units,
    readable_log_end,
    timer_records,
    true_metric_rows,
)

STAGING_DIR = ".timer-repair"
JOURNAL = "journal.json"
LOG_BACKUP_DIR = "timerlog.bak"
WHEEL_BACKUP = "timerwheel.bak"

# Why a unit is dropped (the kinds of `inspect timer --verify`).
BELOW_LOG = "unit-below-log"
PAST_LOG = "unit-past-log"
NO_MESSAGE = "unit-no-message"
NOT_TIMER = "unit-not-timer"

_INT_MIN, _INT_MAX = -2**31, 2**31 - 1
_NEW_UNIT = -2**62  # offsets of units made by the repair, until laid out


@dataclass(slots=True, frozen=True)
class DroppedUnit:
    offset: int  # where the unit was in the timer log
    slotTimeMs: int
    magic: int
    offsetPy: int
    sizePy: int
    kind: str
    pointedAt: str  # what is at offsetPy
    pending: bool  # its slot not read yet: a message the broker will never deliver

    def as_json(self) -> dict:
        return {"offset": self.offset, "slotTimeMs": self.slotTimeMs, "magic": self.magic,
                "offsetPy": self.offsetPy, "sizePy": self.sizePy, "kind": self.kind, "pointedAt": self.pointedAt,
                "pending": self.pending}


@dataclass(slots=True, frozen=True)
class FixedField:
    offset: int  # the unit's offset before the repair
    field: str
    before: int
    after: int
    why: str

    def as_json(self) -> dict:
        return {"offset": self.offset, "field": self.field, "before": self.before, "after": self.after,
                "why": self.why}


@dataclass(slots=True, frozen=True)
class StrayBytes:
    """Bytes of a timer log file that are not a unit, a BLANK or the zeros after them."""

    file: str
    offset: int  # byte in the file
    length: int
    head: str  # the first bytes, hex

    def as_json(self) -> dict:
        return {"file": self.file, "offset": self.offset, "length": self.length, "head": self.head}


@dataclass(slots=True, frozen=True)
class RemadeUnit:
    """A unit made for an enqueued timer message that has none (its unit was destroyed)."""

    queueOffset: int  # its rmq_sys_wheel_timer queue offset
    offsetPy: int
    uniqKey: str | None
    timerOutMs: int
    slotTimeMs: int
    magic: int

    def as_json(self) -> dict:
        return {"queueOffset": self.queueOffset, "offsetPy": self.offsetPy, "uniqKey": self.uniqKey,
                "timerOutMs": self.timerOutMs, "slotTimeMs": self.slotTimeMs, "magic": self.magic}


@dataclass(slots=True, frozen=True)
class Change:
    """One row of the before/after table."""

    file: str
    item: str
    before: str
    after: str

    def as_json(self) -> dict:
        return {"file": self.file, "item": self.item, "before": self.before, "after": self.after}


@dataclass(slots=True, frozen=True)
class LeftAlone:
    what: str
    why: str

    def as_json(self) -> dict:
        return {"what": self.what, "why": self.why}


@dataclass
class RepairPlan:
    store: str
    nowMs: int
    units: int = 0  # units found in the timer log
    kept: int = 0
    dropped: list[DroppedUnit] = field(default_factory=list)
    fixed: list[FixedField] = field(default_factory=list)
    stray: list[StrayBytes] = field(default_factory=list)
    remade: list[RemadeUnit] = field(default_factory=list)
    relinked: int = 0  # units whose prevPos changed other than by moving
    moved: int = 0  # units at a new offset
    slotsChanged: int = 0
    changes: list[Change] = field(default_factory=list)
    leftAlone: list[LeftAlone] = field(default_factory=list)
    metricsDriftOnly: bool = False  # the counts drift, nothing else changes: not rewritten
    interrupted: bool = False  # a journal of an interrupted --execute was found
    # What --execute writes: new contents by target (relative to the store), removals.
    log_files: dict[str, bytes] = field(default_factory=dict)
    log_file_size: int = 0
    log_removed: list[str] = field(default_factory=list)
    wheel: np.ndarray | None = None  # the new non-empty slots (SLOTS_DTYPE), when the wheel changes
    checkpoint: bytes | None = None
    metrics: bytes | None = None

    @property
    def changed(self) -> bool:
        return bool(self.log_files or self.log_removed or self.wheel is not None or self.checkpoint is not None
                    or self.metrics is not None)

    def as_json(self) -> dict:
        return {
            "store": self.store, "nowMs": self.nowMs, "changed": self.changed, "interrupted": self.interrupted,
            "units": self.units, "kept": self.kept, "moved": self.moved, "relinked": self.relinked,
            "slotsChanged": self.slotsChanged, "metricsDriftOnly": self.metricsDriftOnly,
            "changes": [c.as_json() for c in self.changes],
            "dropped": [d.as_json() for d in self.dropped], "fixed": [f.as_json() for f in self.fixed],
            "stray": [s.as_json() for s in self.stray], "remade": [r.as_json() for r in self.remade],
            "leftAlone": [a.as_json() for a in self.leftAlone],
            "filesWritten": sorted(self._targets()), "filesRemoved": [f"timerlog/{n}" for n in self.log_removed],
        }

    def _targets(self) -> list[str]:
        names = [f"timerlog/{n}" for n in self.log_files]
        if self.wheel is not None:
            names.append("timerwheel")
        if self.checkpoint is not None:
            names.append("config/timercheck")
        if self.metrics is not None:
            names.append("config/timermetrics")
        return names


# -- planning --------------------------------------------------------------------------------------
def plan_repair(ts: TimerStore, now_ms: int, wall_ms: int, *, fix_metrics: bool = False) -> RepairPlan:
    """What a repair of ``ts`` changes, judged at ``now_ms``; ``wall_ms`` stamps the new
    dataVersions. Reads only."""
    plan = RepairPlan(str(ts.store.path), now_ms)
    plan.interrupted = (ts.store.path / STAGING_DIR / JOURNAL).exists()
    units, suspect = _read_units(ts, plan)
    plan.units = int((~suspect).sum())
    records = timer_records(ts)
    units, keep = _check_and_fix(ts, units, suspect, records, plan)
    kept = units[keep]
    plan.kept = len(kept)
    cp = ts.checkpoint()
    read_ms = _read_time(ts, cp, kept, now_ms, plan)
    kept = _remake_lost(ts, cp, kept, records, read_ms, plan)
    new_units, log_end = _relayout(ts, kept, plan)
    groups = _groups(new_units)
    _wheel(ts, groups, read_ms, log_end, plan)
    log_changed = bool(plan.log_files or plan.log_removed)
    if cp is not None:
        _checkpoint(ts, cp, kept, records, read_ms, log_end, wall_ms, plan)
    _metrics(ts, new_units, read_ms, wall_ms, plan,
             force=fix_metrics or log_changed or plan.wheel is not None or plan.checkpoint is not None)
    return plan


def _read_units(ts: TimerStore, plan: RepairPlan) -> tuple[np.ndarray, np.ndarray]:
    """Every unit of the log in log order, and which of them are suspect. A file that does not
    decode whole is read stride by stride (units start at multiples of 52): a stride that is
    a unit, or not zeros and not the BLANK, is taken as a suspect unit - kept only if it points
    exactly at a timer message of its size (a unit with a flipped magic or size byte), its
    magic then set from that message; the rest is stray and is cut (its bytes stay in the
    backup)."""
    parts, suspects = [], []
    for index, mf in enumerate(ts.log.files):
        view = ts.log.view(index)
        try:
            units = decode_file(view, mf.start).units
            parts.append(units)
            suspects.append(np.zeros(len(units), dtype=bool))
            continue
        except FormatError:
            pass
        units, suspect = _salvage(view, mf, plan)
        parts.append(units)
        suspects.append(suspect)
    if not parts:
        return np.empty(0, dtype=UNITS_DTYPE), np.zeros(0, dtype=bool)
    return np.concatenate(parts), np.concatenate(suspects)


def _salvage(view, mf, plan: RepairPlan) -> tuple[np.ndarray, np.ndarray]:
    size = len(view)
    count = size // UNIT_SIZE
    raw = np.frombuffer(view, dtype=UNIT_DTYPE, count=count)
    words = np.frombuffer(view, dtype=np.uint8, count=count * UNIT_SIZE).reshape(count, UNIT_SIZE)
    nonzero = words.any(axis=1)
    is_unit = nonzero & (raw["size"] == UNIT_SIZE) & ((raw["magic"] | 0xF) == 0xF)
    # A BLANK sits at a unit boundary: its size is what is left of the file, its magic where a unit's is.
    left = size - np.arange(count, dtype=np.int64) * UNIT_SIZE
    is_blank = (raw["magic"] == BLANK_MAGIC_CODE) & (raw["size"].astype(np.int64) == left) & \
        (raw["prevPos"] == 0) & ~words[:, MIN_BLANK_LEN:].any(axis=1)
    rest = bytes(view[count * UNIT_SIZE:])
    if any(rest) and not (count and is_blank[-1]):
        plan.stray.append(StrayBytes(str(mf.path), count * UNIT_SIZE, len(rest), rest[:16].hex()))
    # After a unit that is not one, the units that follow are suspect too: a torn write can leave
    # well-formed garbage.
    bad = nonzero & ~is_unit & ~is_blank
    after_bad = np.cumsum(bad) > 0
    rows = np.flatnonzero(nonzero & ~is_blank)
    units = np.empty(len(rows), dtype=UNITS_DTYPE)
    units["offset"] = mf.start + rows.astype(np.int64) * UNIT_SIZE
    for name in UNIT_DTYPE.names:
        if name != "size":
            units[name] = raw[name][rows]
    return units, after_bad[rows] | ~is_unit[rows]


def _check_and_fix(ts: TimerStore, units: np.ndarray, suspect: np.ndarray, records: TimerRecords,
                   plan: RepairPlan) -> tuple[np.ndarray, np.ndarray]:
    """(units with their fields set from their messages, which to keep)."""
    keep = np.ones(len(units), dtype=bool)
    if not len(units):
        return units, keep
    units = units.copy()
    c = check_units(ts, units, records)
    idx = c.record
    n = len(records.offsets)
    is_timer_record = c.found & records.is_timer[idx] if n else c.found
    # The log's last units pointing at no record of their size are a torn tail (a unit written
    # in part), not units to drop: cut like any other bytes that are not a unit.
    unpointed = c.no_message | c.not_timer | (c.wrong_size & ~is_timer_record)
    tail = len(units) - (int(np.argmin(unpointed[::-1])) if not unpointed.all() else len(units))
    suspect = suspect.copy()
    suspect[tail:] = True
    # A suspect unit is a unit only if it points exactly at a timer message of its size.
    salvaged = suspect & c.found & ~c.wrong_size & is_timer_record
    for row in np.flatnonzero(suspect & ~salvaged):
        offset = int(units["offset"][row])
        path, byte = ts.log.location(offset)
        head = encode_units(units[row:row + 1])[:16].hex()
        plan.stray.append(StrayBytes(path, byte, UNIT_SIZE, head))
        keep[row] = False
    for row in np.flatnonzero(salvaged):
        magic = int(units["magic"][row])
        slot = int(units["currWriteTime"][row]) + int(units["delayedTime"][row])
        want = (TIMER_MAGIC_DELETE if records.is_delete[idx[row]] else 0) | \
            (0 if int(records.out_ms[idx[row]]) == slot else TIMER_MAGIC_ROLL) | 1
        if magic != want:
            _fix(plan, units, row, "magic", want, "a unit with a damaged magic, restored from its message")
    c = check_units(ts, units, records) if salvaged.any() else c
    trusted = ~suspect | salvaged
    # offsetPy inside a record the scan read is a pointer gone wrong; anywhere else the bytes
    # there did not frame as a record (a damaged header?) and the broker, which reads sizePy
    # bytes from offsetPy without framing, may still deliver them: left alone, not dropped.
    inside = np.zeros(len(units), dtype=bool)
    if n:
        py = units["offsetPy"].astype(np.int64)
        before = np.searchsorted(records.offsets, py, side="right") - 1
        inside = (before >= 0) & (records.offsets[np.maximum(before, 0)] + records.sizes[np.maximum(before, 0)] > py)
    damaged_record = c.no_message & ~inside & trusted
    for row in np.flatnonzero(damaged_record):
        plan.leftAlone.append(LeftAlone(f"unit at timer log offset {int(units['offset'][row])}",
                                        f"it points at commit log offset {int(units['offsetPy'][row])}, where the "
                                        "bytes do not frame as a record (damaged?): mend the commit log first"))
    c.no_message &= ~damaged_record
    drop_not_timer = (c.not_timer | (c.wrong_size & ~is_timer_record)) & trusted
    for mask, kind in ((c.below & trusted, BELOW_LOG), (c.past & trusted, PAST_LOG),
                       (c.no_message & trusted, NO_MESSAGE), (drop_not_timer, NOT_TIMER)):
        for row in np.flatnonzero(mask):
            plan.dropped.append(_dropped(ts, units[row], kind, records))
            keep[row] = False
    for row in np.flatnonzero(c.unreadable & trusted):
        plan.leftAlone.append(LeftAlone(f"unit at timer log offset {int(units['offset'][row])}",
                                        f"it points at commit log offset {int(units['offsetPy'][row])}, in a part "
                                        "of the commit log that could not be read: mend the commit log first"))
    # Units pointing at a timer message: the message decides their fields.
    resized = c.wrong_size & is_timer_record & trusted
    for row in np.flatnonzero(resized):
        _fix(plan, units, row, "sizePy", int(records.sizes[idx[row]]), "the size of the record it points at")
    timer = ((c.found & ~c.wrong_size & ~c.not_timer) | resized) & trusted
    checks = check_units(ts, units, records) if resized.any() else c
    for row in np.flatnonzero(timer & checks.bad_hash):
        _fix(plan, units, row, "hashCodeOfRealTopic", int(records.real_hash[idx[row]]),
             "String.hashCode of the message's REAL_TOPIC")
    for row in np.flatnonzero(timer & checks.bad_delete):
        magic = int(units["magic"][row])
        want = magic | TIMER_MAGIC_DELETE if records.is_delete[idx[row]] else magic & ~TIMER_MAGIC_DELETE
        _fix(plan, units, row, "magic", want, "the DELETE bit as the message's TIMER_DEL_UNIQKEY says")
    for row in np.flatnonzero(timer & checks.bad_time):
        out = int(records.out_ms[idx[row]])
        delta = out - int(units["currWriteTime"][row])
        if out == NO_TIME or not _INT_MIN <= delta <= _INT_MAX:
            plan.leftAlone.append(LeftAlone(
                f"unit at timer log offset {int(units['offset'][row])}",
                "its slot is not its message's TIMER_OUT_MS and the message gives no slot it can hold "
                f"({'no TIMER_OUT_MS' if out == NO_TIME else f'TIMER_OUT_MS {out}'})"))
            continue
        _fix(plan, units, row, "delayedTime", delta, f"slot time = the message's TIMER_OUT_MS {out}")
    return units, keep


def _fix(plan: RepairPlan, units: np.ndarray, row: int, name: str, value: int, why: str) -> None:
    plan.fixed.append(FixedField(int(units["offset"][row]), name, int(units[name][row]), value, why))
    units[name][row] = value


def _dropped(ts: TimerStore, unit, kind: str, records: TimerRecords) -> DroppedUnit:
    py, size = int(unit["offsetPy"]), int(unit["sizePy"])
    if kind == BELOW_LOG:
        what = f"commit log offset {py}, below its first offset {records.min_offset} (deleted by retention)"
    elif kind == PAST_LOG:
        what = f"commit log offset {py} size {size}, past its end {records.end_offset} (truncated)"
    elif kind == NO_MESSAGE:
        what = f"commit log offset {py}, where no record starts"
    else:
        try:
            msg = ts.store.commitlog.read_message(py, int(records.sizes[np.searchsorted(records.offsets, py)]))
            what = f"a record of topic {msg.topic} (queue {msg.queueId}, offset {msg.queueOffset}) at {py}"
        except (StoreError, IndexError):
            what = f"a record that is not a timer message at {py}"
    slot = int(unit["currWriteTime"]) + int(unit["delayedTime"])
    cp = ts.checkpoint()
    pending = cp is None or slot >= cp.lastReadTimeMs
    return DroppedUnit(int(unit["offset"]), slot, int(unit["magic"]), py, size, kind, what, pending)


def _read_time(ts: TimerStore, cp: TimerCheckpoint | None, kept: np.ndarray, now_ms: int,
               plan: RepairPlan) -> int:
    """lastReadTimeMs after the repair (see _checkpoint)."""
    p = ts.config.precisionMs
    if cp is None:
        return now_ms // p * p - ts.config.slotsTotal * p + 60 * p  # where the broker's recovery starts
    read = cp.lastReadTimeMs
    floor_now = now_ms // p * p
    if read <= floor_now + p:
        return read
    # Ahead of the clock. The broker reads a slot only once its write clock (floor(now)) is past
    # it, and stamps the checkpoint's dataVersion with its clock whenever the read time moves:
    # beyond floor(dataVersion.timestamp) no broker that wrote this file has read.
    high = read
    if cp.dataVersion.timestamp > 0:
        high = min(read, cp.dataVersion.timestamp // p * p)
    slots = unit_slot_times(kept) if len(kept) else np.empty(0, dtype=np.int64)
    below = slots[slots < high]
    # Slots below `high` were read: down to floor(now) the read time may only skip empty ones.
    last_read_unit = int(below.max()) + p if len(below) else None
    new = min(high, max(floor_now, last_read_unit if last_read_unit is not None else floor_now))
    if new > floor_now + p:
        plan.leftAlone.append(LeftAlone(
            "config/timercheck lastReadTimeMs",
            f"lowered to {new}, not to now ({floor_now}): the slots up to {new} were already read and hold "
            "units; reading them again would deliver those messages twice. The broker delivers nothing "
            "due before it until its clock passes it"))
    return new


def _remake_lost(ts: TimerStore, cp: TimerCheckpoint | None, kept: np.ndarray, records: TimerRecords,
                 read_ms: int, plan: RepairPlan) -> np.ndarray:
    """``kept`` with a unit for every enqueued timer message that lost its own (a unit
    destroyed, cut as bytes that are not a unit): an rmq_sys_wheel_timer entry below
    masterTimerQueueOffset, due at or after the read time, with no unit in the log and no
    later record of its UNIQ_KEY (no delivered copy, no re-put of a roll). Nothing would ever
    deliver it: it gets the unit doEnqueue writes at the read time, put before the log's last
    unit (which stays last).
    A cancellation marker in that state gets none: one the broker dropped on enqueue (due
    already) leaves no trace either, and a unit made for it could cancel its target."""
    cq = ts.timer_queue()
    if cq is None or cp is None or not len(records.offsets) or not len(kept):
        return kept
    high = min(cp.masterTimerQueueOffset, cq.max_offset)
    if high <= cq.min_offset:
        return kept
    entries = cq.units(cq.min_offset, high)
    py = entries["commitLogOffset"].astype(np.int64)
    idx = np.minimum(np.searchsorted(records.offsets, py), len(records.offsets) - 1)
    found = records.offsets[idx] == py
    found &= records.is_timer[idx] & (records.sizes[idx] == entries["size"].astype(np.int64))
    found &= (records.out_ms[idx] != NO_TIME) & (records.out_ms[idx] >= read_ms) & ~records.is_delete[idx]
    found &= ~np.isin(py, kept["offsetPy"].astype(np.int64))
    rows = np.flatnonzero(found)
    if not len(rows):
        return kept
    candidates: dict[str, int] = {}  # UNIQ_KEY -> row of its entry
    for row in rows.tolist():
        try:
            msg = ts.store.commitlog.read_message(int(py[row]), int(records.sizes[idx[row]]))
        except StoreError:
            continue
        key = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if key is not None:  # without one, no way to tell it was not delivered: left as it is
            candidates[key] = row
    if candidates:  # a later record of the same key: delivered, re-put or rolled - not lost
        first = min(int(py[row]) for row in candidates.values())
        for record in ts.store.commitlog.records(first):
            key = getattr(record, "properties", {}).get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if key in candidates and record.commitLogOffset > int(py[candidates[key]]):
                del candidates[key]
    made = []
    for key, row in sorted(candidates.items(), key=lambda kv: kv[1]):
        out = int(records.out_ms[idx[row]])
        queue_offset = cq.min_offset + row
        write = read_ms
        roll = ts.config.roll_slot(out, write)
        slot, magic = (out, TIMER_MAGIC_DEFAULT) if roll is None else (roll, TIMER_MAGIC_DEFAULT | TIMER_MAGIC_ROLL)
        # (offset: a placeholder no unit or prevPos holds; _relayout gives it its place)
        made.append((_NEW_UNIT - len(made), -1, magic, write, slot - write, int(py[row]),
                     int(records.sizes[idx[row]]), int(records.real_hash[idx[row]]), 0))
        plan.remade.append(RemadeUnit(queue_offset, int(py[row]), key, out, slot, magic))
    if not made:
        return kept
    plan.changes.append(Change("timerlog/", "units made for enqueued messages without one", "-", str(len(made))))
    # Before the last unit, never after it: the broker's recovery resumes the enqueue after the
    # queue offset of the message the log's last unit points at (reviseQueueOffset); a made
    # unit there would enqueue every later entry a second time.
    return np.concatenate([kept[:-1], np.array(made, dtype=kept.dtype), kept[-1:]])


def _relayout(ts: TimerStore, kept: np.ndarray, plan: RepairPlan) -> tuple[np.ndarray, int]:
    """The kept units laid out as TimerLog.append writes them, from the first file's offset:
    back to back, a BLANK closing each full file. prevPos relinked per slot time. Fills
    plan.log_files / log_removed with the files whose bytes change. Returns (the units at
    their new offsets, the log's new end)."""
    files = ts.log.files
    if not files:
        if len(kept):  # cannot happen: units come from files
            raise StoreError(ts.log.directory, None, "timer log files")
        return kept, 0
    file_size = files[0].size
    plan.log_file_size = file_size
    base = files[0].start
    per = units_per_file(file_size)
    k = np.arange(len(kept), dtype=np.int64)
    new = kept.copy()
    new["offset"] = base + (k // per) * file_size + (k % per) * UNIT_SIZE if per else base
    made = kept["offset"] <= _NEW_UNIT  # units made by the repair (_remake_lost): neither moved nor relinked
    plan.moved = int(((new["offset"] != kept["offset"]) & ~made).sum())
    # prevPos: the previous unit of the same slot time, in log order.
    slot = unit_slot_times(new)
    order = np.lexsort((k, slot))
    first = np.ones(len(order), dtype=bool)
    first[1:] = slot[order][1:] != slot[order][:-1]
    prev = np.full(len(order), -1, dtype=np.int64)
    prev[~first] = new["offset"][order][:-1][~first[1:]]
    # The first unit of a slot may go on into files the broker already deleted: kept as it was.
    old_prev = kept["prevPos"][order].astype(np.int64)
    into_deleted = first & (old_prev >= 0) & (old_prev < base)
    prev[into_deleted] = old_prev[into_deleted]
    old_prev_moved = _map_offsets(old_prev, kept["offset"], new["offset"])
    plan.relinked = int(((prev != old_prev_moved) & ~made[order]).sum())
    new["prevPos"][order] = prev
    count = -(-len(new) // per) if per and len(new) else 1
    log_end = base if not len(new) else int(new["offset"][-1]) + UNIT_SIZE
    for j in range(max(count, 1)):
        chunk = new[j * per:(j + 1) * per] if per else new[:0]
        data = encode_units(chunk)
        if j < count - 1:
            data += build_blank(file_size - len(data))
        start = base + j * file_size
        name = f"{start:020d}"
        old = _old_file(ts, start)
        if old is None or len(old) != file_size or bytes(old[:len(data)]) != data or any(old[len(data):]):
            plan.log_files[name] = data
    plan.log_removed = [mf.path.name for mf in files if mf.start >= base + count * file_size]
    if plan.log_files or plan.log_removed:
        touched = sorted(plan.log_files)
        plan.changes.append(Change("timerlog/", "units", f"{plan.units} in {len(files)} file(s)",
                                   f"{len(new)} in {count} file(s)"))
        plan.changes.append(Change("timerlog/", "end offset", str(readable_log_end(ts)), str(log_end)))
        plan.changes.append(Change("timerlog/", "files rewritten", "-", ", ".join(touched) or "-"))
        if plan.log_removed:
            plan.changes.append(Change("timerlog/", "files removed (kept in timerlog.bak/)",
                                       ", ".join(plan.log_removed), "-"))
    return new, log_end


def _map_offsets(values: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Old timer log offsets in ``values`` as the new offsets of the same units (others unchanged)."""
    order = np.argsort(old, kind="stable")
    sorted_old = old[order]
    pos = np.minimum(np.searchsorted(sorted_old, values), max(len(old) - 1, 0))
    hit = (len(old) > 0) & (sorted_old[pos] == values) if len(old) else np.zeros(len(values), dtype=bool)
    out = values.copy()
    out[hit] = new[order][pos[hit]]
    return out


def _old_file(ts: TimerStore, start: int):
    for index, mf in enumerate(ts.log.files):
        if mf.start == start:
            return ts.log.view(index)
    return None


def _groups(units: np.ndarray) -> dict[int, tuple[int, int, int]]:
    """slot time -> (firstPos, lastPos, num) of the units (already in log order)."""
    groups: dict[int, tuple[int, int, int]] = {}
    if not len(units):
        return groups
    slot = unit_slot_times(units)
    order = np.argsort(slot, kind="stable")
    s = slot[order]
    starts = np.flatnonzero(np.concatenate(([True], s[1:] != s[:-1])))
    ends = np.append(starts[1:], len(order)) - 1
    sign = np.where((units["magic"][order] & TIMER_MAGIC_DELETE) != 0, -1, 1)
    net = np.add.reduceat(sign, starts)
    offsets = units["offset"][order]
    for a, b, n in zip(starts.tolist(), ends.tolist(), net.tolist()):
        groups[int(s[a])] = (int(offsets[a]), int(offsets[b]), int(n))
    return groups


def _wheel(ts: TimerStore, groups: dict[int, tuple[int, int, int]], read_ms: int, log_end: int,
           plan: RepairPlan) -> None:
    """The wheel as the timer log says it is. Where two slot times share an index, the one the
    dequeue will still read wins (the broker keeps the later one too). A slot no unit of the
    log explains is kept only if it is done and points into files already deleted (history
    the broker keeps); anything else goes."""
    p = ts.config.precisionMs
    old = ts.wheel.non_empty()
    start = read_ms // p
    chosen: dict[int, tuple[int, tuple[int, int, int]]] = {}
    for t, g in groups.items():
        stored = t // p
        index = stored % WHEEL_SLOTS
        live = start <= stored < start + WHEEL_SLOTS
        have = chosen.get(index)
        if have is not None:
            have_live = start <= have[0] < start + WHEEL_SLOTS
            if have_live and not live or (have_live == live and have[0] > stored):
                continue
        chosen[index] = (stored, g)
    base = ts.log.min_offset
    rows = []
    for s in old:
        index = int(s["index"])
        if index in chosen:
            continue
        live = start <= int(s["timeSlot"]) < start + WHEEL_SLOTS
        if not live and -1 <= int(s["lastPos"]) < base and -1 <= int(s["firstPos"]) < base:
            rows.append((index, int(s["timeSlot"]), int(s["firstPos"]), int(s["lastPos"]), int(s["num"]),
                         int(s["magic"])))
    for index, (stored, (first, last, num)) in chosen.items():
        rows.append((index, stored, first, last, num, 0))
    new = np.array(sorted(rows), dtype=SLOTS_DTYPE)
    if len(new) == len(old) and all(np.array_equal(new[n], old[n]) for n in SLOTS_DTYPE.names):
        return
    old_set = {tuple(int(r[n]) for n in SLOTS_DTYPE.names) for r in old}
    new_set = {tuple(int(r[n]) for n in SLOTS_DTYPE.names) for r in new}
    plan.slotsChanged = len({r[0] for r in old_set ^ new_set})
    plan.wheel = new
    counts_fixed = _count_fixes(old, new)
    plan.changes.append(Change("timerwheel", "non-empty slots", str(len(old)), str(len(new))))
    plan.changes.append(Change("timerwheel", "slots rewritten", "-", str(plan.slotsChanged)))
    if counts_fixed:
        plan.changes.append(Change("timerwheel", "slot counts (num) corrected", "-", str(counts_fixed)))
    live_old = int(old["num"][ts.wheel.live(old, read_ms)].astype(np.int64).sum()) if len(old) else 0
    live_new = int(new["num"][ts.wheel.live(new, read_ms)].astype(np.int64).sum()) if len(new) else 0
    if live_old != live_new:
        plan.changes.append(Change("timerwheel", "pending units by slot counts (getAllNum)", str(live_old),
                                   str(live_new)))


def _count_fixes(old: np.ndarray, new: np.ndarray) -> int:
    before = {(int(r["index"]), int(r["timeSlot"])): int(r["num"]) for r in old}
    return sum(1 for r in new if before.get((int(r["index"]), int(r["timeSlot"])), int(r["num"])) != int(r["num"]))


def _checkpoint(ts: TimerStore, cp: TimerCheckpoint, kept: np.ndarray, records: TimerRecords, read_ms: int,
                log_end: int, wall_ms: int, plan: RepairPlan) -> None:
    """config/timercheck, consistent with the data. From TimerMessageStore.recover (5.3.3):

    - lastReadTimeMs: the dequeue resumes at max(it, now - 7 days + 60 s). Slots are never
      cleared, so a lower value delivers the slots in between again and a higher one never
      delivers them: it stays, unless it lies ahead of the clock (then nothing new sent for
      a time before it is ever delivered): see _read_time.
    - masterTimerQueueOffset: the next rmq_sys_wheel_timer queue offset to enqueue. Every
      message whose unit is in the log was enqueued, and the enqueue goes in queue order, so
      it is at least the queue offset of the last such message + 1 (less would enqueue them a
      second time); it is at most the queue's max offset (recover clamps to it; messages put
      after a truncation would otherwise be skipped).
    - lastTimerQueueOffset: read only when reviseQueueOffset finds no last unit; the broker
      stores min(commitQueueOffset, master), which is master after a clean stop.
    - lastTimerLogFlushPos: recovery re-reads (and revises the wheel from) one file before it;
      at most the log's end.
    - dataVersion: bumped (counter + 1, timestamp now) when anything above changes, as
      TimerCheckpoint.updateDateVersion does.
    """
    cq = ts.timer_queue()
    queue_max = cq.max_offset if cq is not None else 0
    master = cp.masterTimerQueueOffset
    lowest = _last_enqueued(cq, kept) + 1 if cq is not None else 0
    new_master = min(max(master, lowest), queue_max) if cq is not None else min(master, queue_max)
    last = cp.lastTimerQueueOffset
    new_last = new_master if (new_master != master or last > new_master) else last
    flush = min(cp.lastTimerLogFlushPos, log_end)
    fields = {"lastReadTimeMs": (cp.lastReadTimeMs, read_ms), "lastTimerLogFlushPos": (cp.lastTimerLogFlushPos, flush),
              "lastTimerQueueOffset": (last, new_last), "masterTimerQueueOffset": (master, new_master)}
    if all(a == b for a, b in fields.values()):
        return
    dv = cp.dataVersion
    new_dv = DataVersion(counter=dv.counter + 1, stateVersion=dv.stateVersion, timestamp=wall_ms)
    new_cp = TimerCheckpoint(read_ms, flush, new_last, new_master, new_dv)
    old = fileio.read_file(ts.checkpoint_path) or b""
    tail = old[TIMER_CHECKPOINT_SIZE:TIMER_CHECKPOINT_FILE_SIZE] if len(old) >= TIMER_CHECKPOINT_FILE_SIZE else \
        bytes(TIMER_CHECKPOINT_FILE_SIZE - TIMER_CHECKPOINT_SIZE)
    plan.checkpoint = encode_timer_checkpoint(new_cp) + tail
    for name, (a, b) in fields.items():
        if a != b:
            plan.changes.append(Change("config/timercheck", name, str(a), str(b)))
    plan.changes.append(Change("config/timercheck", "dataVersion", f"{dv.counter}@{dv.timestamp}",
                               f"{new_dv.counter}@{new_dv.timestamp}"))


def _last_enqueued(cq, kept: np.ndarray) -> int:
    """The highest queue offset of rmq_sys_wheel_timer whose message has a unit (-1: none)."""
    if not len(kept):
        return -1
    units = cq.units(cq.min_offset, cq.max_offset)
    if not len(units):
        return -1
    py = units["commitLogOffset"].astype(np.int64)
    offsets = np.arange(cq.min_offset, cq.min_offset + len(units), dtype=np.int64)
    order = np.argsort(py, kind="stable")
    wanted = kept["offsetPy"].astype(np.int64)
    pos = np.minimum(np.searchsorted(py[order], wanted), len(order) - 1)
    hit = py[order][pos] == wanted
    return int(offsets[order][pos][hit].max()) if hit.any() else -1


def _metrics(ts: TimerStore, units: np.ndarray, read_ms: int, wall_ms: int, plan: RepairPlan, *,
             force: bool) -> None:
    """config/timermetrics with the true count of every topic: non-delete minus delete units
    of the slots the dequeue has still to read (TimerMetrics counts +1 at enqueue, -1 at
    dequeue and for a delete unit). Topics are kept in the file's order; their timeStamp moves
    only where the count does."""
    metrics, broken = _load_metrics(ts)
    force = force or broken
    rows = true_metric_rows(ts, units, read_ms, metrics)
    true = {m.topic: m.trueCount for m in rows}
    old = metrics.timingCount if metrics is not None else {}
    drift = [m for m in rows if m.count != m.trueCount]
    if not drift and metrics is not None and not broken:
        return
    if not force:
        plan.metricsDriftOnly = bool(drift)
        return
    counts: dict[str, TopicCount] = {}
    for topic, m in old.items():
        n = true.get(topic, 0)
        counts[topic] = m if m.count == n else TopicCount(n, wall_ms)
    for topic in sorted(true):
        if topic not in counts:
            counts[topic] = TopicCount(true[topic], wall_ms)
    dv = metrics.dataVersion if metrics is not None else DataVersion(0, 0, 0)
    new_dv = DataVersion(counter=dv.counter + 1, stateVersion=dv.stateVersion, timestamp=wall_ms)
    plan.metrics = format_timer_metrics(TimerMetrics(counts, new_dv)).encode("utf-8")
    for m in drift:
        plan.changes.append(Change("config/timermetrics", f"count of {m.topic}",
                                   "-" if m.count is None else str(m.count), str(m.trueCount)))
    if broken or metrics is None:
        plan.changes.append(Change("config/timermetrics", "file",
                                   "unreadable (the broker falls back to .bak; without one it does not start)"
                                   if broken else "missing", "written"))


def _load_metrics(ts: TimerStore) -> tuple[TimerMetrics | None, bool]:
    """(the metrics the broker would load, whether config/timermetrics itself is unusable)."""
    try:
        return load_config_file(ts.metrics_path, parse_timer_metrics, fallback=False), False
    except StoreReadError:
        raise  # the system said no (a FIFO, EACCES): not content to replace
    except StoreError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigFallbackWarning)
        try:
            return load_config_file(ts.metrics_path, parse_timer_metrics), True
        except StoreReadError:
            raise
        except StoreError:
            return None, True


# -- writing --------------------------------------------------------------------------------------
@dataclass(slots=True, frozen=True)
class _Entry:
    staged: str | None  # None: the target is removed (moved to its backup)
    target: str
    backup: str | None

    def as_json(self) -> list:
        return [self.staged, self.target, self.backup]


def pending_journal(store_path: Path) -> bool:
    return (Path(store_path) / STAGING_DIR / JOURNAL).exists()


def finish_interrupted(store_path: Path) -> bool:
    """Complete the renames of an interrupted --execute (its journal names them), or discard
    what it staged before its journal was published. True when a journal was completed.
    Call under the store's lock."""
    root = Path(store_path)
    staging = root / STAGING_DIR
    journal = staging / JOURNAL
    data = fileio.read_file(journal)
    if data is None:
        _discard(staging)
        return False
    try:
        entries = [_Entry(*e) for e in json.loads(data.decode("utf-8"))["entries"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise StoreError(journal, None, "the journal of an interrupted timer repair (JSON naming its renames); "
                                        "it is not readable: restore the files from their .bak copies") from None
    _commit(root, entries)
    return True


def execute_repair(store_path: Path, plan: RepairPlan) -> None:
    """Stage every new file, publish the journal, then rename. Call under the store's lock."""
    if not plan.changed:
        return
    root = Path(store_path)
    staging = root / STAGING_DIR
    _discard(staging)
    entries: list[_Entry] = []
    try:
        fileio.make_dirs(staging)
        fileio.fsync_dir(root)
        for name in sorted(plan.log_files):
            target = f"timerlog/{name}"
            staged = f"{STAGING_DIR}/timerlog-{name}"
            _check_target(root / target)
            _write_file(root / staged, plan.log_files[name], plan.log_file_size)
            entries.append(_Entry(staged, target, f"{LOG_BACKUP_DIR}/{name}"))
        for name in plan.log_removed:
            entries.append(_Entry(None, f"timerlog/{name}", f"{LOG_BACKUP_DIR}/{name}"))
        if plan.wheel is not None:
            _check_target(root / "timerwheel")
            _write_wheel(root / STAGING_DIR / "timerwheel", plan.wheel)
            entries.append(_Entry(f"{STAGING_DIR}/timerwheel", "timerwheel", WHEEL_BACKUP))
        for data, name in ((plan.checkpoint, "timercheck"), (plan.metrics, "timermetrics")):
            if data is None:
                continue
            _check_target(root / "config" / name)
            _write_file(root / STAGING_DIR / name, data, len(data))
            entries.append(_Entry(f"{STAGING_DIR}/{name}", f"config/{name}", f"config/{name}.bak"))
        if plan.log_files or plan.log_removed:
            fileio.make_dirs(root / LOG_BACKUP_DIR)
            fileio.fsync_dir(root)
        body = json.dumps({"entries": [e.as_json() for e in entries]}).encode("utf-8")
        _write_file(staging / (JOURNAL + ".tmp"), body, len(body))
        fileio.fsync_dir(staging)
    except BaseException:
        _discard(staging)
        raise
    fileio.replace(staging / (JOURNAL + ".tmp"), staging / JOURNAL)
    fileio.fsync_dir(staging)
    _commit(root, entries)


def _check_target(path: Path) -> None:
    """A file that cannot be replaced (immutable, a directory, ...) is found before any rename."""
    if not os.path.lexists(path):
        return
    fd, _ = fileio.open_for_write(path, create=False)
    os.close(fd)


def _write_file(path: Path, data: bytes, size: int) -> None:
    """``data`` at the start of a new file of ``size`` bytes (the rest a hole reading as zeros), fsynced."""
    fd, _ = fileio.open_for_write(path)
    try:
        fileio.write_all(fd, data, 0, path)
        if size > len(data):
            fileio.ftruncate(fd, size, path)
        fileio.fsync(fd, path)
    finally:
        os.close(fd)


def _write_wheel(path: Path, slots: np.ndarray) -> None:
    """The wheel, sparse: the file is sized first and only runs of non-empty slots are written."""
    raw = np.zeros(len(slots), dtype=SLOT_DTYPE)
    for name in SLOT_DTYPE.names:
        raw[name] = slots[name]
    index = slots["index"].astype(np.int64)
    fd, _ = fileio.open_for_write(path)
    try:
        fileio.ftruncate(fd, WHEEL_FILE_SIZE, path)
        breaks = np.flatnonzero(np.diff(index) != 1) + 1
        for run in np.split(np.arange(len(slots)), breaks):
            if len(run):
                fileio.write_all(fd, raw[run[0]:run[-1] + 1].tobytes(), int(index[run[0]]) * SLOT_SIZE, path)
        fileio.fsync(fd, path)
    finally:
        os.close(fd)


def _commit(root: Path, entries: list[_Entry]) -> None:
    """Each old file linked to its backup, then the new one renamed over it; removals moved to
    their backup. Every step can be repeated: a rerun after a kill picks up where it stopped."""
    dirs = {root}
    try:
        for e in entries:
            target = root / e.target
            dirs.add(target.parent)
            backup = root / e.backup if e.backup else None
            if backup is not None:
                dirs.add(backup.parent)
            if e.staged is None:
                if os.path.lexists(target) and backup is not None:
                    fileio.make_dirs(backup.parent)
                    fileio.replace(target, backup)
                continue
            staged = root / e.staged
            if not os.path.lexists(staged):
                continue  # renamed before an interruption
            if backup is not None and os.path.lexists(target):
                fileio.make_dirs(backup.parent)
                tmp = backup.with_name(backup.name + ".tmp")
                fileio.unlink(tmp)
                fileio.link(target, tmp)
                fileio.replace(tmp, backup)
            fileio.make_dirs(target.parent)
            fileio.replace(staged, target)
        for directory in sorted(dirs):
            fileio.fsync_dir(directory)
    except StoreWriteError as exc:
        raise StoreWriteError(exc.path, exc.offset, f"{exc.what} (the repair is half applied: every file is "
                                                    "whole, old or new; run `rmqdelay timer repair --execute` "
                                                    "again once the fault is gone to finish it)") from None
    staging = root / STAGING_DIR
    fileio.unlink(staging / JOURNAL)
    fileio.fsync_dir(staging)
    _discard(staging)


def _discard(staging: Path) -> None:
    """Remove what an unfinished staging left (never a journal: that is finished, not discarded)."""
    if not staging.is_dir():
        return
    for entry in os.scandir(staging):
        if entry.name != JOURNAL:
            fileio.unlink(Path(entry.path))
    if not (staging / JOURNAL).exists():
        fileio.remove_dir(staging)
        fileio.fsync_dir(staging.parent)
