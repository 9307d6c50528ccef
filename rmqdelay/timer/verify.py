"""`inspect timer --verify`: what goes wrong with a timer store in the field, each problem
named by file and byte.

- the timer log's own framing (a unit that is not 52 bytes with a valid magic, a bad BLANK,
  data after the end, a full file without its BLANK): the broker's recovery stops at such a
  place and truncates the timer log there;
- units pointing outside the commit log (below its first offset after retention, past its end
  after a truncation), at no record, or at a record that is not the timer message they stand
  for (topic, size, TIMER_OUT_MS, real topic hash, delete flag);
- slots pointing outside the timer log, prevPos chains that do not link a slot's units in
  order, slot counts that disagree with their chains, pending units no chain reaches;
- a checkpoint beyond the data (queue offsets past the queue, flush position past the log,
  a read time ahead of the clock);
- timermetrics drift from the true counts: advisory (5.3.3's own counts drift), listed but
  not a failure.

Everything is checked as columns: the timer log units, the commit log's records (one scan),
the wheel; a log of millions of units is checked without a Python loop per unit.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import (
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.timerwheel import WHEEL_FILE_SIZE
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.timerlog import (
    UNIT_SIZE,
    UNITS_DTYPE,
    decode_file,
    units_per_file,
)
from rmqdelay.formats.timerprops import timer_columns
from rmqdelay.formats.timerwheel import SLOT_SIZE
from rmqdelay.store.problems import Problem
from rmqdelay.store.scan import Skipped, scan_commitlog_file

from .status import metric_rows, resolve_topics
from .store import TimerStore, unit_slot_times

# Problem kinds, as shown to the user and in --json.
TIMERLOG_FRAMING = "timerLogFraming"
TIMERLOG_NO_BLANK = "timerLogNoBlank"
UNIT_BELOW_LOG = "unitBelowLog"
UNIT_PAST_LOG = "unitPastLog"
UNIT_UNREADABLE = "unitUnreadable"
UNIT_NO_MESSAGE = "unitNoMessage"
UNIT_SIZE_MISMATCH = "unitSize"
UNIT_NOT_TIMER = "unitNotTimer"
UNIT_TIME = "unitTime"
UNIT_TOPIC_HASH = "unitTopicHash"
UNIT_DELETE_FLAG = "unitDeleteFlag"
SLOT_OUTSIDE_LOG = "slotOutsideLog"
CHAIN_BROKEN = "chainBroken"
SLOT_ENDS = "slotEnds"
SLOT_COUNT = "slotCount"
UNIT_NOT_IN_CHAIN = "unitNotInChain"
CHECKPOINT_BEYOND = "checkpointBeyond"
METRICS_DRIFT = "metricsDrift"
# The files themselves, on a store opened leniently (TimerStore(lenient=True)): each is one
# problem, and the checks of what can still be read go on.
WHEEL_FILE = "wheelFile"
CHECKPOINT_FILE = "checkpointFile"

Advance = Callable[[int], None]


@dataclass(slots=True, frozen=True)
class TimerProblem(Problem):
    """A problem of the timer store: where (file, byte), what was expected, and which unit."""

    timerLogOffset: int | None = None  # the unit's global offset, when it is about a unit
    advisory: bool = False  # not a fault: shown, never fails the check

    def as_json(self) -> dict:
        return Problem.as_json(self) | {"timerLogOffset": self.timerLogOffset, "advisory": self.advisory}


@dataclass(slots=True)
class TimerVerifyCounts:
    files: int = 0
    units: int = 0
    slots: int = 0
    messages: int = 0  # rmq_sys_wheel_timer records read


def iter_timer_problems(ts: TimerStore, now_ms: int, advance: Advance | None = None,
                        counts: TimerVerifyCounts | None = None) -> Iterator[TimerProblem]:
    advance = advance or (lambda n: None)
    counts = counts if counts is not None else TimerVerifyCounts()
    yield from _files(ts)
    units = yield from _framing(ts, advance, counts)
    counts.units = len(units)
    records = timer_records(ts)
    counts.messages = records.timer_count
    yield from _units_against_log(ts, units, records)
    slots = ts.wheel.non_empty()
    counts.slots = len(slots)
    yield from _chains(ts, units, slots)
    yield from _checkpoint(ts, now_ms)
    yield from _metrics(ts, units)


# -- the timer log's framing -----------------------------------------------------------------------
def _framing(ts: TimerStore, advance: Advance, counts: TimerVerifyCounts):
    """Decode every file, reporting where one stops being units; returns the readable units."""
    parts = []
    cp = ts.checkpoint()
    # Recovery checks the log from one file before lastTimerLogFlushPos and truncates at a bad unit.
    checked_from = max((cp.lastTimerLogFlushPos if cp else 0) - (ts.log.file_size or 0), 0)
    files = ts.log.files
    for index, mf in enumerate(files):
        counts.files += 1
        view = ts.log.view(index)
        try:
            part = decode_file(view, mf.start)
        except FormatError as exc:
            note = " (the broker's recovery truncates the timer log here)" if mf.end > checked_from else ""
            yield TimerProblem(TIMERLOG_FRAMING, str(mf.path), exc.offset, exc.expected + note,
                               timerLogOffset=mf.start + exc.offset)
            usable = exc.offset - exc.offset % UNIT_SIZE
            try:
                part = decode_file(view[:usable], mf.start)
            except FormatError:
                part = None
        if part is not None:
            parts.append(part.units)
            if part.blank is None and index < len(files) - 1:
                # TimerLog.append always closes a file with a BLANK before it starts the next.
                pos = part.end - mf.start
                yield TimerProblem(TIMERLOG_NO_BLANK, str(mf.path), pos,
                                   f"units up to the BLANK closing the file (a later file exists; it holds "
                                   f"{units_per_file(mf.size)} units), found zeros after {len(part.units)} unit(s): "
                                   "the broker's recovery stops here and deletes the later files",
                                   timerLogOffset=part.end)
        advance(mf.size)
    return np.concatenate(parts) if parts else np.empty(0, dtype=UNITS_DTYPE)


# -- units against the commit log --------------------------------------------------------------------
@dataclass
class TimerRecords:
    """Every commit log record (sorted offsets and sizes) and the timer fields of those of
    rmq_sys_wheel_timer."""

    offsets: np.ndarray
    sizes: np.ndarray
    is_timer: np.ndarray
    out_ms: np.ndarray  # TIMER_OUT_MS, or MIN when absent
    real_hash: np.ndarray  # String.hashCode of REAL_TOPIC, or 0
    is_delete: np.ndarray
    skipped: list[Skipped]
    min_offset: int
    end_offset: int
    timer_count: int


_NO_TIME = np.iinfo(np.int64).min
NO_TIME = _NO_TIME  # records.out_ms of a record without TIMER_OUT_MS


def timer_records(ts: TimerStore) -> TimerRecords:
    store = ts.store
    skipped: list[Skipped] = []
    offsets, sizes, timer, out, hashes, deletes = [], [], [], [], [], []
    for mf in store.commitlog.files:
        for batch in scan_commitlog_file(mf, "store", keep_going=True, skipped=skipped):
            offsets.append(batch.column("commitlog_offset").to_numpy())
            sizes.append(batch.column("store_size").to_numpy().astype(np.int64))
            topic = batch.column("topic")
            is_timer = pc.fill_null(pc.equal(topic, RMQ_SYS_WHEEL_TIMER_TOPIC), False).to_numpy(zero_copy_only=False)
            timer.append(is_timer)
            n = batch.num_rows
            o = np.full(n, _NO_TIME, dtype=np.int64)
            h = np.zeros(n, dtype=np.int64)
            d = np.zeros(n, dtype=bool)
            rows = np.flatnonzero(is_timer)
            if len(rows):
                picked = batch.take(pa.array(rows))
                cols = timer_columns(picked.column("topic"), picked.column("properties_raw"))
                out_ms = cols["outMs"]
                o[rows] = pc.fill_null(out_ms, _NO_TIME).to_numpy()
                names = cols["realTopic"].to_pylist()
                h[rows] = [java_string_hash(t) if t is not None else 0 for t in names]
                d[rows] = cols["delUniqKey"].is_valid().to_numpy(zero_copy_only=False)
            out.append(o)
            hashes.append(h)
            deletes.append(d)
    cat = lambda xs, dtype: np.concatenate(xs) if xs else np.empty(0, dtype=dtype)  # noqa: E731
    offsets_all = cat(offsets, np.int64)
    order = np.argsort(offsets_all, kind="stable")
    is_timer_all = cat(timer, bool)[order]
    sizes_all = cat(sizes, np.int64)[order]
    offsets_all = offsets_all[order]
    # Where the records end (not where the queues say: after a truncation they point past it).
    end = int((offsets_all + sizes_all).max()) if len(offsets_all) else store.commitlog.min_offset
    return TimerRecords(offsets_all, sizes_all, is_timer_all, cat(out, np.int64)[order],
                    cat(hashes, np.int64)[order], cat(deletes, bool)[order], skipped,
                    store.commitlog.min_offset, end, int(is_timer_all.sum()))


def _unit_problem(ts: TimerStore, kind: str, unit, expected: str) -> TimerProblem:
    offset = int(unit["offset"])
    path, byte = ts.log.location(offset)
    return TimerProblem(kind, path, byte, expected, timerLogOffset=offset, physicalOffset=int(unit["offsetPy"]))


@dataclass
class UnitChecks:
    """Each unit against the commit log, as masks over the units (one kind per unit for the
    first six; the last three only among units that point at a timer message of their size).
    ``record`` is the index into the records of the record at each unit's offsetPy (valid
    where ``found``)."""

    below: np.ndarray
    past: np.ndarray
    unreadable: np.ndarray
    no_message: np.ndarray
    wrong_size: np.ndarray
    not_timer: np.ndarray
    bad_time: np.ndarray
    bad_hash: np.ndarray
    bad_delete: np.ndarray
    found: np.ndarray
    record: np.ndarray

    @property
    def any_problem(self) -> np.ndarray:
        return (self.below | self.past | self.unreadable | self.no_message | self.wrong_size | self.not_timer
                | self.bad_time | self.bad_hash | self.bad_delete)


def check_units(ts: TimerStore, units: np.ndarray, records: TimerRecords) -> UnitChecks:
    py = units["offsetPy"].astype(np.int64)
    size = units["sizePy"].astype(np.int64)
    below = py < records.min_offset
    past = ~below & (py + size > records.end_offset)
    unreadable = np.zeros(len(units), dtype=bool)
    for s in records.skipped:
        start = _file_start(ts, s.file) + s.offset
        unreadable |= ~below & ~past & (py >= start) & (py < start + s.bytes)
    ok = ~below & ~past & ~unreadable
    n = len(records.offsets)
    idx = np.minimum(np.searchsorted(records.offsets, py), max(n - 1, 0))
    found = ok & (n > 0) & (records.offsets[idx] == py) if n else np.zeros(len(units), dtype=bool)
    no_message = ok & ~found
    wrong_size = found & (records.sizes[idx] != size) if n else found
    not_timer = found & ~wrong_size & ~records.is_timer[idx] if n else found
    timer = found & ~wrong_size & ~not_timer
    slot = unit_slot_times(units)
    roll = (units["magic"] & TIMER_MAGIC_ROLL) != 0
    delete = (units["magic"] & TIMER_MAGIC_DELETE) != 0
    out = records.out_ms[idx] if n else np.full(len(units), _NO_TIME, dtype=np.int64)
    bad_time = timer & ~roll & (out != slot)
    bad_hash = timer & (records.real_hash[idx] != units["hashCodeOfRealTopic"].astype(np.int64)) if n else timer
    bad_delete = timer & (records.is_delete[idx] != delete) if n else timer
    return UnitChecks(below, past, unreadable, no_message, wrong_size, not_timer, bad_time, bad_hash, bad_delete,
                      found, idx)


def _units_against_log(ts: TimerStore, units: np.ndarray, records: TimerRecords) -> Iterator[TimerProblem]:
    if not len(units):
        return
    c = check_units(ts, units, records)
    py = units["offsetPy"].astype(np.int64)
    size = units["sizePy"].astype(np.int64)
    idx = c.record
    slot = unit_slot_times(units)
    out = records.out_ms[idx]
    end, first = records.end_offset, records.min_offset
    for row in np.flatnonzero(c.any_problem):
        u = units[row]
        p, s = int(py[row]), int(size[row])
        if c.below[row]:
            yield _unit_problem(ts, UNIT_BELOW_LOG, u, f"a unit pointing inside the commit log [{first}, {end}), "
                                                      f"found offsetPy {p} below its first offset (deleted by "
                                                      f"retention: the message is lost)")
        elif c.past[row]:
            yield _unit_problem(ts, UNIT_PAST_LOG, u, f"a unit pointing inside the commit log [{first}, {end}), "
                                                     f"found offsetPy {p} size {s} past its end (truncated)")
        elif c.unreadable[row]:
            yield _unit_problem(ts, UNIT_UNREADABLE, u, f"a unit pointing at a readable record, found offsetPy {p} "
                                                        "in a part of the commit log that could not be read")
        elif c.no_message[row]:
            yield _unit_problem(ts, UNIT_NO_MESSAGE, u, f"a unit pointing at the start of a record, found offsetPy "
                                                       f"{p}, where no record starts")
        elif c.wrong_size[row]:
            yield _unit_problem(ts, UNIT_SIZE_MISMATCH, u, f"a unit with the size of the record at {p} "
                                                           f"({int(records.sizes[idx[row]])}), found sizePy {s}")
        elif c.not_timer[row]:
            yield _unit_problem(ts, UNIT_NOT_TIMER, u, f"a unit pointing at a timer message of "
                                                      f"{RMQ_SYS_WHEEL_TIMER_TOPIC}, found a record of another "
                                                      f"topic at {p}")
        else:
            if c.bad_time[row]:
                got = "no TIMER_OUT_MS" if out[row] == _NO_TIME else f"TIMER_OUT_MS {int(out[row])}"
                yield _unit_problem(ts, UNIT_TIME, u, f"a unit in the slot of its message's TIMER_OUT_MS "
                                                      f"({int(slot[row])}), found {got}")
            if c.bad_hash[row]:
                yield _unit_problem(ts, UNIT_TOPIC_HASH, u, f"hashCodeOfRealTopic {int(records.real_hash[idx[row]])} "
                                                            f"of the message's REAL_TOPIC, found "
                                                            f"{int(units['hashCodeOfRealTopic'][row])}")
            if c.bad_delete[row]:
                want = "set" if records.is_delete[idx[row]] else "clear"
                yield _unit_problem(ts, UNIT_DELETE_FLAG, u, f"the DELETE magic bit {want} as the message's "
                                                             f"TIMER_DEL_UNIQKEY says, found magic {int(u['magic'])}")


def _file_start(ts: TimerStore, path: str) -> int:
    for mf in ts.store.commitlog.files:
        if str(mf.path) == path:
            return mf.start
    return 0


# -- chains and slots ------------------------------------------------------------------------------
def _chains(ts: TimerStore, units: np.ndarray, slots: np.ndarray) -> Iterator[TimerProblem]:
    """A healthy slot chain links the units of one slot time in log order: each unit's prevPos
    is the previous unit of its slot time (-1 for the first), the slot's lastPos/firstPos are
    the last/first, and num counts them (delete units -1)."""
    p = ts.config.precisionMs
    log_min, log_end = ts.log.min_offset, readable_log_end(ts)
    cp = ts.checkpoint()
    read_ms = cp.lastReadTimeMs if cp is not None else 0
    wheel = str(ts.wheel.path)
    live = ts.wheel.live(slots, read_ms)
    slot_times = slots["timeSlot"].astype(np.int64) * p
    bad_slot = np.zeros(len(slots), dtype=bool)
    starts = np.array([mf.start for mf in ts.log.files] or [0], dtype=np.int64)
    for name in ("lastPos", "firstPos"):
        pos = slots[name].astype(np.int64)
        in_file = pos - starts[np.maximum(np.searchsorted(starts, pos, side="right") - 1, 0)]
        outside = (pos >= log_end) | ((pos < log_min) & live) | ((pos >= log_min) & (in_file % UNIT_SIZE != 0)) | \
            (pos < -1)
        for i in np.flatnonzero(outside & ~bad_slot):
            s = slots[i]
            yield TimerProblem(SLOT_OUTSIDE_LOG, wheel, int(s["index"]) * SLOT_SIZE + (16 if name == "lastPos" else 8),
                               f"slot {int(s['index'])} ({int(slot_times[i])}) with a {name} on a unit of the timer "
                               f"log [{log_min}, {log_end}), found {int(pos[i])}", timerLogOffset=int(pos[i]))
        bad_slot |= outside
    if not len(units):
        return
    slot = unit_slot_times(units)
    offsets = units["offset"].astype(np.int64)
    order = np.lexsort((offsets, slot))
    s_slot, s_off = slot[order], offsets[order]
    first_of_group = np.ones(len(order), dtype=bool)
    first_of_group[1:] = s_slot[1:] != s_slot[:-1]
    expected_prev = np.where(first_of_group, -1, np.concatenate(([-1], s_off[:-1])))
    actual_prev = units["prevPos"].astype(np.int64)[order]
    # The first unit of a slot time may go on into files already deleted (below the log's start).
    ok_first = first_of_group & (actual_prev < log_min) & (actual_prev >= 0)
    broken = broken_links = (actual_prev != expected_prev) & ~ok_first
    slot_index_of = {int(t): i for i, t in enumerate(slot_times)}
    for k in np.flatnonzero(broken):
        row = order[k]
        want = "-1 (the first unit of its slot)" if expected_prev[k] == -1 else \
            f"{int(expected_prev[k])} (the previous unit of slot time {int(s_slot[k])})"
        yield _unit_problem(ts, CHAIN_BROKEN, units[row], f"prevPos {want}, found {int(actual_prev[k])}")
    # Per slot time: the first, last and net count of its units.
    starts = np.flatnonzero(first_of_group)
    ends = np.append(starts[1:], len(order)) - 1
    sign = np.where((units["magic"][order] & TIMER_MAGIC_DELETE) != 0, -1, 1)
    net = np.add.reduceat(sign, starts) if len(starts) else np.empty(0, dtype=np.int64)
    groups = {int(s_slot[a]): (int(s_off[a]), int(s_off[b]), int(n)) for a, b, n in zip(starts, ends, net)}
    for i, s in enumerate(slots):
        if bad_slot[i] or int(s["timeSlot"]) % ts.config.wheelSlots != int(s["index"]):
            continue
        t = int(slot_times[i])
        group = groups.get(t)
        index = int(s["index"])
        if group is None:
            if live[i]:
                yield TimerProblem(SLOT_ENDS, wheel, index * SLOT_SIZE + 16,
                                   f"slot {index} ({t}) pointing at units of its time, found none in the timer log "
                                   f"(lastPos {int(s['lastPos'])})", timerLogOffset=int(s["lastPos"]))
            continue
        first, last, n = group
        if int(s["lastPos"]) != last or int(s["firstPos"]) != first:
            yield TimerProblem(SLOT_ENDS, wheel, index * SLOT_SIZE + 8,
                               f"slot {index} ({t}) with firstPos/lastPos {first}/{last} (its chain's ends), found "
                               f"{int(s['firstPos'])}/{int(s['lastPos'])}", timerLogOffset=int(s["lastPos"]))
        if int(s["num"]) != n:
            yield TimerProblem(SLOT_COUNT, wheel, index * SLOT_SIZE + 24,
                               f"slot {index} ({t}) with num {n} (non-delete minus delete units of its chain), "
                               f"found {int(s['num'])}", timerLogOffset=last)
    # Pending units whose slot does not hold their time: the dequeue never reads them. A
    # delete unit only where its slot holds its time but points outside the log (its target,
    # sharing its slot time, is cut off with it): anywhere else the broker would put nothing
    # for it whether it reads it or not. Slots read ahead of the wall clock leave such units
    # (neutralised into delete units) beyond a 14-day wheel from the checkpoint, or under a
    # later time that took their wheel index as the broker's own enqueue takes it
    # (TimerWheel.getSlot reads another time as empty).
    held = {int(t) for t, ok in zip(slot_times, live & ~bad_slot) if ok}
    broken = {int(t) for t, bad in zip(slot_times, bad_slot) if bad}
    delete = (units["magic"] & TIMER_MAGIC_DELETE) != 0
    pending = np.flatnonzero(slot >= read_ms)
    lost = [r for r in pending if int(slot[r]) not in held and (not delete[r] or int(slot[r]) in broken)]
    # A time whose index still holds an earlier time not read yet, its own units one chain from
    # -1: the wheel comes round to it once the earlier time is read (stranded.DeferredSlot).
    unlinked = {int(s_slot[k]) for k in np.flatnonzero(broken_links)}
    held_at = {int(t) // p % ts.config.wheelSlots: int(t) for t in held}
    waiting: dict[int, int] = {}
    for t in sorted({int(slot[r]) for r in lost}):
        index = t // p % ts.config.wheelSlots
        if t not in unlinked and index not in waiting and read_ms <= held_at.get(index, t) < t:
            waiting[index] = t
    deferred = set(waiting.values())
    lost = [r for r in lost if int(slot[r]) not in deferred]
    for row in lost:
        yield _unit_problem(ts, UNIT_NOT_IN_CHAIN, units[row],
                            f"a pending unit in its slot's chain (slot time {int(slot[row])}), found the slot "
                            f"{'holding another time' if int(slot[row]) in slot_index_of else 'empty'}: "
                            "the message is never delivered")


def readable_log_end(ts: TimerStore) -> int:
    """Where the units end; in a last file that does not decode whole, where its units stop
    (already reported as a framing problem)."""
    try:
        return ts.log.end_offset()
    except StoreError:
        index = len(ts.log.files) - 1
        mf = ts.log.files[index]
        view = ts.log.view(index)
        count = len(view) // UNIT_SIZE
        raw = np.frombuffer(view, dtype=np.dtype([("size", ">i4"), ("pad", "V8"), ("magic", ">i4"),
                                                  ("rest", f"V{UNIT_SIZE - 16}")]), count=count)
        bad = (raw["size"] != UNIT_SIZE) | ((raw["magic"] | 0xF) != 0xF)
        return mf.start + (int(np.argmax(bad)) if bad.any() else count) * UNIT_SIZE


# -- the checkpoint --------------------------------------------------------------------------------
def _files(ts: TimerStore) -> Iterator[TimerProblem]:
    """What a lenient open noted of the files: timer log files missing or of the wrong size,
    a wheel of the wrong size or not a file, a checkpoint that does not parse."""
    for p in getattr(ts.log, "damage", ()):
        yield TimerProblem(p.kind, p.file, p.offset, p.expected)
    wheel = ts.wheel
    if wheel.wrong_size is not None:
        yield TimerProblem(WHEEL_FILE, str(wheel.path), wheel.wrong_size,
                           f"a timer wheel of {WHEEL_FILE_SIZE} bytes, found {wheel.wrong_size} bytes (read as "
                           "no wheel: the slots' chains are not checked)")
    if wheel.not_regular is not None:
        yield TimerProblem(WHEEL_FILE, str(wheel.path), None, f"a timer wheel (a regular file), found "
                                                              f"{wheel.not_regular}")
    if ts.lenient:
        ts.checkpoint()
        damage = ts.checkpoint_damage
        if damage is not None:
            yield TimerProblem(CHECKPOINT_FILE, str(damage.path), damage.offset, damage.expected)


def _checkpoint(ts: TimerStore, now_ms: int) -> Iterator[TimerProblem]:
    cp = ts.checkpoint()
    if cp is None:
        return
    path = str(ts.checkpoint_path)
    cq = ts.timer_queue()
    queue_max = cq.max_offset if cq is not None else 0
    if cp.masterTimerQueueOffset > queue_max:
        yield TimerProblem(CHECKPOINT_BEYOND, path, 24,
                           f"masterTimerQueueOffset at most the {RMQ_SYS_WHEEL_TIMER_TOPIC} queue's max offset "
                           f"{queue_max}, found {cp.masterTimerQueueOffset} (messages put after a truncation are "
                           "skipped)")
    if cp.lastTimerQueueOffset > max(cp.masterTimerQueueOffset, queue_max):
        yield TimerProblem(CHECKPOINT_BEYOND, path, 16,
                           f"lastTimerQueueOffset at most {max(cp.masterTimerQueueOffset, queue_max)}, found "
                           f"{cp.lastTimerQueueOffset}")
    log_end = readable_log_end(ts)
    if cp.lastTimerLogFlushPos > log_end:
        yield TimerProblem(CHECKPOINT_BEYOND, path, 8,
                           f"lastTimerLogFlushPos at most the timer log's end {log_end}, found "
                           f"{cp.lastTimerLogFlushPos} (the log was truncated after the checkpoint)")
    precision = ts.config.precisionMs
    if cp.lastReadTimeMs > now_ms // precision * precision + precision:
        yield TimerProblem(CHECKPOINT_BEYOND, path, 0,
                           f"lastReadTimeMs at most now ({now_ms}), found {cp.lastReadTimeMs}: a broker resuming "
                           "delivers nothing due before it")


# -- metrics ---------------------------------------------------------------------------------------
def true_metric_rows(ts: TimerStore, units: np.ndarray, read_ms: int, metrics) -> list:
    """Per topic: what timermetrics says and the true count (non-delete minus delete units in
    the slots from ``read_ms`` on), as status.TopicMetric rows."""
    live = unit_slot_times(units) >= read_ms if len(units) else np.zeros(0, dtype=bool)
    delete = (units["magic"] & TIMER_MAGIC_DELETE) != 0 if len(units) else live
    net: dict[int, int] = {}
    first: dict[int, tuple[int, int]] = {}
    for sign, mask in ((1, live & ~delete), (-1, live & delete)):
        values, index, n = np.unique(units["hashCodeOfRealTopic"][mask], return_index=True, return_counts=True)
        rows = np.flatnonzero(mask)[index]
        for h, row, c in zip(values.tolist(), rows.tolist(), n.tolist()):
            net[h] = net.get(h, 0) + sign * c
            first.setdefault(h, (int(units["offsetPy"][row]), int(units["sizePy"][row])))
    return metric_rows(net, resolve_topics(ts, net, first, metrics), metrics)


def _metrics(ts: TimerStore, units: np.ndarray) -> Iterator[TimerProblem]:
    metrics = ts.metrics()
    if metrics is None:
        return
    cp = ts.checkpoint()
    rows = true_metric_rows(ts, units, cp.lastReadTimeMs if cp is not None else 0, metrics)
    try:
        text = ts.metrics_path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        text = ""
    for m in rows:
        if m.count is None or m.drift == 0:
            continue
        found = re.search(re.escape(f'"{m.topic}":') + r'\{"count":', text)
        byte = len(text[:found.end()].encode("utf-8")) if found else None
        yield TimerProblem(METRICS_DRIFT, str(ts.metrics_path), byte,
                           f"the count of {m.topic} at its true {m.trueCount} (net pending units in the wheel), "
                           f"found {m.count} ({m.drift:+d}; advisory: 5.3.3's counts drift)", advisory=True)

