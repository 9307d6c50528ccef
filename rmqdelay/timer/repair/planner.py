"""``plan_repair``: what a repair of a 5.3.3 timer store changes, judged at a given time, derived
from the timer log and the commit log (never from the wheel). Reads only.

The log's units are read (a file that does not decode whole, stride by stride: what is not a
unit is stray), checked against the commit log and fixed or dropped, units remade for enqueued
messages whose unit was destroyed; the kept units are laid out and the wheel rebuilt
(layout.py); then the checkpoint is set to a point consistent with the data, and the metrics get
the true pending counts when anything else changes.
"""

from __future__ import annotations

import warnings

import numpy as np

from rmqdelay.errors import ConfigFallbackWarning, NotRegularFileError, StoreError, StoreReadError
from rmqdelay.formats.constants import (
    BLANK_MAGIC_CODE,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
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
    decode_file,
    encode_units,
)
from rmqdelay.formats.timermetrics import (
    TimerMetrics,
    TopicCount,
    format_timer_metrics,
    parse_timer_metrics,
)
from rmqdelay.store import fileio
from rmqdelay.store.directory import load_config_file

from ..store import TimerStore, unit_slot_times
from ..verify import (
    NO_TIME,
    TimerRecords,
    check_units,
    timer_records,
    true_metric_rows,
)
from .carry import carry, run_state
from .fromlog import LaterRecords, checkpoint_damage, derived_checkpoint
from .layout import NEW_UNIT, rebuild_wheel, relayout, slot_groups
from .plan import (
    BELOW_LOG,
    JOURNAL,
    NO_MESSAGE,
    NOT_TIMER,
    PAST_LOG,
    STAGING_DIR,
    Change,
    DroppedUnit,
    FixedField,
    LeftAlone,
    RemadeUnit,
    RepairPlan,
    StrayBytes,
)

_INT_MIN, _INT_MAX = -2**31, 2**31 - 1


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
    later = LaterRecords(ts)
    found = ts.checkpoint()
    damage = checkpoint_damage(ts, found)
    state, cp = run_state(ts, found, damage is not None, plan)
    derived = damage is not None and state is None
    if derived:
        cp = derived_checkpoint(ts, kept, later, now_ms, wall_ms)
        read_ms = cp.lastReadTimeMs
    else:
        read_ms = _read_time(ts, cp, kept, now_ms, plan)
    # A run that read ahead of the clock read every slot before its read clock: nothing is
    # remade there (the next run, finding its state, reads on from that clock).
    remake_ms = max(read_ms, state.readTimeMs or 0) if state is not None else read_ms
    kept = _remake_lost(ts, cp, kept, records, remake_ms, plan, later)
    new_units, log_end = relayout(ts, kept, plan)
    groups = slot_groups(new_units)
    rebuild_wheel(ts, groups, read_ms, log_end, plan)
    if derived:
        cp = TimerCheckpoint(cp.lastReadTimeMs, min(cp.lastTimerLogFlushPos, log_end), cp.lastTimerQueueOffset,
                             cp.masterTimerQueueOffset, cp.dataVersion)
        plan.checkpoint = encode_timer_checkpoint(cp) + bytes(TIMER_CHECKPOINT_FILE_SIZE - TIMER_CHECKPOINT_SIZE)
        plan.changes.append(Change("config/timercheck", "file", damage,
                                   f"rebuilt from the commit log: lastReadTimeMs {cp.lastReadTimeMs}, "
                                   f"masterTimerQueueOffset {cp.masterTimerQueueOffset}"))
    elif cp is not None:
        cp = _checkpoint(ts, cp, kept, records, read_ms, log_end, wall_ms, plan, damage=damage)
    rewritten = bool(plan.log_files or plan.log_removed) or plan.wheel is not None or plan.checkpoint is not None
    if state is not None and rewritten:
        carry(state, None if damage is not None else found, cp, log_end, plan)
    _metrics(ts, new_units, read_ms, wall_ms, plan, force=fix_metrics or rewritten)
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
    # ... and only if its times are ones the enqueue writes (the write clock a multiple of the
    # precision, the slot its message's TIMER_OUT_MS or, rolled, one between the two): bytes
    # overwritten across its clock leave a unit whose slot no one can tell - cut, and made
    # again from its message like any unit destroyed.
    if salvaged.any():
        p = ts.config.precisionMs
        cwt = units["currWriteTime"].astype(np.int64)
        slot = unit_slot_times(units)
        out = records.out_ms[idx] if n else np.full(len(units), NO_TIME, dtype=np.int64)
        salvaged &= (cwt > 0) & (cwt % p == 0) & ((slot == out) | ((slot < out) & (slot >= cwt) & (slot % p == 0)))
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
                 read_ms: int, plan: RepairPlan, later: LaterRecords) -> np.ndarray:
    """``kept`` with a unit for every enqueued timer message that lost its own (a unit
    destroyed: cut as bytes that are not a unit, its file truncated, zeroed or deleted): an
    rmq_sys_wheel_timer entry below masterTimerQueueOffset, due at or after the read time,
    with no unit in the log and no later record of its UNIQ_KEY (no delivered copy, no re-put
    of a roll). Nothing would ever deliver it: it gets the unit doEnqueue writes at the read
    time, put before the log's last unit (which stays last).
    A cancellation marker in that state gets its unit again when its target waits in the
    same slot, undelivered (it had one: the put hook parks a marker only while its time is
    ahead, and the enqueue gives it the target's slot); without one the recalled message
    would be delivered. A marker whose target is not waiting gets none (the broker drops one
    that is due on enqueue)."""
    cq = ts.timer_queue()
    if cq is None or cp is None or not len(records.offsets):
        return kept
    # Below the master offset the checkpoint will hold: every entry up to the last one with a
    # unit was enqueued (a run killed after it enqueued past what it published leaves units
    # beyond the checkpoint's master; the entries between whose units were cut are lost too).
    high = min(max(cp.masterTimerQueueOffset, _last_enqueued(cq, kept) + 1), cq.max_offset)
    if high <= cq.min_offset:
        return kept
    entries = cq.units(cq.min_offset, high)
    py = entries["commitLogOffset"].astype(np.int64)
    idx = np.minimum(np.searchsorted(records.offsets, py), len(records.offsets) - 1)
    found = records.offsets[idx] == py
    found &= records.is_timer[idx] & (records.sizes[idx] == entries["size"].astype(np.int64))
    found &= (records.out_ms[idx] != NO_TIME) & (records.out_ms[idx] >= read_ms)
    found &= ~np.isin(py, kept["offsetPy"].astype(np.int64))
    rows = np.flatnonzero(found)
    if not len(rows):
        return kept
    candidates: dict[str, int] = {}  # UNIQ_KEY -> row of its entry
    targets: dict[str, str] = {}  # UNIQ_KEY -> realTopic+uniqKey, what a marker names
    markers: dict[int, str] = {}  # row of a cancellation marker -> the realTopic+uniqKey it cancels
    for row in rows.tolist():
        try:
            msg = ts.store.commitlog.read_message(int(py[row]), int(records.sizes[idx[row]]))
        except StoreError:
            continue
        if records.is_delete[idx[row]]:
            target = msg.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
            if target:
                markers[row] = target
            continue
        key = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if key is not None:  # without one, no way to tell it was not delivered: left as it is
            candidates[key] = row
            targets[key] = f"{msg.properties.get(PROPERTY_REAL_TOPIC)}+{key}"
    for key in later.of(candidates, {k: int(py[r]) for k, r in candidates.items()}):
        del candidates[key]  # a later record of the same key: delivered, re-put or rolled - not lost
    # A message its producer recalled (a marker for it with its TIMER_OUT_MS, anywhere in the
    # queue: the marker may come before a roll's re-put) gets no unit: never a recalled
    # message delivered.
    recalled = _recalled(ts, cq, records) if candidates else set()
    for key in [k for k, r in candidates.items() if (targets[k], int(records.out_ms[idx[r]])) in recalled]:
        del candidates[key]
    chosen = sorted(candidates.values())
    if markers:
        waiting = _waiting_targets(ts, kept, [int(py[r]) for r in chosen], records, read_ms, later)
        chosen = sorted(chosen + [r for r, target in markers.items()
                                  if (target, int(records.out_ms[idx[r]])) in waiting])
    made = []
    for row in chosen:
        out = int(records.out_ms[idx[row]])
        queue_offset = cq.min_offset + row
        write = read_ms
        delete = bool(records.is_delete[idx[row]])
        roll = None if delete else ts.config.roll_slot(out, write)
        slot, magic = (out, TIMER_MAGIC_DEFAULT) if roll is None else (roll, TIMER_MAGIC_DEFAULT | TIMER_MAGIC_ROLL)
        magic |= TIMER_MAGIC_DELETE if delete else 0
        # (offset: a placeholder no unit or prevPos holds; relayout gives it its place)
        made.append((NEW_UNIT - len(made), -1, magic, write, slot - write, int(py[row]),
                     int(records.sizes[idx[row]]), int(records.real_hash[idx[row]]), 0))
        key = markers.get(row) or next(k for k, r in candidates.items() if r == row)
        plan.remade.append(RemadeUnit(queue_offset, int(py[row]), key, out, slot, magic))
    if not made:
        return kept
    plan.changes.append(Change("timerlog/", "units made for enqueued messages without one", "-", str(len(made))))
    # Before the last unit, never after it: the broker's recovery resumes the enqueue after the
    # queue offset of the message the log's last unit points at (reviseQueueOffset); a made
    # unit there would enqueue every later entry a second time.
    if not len(kept):
        return np.array(made, dtype=kept.dtype)
    return np.concatenate([kept[:-1], np.array(made, dtype=kept.dtype), kept[-1:]])


def _recalled(ts: TimerStore, cq, records: TimerRecords) -> set[tuple[str, int]]:
    """(realTopic+uniqKey, TIMER_OUT_MS) every cancellation marker of the timer queue names."""
    entries = cq.units(cq.min_offset, cq.max_offset)
    py = entries["commitLogOffset"].astype(np.int64)
    idx = np.minimum(np.searchsorted(records.offsets, py), len(records.offsets) - 1)
    marker = (records.offsets[idx] == py) & records.is_timer[idx] & records.is_delete[idx]
    found = set()
    for row in np.flatnonzero(marker).tolist():
        try:
            msg = ts.store.commitlog.read_message(int(py[row]), int(records.sizes[idx[row]]))
        except StoreError:
            continue
        target = msg.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
        if target:
            found.add((target, int(records.out_ms[idx[row]])))
    return found


def _waiting_targets(ts: TimerStore, kept: np.ndarray, made_py: list[int], records: TimerRecords, read_ms: int,
                     later: LaterRecords) -> set[tuple[str, int]]:
    """(realTopic+uniqKey, slot time) of the timer messages that wait undelivered in a slot
    not read yet: kept non-delete units and the messages about to get a unit again."""
    delete = (kept["magic"] & TIMER_MAGIC_DELETE) != 0 if len(kept) else np.zeros(0, dtype=bool)
    pending = kept[~delete & (unit_slot_times(kept) >= read_ms)] if len(kept) else kept
    targets = [(int(u["offsetPy"]), int(u["sizePy"])) for u in pending]
    targets += [(p, int(records.sizes[np.searchsorted(records.offsets, p)])) for p in made_py]
    waiting: dict[str, tuple[str, int, int]] = {}
    for offset, size in targets:
        try:
            msg = ts.store.commitlog.read_message(offset, size)
        except StoreError:
            continue
        props = msg.properties
        key = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        out = props.get(PROPERTY_TIMER_OUT_MS, "")
        if key is not None and out.lstrip("-").isdigit():
            waiting[key] = (f"{props.get(PROPERTY_REAL_TOPIC)}+{key}", int(out), offset)
    # A later record of the same key that is not a cancellation: the message was delivered.
    gone = later.of(waiting, {k: v[2] for k, v in waiting.items()}, skip_markers=True)
    return {(target, out) for key, (target, out, _) in waiting.items() if key not in gone}


def _checkpoint(ts: TimerStore, cp: TimerCheckpoint, kept: np.ndarray, records: TimerRecords, read_ms: int,
                log_end: int, wall_ms: int, plan: RepairPlan, *, damage: str | None = None) -> TimerCheckpoint:
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
    if damage is None and all(a == b for a, b in fields.values()):
        return cp
    dv = cp.dataVersion
    new_dv = DataVersion(counter=dv.counter + 1, stateVersion=dv.stateVersion, timestamp=wall_ms)
    new_cp = TimerCheckpoint(read_ms, flush, new_last, new_master, new_dv)
    old = fileio.read_file(ts.checkpoint_path) or b""
    keep_tail = damage is None and len(old) >= TIMER_CHECKPOINT_FILE_SIZE
    tail = old[TIMER_CHECKPOINT_SIZE:TIMER_CHECKPOINT_FILE_SIZE] if keep_tail else \
        bytes(TIMER_CHECKPOINT_FILE_SIZE - TIMER_CHECKPOINT_SIZE)
    plan.checkpoint = encode_timer_checkpoint(new_cp) + tail
    for name, (a, b) in fields.items():
        if a != b:
            plan.changes.append(Change("config/timercheck", name, str(a), str(b)))
    plan.changes.append(Change("config/timercheck", "dataVersion", f"{dv.counter}@{dv.timestamp}",
                               f"{new_dv.counter}@{new_dv.timestamp}"))
    if damage is not None:
        plan.changes.append(Change("config/timercheck", "file", damage,
                                   "rebuilt from config/rmqdelay.timer.json, the state rmqdelay published with it"))
    return new_cp


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
    except NotRegularFileError:
        if fileio.not_regular(ts.metrics_path) == "a directory":
            raise  # the repair cannot rename over it (execute says to move it out)
        # A FIFO, a socket, a symlink to nothing in its place: never opened, replaced (the
        # backup keeps it); the counts before it from the .bak when that is usable.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConfigFallbackWarning)
            try:
                return load_config_file(ts.metrics_path.with_name(ts.metrics_path.name + ".bak"),
                                        parse_timer_metrics, fallback=False), True
            except StoreError:
                return None, True
    except StoreReadError:
        raise  # the system said no (EACCES): not content to replace
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
