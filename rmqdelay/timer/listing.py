"""The rows of `inspect timer --slots` and `--units`: wheel slots and timer log units with
the spec's field names, each unit with the record it points at."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import TIMER_MAGIC_DELETE, TIMER_MAGIC_ROLL
from rmqdelay.formats.timerlog import UNIT_SIZE
from rmqdelay.formats.timerprops import timer_info
from rmqdelay.formats.timerwheel import slot_index

from .store import TimerStore, unit_slot_times

DONE = "done"  # before the checkpoint's read time: delivered or rolled already
PENDING = "pending"  # read by the dequeue still to come
STALE = "stale"  # holds a time outside the wheel's span from the read time (TimerWheel.getSlot: empty)


def read_position(ts: TimerStore) -> int:
    cp = ts.checkpoint()
    return cp.lastReadTimeMs if cp is not None else 0


def slot_rows(ts: TimerStore, from_ms: int | None = None, to_ms: int | None = None,
              limit: int | None = None) -> tuple[list[dict], int]:
    """Non-empty slots in index order, the first ``limit``: index, storedTime, timeMs,
    firstPos, lastPos, num, magic, state (done / pending / stale); and how many there are."""
    slots = ts.wheel.non_empty()
    p = ts.config.precisionMs
    times = slots["timeSlot"].astype(np.int64) * p
    keep = np.ones(len(slots), dtype=bool)
    if from_ms is not None:
        keep &= times >= from_ms
    if to_ms is not None:
        keep &= times < to_ms
    read_ms = read_position(ts)
    live = ts.wheel.live(slots, read_ms)
    rows = []
    picked = np.flatnonzero(keep)
    for i in picked[:limit]:
        s = slots[i]
        state = DONE if times[i] < read_ms else PENDING if live[i] else STALE
        rows.append({"index": int(s["index"]), "storedTime": int(s["timeSlot"]), "timeMs": int(times[i]),
                     "firstPos": int(s["firstPos"]), "lastPos": int(s["lastPos"]), "num": int(s["num"]),
                     "magic": int(s["magic"]), "state": state})
    return rows, len(picked)


def unit_message(ts: TimerStore, offset_py: int, size_py: int) -> dict | None:
    """What a unit's record says (the fields of the fixtures' dumps), or None when there is no
    record at offsetPy."""
    try:
        msg = ts.store.commitlog.read_message(offset_py)
    except StoreError:
        return None
    info = timer_info(msg.topic, msg.properties)
    return {"topic": msg.topic, "queueId": msg.queueId, "queueOffset": msg.queueOffset,
            "sizeMatches": msg.storeSize == size_py, "stage": None if info is None else info.stage,
            "realTopic": None if info is None else info.realTopic,
            "uniqKey": None if info is None else info.uniqKey,
            "timerOutMs": None if info is None else info.outMs,
            "rollTimes": None if info is None else info.rollTimes,
            "delUniqKey": None if info is None else info.delUniqKey}


def unit_rows(ts: TimerStore, from_ms: int | None = None, to_ms: int | None = None,
              topic_hash: int | None = None, advance: Callable[[int], None] | None = None) -> Iterator[dict]:
    """Every unit in timer log order (optionally: slot time in [from_ms, to_ms), topic hash),
    with its record."""
    advance = advance or (lambda n: None)
    p = ts.config.precisionMs
    for mf, part in ts.log.iter_files():
        units = part.units
        slot = unit_slot_times(units)
        keep = np.ones(len(units), dtype=bool)
        if from_ms is not None:
            keep &= slot >= from_ms
        if to_ms is not None:
            keep &= slot < to_ms
        if topic_hash is not None:
            keep &= units["hashCodeOfRealTopic"] == topic_hash
        for i in np.flatnonzero(keep):
            u = units[i]
            magic = int(u["magic"])
            offset = int(u["offset"])
            yield {"offset": offset, "file": mf.path.name, "filePos": offset - mf.start, "size": UNIT_SIZE,
                   "prevPos": int(u["prevPos"]), "magic": magic, "roll": bool(magic & TIMER_MAGIC_ROLL),
                   "delete": bool(magic & TIMER_MAGIC_DELETE), "currWriteTime": int(u["currWriteTime"]),
                   "delayedTime": int(u["delayedTime"]), "slotTimeMs": int(slot[i]),
                   "slotIndex": slot_index(int(slot[i]), p), "offsetPy": int(u["offsetPy"]),
                   "sizePy": int(u["sizePy"]), "hashCodeOfRealTopic": int(u["hashCodeOfRealTopic"]),
                   "reservedValue": int(u["reservedValue"]),
                   "message": unit_message(ts, int(u["offsetPy"]), int(u["sizePy"]))}
        advance(mf.size)


def units_of_message(ts: TimerStore, offset_py: int) -> list[dict]:
    """The units pointing at the record at ``offset_py``: offset, slot time, roll, delete and
    whether the slot was read (state done / pending)."""
    read_ms = read_position(ts)
    found = []
    for _, part in ts.log.iter_files():
        units = part.units
        for i in np.flatnonzero(units["offsetPy"] == offset_py):
            u = units[i]
            slot = int(u["currWriteTime"]) + int(u["delayedTime"])
            magic = int(u["magic"])
            found.append({"offset": int(u["offset"]), "slotTimeMs": slot, "roll": bool(magic & TIMER_MAGIC_ROLL),
                          "delete": bool(magic & TIMER_MAGIC_DELETE), "state": DONE if slot < read_ms else PENDING})
    return found
