"""After a kill: what the killed run did past the state it published, taken up again so that
nothing is lost or put twice (the argument is the package's, in __init__.py).

Units past the published timer log end are kept in order (a torn one zeroed) and adopted, each
by the queue entry whose record (offset and size) it points at, as that entry's turn comes;
units no entry can adopt are made delete units in their slots (``_settle``). The outputs in the
commit log past the published offset X are collected and matched, by everything but the clock,
against what the engine puts again (``Dequeue._put``): each one found is not put twice. Until the
replay has met every slot the killed run read, nothing is published."""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from rmqdelay.errors import StoreError, StoreReadError
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.timerlog import BLANK_MAGIC_CODE, UNIT_SIZE, TimerLogUnit
from rmqdelay.store.fileio import open_for_read

from ..convert import is_timer_output, output_key
from ..files import TimerLogFiles
from .enqueue import QueueEntry
from .events import TimerEvent, TimerNotice
from .publish import MAGIC_NEUTRAL, marker_message
from ..runstate import TIMER_STATE_FILE, timer_state_path


class Replay:
    """TimerEngine's replay of what a killed run left past its published state. A part of
    TimerEngine (whose state it works on), not used alone."""

    def _scan_own_tail(self, directory: Path, file_size: int, start: int) -> int:
        """Units past the published end (written by a run that was killed): kept in order for
        adoption; a torn one (and what follows it in that file) is zeroed."""
        self._torn = None
        self._torn_range = (0, 0)
        probe = TimerLogFiles(directory, file_size, start)
        pos = start
        try:
            while True:
                file_start = pos - pos % probe.file_size
                path = directory / f"{file_start:020d}"
                if not path.exists():
                    break
                try:
                    unit = probe.read(pos)
                except StoreError:
                    head = _raw_head(path, pos - file_start)
                    if head is None or not any(head):
                        break
                    if len(head) >= 16 and int.from_bytes(head[12:16], "big", signed=True) == BLANK_MAGIC_CODE:
                        pos = file_start + probe.file_size
                        continue
                    self._torn = pos
                    self._torn_range = (pos, min(pos + UNIT_SIZE, file_start + probe.file_size))
                    break
                if unit.sizePy <= 0 or unit.offsetPy < 0:
                    self._torn = pos  # a unit cut short by a kill: its tail is zeros
                    self._torn_range = (pos, min(pos + UNIT_SIZE, file_start + probe.file_size))
                    break
                self._leftovers.setdefault(unit.offsetPy, deque()).append(unit)
                pos += UNIT_SIZE
        finally:
            probe.close()
        return pos

    def _collect_replay(self, start: int) -> Iterator[TimerEvent]:
        end = self.store.end_offset()
        if start > end:
            raise StoreError(timer_state_path(self.path), None,
                             f"a commit log offset inside the log; the timer state is exact at {start} but the log "
                             f"ends at {end}: outputs it counts are missing. Remove config/{TIMER_STATE_FILE} to "
                             f"resume from config/timercheck as the broker would")
        newest = 0
        found = 0
        for record in self.store.commitlog.records(start):
            if not is_timer_output(record):
                continue
            found += 1
            self._replay.setdefault(output_key(record.topic, record.queueId, record.propertiesRaw, record.bodyCRC,
                                               record.bornTimestamp), []).append(record.commitLogOffset)
            dq = java_parse_long(record.properties.get(PROPERTY_TIMER_DEQUEUE_MS, ""))
            if dq is not None:
                newest = max(newest, dq)
        self._write_floor = self._floor(newest)
        if found or self._leftovers:
            yield TimerNotice("replay", f"after the published timer state: {found} timer output(s) in the commit "
                                        f"log past offset {start} and {self._leftover_count} timer log unit(s); "
                                        f"matched as the engine runs again, none put twice")

    def _end_replay(self) -> Iterator[TimerEvent]:
        """Every slot the killed run read is read again: what matched nothing was not this
        engine's work (or is already in the log): left as it is, said."""
        if self._replay:
            yield TimerNotice("replay", f"{sum(map(len, self._replay.values()))} timer output(s) after the published state "
                                        f"matched nothing this run put again; left as they are")
        rest = [u for units in self._leftovers.values() for u in units]
        self._leftovers.clear()
        if rest:
            yield from self._settle(rest, "matched no queue entry")
            self._consume_own_entries()
        self._replay.clear()
        self._replaying = False

    def _adopt_leftovers(self) -> None:
        """Units past the published end go into the wheel at once, each with the queue entry
        whose record it points at (that entry's turn then adds nothing): the killed run had
        them in its wheel before it read any later slot, and so must this run, whatever it
        reads before it enqueues (see ``step``)."""
        if not self._leftovers:
            return
        last = max(self._leftovers)  # entries are in commit log order: none after this can match
        q = self.queue_offset
        while self._leftovers and q < self.cq_end:
            entry = self._entry(q)
            if entry.offsetPy > last:
                break
            if self._leftover_for(entry) is not None:
                units = self._leftovers[entry.offsetPy]
                self._adopt(units.popleft())
                if not units:
                    del self._leftovers[entry.offsetPy]
                self._adopted.add(q)
            q += 1

    def _wait_for_origin(self, entry: QueueEntry) -> bool:
        """In a replay: a re-put the killed run put but did not enqueue waits (and the queue
        after it, in order) until its roll slot is read again, so that it is enqueued at the
        clock that run had."""
        if entry.offsetPy < self.replay_from or entry.offsetPy in self._reput_slots:
            return False
        if self.read_ms >= self._write_floor:
            return False
        try:
            msg = self._message(entry.offsetPy, entry.size)
        except StoreError:
            return False
        return PROPERTY_TIMER_ROLL_TIMES in msg.properties and is_timer_output(msg)

    def _count_adopted(self, entry: QueueEntry) -> None:
        """timermetrics for a unit the killed run appended and this run adopted: counted at
        its entry's turn as doEnqueue counts it (the killed run's count was never published:
        the metrics go out after the state that names the unit)."""
        try:
            props = self._message(entry.offsetPy, entry.size).properties
        except StoreReadError:
            raise
        except StoreError:
            return
        if "RMQDELAY" in props:
            return  # one of rmqdelay's markers: never counted
        self._count(props.get(PROPERTY_REAL_TOPIC), -1 if PROPERTY_TIMER_DEL_UNIQKEY in props else 1)

    def _leftover_for(self, entry: QueueEntry) -> TimerLogUnit | None:
        """The unit past the published end that the killed run appended for this entry: the
        same record (offset and size), whatever came between; a unit for another record
        stays out of the wheel."""
        units = self._leftovers.get(entry.offsetPy)
        if units and units[0].sizePy == entry.size:
            return units[0]
        return None

    @property
    def _leftover_count(self) -> int:
        return sum(map(len, self._leftovers.values()))

    def _adopt(self, unit: TimerLogUnit) -> None:
        """A unit the killed run appended for this entry: into the wheel unless it is there."""
        t = unit.slotTimeMs
        slot = self.wheel.get(t)
        if slot is None and t < self.read_ms and self._pending_other(t):
            return  # a marker left out of the wheel (see _append_unit): never over a slot not read
        if slot is None or slot.lastPos < unit.offset:
            delta = -1 if unit.magic & TIMER_MAGIC_DELETE else 1
            self.wheel.put(t, slot.firstPos if slot is not None and slot.firstPos != -1 else unit.offset,
                           unit.offset, (slot.num if slot is not None else 0) + delta,
                           slot.magic if slot is not None else 0)
        if t >= self.read_ms:
            heapq.heappush(self._heap, t)

    def _settle_unadoptable(self) -> Iterator[TimerEvent]:
        """Units past the published end that no queue entry of this run can adopt are settled
        before anything is read or appended (see ``_settle``); the rest wait for their entry.
        Called after ``_collect_replay``: the store's view of the commit log does not see the
        marker records the writer puts from here on."""
        stay: dict[int, deque[TimerLogUnit]] = {}
        lost: list[TimerLogUnit] = []
        for key, units in self._leftovers.items():
            for unit in units:
                if self._unadoptable(unit):
                    lost.append(unit)
                else:
                    stay.setdefault(key, deque()).append(unit)
        self._leftovers = stay
        yield from self._settle(lost, "point at no record still to enqueue")

    def _unadoptable(self, unit: TimerLogUnit) -> bool:
        """A unit the killed run appended whose record is not an rmq_sys_wheel_timer entry
        still to enqueue: the record was lost (still in that run's buffer, or not yet on disk
        at a power loss) and the offset is past the log's end or holds another writer's
        record now; or the unit is one of rmqdelay's neutral units (its record a marker)."""
        try:
            msg = self._message(unit.offsetPy, unit.sizePy)
        except StoreReadError:
            raise
        except StoreError:
            return True
        props = msg.properties
        if "RMQDELAY" in props:
            return True
        if msg.topic != RMQ_SYS_WHEEL_TIMER_TOPIC or msg.queueId != 0 or msg.queueOffset < self.queue_offset:
            return True
        # Another record of the same size where the lost one was: the unit says what it was for.
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
        return (unit.hashCodeOfRealTopic != (java_string_hash(real_topic) if real_topic is not None else 0)
                or bool(unit.magic & TIMER_MAGIC_DELETE) != (PROPERTY_TIMER_DEL_UNIQKEY in props)
                or (not unit.magic & TIMER_MAGIC_ROLL and unit.slotTimeMs != out))

    def _settle(self, units: list[TimerLogUnit], why: str) -> Iterator[TimerEvent]:
        """Units past the published end that no queue entry adopts. Each becomes what
        ``_neutralise`` makes of a unit read ahead: a delete unit pointing at a cancellation
        due in its slot that names no message (put and made durable first), so a broker
        reading it puts nothing; and it joins its slot: its prevPos is the unit of its slot
        the killed run appended before it, so the slot's lastPos, firstPos and num are set
        from the chain, as the broker counts them. Nothing is cut: later units may chain
        through it, and the wheel the killed run wrote may point at it."""
        if not units:
            return
        yield TimerNotice("recovery", f"{len(units)} timer log unit(s) after the published end {why}: made delete "
                                      f"units (the broker puts nothing for them), kept in their slots")
        if self.dry_run or self.writer is None:
            return
        units = sorted(units, key=lambda u: u.offset)
        todo = [u for u in units if not self._is_marker_record(u, u.slotTimeMs)]
        targets: dict[int, tuple[int, int, int]] = {}
        for unit in todo:
            t = unit.slotTimeMs
            if t not in targets:
                new = marker_message(t, "unit-without-record", self.clock())
                self._remember(new, self.writer.put(new))
                result = self._last_put
                targets[t] = (result.commitLogOffset, result.storeSize, java_string_hash(RMQ_SYS_WHEEL_TIMER_TOPIC))
        if targets:
            self.writer.sync_to_disk()  # the records the units will point at, durable first
        for unit in todo:
            self.log.set_target(unit.offset, *targets[unit.slotTimeMs])
            self.log.set_magic(unit.offset, MAGIC_NEUTRAL)
        times: list[int] = []
        for unit in units:
            t = unit.slotTimeMs
            slot = self.wheel.get(t)
            if slot is None or slot.lastPos < unit.offset:
                self.wheel.put(t, slot.firstPos if slot is not None else -1, unit.offset,
                               slot.num if slot is not None else 0, slot.magic if slot is not None else 0)
            if t not in times:
                times.append(t)
        for t in times:
            self._recount(t)
            if t >= self.read_ms:
                heapq.heappush(self._heap, t)


def _raw_head(path: Path, pos: int) -> bytes | None:
    fd = open_for_read(path)
    if fd is None:
        return None
    try:
        return os.pread(fd, UNIT_SIZE, pos)
    except OSError as exc:
        raise StoreError(path, pos, f"a readable timer log ({exc.strerror})") from None
    finally:
        os.close(fd)
