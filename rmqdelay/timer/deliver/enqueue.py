"""The timer engine's enqueue (``TimerEnqueueGetService`` / ``TimerEnqueuePutService``): every
rmq_sys_wheel_timer queue 0 entry from masterTimerQueueOffset on. One whose TIMER_OUT_MS is
behind the write clock (the clock floored to the precision) is put at once with
TIMER_ENQUEUE_MS = Long.MAX_VALUE and no unit (a cancellation going that way is dropped, as
doPut drops it); any other gets a timer log unit in its slot, or - TIMER_OUT_MS a roll window or
more ahead - a ROLL unit in the slot a window (half a window when less than a third remains)
ahead; prevPos = the slot's lastPos, the slot's lastPos / firstPos / num updated, timermetrics
counted.

A message and its recall both still in the queue when the clock is past their time reach the
wheel late; a broker that never stopped had both in the slot (each stored before the slot was
due) and put nothing. So the queue ahead, as far as entries stored before the write clock, is
read once for recalls (``_scan_recalls``): a late message such a recall names, in its slot, is
cancelled whatever their order in the queue; a recall stored after its time (the message went
out before it came) is dropped as the broker drops it.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from rmqdelay.errors import StoreError, StoreReadError
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_MAGIC_DEFAULT,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
    TIMER_NEVER_ENQUEUED,
)
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.timerlog import UNIT_SIZE, TimerLogUnit
from rmqdelay.formats.timermetrics import TopicCount
from rmqdelay.store.writer import PUT_BATCH_MIN

from .events import TimerCancelled, TimerEvent, TimerHeld, TimerNotice, TimerSkipped


@dataclass(slots=True)
class QueueEntry:
    """An rmq_sys_wheel_timer queue entry: where its record is, and its size."""

    offsetPy: int
    size: int


class Enqueue:
    """TimerEngine's enqueue: every queue entry into the timer log and the wheel, or put at once
    when it is already due. A part of TimerEngine (whose state it works on), not used alone."""

    def _enqueue_all(self) -> Iterator[TimerEvent]:
        """Every entry in turn. The messages entries put at once (already due) are put a batch
        at a time (``enqueue_batch`` entries' outcomes, put_all), then the events of those
        entries in queue order; the rest of the batch goes out when the queue ends or an entry
        waits. Under --rate each goes out on its own, after its turn. A batch moves nothing
        the run publishes ahead of what is written: the queue offset and the outputs go out
        together at the next publish, as one entry's did (the writer buffers either way). The
        timer log units of the entries are written together once the loop ends."""
        outcomes: list = []
        pending = 0  # the entries among them
        one_by_one = self.gate is not None and self.gate.rate
        self._scan_recalls()
        while self.queue_offset < self.cq_end:
            qoff = self.queue_offset
            entry = self._entry(qoff)
            if self._replaying and qoff not in self._adopted and self._wait_for_origin(entry):
                break
            row = self._entry_row(qoff) if not self._recalls else None
            stop = self._entry_columns.due_run(row, self.write_ms) if row is not None else -1
            if row is not None and stop - row >= PUT_BATCH_MIN:
                # Ready entries put at once, one after another: as columns, together.
                outcomes.append(self._column_run(self._entry_columns, row, stop))
                self.queue_offset = qoff + stop - row
                pending += stop - row
            elif self._enqueue(qoff, entry, outcomes) is False:
                break  # its slot's wheel index holds a slot not read yet: read first
            else:
                self.queue_offset = qoff + 1
                pending += 1
            if pending >= self.enqueue_batch or (one_by_one and outcomes):
                yield from self._put_outputs(outcomes)
                outcomes, pending = [], 0
        if not self.dry_run:
            self.log.write_pending()  # the units of these entries: one write per timer log file
        if outcomes:
            yield from self._put_outputs(outcomes)

    def _entry_write_ms(self, offset_py: int, props: dict[str, str], out: int) -> int:
        """The write clock an entry is enqueued at (see ``step``)."""
        if PROPERTY_TIMER_ROLL_TIMES not in props:
            return self.write_ms
        slot = self._reput_slots.get(offset_py)  # re-put by this run: the slot it was read in
        if slot is None:
            enqueued = java_parse_long(props.get(PROPERTY_TIMER_ENQUEUE_MS, ""))
            if enqueued is not None and enqueued != TIMER_NEVER_ENQUEUED:
                slot = self.ts.config.roll_slot(out, enqueued)  # rolled with this run's window
        if slot is not None:
            return max(slot + self.precision, self.read_ms)
        # Rolled with another window (another broker.conf): the re-put's own dequeue clock.
        dequeued = java_parse_long(props.get(PROPERTY_TIMER_DEQUEUE_MS, ""))
        if dequeued is not None:
            return max(min(self._floor(dequeued), self.write_ms), self.read_ms)
        return self.write_ms

    def _unread_under(self, slot_ms: int) -> bool:
        """The wheel index of ``slot_ms`` holds an earlier slot with units not read yet."""
        held = self.wheel.slots.get(self.wheel.index(slot_ms))
        if held is None or held.lastPos < 0:
            return False
        return self.read_ms <= held.timeSlot * self.precision < slot_ms

    def _enqueue(self, qoff: int, entry: QueueEntry, outcomes: list) -> bool | None:
        """Enqueue one entry; False (nothing done) when it has to wait for a slot to be read.
        Its events, and its output when it is put at once, join ``outcomes`` (put_outputs)."""
        if qoff in self._adopted:
            # Its unit, appended by the killed run, is in the wheel already (adopted in setup;
            # a resume marker's too: in a slot read already).
            self._adopted.discard(qoff)
            self._count_adopted(entry)
            return
        row = self._entry_row(qoff) if not self._recalls else None
        if row is not None:
            return self._enqueue_ready(entry, row, outcomes)
        try:
            msg = self._message(entry.offsetPy, entry.size)
        except StoreReadError:
            raise
        except StoreError as exc:
            self.skipped += 1
            outcomes.append(TimerSkipped(entry.offsetPy, f"no readable message ({exc}); the broker skips it", qoff))
            return
        props = msg.properties
        out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
        if out is None:
            self.skipped += 1
            outcomes.append(TimerSkipped(entry.offsetPy, f"TIMER_OUT_MS is not a number: "
                                                         f"{props.get(PROPERTY_TIMER_OUT_MS)!r} (the broker's "
                                                         f"enqueue stops at it for good)", qoff))
            return
        if PROPERTY_TIMER_DEL_UNIQKEY in props and "RMQDELAY" in props:
            return  # one of rmqdelay's markers: the units pointing at it were written with it
        write_ms = self._entry_write_ms(entry.offsetPy, props, out)
        if out < write_ms:
            if PROPERTY_TIMER_DEL_UNIQKEY in props:
                if qoff in self._recall_at:
                    return  # in time for its message's slot: honoured there (``_recalled``)
                if "RMQDELAY" not in props:
                    # doPut: "Trying do put delete timer msg" - a cancellation past due is dropped.
                    outcomes.append(TimerNotice("cancelDropped",
                                                f"cancellation of {props[PROPERTY_TIMER_DEL_UNIQKEY]} reached the "
                                                f"timer after its time: dropped, as the broker does (its target is "
                                                f"not cancelled)"))
                return
            if self.gate is not None and self.gate.holds_any:
                reason = self.gate.holds(props.get(PROPERTY_REAL_TOPIC), out)
                if reason is not None:
                    # Put at once, it would be delivered: held here, the queue offset stays.
                    self.held = f"rmq_sys_wheel_timer offset {qoff}: {reason}"
                    outcomes.append(TimerHeld(None, qoff, props.get(PROPERTY_REAL_TOPIC), reason))
                    return False
            if self._recalled(qoff, msg, props, out):
                self.cancelled += 1
                outcomes.append(TimerCancelled(props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, ""),
                                               props.get(PROPERTY_REAL_TOPIC, ""), self._floor(out)))
                return
            outcomes.append(self._output(msg, TIMER_NEVER_ENQUEUED, False, None, out))
            return
        return self._enqueue_unit(entry, out, write_ms, PROPERTY_TIMER_DEL_UNIQKEY in props,
                                  props.get(PROPERTY_REAL_TOPIC))

    def _scan_recalls(self) -> None:
        """The recalls among the queue's entries not enqueued yet that were stored before the
        write clock (in time for a slot it has passed), read once: by (the key they name,
        their slot) -> their queue offsets."""
        bound = self.write_ms
        if self._cq is None or self._recall_end >= bound:
            return
        q = max(self._recall_scan_at, self.queue_offset)
        while q < self._cq_max:
            units = self._cq.units(q, min(q + 1024, self._cq_max))
            if not len(units):
                break
            for cl, size in zip(units["commitLogOffset"].tolist(), units["size"].tolist()):
                try:
                    msg = self.store.commitlog.read_message(cl, size)
                except StoreReadError:
                    raise
                except StoreError:
                    q += 1
                    continue
                if self._floor(msg.storeTimestamp) >= bound:
                    self._recall_scan_at, self._recall_end = q, bound
                    return
                props = msg.properties
                key = props.get(PROPERTY_TIMER_DEL_UNIQKEY)
                out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
                if key is not None and "RMQDELAY" not in props and out is not None \
                        and self._floor(msg.storeTimestamp) <= out:
                    self._recalls.setdefault((key, self._floor(out)), []).append(q)
                q += 1
        self._recall_scan_at, self._recall_end = q, bound

    def _recalled(self, qoff: int, msg, props: dict[str, str], out: int) -> bool:
        """A late message (stored in time for its slot) that a recall in time for the same slot
        names: cancelled, and that recall used."""
        if not self._recalls or self._floor(msg.storeTimestamp) > out:
            return False
        key = (f"{props.get(PROPERTY_REAL_TOPIC)}+{props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)}",
               self._floor(out))
        found = [q for q in self._recalls.get(key, ()) if q != qoff and q not in self._recall_at.values()]
        if not found:
            return False
        self._recall_at[found[0]] = qoff
        return True

    def _enqueue_ready(self, entry: QueueEntry, row: int, outcomes: list) -> bool | None:
        """``_enqueue`` of a ready record (columns.py): what it decides follows from the
        record's TIMER_OUT_MS and its shape."""
        cols = self._entry_columns
        out = cols.out_ms[row]
        if out < self.write_ms:
            outcomes.append(self._column_output(cols, row, entry, TIMER_NEVER_ENQUEUED, None))
            return
        return self._enqueue_unit(entry, out, self.write_ms, False, cols.shape(row).topic)

    def _enqueue_unit(self, entry: QueueEntry, out: int, write_ms: int, is_delete: bool,
                      real_topic: str | None) -> bool | None:
        """The entry's unit appended in its slot (or a roll slot); False when that slot's wheel
        index holds a slot not read yet."""
        magic = TIMER_MAGIC_DEFAULT
        slot_ms = out
        roll_slot = self.ts.config.roll_slot(out, write_ms)
        if roll_slot is not None:
            magic |= TIMER_MAGIC_ROLL
            slot_ms = roll_slot
        if is_delete:
            magic |= TIMER_MAGIC_DELETE
        if self._unread_under(slot_ms):
            return False
        self._written_before_unit(entry.offsetPy)
        self._append_unit(magic, write_ms, slot_ms, entry.offsetPy, entry.size, topic_hash(real_topic))
        self._count(real_topic, -1 if is_delete else 1)

    def _written_before_unit(self, offset_py: int) -> None:
        """A unit may only point at a record in the commit log file: the broker enqueues
        what its consume queue shows. A re-put of this run (a roll) may still wait in the
        writer's buffer; written out first, or a kill between the two leaves a unit pointing
        where the rerun writes something else."""
        if self.writer is not None and not self.dry_run and offset_py >= self.writer.flushed_end:
            self.writer.flush()

    def _pending_other(self, slot_ms: int) -> bool:
        """The wheel index of ``slot_ms`` holds another time with units not read yet."""
        held = self.wheel.slots.get(self.wheel.index(slot_ms))
        return held is not None and held.lastPos >= 0 and held.timeSlot * self.precision != slot_ms \
            and held.timeSlot * self.precision >= self.read_ms

    def _append_unit(self, magic: int, write_ms: int, slot_ms: int, offset_py: int, size_py: int,
                     topic_hash: int, *, read_slot: bool = False) -> int:
        """Append a unit and link it into its slot. ``read_slot``: a marker in a slot already
        read; left out of the wheel when linking it would take the index from another time
        not read yet (the slot 14 days later, enqueued by a run reading ahead)."""
        slot = self.wheel.get(slot_ms)
        prev = slot.lastPos if slot is not None else -1
        if self.dry_run:
            pos = self.log.end
            self.log.end += UNIT_SIZE
        else:
            pos = self.log.append((prev, magic, write_ms, slot_ms - write_ms, offset_py, size_py, topic_hash))
        if read_slot and self._pending_other(slot_ms):
            return pos
        delta = -1 if magic & TIMER_MAGIC_DELETE else 1
        self.wheel.put(slot_ms, slot.firstPos if slot is not None and slot.firstPos != -1 else pos, pos,
                       (slot.num if slot is not None else 0) + delta, slot.magic if slot is not None else 0)
        if slot_ms >= self.read_ms:
            heapq.heappush(self._heap, slot_ms)
        if self.dry_run:
            self._dry_units[pos] = TimerLogUnit(pos, prev, magic, write_ms, slot_ms - write_ms, offset_py, size_py,
                                                topic_hash)
        return pos

    def _count(self, topic: str | None, delta: int) -> None:
        """TimerMetrics.addAndGet: per real topic."""
        if topic is None:
            return
        now = self.wall_clock()
        counts = self._metrics.timingCount
        current = counts.get(topic)
        counts[topic] = TopicCount((current.count if current else 0) + delta, now)
        self._metric_steps += 1


@lru_cache(maxsize=4096)
def _hash_of(topic: str) -> int:
    return java_string_hash(topic)


def topic_hash(topic: str | None) -> int:
    """A unit's hashCodeOfRealTopic (String.hashCode; 0 without REAL_TOPIC), once per topic."""
    return 0 if topic is None else _hash_of(topic)
