"""The timer engine's dequeue (``TimerDequeueGetService`` / ``TimerDequeuePutMessageService``):
while the read clock is behind the write clock, the slot at the read clock: its delete units
first (their TIMER_DEL_UNIQKEY), then every other unit in append order: cancelled when
``realTopic+uniqKey`` is among the deletes, re-put to rmq_sys_wheel_timer with
TIMER_ROLL_TIMES + 1 when it is a ROLL unit, delivered to REAL_TOPIC / REAL_QID otherwise
(convert.py). Empty slots are jumped over, not walked.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from rmqdelay.errors import StoreError, StoreReadError
from rmqdelay.formats.commitlog import Message, body_crc
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
    TIMER_NEVER_ENQUEUED,
)
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.timerlog import TimerLogUnit
from rmqdelay.store.writer import NewMessage

from ..convert import NotDeliverable, output_key, timer_output
from .events import TimerCancelled, TimerDelivered, TimerEvent, TimerSkipped


class Dequeue:
    """TimerEngine's dequeue: a due slot's units read and their messages put. A part of
    TimerEngine (whose state it works on), not used alone."""

    def _slot_held(self, t: int) -> str | None:
        """Why a run filter holds the wheel back at slot ``t`` (rmqdelay/runfilter.py), or None: the
        slot is due after --until, or it would deliver a message for a topic not in --topics,
        or more messages than --limit leaves. Re-puts (roll units) and cancelled messages
        deliver nothing."""
        gate = self.gate
        reason = gate.held_by_time(t)
        if reason is not None:
            return reason
        deletes: set[str] = set()
        deliveries: list[str | None] = []
        for unit in self._chain(t):
            try:
                props = self._message(unit.offsetPy, unit.sizePy).properties
            except StoreReadError:
                raise
            except StoreError:
                continue  # skipped when the slot is read, as the broker does
            if unit.magic & TIMER_MAGIC_DELETE and not unit.magic & TIMER_MAGIC_ROLL:
                if PROPERTY_TIMER_DEL_UNIQKEY in props:
                    deletes.add(props[PROPERTY_TIMER_DEL_UNIQKEY])
            elif not unit.magic & TIMER_MAGIC_ROLL:
                deliveries.append(f"{props.get(PROPERTY_REAL_TOPIC)}+{props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)}")
        kept = [key for key in deliveries if key not in deletes]
        for key in kept:
            reason = gate.held_by_topic(key.rpartition("+")[0])
            if reason is not None:
                return reason
        return gate.held_by_limit(len(kept)) if kept else None

    def _dequeue_slot(self, t: int) -> None:
        """Read slot ``t``: its outcomes (events, outputs) join the pending ones, put by
        ``_put_pending`` (several slots' at once while nothing else waits)."""
        units = self._chain(t)
        self._read_slot_ahead(units)
        self._processed.append(t)
        delete_keys: set[str] = set()
        normals: list[TimerLogUnit] = []
        for unit in units:
            if unit.magic & TIMER_MAGIC_DELETE and not unit.magic & TIMER_MAGIC_ROLL:
                try:
                    msg = self._message(unit.offsetPy, unit.sizePy)
                except StoreReadError:
                    raise
                except StoreError:
                    continue  # the broker releases a delete whose message it cannot read
                key = msg.properties.get(PROPERTY_TIMER_DEL_UNIQKEY)
                if key is not None:
                    delete_keys.add(key)
            else:
                normals.append(unit)
        normals.reverse()  # normalMsgStack.addFirst while walking back: append order
        outcomes = self._pending_outcomes  # in append order: events, and outputs to put
        for unit in normals:
            try:
                msg = self._message(unit.offsetPy, unit.sizePy)
            except StoreReadError:
                raise
            except StoreError as exc:
                self.skipped += 1
                outcomes.append(TimerSkipped(unit.offsetPy, f"timer log unit at {unit.offset}: no readable message "
                                                            f"({exc}); the broker skips it"))
                continue
            props = msg.properties
            uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            real_topic = props.get(PROPERTY_REAL_TOPIC)
            if uniq is not None and delete_keys and f"{real_topic}+{uniq}" in delete_keys:
                self.cancelled += 1
                outcomes.append(TimerCancelled(uniq, real_topic or "", t))
                continue
            if java_parse_long(props.get(PROPERTY_TIMER_ENQUEUE_MS, "")) != TIMER_NEVER_ENQUEUED:
                self._count(real_topic, -1)
            out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
            roll = bool(unit.magic & TIMER_MAGIC_ROLL)
            self._rolls_pending = self._rolls_pending or roll
            outcomes.append(self._output(msg, unit.currWriteTime, roll, t, out))

    def _put_pending(self) -> Iterator[TimerEvent]:
        """The outcomes of the slots read since the last call: outputs put, events in order."""
        outcomes, self._pending_outcomes, self._rolls_pending = self._pending_outcomes, [], False
        if outcomes:
            yield from self._put_outputs(outcomes)

    def _output(self, msg: Message, enqueue_time: int, roll: bool, slot_ms: int | None,
                timer_out: int | None) -> TimerEvent | _Output | None:
        """What becomes of one message read from a slot (or put at once): an event to yield
        as it is (skipped, dry run), None (written by an earlier run: replayed), or an output
        for the writer."""
        now = self.clock()
        try:
            if not roll and PROPERTY_TIMER_DEL_UNIQKEY in msg.properties:
                raise NotDeliverable("a cancellation put as a delivery (doPut refuses it)")
            new = timer_output(msg, enqueue_time, roll, now)
        except NotDeliverable as exc:
            self.skipped += 1
            return TimerSkipped(msg.commitLogOffset, str(exc))
        uniq = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        roll_times = int(new.properties.get(PROPERTY_TIMER_ROLL_TIMES, "0") or 0)
        due = (slot_ms if slot_ms is not None else (timer_out if timer_out is not None else now)) + self.precision
        if self._replay:
            key = output_key(new.topic, new.queueId, new.propertiesRaw, body_crc(new.body), new.bornTimestamp)
            found = self._replay.get(key)
            if found:
                offset = found.pop(0)
                if not found:
                    del self._replay[key]
                if roll:
                    self._reput_slots[offset] = slot_ms
                self.replayed += 1
                return None
        if self.gate is not None and not roll:
            self.gate.delivered += 1
            self.gate.pace()  # --rate (a stop ends the wait; the slot is finished all the same)
        if self.dry_run or self.writer is None:
            if roll:
                self.rolled += 1
            else:
                self.delivered += 1
            return TimerDelivered(uniq, new.topic, new.queueId, None, None, None, timer_out, slot_ms, now,
                                  now - due, roll, roll_times, dryRun=True)
        return _Output(new, uniq, roll, roll_times, slot_ms, timer_out, due)

    def _put_outputs(self, outcomes: list) -> Iterator[TimerEvent]:
        """The outputs among ``outcomes`` put with the one writer at once (put_all: put_batch,
        the bytes put() writes, in the same order), then every event in order."""
        news = [o.new for o in outcomes if isinstance(o, _Output)]
        puts = self.writer.put_all(news) if news else None
        j = 0
        for o in outcomes:
            if o is None:
                continue
            if not isinstance(o, _Output):
                yield o
                continue
            store_ts = puts.store_timestamps[j]
            if o.roll:
                self.rolled += 1
                self._remember(o.new, puts.result(j))
                self._reput_slots[puts.commit_log_offsets[j]] = o.slot_ms
            else:
                self.delivered += 1
                self.lateness.append(store_ts - o.due)
                if len(self.lateness) > 1 << 17:
                    del self.lateness[:1 << 16]
            yield TimerDelivered(o.uniq, puts.topics[j], puts.queue_ids[j], puts.queue_offsets[j],
                                 puts.commit_log_offsets[j], puts.msg_ids[j], o.timer_out, o.slot_ms, store_ts,
                                 store_ts - o.due, o.roll, o.roll_times)
            j += 1


class _Output(NamedTuple):
    """A message the dequeue puts: its output, and what its event says."""

    new: NewMessage
    uniq: str | None
    roll: bool
    roll_times: int
    slot_ms: int | None
    timer_out: int | None
    due: int
