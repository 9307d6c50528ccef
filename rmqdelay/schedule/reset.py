"""Where `offsets reset` moves a level: the target of each kind, clamped into the queue as
the broker's correctDelayOffset would, and what the move means (messages delivered again,
or skipped)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rmqdelay.errors import UsageError
from rmqdelay.schedule.status import corrected_offset
from rmqdelay.store import Store

TARGET_KINDS = ("to-earliest", "to-latest", "to-offset", "to-datetime", "by-duration", "shift-by")


@dataclass(slots=True, frozen=True)
class ResetTarget:
    kind: str
    value: int | None = None  # offset, epoch ms, duration ms or shift, by kind

    def __post_init__(self) -> None:
        if self.kind not in TARGET_KINDS:
            raise UsageError(f"a reset target, one of {', '.join(TARGET_KINDS)}; found {self.kind!r}")


@dataclass(slots=True, frozen=True)
class LevelReset:
    level: int
    before: int
    requested: int
    after: int
    minOffset: int
    maxOffset: int
    warning: str | None

    @property
    def resumes(self) -> int:
        """Where the scheduler resumes today: ``before`` as the broker's correctDelayOffset reads
        it (an offset below the queue's units, gone with the files, is their first)."""
        return corrected_offset(self.before, self.minOffset, self.maxOffset)

    @property
    def redelivered(self) -> int:
        """Messages delivered once already (units the queue still holds below where the
        scheduler resumes) that the scheduler will deliver again."""
        return max(self.resumes - self.after, 0)

    @property
    def skipped(self) -> int:
        """Pending messages (from where the scheduler resumes) it will never deliver; units
        gone from the queue below its minimum are neither."""
        return max(self.after - self.resumes, 0)

    def as_json(self) -> dict:
        return {"level": self.level, "before": self.before, "after": self.after,
                "requested": self.requested, "minOffset": self.minOffset, "maxOffset": self.maxOffset,
                "redelivered": self.redelivered, "skipped": self.skipped, "warning": self.warning}


def first_unit_at_or_after(tags_codes: np.ndarray, timestamp_ms: int) -> int:
    """Index of the first unit whose deliver time is >= ``timestamp_ms`` (binary search:
    deliver times never decrease within a level)."""
    return int(np.searchsorted(tags_codes.astype(np.int64, copy=False), timestamp_ms, side="left"))


def requested_offset(target: ResetTarget, lo: int, hi: int, current: int, now_ms: int,
                     first_at_or_after: Callable[[int], int]) -> int:
    """Where ``target`` asks a queue of units ``[lo, hi)`` to be, read from ``current``;
    ``first_at_or_after(instant)`` finds the first unit of the queue at or after an instant
    (its deliver time in a delay level, its store time in a consumer's queue). Not clamped."""
    kind = target.kind
    if kind == "to-earliest":
        return lo
    if kind == "to-latest":
        return hi
    if kind == "to-offset":
        return int(target.value)
    if kind == "shift-by":
        return current + int(target.value)
    instant = int(target.value) if kind == "to-datetime" else now_ms - int(target.value)
    return first_at_or_after(instant)


def clamp_warning(what: str, requested: int, lo: int, hi: int, after: int, why: str) -> str | None:
    """The warning of a target clamped into ``[lo, hi]`` (None when it was not)."""
    if after == requested:
        return None
    side = "before minOffset" if requested < lo else "beyond maxOffset"
    return f"{what}: offset {requested} is {side} of the queue [{lo}, {hi}]; clamped to {after}, {why}"


def plan_level_reset(store: Store, level: int, current: int, target: ResetTarget, now_ms: int) -> LevelReset:
    cq = store.schedule_queue(level)
    lo, hi = cq.min_offset, cq.max_offset
    requested = requested_offset(target, lo, hi, current, now_ms,
                                 lambda instant: lo + first_unit_at_or_after(cq.units(lo, hi)["tagsCode"], instant))
    after = corrected_offset(requested, lo, hi)
    warning = clamp_warning(f"level {level}", requested, lo, hi, after, "as the broker's correctDelayOffset would")
    return LevelReset(level, current, requested, after, lo, hi, warning)


def plan_reset(store: Store, current: dict[int, int], levels: list[int], target: ResetTarget,
               now_ms: int) -> list[LevelReset]:
    return [plan_level_reset(store, level, current[level], target, now_ms) for level in levels]
