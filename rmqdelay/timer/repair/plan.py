"""What a timer repair changes (``RepairPlan``), row by row: what `rmqdelay timer repair` shows
and what ``--execute`` writes. Made by planner.py, read only; written by execute.py."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rmqdelay.store.kind import TIMER_REPAIR_JOURNAL, TIMER_REPAIR_STAGING

STAGING_DIR = TIMER_REPAIR_STAGING
JOURNAL = TIMER_REPAIR_JOURNAL
LOG_BACKUP_DIR = "timerlog.bak"
WHEEL_BACKUP = "timerwheel.bak"

# Why a unit is dropped (the kinds of `inspect timer --verify`).
BELOW_LOG = "unitBelowLog"
PAST_LOG = "unitPastLog"
NO_MESSAGE = "unitNoMessage"
NOT_TIMER = "unitNotTimer"


@dataclass(slots=True, frozen=True)
class DroppedUnit:
    offset: int  # where the unit was in the timer log
    slotTimeMs: int
    magic: int
    offsetPy: int
    sizePy: int
    kind: str
    pointedAt: str  # what is at offsetPy
    pending: bool  # its slot not read yet: a message the broker will never deliver

    def as_json(self) -> dict:
        return {"offset": self.offset, "slotTimeMs": self.slotTimeMs, "magic": self.magic,
                "offsetPy": self.offsetPy, "sizePy": self.sizePy, "kind": self.kind, "pointedAt": self.pointedAt,
                "pending": self.pending}


@dataclass(slots=True, frozen=True)
class FixedField:
    offset: int  # the unit's offset before the repair
    field: str
    before: int
    after: int
    why: str

    def as_json(self) -> dict:
        return {"offset": self.offset, "field": self.field, "before": self.before, "after": self.after,
                "why": self.why}


@dataclass(slots=True, frozen=True)
class StrayBytes:
    """Bytes of a timer log file that are not a unit, a BLANK or the zeros after them."""

    file: str
    offset: int  # byte in the file
    length: int
    head: str  # the first bytes, hex

    def as_json(self) -> dict:
        return {"file": self.file, "offset": self.offset, "length": self.length, "head": self.head}


@dataclass(slots=True, frozen=True)
class RemadeUnit:
    """A unit made for an enqueued timer message that has none (its unit was destroyed)."""

    queueOffset: int  # its rmq_sys_wheel_timer queue offset
    offsetPy: int
    uniqKey: str | None
    timerOutMs: int
    slotTimeMs: int
    magic: int

    def as_json(self) -> dict:
        return {"queueOffset": self.queueOffset, "offsetPy": self.offsetPy, "uniqKey": self.uniqKey,
                "timerOutMs": self.timerOutMs, "slotTimeMs": self.slotTimeMs, "magic": self.magic}


@dataclass(slots=True, frozen=True)
class Change:
    """One row of the before/after table."""

    file: str
    item: str
    before: str
    after: str

    def as_json(self) -> dict:
        return {"file": self.file, "item": self.item, "before": self.before, "after": self.after}


@dataclass(slots=True, frozen=True)
class LeftAlone:
    what: str
    why: str

    def as_json(self) -> dict:
        return {"what": self.what, "why": self.why}


@dataclass
class RepairPlan:
    store: str
    nowMs: int
    units: int = 0  # units found in the timer log
    kept: int = 0
    dropped: list[DroppedUnit] = field(default_factory=list)
    fixed: list[FixedField] = field(default_factory=list)
    stray: list[StrayBytes] = field(default_factory=list)
    remade: list[RemadeUnit] = field(default_factory=list)
    relinked: int = 0  # units whose prevPos changed other than by moving
    moved: int = 0  # units at a new offset
    slotsChanged: int = 0
    changes: list[Change] = field(default_factory=list)
    leftAlone: list[LeftAlone] = field(default_factory=list)
    metricsDriftOnly: bool = False  # the counts drift, nothing else changes: not rewritten
    interrupted: bool = False  # a journal of an interrupted --execute was found
    # What --execute writes: new contents by target (relative to the store), removals.
    log_files: dict[str, bytes] = field(default_factory=dict)
    log_file_size: int = 0
    log_removed: list[str] = field(default_factory=list)
    wheel: np.ndarray | None = None  # the new non-empty slots (SLOTS_DTYPE), when the wheel changes
    checkpoint: bytes | None = None
    state: bytes | None = None  # config/rmqdelay.timer.json, carried beside the checkpoint (carry.py)
    metrics: bytes | None = None

    @property
    def changed(self) -> bool:
        return bool(self.log_files or self.log_removed or self.wheel is not None or self.checkpoint is not None
                    or self.state is not None or self.metrics is not None)

    def as_json(self) -> dict:
        return {
            "store": self.store, "nowMs": self.nowMs, "changed": self.changed, "interrupted": self.interrupted,
            "units": self.units, "kept": self.kept, "moved": self.moved, "relinked": self.relinked,
            "slotsChanged": self.slotsChanged, "metricsDriftOnly": self.metricsDriftOnly,
            "changes": [c.as_json() for c in self.changes],
            "dropped": [d.as_json() for d in self.dropped], "fixed": [f.as_json() for f in self.fixed],
            "stray": [s.as_json() for s in self.stray], "remade": [r.as_json() for r in self.remade],
            "leftAlone": [a.as_json() for a in self.leftAlone],
            "filesWritten": sorted(self._targets()), "filesRemoved": [f"timerlog/{n}" for n in self.log_removed],
        }

    def _targets(self) -> list[str]:
        names = [f"timerlog/{n}" for n in self.log_files]
        if self.wheel is not None:
            names.append("timerwheel")
        if self.state is not None:
            names.append("config/rmqdelay.timer.json")
        if self.checkpoint is not None:
            names.append("config/timercheck")
        if self.metrics is not None:
            names.append("config/timermetrics")
        return names
