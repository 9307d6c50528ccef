"""What a timer repair takes from the commit log alone, the one source of truth: which
UNIQ_KEYs went on (a later record: a delivered copy, a re-put), whether config/timercheck can be
trusted at all, and the checkpoint rebuilt from the delivered copies and re-puts when it cannot."""

from __future__ import annotations

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import (
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.timercheck import TimerCheckpoint
from rmqdelay.store.commitlog import Blank
from rmqdelay.store.recovery import data_end

from ..store import TimerStore, unit_slot_times
from ..verify import readable_log_end


class LaterRecords:
    """Which UNIQ_KEYs have a record after a given commit log offset (a delivered copy, a
    re-put): one scan of the commit log from the lowest offset asked, kept for the next ask."""

    def __init__(self, ts: TimerStore) -> None:
        self.ts = ts
        self._from: int | None = None
        self._records: dict[str, list[tuple[int, bool]]] = {}  # key -> [(offset, is a cancellation)]

    def of(self, keys, offsets: dict[str, int], *, skip_markers: bool = False) -> set[str]:
        if not offsets:
            return set()
        first = min(offsets.values())
        if self._from is None or first < self._from:
            self._records = {}
            end = data_end(self.ts.store)  # a killed run's torn tail is not read
            records = self.ts.store.commitlog.records(first, include_blanks=True) if first < end else ()
            for record in records:
                if isinstance(record, Blank):
                    if record.physicalOffset + record.totalSize >= end:
                        break
                    continue
                key = record.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
                if key is not None:
                    self._records.setdefault(key, []).append(
                        (record.commitLogOffset, PROPERTY_TIMER_DEL_UNIQKEY in record.properties))
                if record.commitLogOffset + record.storeSize >= end:
                    break
            self._from = first
        return {key for key, at in offsets.items()
                if any(o > at and not (skip_markers and marker) for o, marker in self._records.get(key, ()))}


def checkpoint_damage(ts: TimerStore, cp: TimerCheckpoint | None) -> str | None:
    """Why config/timercheck cannot be trusted at all (missing, short, zeroed, random
    bytes), or None. A file that parses with values no broker writes counts as damaged: the
    read time a positive multiple of the precision, every offset and the dataVersion stamp
    not negative."""
    if ts.checkpoint_damage is not None:
        return f"unreadable ({ts.checkpoint_damage})"
    if cp is None:
        return "missing"
    p = ts.config.precisionMs
    if cp.lastReadTimeMs <= 0 or cp.lastReadTimeMs % p:
        return f"lastReadTimeMs {cp.lastReadTimeMs} (not a time of a slot of {p} ms)"
    fields = {"lastTimerLogFlushPos": cp.lastTimerLogFlushPos, "lastTimerQueueOffset": cp.lastTimerQueueOffset,
              "masterTimerQueueOffset": cp.masterTimerQueueOffset, "dataVersion.timestamp": cp.dataVersion.timestamp,
              "dataVersion.counter": cp.dataVersion.counter}
    for name, value in fields.items():
        if value < 0:
            return f"{name} {value} (negative)"
    if cp.dataVersion.timestamp == 0:
        return "dataVersion timestamp 0 (zeroed)"
    return None


def derived_checkpoint(ts: TimerStore, kept: np.ndarray, later: LaterRecords, now_ms: int,
                        wall_ms: int) -> TimerCheckpoint:
    """A checkpoint rebuilt from the commit log, where every delivered copy and re-put is: the
    read time just after the last slot holding a unit whose message went on (a later record of
    its UNIQ_KEY that is not a cancellation), else the first slot with a unit (else now); the
    next queue offset to enqueue just after the last entry that has a unit or went on."""
    p = ts.config.precisionMs
    cq = ts.timer_queue()
    master = 0
    went_on: set[int] = set()  # commit log offsets of timer messages delivered or re-put
    if cq is not None and cq.max_offset > cq.min_offset:
        entries = cq.units(cq.min_offset, cq.max_offset)
        keys: dict[str, int] = {}
        for py, size in zip(entries["commitLogOffset"].tolist(), entries["size"].tolist()):
            try:
                msg = ts.store.commitlog.read_message(int(py), int(size))
            except StoreError:
                continue
            key = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if key is not None and PROPERTY_TIMER_DEL_UNIQKEY not in msg.properties:
                keys[key] = int(py)  # the last entry of a key: a roll's re-put comes after the original
        done = later.of(keys, keys, skip_markers=True)
        went_on = {keys[k] for k in done}
        py_all = entries["commitLogOffset"].astype(np.int64)
        has = np.isin(py_all, np.fromiter(went_on, dtype=np.int64, count=len(went_on)))
        if len(kept):
            has |= np.isin(py_all, kept["offsetPy"].astype(np.int64))
        # A roll's original entry went on too when its re-put did.
        master = cq.min_offset + int(np.flatnonzero(has).max()) + 1 if has.any() else cq.min_offset
    slots = unit_slot_times(kept) if len(kept) else np.empty(0, dtype=np.int64)
    delete = (kept["magic"] & TIMER_MAGIC_DELETE) != 0 if len(kept) else np.zeros(0, dtype=bool)
    gone = np.isin(kept["offsetPy"].astype(np.int64), np.fromiter(went_on, dtype=np.int64, count=len(went_on))) \
        if len(kept) else delete
    roll = (kept["magic"] & TIMER_MAGIC_ROLL) != 0 if len(kept) else delete
    # A rolled unit went on when its message was re-put: any later record of the key counts.
    if len(kept) and roll.any():
        rolled = {}
        for row in np.flatnonzero(roll & ~delete).tolist():
            try:
                msg = ts.store.commitlog.read_message(int(kept["offsetPy"][row]), int(kept["sizePy"][row]))
            except StoreError:
                continue
            key = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if key is not None:
                rolled[key] = row
        for key in later.of(rolled, {k: int(kept["offsetPy"][r]) for k, r in rolled.items()}, skip_markers=True):
            gone[rolled[key]] = True
    if (gone & ~delete).any():
        read = int(slots[gone & ~delete].max()) + p
    elif len(slots):
        read = int(slots.min())
    else:
        read = now_ms // p * p
    log_end = readable_log_end(ts) if ts.log.files else 0
    return TimerCheckpoint(read, log_end, master, master, DataVersion(counter=1, stateVersion=0, timestamp=wall_ms))
