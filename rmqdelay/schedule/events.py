"""What the level scheduler yields as it runs (``Scheduler.events()``): the engine never prints;
`rmqdelay run` shows these (and the timer engine's, rmqdelay.timer.deliver.events)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)  # not frozen: built once per message, and frozen init is slower
class Delivered:
    level: int
    offset: int  # the unit's offset in the schedule queue
    scheduleCommitLogOffset: int
    uniqKey: str | None
    topic: str
    queueId: int
    queueOffset: int | None  # None in a dry run
    commitLogOffset: int | None
    msgId: str | None
    deliverTimestamp: int
    storeTimestamp: int
    latenessMs: int
    dryRun: bool = False


@dataclass(slots=True, frozen=True)
class Skipped:
    level: int
    offset: int
    scheduleCommitLogOffset: int
    reason: str


@dataclass(slots=True, frozen=True)
class Held:
    """A run filter held this level back at this unit: the level stops here, its offset stays
    (rmqdelay/runfilter.py)."""

    level: int
    offset: int
    scheduleCommitLogOffset: int
    topic: str | None
    deliverTimestamp: int
    reason: str


@dataclass(slots=True, frozen=True)
class QueueCreated:
    """A REAL_QID beyond the queues the topic had: the broker writes to it all the same."""

    topic: str
    queueId: int
    level: int
    offset: int


@dataclass(slots=True, frozen=True)
class Notice:
    """Something the operator should know (corrections, replay, recovery)."""

    kind: str
    message: str
    level: int | None = None


@dataclass(slots=True, frozen=True)
class Replayed:
    commitLogOffset: int  # where the replay started
    perLevel: dict[int, int]  # deliveries found already done, by level


@dataclass(slots=True, frozen=True)
class Persisted:
    commitLogOffset: int
    offsetTable: dict[int, int]


@dataclass(slots=True, frozen=True)
class Sleeping:
    untilTimestamp: int | None  # None: until stopped


@dataclass(slots=True, frozen=True)
class Stopped:
    reason: str
    delivered: int
    skipped: int
    offsetTable: dict[int, int]
    # the timer wheel (5.x stores): messages delivered, re-put by a roll, cancelled, skipped
    timerDelivered: int = 0
    timerRolled: int = 0
    timerCancelled: int = 0
    timerSkipped: int = 0
