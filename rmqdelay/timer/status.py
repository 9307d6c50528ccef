"""What the timer store says to an operator (``rmqdelay inspect timer``): how far dequeue and
enqueue are behind, what waits in the wheel by due time, the hot slots, rolls, cancellations
and whether each found its target, what a restart would skip, and the metrics against the
true counts.

The timer log is read file by file as columns (numpy), never unit by unit, so the figures of
a log of tens of millions of units come in seconds. Records of the commit log are read only
where a figure needs them: the cancellation markers and the units in their slots, the
messages not yet enqueued, and one record per topic hash no known topic name explains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import TIMER_MAGIC_DELETE, TIMER_MAGIC_ROLL
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.timercheck import TimerCheckpoint
from rmqdelay.formats.timerprops import TimerInfo, delete_key, timer_info

from .store import TimerStore, unit_slot_times

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
DAY_MS = 86_400_000
# Due-time buckets of pending messages, upper bounds relative to now (inclusive).
BUCKETS = (("dueNow", 0), ("nextMinute", MINUTE_MS), ("nextHour", HOUR_MS), ("nextDay", DAY_MS))
LATER = "later"
BEYOND_ROLL_WINDOW = "beyondRollWindow"

# Cancellation states. TimerMessageStore.dequeue honours a marker only for a target in the same
# slot in the same dequeue; a rolled marker is re-put like any rolled message and tried later.
HONOURED = "honoured"  # its slot was read with its target in it: the target was dropped
WILL_BE_HONOURED = "willBeHonoured"  # its target is in the same pending slot
MISSED = "missed"  # its slot was read without its target: the target was delivered, or never existed
NOT_IN_SLOT = "notInSlot"  # pending, its target is not in its slot (yet): unless it arrives, it is delivered
ROLLED = "rolled"  # a rolled marker whose slot was read: re-put (its later unit carries on)
ROLLING = "rolling"  # a rolled marker, pending: it is tried when it reaches its own slot
# Markers still in rmq_sys_wheel_timer beyond masterTimerQueueOffset (sent, not enqueued yet):
QUEUED = "queued"  # its target is parked at the same TIMER_OUT_MS (in the wheel or queued too)
QUEUED_NO_TARGET = "queuedNoTarget"  # no parked message of its realTopic+uniqKey at that time
CANCEL_STATES = (HONOURED, WILL_BE_HONOURED, MISSED, NOT_IN_SLOT, ROLLED, ROLLING, QUEUED, QUEUED_NO_TARGET)

Advance = Callable[[int], None]


@dataclass(slots=True)
class Pending:
    """Pending timer messages (non-delete units at or after the read position), by due time."""

    units: int = 0
    buckets: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in BUCKETS} | {LATER: 0})
    beyondRollWindow: int = 0  # roll units: the message is due later than its slot (rolled there)
    cancelMarkers: int = 0  # pending delete units (not messages)
    oldestDueMs: int | None = None  # the earliest pending slot time
    notEnqueued: int = 0  # in rmq_sys_wheel_timer after masterTimerQueueOffset: no unit yet
    notEnqueuedBuckets: dict[str, int] = field(default_factory=lambda: {name: 0 for name, _ in BUCKETS} | {LATER: 0})
    notEnqueuedCancels: int = 0

    def as_json(self) -> dict:
        return {"units": self.units, **self.buckets, BEYOND_ROLL_WINDOW: self.beyondRollWindow,
                "cancelMarkers": self.cancelMarkers, "oldestDueTimestamp": self.oldestDueMs,
                "notEnqueued": self.notEnqueued, "notEnqueuedByDue": dict(self.notEnqueuedBuckets),
                "notEnqueuedCancels": self.notEnqueuedCancels}


@dataclass(slots=True)
class HotSlot:
    index: int
    timeMs: int
    num: int  # the wheel's own count of the slot (what getAllNum sums)
    firstPos: int
    lastPos: int
    congestion: str  # "" | "throttled" (num > timerCongestNumEachSlot) | "rejecting" (>= twice that)
    # The units the timer log holds at the slot's time: messages due then, roll units (messages
    # due beyond the roll window, re-put from this slot), cancellation markers.
    messages: int = 0
    rolls: int = 0
    markers: int = 0

    def as_json(self) -> dict:
        return {"index": self.index, "timeMs": self.timeMs, "num": self.num, "firstPos": self.firstPos,
                "lastPos": self.lastPos, "congestion": self.congestion or None, "messages": self.messages,
                "rolls": self.rolls, "markers": self.markers}


@dataclass(slots=True, frozen=True)
class Cancellation:
    offset: int  # the delete unit's timer log offset
    slotTimeMs: int
    roll: bool
    delUniqKey: str | None
    timerOutMs: int | None
    state: str
    targetOffset: int | None  # the target's unit, when found
    # A marker not enqueued yet (offset -1): its rmq_sys_wheel_timer queue offset, and its
    # target's when the target is not enqueued either.
    queueOffset: int | None = None
    targetQueueOffset: int | None = None

    def as_json(self) -> dict:
        return {"offset": self.offset, "slotTimeMs": self.slotTimeMs, "roll": self.roll,
                "delUniqKey": self.delUniqKey, "timerOutMs": self.timerOutMs, "state": self.state,
                "targetOffset": self.targetOffset, "queueOffset": self.queueOffset,
                "targetQueueOffset": self.targetQueueOffset}


@dataclass(slots=True, frozen=True)
class TopicMetric:
    topic: str
    count: int | None  # what config/timermetrics says (None: the topic is not in it)
    trueCount: int  # net pending units of the topic in the wheel (non-delete - delete)

    @property
    def drift(self) -> int | None:
        return None if self.count is None else self.count - self.trueCount

    def as_json(self) -> dict:
        return {"topic": self.topic, "count": self.count, "trueCount": self.trueCount, "drift": self.drift}


@dataclass(slots=True)
class TimerStatus:
    store: str
    nowMs: int
    config: dict
    precisionInFiles: int | None
    checkpoint: TimerCheckpoint | None
    timerLog: dict
    dequeue: dict
    enqueue: dict
    pending: Pending
    hotSlots: list[HotSlot]
    rolls: dict
    cancellations: list[Cancellation]
    horizon: dict
    metrics: list[TopicMetric]
    metricsFile: bool
    rollWindowInFiles: int | None = None  # slots, as the roll units show it

    def cancellation_counts(self) -> dict[str, int]:
        counts = {state: 0 for state in CANCEL_STATES}
        for c in self.cancellations:
            counts[c.state] += 1
        return counts

    def findings(self) -> dict[str, int]:
        """What `inspect timer` warns of, by count: messages a restart now would skip, markers
        that missed or have no target (their targets are delivered), a wheel written with
        another precision (1). The report's problems figure and headlines count these."""
        counts = self.cancellation_counts()
        mismatch = self.precisionInFiles is not None and self.precisionInFiles != self.config["timerPrecisionMs"]
        return {"restartSkipped": self.horizon["skipped"], "missedCancellations": counts[MISSED],
                "unmatchedCancellations": counts[NOT_IN_SLOT] + counts[QUEUED_NO_TARGET],
                "precisionMismatch": int(mismatch)}

    def as_json(self) -> dict:
        return {
            "store": self.store, "nowMs": self.nowMs, "config": self.config,
            "precisionInFiles": self.precisionInFiles, "rollWindowSlotsInFiles": self.rollWindowInFiles,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.as_json(),
            "timerLog": self.timerLog, "dequeue": self.dequeue, "enqueue": self.enqueue,
            "pending": self.pending.as_json(), "hotSlots": [s.as_json() for s in self.hotSlots],
            "rolls": self.rolls, "cancellations": self.cancellation_counts(),
            "horizon": self.horizon, "metricsFile": self.metricsFile,
            "metrics": [m.as_json() for m in self.metrics],
        }


def bucket_of(due_ms: np.ndarray, now_ms: int) -> np.ndarray:
    """0..len(BUCKETS): the due-time bucket of each time (the last one: later)."""
    edges = np.array([now_ms + upper for _, upper in BUCKETS], dtype=np.int64)
    return np.searchsorted(edges, due_ms, side="left")


def restart_read_ms(checkpoint_read_ms: int, now_ms: int, ts: TimerStore) -> int:
    """Where TimerMessageStore.recover starts reading if the broker started at ``now_ms``:
    max(lastReadTimeMs, floor(now) - slotsTotal + 60 slots)."""
    p = ts.config.precisionMs
    return max(checkpoint_read_ms, now_ms // p * p - ts.config.slotsTotal * p + 60 * p)


def timer_status(ts: TimerStore, now_ms: int, *, hot: int = 10, advance: Advance | None = None) -> TimerStatus:
    advance = advance or (lambda n: None)
    cp = ts.checkpoint()
    # Without a checkpoint the broker starts reading where recovery puts it.
    read_ms = cp.lastReadTimeMs if cp is not None else restart_read_ms(0, now_ms, ts)
    horizon_ms = restart_read_ms(read_ms, now_ms, ts)
    pending = Pending()
    rolls = {"pending": 0, "done": 0}
    net_by_hash: dict[int, int] = {}
    first_unit_by_hash: dict[int, tuple[int, int]] = {}
    deletes: list[tuple[int, int, bool, int, int, int]] = []  # offset, slot, roll, hash, offsetPy, sizePy
    units_total = 0
    skipped = 0
    roll_delays: set[int] = set()
    slots = ts.wheel.non_empty()
    live_slots = slots[ts.wheel.live(slots, read_ms)]
    hot_slots = _hot_slots(live_slots, ts, hot)
    hot_by_time = {h.timeMs: h for h in hot_slots}
    hot_times = np.array(sorted(hot_by_time), dtype=np.int64)
    for mf, part in ts.log.iter_columns():
        # Only the columns the figures need, each decoded once: a log of 10 M units is 520 MB.
        units_total += part.count
        slot = part.column("currWriteTime") + part.column("delayedTime")
        magic = part.column("magic")
        delete = (magic & TIMER_MAGIC_DELETE) != 0
        roll = (magic & TIMER_MAGIC_ROLL) != 0
        live = slot >= read_ms
        message = live & ~delete
        pending.units += int(np.count_nonzero(message))
        pending.cancelMarkers += int(np.count_nonzero(live & delete))
        plain = message & ~roll
        counts = np.bincount(bucket_of(slot[plain], now_ms), minlength=len(BUCKETS) + 1)
        for (name, _), n in zip(BUCKETS, counts):
            pending.buckets[name] += int(n)
        pending.buckets[LATER] += int(counts[len(BUCKETS)])
        rolled = message & roll
        pending.beyondRollWindow += int(np.count_nonzero(rolled))
        if message.any():
            oldest = int(slot[message].min())
            pending.oldestDueMs = oldest if pending.oldestDueMs is None else min(pending.oldestDueMs, oldest)
        rolls["pending"] += int(np.count_nonzero(rolled))
        rolls["done"] += int(np.count_nonzero(~live & roll & ~delete))
        if roll.any():
            roll_delays.update(_distinct(part.column("delayedTime")[roll]).tolist())
        skipped += int(np.count_nonzero(message & (slot < horizon_ms)))
        if len(hot_times):
            _count_hot(hot_by_time, slot, live & np.isin(slot, hot_times), delete, roll)
        values, index, first = _hash_index(part.column("hashCodeOfRealTopic"))
        for sign, mask in ((1, message), (-1, live & delete)):
            counts = np.bincount(index[mask], minlength=len(values))
            for h, row, c in zip(values.tolist(), first.tolist(), counts.tolist()):
                if c:
                    net_by_hash[h] = net_by_hash.get(h, 0) + sign * c
                    # Any unit of the hash tells its topic (resolve_topics reads its record).
                    first_unit_by_hash.setdefault(h, (int(part.raw["offsetPy"][row]), int(part.raw["sizePy"][row])))
        marked = np.flatnonzero(delete)
        if len(marked):
            deletes += delete_units(part.rows(marked), slot[marked])
        advance(mf.size)

    behind_messages = int(live_slots["num"].astype(np.int64).sum())

    cq = ts.timer_queue()
    queue_max = cq.max_offset if cq is not None else 0
    master = cp.masterTimerQueueOffset if cp is not None else 0
    queued_cancels: list[tuple[int, str, int | None]] = []
    queued_targets: dict[tuple[str, int | None], int] = {}
    if cq is not None and master < queue_max:
        _not_enqueued(ts, cq, max(master, cq.min_offset), queue_max, now_ms, pending, queued_cancels,
                      queued_targets)

    metrics = ts.metrics()
    topics = resolve_topics(ts, net_by_hash, first_unit_by_hash, metrics)
    topic_metrics = metric_rows(net_by_hash, topics, metrics)
    cancellations = _cancellations(ts, deletes, read_ms)
    cancellations += _queued_cancellations(ts, queued_cancels, queued_targets, read_ms)

    log_end = ts.log.end_offset()
    config = ts.config
    return TimerStatus(
        store=str(ts.store.path), nowMs=now_ms, config=config.as_json(), precisionInFiles=ts.precision_in_files,
        checkpoint=cp,
        timerLog={"files": len(ts.log.files), "fileSize": ts.log.file_size, "units": units_total,
                  "minOffset": ts.log.min_offset, "endOffset": log_end,
                  "flushPosLag": None if cp is None else log_end - cp.lastTimerLogFlushPos},
        dequeue={"lastReadTimeMs": None if cp is None else read_ms,
                 "behindMs": now_ms - read_ms, "behindMessages": behind_messages},
        enqueue={"queueMaxOffset": queue_max, "masterTimerQueueOffset": None if cp is None else master,
                 "behindMessages": max(queue_max - master, 0)},
        pending=pending, hotSlots=hot_slots, rolls=rolls, cancellations=cancellations,
        horizon={"restartAtMs": now_ms, "readFromMs": horizon_ms, "skipped": skipped,
                 "wheelSpanMs": config.wheelSpanMs},
        metrics=topic_metrics, metricsFile=metrics is not None,
        rollWindowInFiles=roll_window_from_delays(roll_delays, config.precisionMs),
    )


def roll_window_from_delays(delays: set[int], precision_ms: int) -> int | None:
    """The roll window (slots) the roll units were written with: doEnqueue puts a roll unit
    the whole window ahead, or half of it when little would be left after. None unless both
    show (or the values cannot be one window)."""
    slots = sorted({d // precision_ms for d in delays if d > 0 and d % precision_ms == 0})
    if len(slots) == 2 and slots[1] // 2 == slots[0]:
        return slots[1]
    return None


def _hot_slots(live: np.ndarray, ts: TimerStore, hot: int) -> list[HotSlot]:
    if hot <= 0 or not len(live):
        return []
    order = np.lexsort((live["timeSlot"], -live["num"].astype(np.int64)))[:hot]
    congest = ts.config.congestNumEachSlot
    rows = []
    for row in live[order]:
        num = int(row["num"])
        if num <= 0:
            continue
        level = "rejecting" if num >= 2 * congest else "throttled" if num > congest else ""
        rows.append(HotSlot(int(row["index"]), int(row["timeSlot"]) * ts.config.precisionMs, num,
                            int(row["firstPos"]), int(row["lastPos"]), level))
    return rows


def _count_hot(hot: dict[int, HotSlot], slot: np.ndarray, near: np.ndarray, delete: np.ndarray,
               roll: np.ndarray) -> None:
    """Add the units at the hot slots' times to their messages, rolls and markers."""
    for kind, mask in (("markers", near & delete), ("rolls", near & roll & ~delete),
                       ("messages", near & ~roll & ~delete)):
        times, counts = np.unique(slot[mask], return_counts=True)
        for t, n in zip(times.tolist(), counts.tolist()):
            h = hot[t]
            setattr(h, kind, getattr(h, kind) + n)


def _not_enqueued(ts: TimerStore, cq, start: int, stop: int, now_ms: int, pending: Pending,
                  cancels: list[tuple[int, str, int | None]], targets: dict[tuple[str, int | None], int]) -> None:
    """Messages the enqueue has not reached: their due time from their records. Collects the
    cancellation markers among them (queue offset, delete key, TIMER_OUT_MS) and the parked
    messages by (delete key, TIMER_OUT_MS) -> queue offset."""
    units = cq.units(start, stop)
    for i, u in enumerate(units):
        try:
            msg = ts.store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
        except StoreError:
            continue  # verify reports units that point nowhere
        info = timer_info(msg.topic, msg.properties)
        if info is None:
            continue
        if info.isCancel:
            pending.notEnqueuedCancels += 1
            cancels.append((start + i, info.delUniqKey, info.outMs))
            continue
        if info.realTopic is not None and info.uniqKey is not None:
            targets[(delete_key(info.realTopic, info.uniqKey), info.outMs)] = start + i
        pending.notEnqueued += 1
        if info.outMs is not None:
            bucket = int(bucket_of(np.array([info.outMs], dtype=np.int64), now_ms)[0])
            name = BUCKETS[bucket][0] if bucket < len(BUCKETS) else LATER
            pending.notEnqueuedBuckets[name] += 1


def known_topic_names(ts: TimerStore, metrics) -> set[str]:
    names = set(ts.store.topics())
    if metrics is not None:
        names |= set(metrics.timingCount)
    return names


def resolve_topics(ts: TimerStore, net_by_hash: dict[int, int], first_unit: dict[int, tuple[int, int]],
                    metrics) -> dict[int, str]:
    """hashCodeOfRealTopic -> topic name: by the names the store knows, else by reading one
    record of the hash (REAL_TOPIC). Two known names of one hash are told apart the same way."""
    by_hash: dict[int, list[str]] = {}
    for name in known_topic_names(ts, metrics):
        by_hash.setdefault(java_string_hash(name), []).append(name)
    topics: dict[int, str] = {}
    for h in net_by_hash:
        names = by_hash.get(h, [])
        if len(names) == 1:
            topics[h] = names[0]
            continue
        offset, size = first_unit[h]
        try:
            msg = ts.store.commitlog.read_message(offset, size)
            info = timer_info(msg.topic, msg.properties)
            topics[h] = info.realTopic if info is not None and info.realTopic else f"#{h}"
        except StoreError:
            topics[h] = f"#{h}"  # a unit pointing nowhere: verify names it
    return topics


def metric_rows(net_by_hash: dict[int, int], topics: dict[int, str], metrics) -> list[TopicMetric]:
    true_counts: dict[str, int] = {}
    for h, n in net_by_hash.items():
        true_counts[topics[h]] = true_counts.get(topics[h], 0) + n
    counts = {} if metrics is None else {t: m.count for t, m in metrics.timingCount.items()}
    return [TopicMetric(t, counts.get(t), true_counts.get(t, 0)) for t in sorted(set(true_counts) | set(counts))]


def _distinct(values: np.ndarray, sample: int = 4096) -> np.ndarray:
    """np.unique(values) for columns of few distinct values (topic hashes, roll delays): the
    values of a sample, then whatever the rest holds besides (each a vectorised compare)."""
    found = np.unique(values[:sample])
    if len(found) > 16:
        return np.unique(values)
    rest = values[sample:]
    rest = rest[~np.isin(rest, found)]
    return np.union1d(found, rest) if len(rest) else found


def _hash_index(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the distinct values, each row's index among them, each value's first row): a store has
    a few topics and millions of units, so the values are hashed and the rows never sorted."""
    values = _distinct(hashes)
    index = np.searchsorted(values, hashes)
    first = np.full(len(values), len(hashes), dtype=np.int64)
    np.minimum.at(first, index, np.arange(len(hashes), dtype=np.int64))
    return values, index, first


def delete_units(units: np.ndarray, slot: np.ndarray | None = None) -> list[tuple[int, int, bool, int, int, int]]:
    """(offset, slot time, roll, topic hash, offsetPy, sizePy) of the delete units among
    UNITS_DTYPE rows: what ``cancellations`` takes (``slot``: the rows' slot times, if known)."""
    rows = np.flatnonzero((units["magic"] & TIMER_MAGIC_DELETE) != 0)
    if not len(rows):
        return []
    picked = units[rows]
    times = unit_slot_times(picked) if slot is None else slot[rows]
    roll = (picked["magic"] & TIMER_MAGIC_ROLL) != 0
    return [(int(u["offset"]), int(t), bool(r), int(u["hashCodeOfRealTopic"]), int(u["offsetPy"]), int(u["sizePy"]))
            for u, t, r in zip(picked, times, roll)]


def cancelled_targets(ts: TimerStore, read_ms: int) -> set[int]:
    """Timer log offsets of the pending units a pending cancellation marker will drop: its
    target is in its slot (WILL_BE_HONOURED), so the timer will not deliver it."""
    deletes = []
    for _, part in ts.log.iter_columns():
        marked = np.flatnonzero((part.column("magic") & TIMER_MAGIC_DELETE) != 0)
        if len(marked):
            deletes += delete_units(part.rows(marked))
    return {c.targetOffset for c in _cancellations(ts, deletes, read_ms)
            if c.state == WILL_BE_HONOURED and c.targetOffset is not None}


def _cancellations(ts: TimerStore, deletes: list[tuple[int, int, bool, int, int, int]],
                   read_ms: int) -> list[Cancellation]:
    """Each delete unit and whether its target (a non-delete unit of realTopic+uniqKey) is in
    the same slot, where TimerMessageStore.dequeue looks for it."""
    if not deletes:
        return []
    markers = []
    for offset, slot, roll, topic_hash, offset_py, size_py in deletes:
        try:
            msg = ts.store.commitlog.read_message(offset_py, size_py)
            info = timer_info(msg.topic, msg.properties)
        except StoreError:
            info = None  # verify names the unit that points nowhere
        markers.append((offset, slot, roll, topic_hash, info.delUniqKey if info else None,
                        info.outMs if info else None))
    candidates = target_units(ts, {(slot, topic_hash) for _, slot, _, topic_hash, _, _ in markers})
    result = []
    for offset, slot, roll, _, key, out_ms in markers:
        here = [c for c in candidates.get(key, []) if c[1] == slot] if key else []
        target = here[0][0] if here else None
        done = slot < read_ms
        if roll:
            state = ROLLED if done else ROLLING
        elif here:
            state = HONOURED if done else WILL_BE_HONOURED
        else:
            state = MISSED if done else NOT_IN_SLOT
        result.append(Cancellation(offset, slot, roll, key, out_ms, state, target))
    return result


def _queued_cancellations(ts: TimerStore, cancels: list[tuple[int, str, int | None]],
                          targets: dict[tuple[str, int | None], int], read_ms: int) -> list[Cancellation]:
    """The markers not enqueued yet and where their target is: a unit in the wheel at the
    marker's TIMER_OUT_MS, or a parked message not enqueued either (both then take the same
    slot, where the dequeue drops the target)."""
    if not cancels:
        return []
    slot_topics = set()
    for _, key, out_ms in cancels:
        if key and "+" in key and out_ms is not None:
            slot_topics.add((out_ms, java_string_hash(key.rpartition("+")[0])))
    in_wheel = target_units(ts, slot_topics) if slot_topics else {}
    units = {key: next((c[0] for c in in_wheel.get(key, []) if c[1] == out_ms and not c[2]), None)
             for _, key, out_ms in cancels}
    missing = {(key, out_ms) for _, key, out_ms in cancels if units[key] is None and (key, out_ms) not in targets}
    rolled = _rolled_targets(ts, missing, read_ms) if missing else {}
    result = []
    for queue_offset, key, out_ms in cancels:
        unit = units[key] if units[key] is not None else rolled.get((key, out_ms))
        queued = targets.get((key, out_ms))
        state = QUEUED if unit is not None or queued is not None else QUEUED_NO_TARGET
        result.append(Cancellation(-1, out_ms if out_ms is not None else -1, False, key, out_ms, state, unit,
                                   queue_offset, queued))
    return result


def _rolled_targets(ts: TimerStore, wanted: set[tuple[str, int | None]], read_ms: int) -> dict[tuple[str, int], int]:
    """(delete key, TIMER_OUT_MS) -> the pending roll unit of such a message: a target beyond
    the roll window sits in a roll slot, not at its own time."""
    hashes = np.array(sorted({java_string_hash(key.rpartition("+")[0]) for key, _ in wanted if key and "+" in key}),
                      dtype=np.int64)
    found: dict[tuple[str, int], int] = {}
    for _, part in ts.log.iter_files():
        units = part.units
        magic = units["magic"]
        near = ((magic & TIMER_MAGIC_ROLL) != 0) & ((magic & TIMER_MAGIC_DELETE) == 0) \
            & (unit_slot_times(units) >= read_ms) & np.isin(units["hashCodeOfRealTopic"].astype(np.int64), hashes)
        for row in np.flatnonzero(near):
            named = _unit_target(ts, units, row)
            if named is not None and (named[0], named[1].outMs) in wanted:
                found[(named[0], named[1].outMs)] = int(units["offset"][row])
    return found


def _unit_target(ts: TimerStore, units: np.ndarray, row: int) -> tuple[str, TimerInfo] | None:
    """(delete key, TimerInfo) of the message a unit points at, or None when its record is
    not there or names no realTopic+uniqKey."""
    try:
        msg = ts.store.commitlog.read_message(int(units["offsetPy"][row]), int(units["sizePy"][row]))
    except StoreError:
        return None
    info = timer_info(msg.topic, msg.properties)
    if info is None or info.realTopic is None or info.uniqKey is None:
        return None
    return delete_key(info.realTopic, info.uniqKey), info


def target_units(ts: TimerStore, slot_topics: set[tuple[int, int]]) -> dict[str, list[tuple[int, int, bool]]]:
    """Delete key (realTopic+uniqKey) -> [(unit offset, slot time, roll)] of the non-delete
    units in the given (slot time, topic hash) pairs: the records read are those of the
    markers' topics in the markers' slots."""
    pairs = np.array(sorted(slot_topics), dtype=np.int64).reshape(-1, 2)
    wanted_slots = np.unique(pairs[:, 0])
    found: dict[str, list[tuple[int, int, bool]]] = {}
    pair_set = {(int(a), int(b)) for a, b in pairs}
    for _, part in ts.log.iter_columns():
        slot = part.column("currWriteTime") + part.column("delayedTime")
        near = np.flatnonzero(np.isin(slot, wanted_slots) & ((part.column("magic") & TIMER_MAGIC_DELETE) == 0))
        units = part.rows(near)
        slot = slot[near]
        for row in range(len(units)):
            if (int(slot[row]), int(units["hashCodeOfRealTopic"][row])) not in pair_set:
                continue
            named = _unit_target(ts, units, row)
            if named is None:
                continue
            found.setdefault(named[0], []).append(
                (int(units["offset"][row]), int(slot[row]), bool(units["magic"][row] & TIMER_MAGIC_ROLL)))
    return found
