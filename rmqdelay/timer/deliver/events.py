"""What the timer engine yields as it runs (``TimerEngine.setup``, ``step``, ``publish``): the
engine never prints; `rmqdelay run` shows these beside the delay levels' events."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class TimerDelivered:
    uniqKey: str | None
    topic: str
    queueId: int
    queueOffset: int | None  # None in a dry run
    commitLogOffset: int | None
    msgId: str | None
    timerOutMs: int | None
    slotTimeMs: int | None  # None: put at enqueue (TIMER_OUT_MS already behind the write clock)
    storeTimestamp: int
    latenessMs: int  # store time - when the slot became due (slot + precision)
    rolled: bool = False  # re-put to rmq_sys_wheel_timer with TIMER_ROLL_TIMES + 1
    rollTimes: int = 0
    dryRun: bool = False


@dataclass(slots=True, frozen=True)
class TimerCancelled:
    uniqKey: str
    realTopic: str
    slotTimeMs: int


@dataclass(slots=True, frozen=True)
class TimerSkipped:
    offsetPy: int
    reason: str
    timerQueueOffset: int | None = None


@dataclass(slots=True, frozen=True)
class TimerHeld:
    """A run filter held the wheel back: at this slot (its read clock stays there), or at
    this rmq_sys_wheel_timer entry its enqueue would put at once (its queue offset stays)."""

    slotTimeMs: int | None
    timerQueueOffset: int | None
    topic: str | None
    reason: str


@dataclass(slots=True, frozen=True)
class TimerNotice:
    kind: str
    message: str


@dataclass(slots=True, frozen=True)
class TimerPersisted:
    commitLogOffset: int
    lastReadTimeMs: int
    masterTimerQueueOffset: int
    timerLogEnd: int
    neutralisedUnits: int


TimerEvent = TimerDelivered | TimerCancelled | TimerSkipped | TimerHeld | TimerNotice | TimerPersisted
