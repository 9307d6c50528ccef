"""Per-level state of SCHEDULE_TOPIC_XXXX: what `inspect delay` and `offsets show` report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqdelay.store import Store


@dataclass(slots=True, frozen=True)
class LevelStatus:
    level: int
    delayMs: int
    # Where the scheduler resumes: delayOffset.json's offset clamped into [minOffset, maxOffset]
    # as the broker's correctDelayOffset does on start; an absent level starts at 0, which the
    # broker's timer task moves to minOffset, so that is where it resumes too.
    offset: int
    persisted: bool  # whether delayOffset.json names this level
    storedOffset: int | None  # the offset in delayOffset.json as it is (None: absent)
    minOffset: int
    maxOffset: int
    pending: int
    dueNow: int
    nextDueTimestamp: int | None  # deliver time of the unit at `offset`, if any is pending
    oldestDueTimestamp: int | None  # the same, when it is already due

    def as_json(self) -> dict:
        return {
            "level": self.level, "delayMs": self.delayMs, "offset": self.offset,
            "storedOffset": self.storedOffset, "minOffset": self.minOffset, "maxOffset": self.maxOffset, "pending": self.pending,
            "dueNow": self.dueNow, "nextDueTimestamp": self.nextDueTimestamp,
        }


def corrected_deliver_times(tags_codes: np.ndarray, now_ms: int, delay_ms: int) -> np.ndarray:
    """DeliverDelayedMessageTimerTask.correctDeliverTimestamp over many units at once:
    a deliver time further ahead than now + the level's delay is taken as now."""
    times = tags_codes.astype(np.int64, copy=True)
    times[times > now_ms + delay_ms] = now_ms
    return times


def corrected_offset(offset: int, min_offset: int, max_offset: int) -> int:
    """ScheduleMessageService.correctDelayOffset: an offset below the queue's minimum becomes
    the minimum, one beyond its maximum the maximum."""
    return min(max(offset, min_offset), max_offset)


def level_statuses(store: Store, delay_levels: dict[int, int], now_ms: int,
                   levels: list[int] | None = None) -> list[LevelStatus]:
    offsets = store.delay_offsets()
    table = offsets.offsetTable if offsets else {}
    result = []
    for level in levels or sorted(delay_levels):
        delay = delay_levels[level]
        cq = store.schedule_queue(level)
        lo, hi = cq.min_offset, cq.max_offset
        stored = table.get(level)
        # correctDelayOffset leaves a level without a queue alone.
        start = corrected_offset(0 if stored is None else stored, lo, hi) if cq.runs() else (stored or 0)
        units = cq.units(start, hi)
        cq.check_deliver_times(units, start)
        times = corrected_deliver_times(units["tagsCode"], now_ms, delay)
        due = int((times <= now_ms).sum())
        first = int(times[0]) if len(times) else None
        result.append(LevelStatus(
            level=level, delayMs=delay, offset=start, persisted=stored is not None, storedOffset=stored,
            minOffset=lo, maxOffset=hi, pending=len(units), dueNow=due,
            nextDueTimestamp=first,
            oldestDueTimestamp=first if first is not None and first <= now_ms else None,
        ))
    return result
