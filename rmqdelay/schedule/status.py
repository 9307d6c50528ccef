"""Per-level state of SCHEDULE_TOPIC_XXXX: what `inspect delay` and `offsets show` report."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rmqdelay.store import Store


@dataclass(slots=True, frozen=True)
class LevelStatus:
    level: int
    delayMs: int
    offset: int  # from delayOffset.json; 0 when the level is absent (as the broker loads it)
    persisted: bool  # whether delayOffset.json names this level
    minOffset: int
    maxOffset: int
    pending: int
    dueNow: int
    nextDueTimestamp: int | None  # deliver time of the unit at `offset`, if any is pending
    oldestDueTimestamp: int | None  # the same, when it is already due

    def as_json(self) -> dict:
        return {
            "level": self.level, "delayMs": self.delayMs, "offset": self.offset,
            "minOffset": self.minOffset, "maxOffset": self.maxOffset, "pending": self.pending,
            "dueNow": self.dueNow, "nextDueTimestamp": self.nextDueTimestamp,
        }


def corrected_deliver_times(tags_codes: np.ndarray, now_ms: int, delay_ms: int) -> np.ndarray:
    """DeliverDelayedMessageTimerTask.correctDeliverTimestamp over many units at once:
    a deliver time further ahead than now + the level's delay is taken as now."""
    times = tags_codes.astype(np.int64, copy=True)
    times[times > now_ms + delay_ms] = now_ms
    return times


def level_statuses(store: Store, delay_levels: dict[int, int], now_ms: int,
                   levels: list[int] | None = None) -> list[LevelStatus]:
    offsets = store.delay_offsets()
    table = offsets.offsetTable if offsets else {}
    result = []
    for level in levels or sorted(delay_levels):
        delay = delay_levels[level]
        cq = store.schedule_queue(level)
        lo, hi = cq.min_offset, cq.max_offset
        offset = table.get(level, 0)
        start = min(max(offset, lo), hi)
        units = cq.units(start, hi)
        times = corrected_deliver_times(units["tagsCode"], now_ms, delay)
        due = int((times <= now_ms).sum())
        first = int(times[0]) if len(times) else None
        result.append(LevelStatus(
            level=level, delayMs=delay, offset=offset, persisted=level in table,
            minOffset=lo, maxOffset=hi, pending=max(hi - offset, 0), dueNow=due,
            nextDueTimestamp=first,
            oldestDueTimestamp=first if first is not None and first <= now_ms else None,
        ))
    return result
