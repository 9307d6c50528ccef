"""The kept units laid out as TimerLog.append writes them (52-byte units back to back from the
first file's offset, a BLANK closing every full file, prevPos relinked so each slot's units form
one chain in log order), and the wheel rebuilt from them: firstPos, lastPos and num of every
slot (the broker's own recovery revises the positions but never the counts)."""

from __future__ import annotations

import numpy as np

from rmqdelay.formats.constants import TIMER_MAGIC_DELETE
from rmqdelay.formats.timerlog import (
    UNIT_SIZE,
    build_blank,
    encode_units,
    units_per_file,
)
from rmqdelay.formats.timerwheel import SLOTS_DTYPE, WHEEL_FILE_SIZE, WHEEL_SLOTS
from rmqdelay.store.commitlog import first_nonzero

from ..store import TimerStore, unit_slot_times
from ..verify import readable_log_end
from .plan import Change, RepairPlan

NEW_UNIT = -2**62  # offsets of units made by the repair, until laid out


def relayout(ts: TimerStore, kept: np.ndarray, plan: RepairPlan) -> tuple[np.ndarray, int]:
    """The kept units laid out as TimerLog.append writes them, from the first file's offset:
    back to back, a BLANK closing each full file. prevPos relinked per slot time. Fills
    plan.log_files / log_removed with the files whose bytes change. Returns (the units at
    their new offsets, the log's new end)."""
    files = ts.log.files
    if not files and not len(kept):
        return kept, 0
    file_size = ts.config.timerLogFileSize  # the broker's size: a damaged file may have another
    plan.log_file_size = file_size
    # No file left (all deleted): the units made again from the commit log start a new log.
    base = files[0].start if files else 0
    per = units_per_file(file_size)
    k = np.arange(len(kept), dtype=np.int64)
    new = kept.copy()
    new["offset"] = base + (k // per) * file_size + (k % per) * UNIT_SIZE if per else base
    made = kept["offset"] <= NEW_UNIT  # units made by the repair (_remake_lost): neither moved nor relinked
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
        if old is None or len(old) != file_size or bytes(old[:len(data)]) != data \
                or first_nonzero(old, len(data)) is not None:
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


def slot_groups(units: np.ndarray) -> dict[int, tuple[int, int, int]]:
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


def rebuild_wheel(ts: TimerStore, groups: dict[int, tuple[int, int, int]], read_ms: int, log_end: int,
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
    if ts.wheel.wrong_size is None and ts.wheel.not_regular is None and len(new) == len(old) and \
            all(np.array_equal(new[n], old[n]) for n in SLOTS_DTYPE.names):
        return
    old_set = {tuple(int(r[n]) for n in SLOTS_DTYPE.names) for r in old}
    new_set = {tuple(int(r[n]) for n in SLOTS_DTYPE.names) for r in new}
    plan.slotsChanged = len({r[0] for r in old_set ^ new_set})
    plan.wheel = new
    counts_fixed = _count_fixes(old, new)
    if ts.wheel.not_regular is not None:
        plan.changes.append(Change("timerwheel", "file", f"{ts.wheel.not_regular} (read as no wheel)",
                                   f"a regular file of {WHEEL_FILE_SIZE} bytes"))
    if ts.wheel.wrong_size is not None:
        plan.changes.append(Change("timerwheel", "file size", f"{ts.wheel.wrong_size} bytes (read as no wheel)",
                                   f"{WHEEL_FILE_SIZE} bytes"))
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
