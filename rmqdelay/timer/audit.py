"""What a delivered 5.x timer store must show, read from its bytes alone: every parked timer
message delivered exactly once to its real topic and queue unless a cancellation for it met it
in its slot, and a state the real broker resumes from without putting anything again
(TimerMessageStore.recover: the read clock, the queue offset after the last unit's message, and
the slots it will read). The exactly-once check of the timer tests and of the kill -9 soak
(tests/support/kill9_timer_soak.py); in the package, since both need it and it reads nothing but
the store (schedule/audit.py is its counterpart for the delay levels)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.formats.constants import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.store import Store
from rmqdelay.store.verify import verify_store

from .store import TimerStore
from .verify import iter_timer_problems


@dataclass
class TimerCheck:
    parked: int = 0
    cancelled: int = 0
    delivered: int = 0
    lost: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    misrouted: list[str] = field(default_factory=list)
    delay_parked: int = 0
    delay_delivered: int = 0
    problems: list[str] = field(default_factory=list)
    why: dict[str, str] = field(default_factory=dict)  # a lost message: where its trail ends

    def lost_lines(self) -> list[str]:
        return [f"{key}: {self.why.get(key, '?')}" for key in self.lost]


def is_marker(props: dict) -> bool:
    return "RMQDELAY" in props


def check_timer_store(path: Path, *, drained: bool = True, strict_cancel: bool = True) -> TimerCheck:
    """Every parked timer message (a rmq_sys_wheel_timer record without TIMER_ROLL_TIMES or
    TIMER_DEL_UNIQKEY) against the deliveries (records carrying TIMER_DEQUEUE_MS in a real
    topic), by REAL_TOPIC + UNIQ_KEY; cancelled = a cancellation with the same TIMER_OUT_MS.
    ``strict_cancel=False``: a cancellation that reached the timer after its time is dropped
    by the broker (its target delivered), so a cancelled target may be delivered once."""
    check = TimerCheck()
    parked: dict[str, dict] = {}
    cancels: set[tuple[str, str]] = set()
    delivered: Counter = Counter()
    delay_parked: set[str] = set()
    delay_delivered: Counter = Counter()
    trail: dict[str, list[tuple[int, int, str]]] = {}  # key -> its rmq_sys_wheel_timer records
    with Store(path) as store:
        for rec in store.commitlog.records():
            p = rec.properties
            uniq = p.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if rec.topic == RMQ_SYS_WHEEL_TIMER_TOPIC:
                if is_marker(p):
                    continue
                kind = "cancellation" if PROPERTY_TIMER_DEL_UNIQKEY in p else (
                    f"re-put {p[PROPERTY_TIMER_ROLL_TIMES]}" if PROPERTY_TIMER_ROLL_TIMES in p else "parked")
                trail.setdefault(f"{p.get(PROPERTY_REAL_TOPIC)}+{uniq}", []).append(
                    (rec.commitLogOffset, rec.storeSize, f"{kind} TIMER_OUT_MS {p.get(PROPERTY_TIMER_OUT_MS)}"))
                if PROPERTY_TIMER_DEL_UNIQKEY in p:
                    if PROPERTY_TIMER_ROLL_TIMES not in p:
                        cancels.add((p[PROPERTY_TIMER_DEL_UNIQKEY], p.get(PROPERTY_TIMER_OUT_MS)))
                elif PROPERTY_TIMER_ROLL_TIMES not in p:
                    parked[f"{p.get(PROPERTY_REAL_TOPIC)}+{uniq}"] = p
            elif rec.topic == RMQ_SYS_SCHEDULE_TOPIC:
                # reconsumeTimes tells apart the send-backs of one message (a retry chain).
                delay_parked.add(f"{p.get(PROPERTY_REAL_TOPIC)}+{uniq}+{rec.reconsumeTimes}")
            elif PROPERTY_TIMER_DEQUEUE_MS in p and PROPERTY_DELAY_TIME_LEVEL not in p:
                key = f"{p.get(PROPERTY_REAL_TOPIC)}+{uniq}"
                delivered[key] += 1
                want = parked.get(key)
                if want is not None and (rec.topic != want.get(PROPERTY_REAL_TOPIC)
                                         or str(rec.queueId) != want.get(PROPERTY_REAL_QUEUE_ID)):
                    check.misrouted.append(key)
            elif PROPERTY_DELAY_TIME_LEVEL in p and PROPERTY_REAL_TOPIC in p:
                delay_delivered[f"{p.get(PROPERTY_REAL_TOPIC)}+{uniq}+{rec.reconsumeTimes}"] += 1
        check.problems += [f"{p.kind}: {p.file} {p.offset} {p.expected}" for p in verify_store(store)]
        with TimerStore(store) as ts:
            now = int(time.time() * 1000)
            check.problems += [f"{p.kind}: {p.file} {p.offset} {p.expected}" for p in iter_timer_problems(ts, now)
                               if not p.advisory]
            if drained:
                check.problems += broker_would_put(store, ts, now)
            lost_keys = [k for k, p in parked.items() if delivered[k] == 0
                         and (k, p.get(PROPERTY_TIMER_OUT_MS)) not in cancels]
            if lost_keys:
                check.why = explain_lost(ts, {k: trail.get(k, []) for k in lost_keys})
    check.parked = len(parked)
    check.delay_parked = len(delay_parked)
    for key, p in parked.items():
        if (key, p.get(PROPERTY_TIMER_OUT_MS)) in cancels:
            check.cancelled += 1
            if delivered[key] > (0 if strict_cancel else 1):
                check.duplicated.append(key + " (cancelled but delivered)")
            continue
        if delivered[key] == 0:
            check.lost.append(key)
        elif delivered[key] > 1:
            check.duplicated.append(key)
        else:
            check.delivered += 1
    check.delay_delivered = sum(1 for k in delay_parked if delay_delivered[k] == 1)
    check.duplicated += [k for k in delay_parked if delay_delivered[k] > 1]
    return check


def explain_lost(ts: TimerStore, trails: dict[str, list[tuple[int, int, str]]]) -> dict[str, str]:
    """Where the trail of each lost message ends: its records in rmq_sys_wheel_timer (parked,
    re-puts, cancellations) and, for each, the timer log units pointing at it - slot time,
    magic, sizePy - and whether the wheel's chain of that slot reaches the unit."""
    units = ts.log.units()
    by_py: dict[int, list] = {}
    wanted = {off for trail in trails.values() for off, _, _ in trail}
    for u in units:
        if int(u["offsetPy"]) in wanted:
            by_py.setdefault(int(u["offsetPy"]), []).append(u)
    cp = ts.checkpoint()
    p = ts.config.precisionMs

    def reached(slot_ms: int, pos: int) -> str:
        slot = ts.wheel.slot(slot_ms)
        at, steps = slot.lastPos, 0
        while at >= 0 and steps < 1_000_000:
            if at == pos:
                return "in its slot's chain"
            try:
                at = ts.log.unit_at(at).prevPos
            except Exception:  # noqa: BLE001 - a diagnostic: say where the walk stopped
                return f"not reached (the chain breaks at {at})"
            steps += 1
        return "in no chain (the wheel slot holds another time)" if slot.lastPos < 0 else "not in its slot's chain"

    out: dict[str, str] = {}
    for key, trail in trails.items():
        parts = []
        for off, size, what in trail:
            found = by_py.get(off, [])
            if not found:
                parts.append(f"{what} at {off}: no timer log unit points at it")
                continue
            for u in found:
                slot_ms = int(u["currWriteTime"]) + int(u["delayedTime"])
                size_note = "" if int(u["sizePy"]) == size else f", sizePy {int(u['sizePy'])} != record {size}"
                read = "read" if cp is not None and slot_ms < cp.lastReadTimeMs else "pending"
                parts.append(f"{what} at {off}: unit {int(u['offset'])} slot {slot_ms} ({read}) magic "
                             f"{int(u['magic'])}{size_note}, {reached(slot_ms // p * p, int(u['offset']))}")
        out[key] = "; ".join(parts) if parts else "no record of it in rmq_sys_wheel_timer"
    return out


def broker_would_put(store: Store, ts: TimerStore, now_ms: int) -> list[str]:
    """What TimerMessageStore.recover + dequeue would put on this store, started now: []
    when nothing (the read clock not past the wall clock, the queue resumed at its end, and
    every slot from the read clock on holding only delete units)."""
    out: list[str] = []
    cp = ts.checkpoint()
    cq = ts.timer_queue()
    if cp.lastReadTimeMs > now_ms:
        out.append(f"lastReadTimeMs {cp.lastReadTimeMs} is past the wall clock {now_ms}")
    if cq is not None and cp.masterTimerQueueOffset != cq.max_offset:
        out.append(f"masterTimerQueueOffset {cp.masterTimerQueueOffset}, queue ends at {cq.max_offset}")
    # reviseQueueOffset: the queue resumes after the message of the last unit
    units = ts.log.units()
    if len(units) and cq is not None and cq.max_offset > 0:
        last = units[-1]
        entry = cq.unit(cq.max_offset - 1)
        if int(last["offsetPy"]) != entry.commitLogOffset:
            out.append(f"the last timer log unit points at {int(last['offsetPy'])}, not at the queue's last entry "
                       f"{entry.commitLogOffset}: the broker would enqueue entries again")
    start = max(cp.lastReadTimeMs, now_ms // 1000 * 1000 - (ts.config.slotsTotal - 60) * ts.config.precisionMs)
    for row in ts.wheel.non_empty():
        t = int(row["timeSlot"]) * ts.config.precisionMs
        if t < start or int(row["lastPos"]) < 0:
            continue
        pos = int(row["lastPos"])
        while pos != -1:
            u = ts.log.unit_at(pos)
            if not (u.magic & TIMER_MAGIC_DELETE) or u.magic & TIMER_MAGIC_ROLL:
                out.append(f"slot {t} holds unit {pos} (magic {u.magic}) the broker would put")
                break
            pos = u.prevPos
    for level in range(1, 19):
        sq = store.schedule_queue(level)
        offsets = store.delay_offsets()
        if sq.max_offset > (offsets.offsetTable.get(level, 0) if offsets else 0):
            out.append(f"delay level {level} has messages past its offset")
    return out
