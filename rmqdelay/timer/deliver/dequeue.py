"""The timer engine's dequeue (``TimerDequeueGetService`` / ``TimerDequeuePutMessageService``):
while the read clock is behind the write clock, the slot at the read clock: its delete units
first (their TIMER_DEL_UNIQKEY), then every other unit in append order: cancelled when
``realTopic+uniqKey`` is among the deletes, re-put to rmq_sys_wheel_timer with
TIMER_ROLL_TIMES + 1 when it is a ROLL unit, delivered to REAL_TOPIC / REAL_QID otherwise
(convert.py). Empty slots are jumped over, not walked.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
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
from rmqdelay.store.writer import PUT_BATCH_MIN, NewMessage

from .columns import TimerColumns
from .enqueue import QueueEntry

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
        rows = self._slot_rows
        for unit in normals:
            row = rows.get(unit.offsetPy) if rows else None
            if row is not None and not unit.magic & TIMER_MAGIC_ROLL and unit.currWriteTime != -1 \
                    and not self._replaying and self._slot_columns.sizes[row] == unit.sizePy:
                self._dequeue_ready(unit, row, t, delete_keys, outcomes)
                continue
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

    def _dequeue_ready(self, unit: TimerLogUnit, row: int, t: int, delete_keys: set[str], outcomes: list) -> None:
        """``_dequeue_slot`` of a ready record's unit, not a roll (columns.py)."""
        cols = self._slot_columns
        uniq = cols.uniq_keys()[row]
        real_topic = cols.shape(row).topic
        if uniq is not None and delete_keys and f"{real_topic}+{uniq}" in delete_keys:
            self.cancelled += 1
            outcomes.append(TimerCancelled(uniq, real_topic, t))
            return
        self._count(real_topic, -1)  # a ready record has no TIMER_ENQUEUE_MS: it was enqueued
        outcomes.append(self._column_output(cols, row, QueueEntry(unit.offsetPy, unit.sizePy), unit.currWriteTime, t))

    def _column_output(self, cols: TimerColumns, row: int, entry: QueueEntry, enqueue_time: int,
                       slot_ms: int | None) -> _Columned:
        """``_output`` of a ready record (nothing to replay, no run filter, a writer)."""
        timer_out = cols.out_ms[row]
        due = (slot_ms if slot_ms is not None else timer_out) + self.precision
        return _Columned(cols, row, entry, enqueue_time, self.clock(), cols.uniq_keys()[row], slot_ms, timer_out, due)

    def _column_run(self, cols: TimerColumns, start: int, stop: int) -> _ColumnRun:
        """Ready rows ``start`` to ``stop`` of a queue batch, already due: put at once."""
        return _ColumnRun(cols, start, stop, self.clock())

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
        """The outputs among ``outcomes`` put with the one writer, in order, then every event
        in order. A run of outputs of ready records (``_Columned`` of one batch's columns, or
        a ``_ColumnRun``) is put as columns (put_stored); any other output, and a run of ready
        ones too short to repay a batch's fixed cost, is made the reference way and put with
        put_all (put_batch, or put() for a few). The bytes are put()'s either way."""
        outcomes = self._short_runs_made(outcomes)
        placed: list[tuple] = []  # what each output became: topic, queue id and offset, offset, id, time
        results = []  # put_all's result for each output made the reference way
        for run in _runs(outcomes):
            self._put_run(run, placed, results)
        j = k = 0
        lateness = self.lateness
        for o in outcomes:
            kind = type(o)
            if kind is _ColumnRun:
                uniqs = o.cols.uniq_keys()
                outs = o.cols.out_ms
                due = self.precision
                for row in range(o.start, o.stop):
                    topic, queue_id, queue_offset, cl_offset, msg_id, store_ts = placed[j]
                    late = store_ts - outs[row] - due
                    lateness.append(late)
                    yield TimerDelivered(uniqs[row], topic, queue_id, queue_offset, cl_offset, msg_id, outs[row], None,
                                         store_ts, late, False, 0)
                    j += 1
                self.delivered += o.stop - o.start
                if len(lateness) > 1 << 17:
                    del lateness[:1 << 16]
                continue
            if kind is not _Output and kind is not _Columned:
                if o is not None:
                    yield o
                continue
            topic, queue_id, queue_offset, cl_offset, msg_id, store_ts = placed[j]
            roll = kind is _Output and o.roll
            if roll:
                self.rolled += 1
                self._remember(o.new, results[k]())
                self._reput_slots[cl_offset] = o.slot_ms
            else:
                self.delivered += 1
                lateness.append(store_ts - o.due)
                if len(lateness) > 1 << 17:
                    del lateness[:1 << 16]
            k += kind is _Output
            yield TimerDelivered(o.uniq, topic, queue_id, queue_offset, cl_offset, msg_id, o.timer_out, o.slot_ms,
                                 store_ts, store_ts - o.due, roll, o.roll_times if kind is _Output else 0)
            j += 1

    def _short_runs_made(self, outcomes: list) -> list:
        """``outcomes`` with each run of fewer than PUT_BATCH_MIN ready outputs of one batch's
        columns made the reference way (``_output`` of the decoded record)."""
        short = [run for run in _runs(outcomes) if type(run[0]) is _Columned and len(run) < PUT_BATCH_MIN]
        if not short:
            return outcomes
        made = {id(c): self._output(self._message(c.entry.offsetPy, c.entry.size), c.enqueue_time, False, c.slot_ms,
                                    c.timer_out) for run in short for c in run}
        return [made.get(id(o), o) for o in outcomes]

    def _put_run(self, run: list, placed: list, results: list) -> None:
        """One run of outputs (``_runs``) put; what each became joins ``placed`` (and for
        outputs made the reference way, their results)."""
        first = run[0]
        if type(first) is _Output:
            puts = self.writer.put_all([o.new for o in run])
            placed.extend(zip(puts.topics, puts.queue_ids, puts.queue_offsets, puts.commit_log_offsets, puts.msg_ids,
                              puts.store_timestamps))
            results.extend(partial(puts.result, j) for j in range(len(run)))
            return
        if type(first) is _ColumnRun:
            rows = list(range(first.start, first.stop))
            copies = first.cols.copies(rows, [str(TIMER_NEVER_ENQUEUED)] * len(rows), [str(first.now)] * len(rows))
        else:
            copies = first.cols.copies([o.row for o in run], [str(o.enqueue_time) for o in run],
                                       [str(o.now) for o in run])
        puts = self.writer.put_stored(copies)
        placed.extend(zip(puts.topics, puts.queue_ids, puts.queue_offsets.tolist(), puts.commit_log_offsets.tolist(),
                          puts.msg_ids(), puts.store_timestamps.tolist()))


def _runs(outcomes: list) -> list[list]:
    """The outputs among ``outcomes`` in runs that are put together, in order: consecutive
    ``_Output``s; consecutive ``_Columned`` of one batch's columns; a ``_ColumnRun`` alone."""
    runs: list[list] = []
    for o in outcomes:
        kind = type(o)
        if kind is not _Output and kind is not _Columned and kind is not _ColumnRun:
            continue
        last = runs[-1][0] if runs else None
        if kind is _ColumnRun or type(last) is not kind or (kind is _Columned and last.cols is not o.cols):
            runs.append([o])
        else:
            runs[-1].append(o)
    return runs


class _Columned(NamedTuple):
    """A ready record the dequeue (or the enqueue, already due) puts, as a row of columns."""

    cols: TimerColumns
    row: int
    entry: QueueEntry
    enqueue_time: int
    now: int  # its TIMER_DEQUEUE_MS
    uniq: str | None
    slot_ms: int | None
    timer_out: int
    due: int


class _ColumnRun(NamedTuple):
    """Ready records of a queue batch, rows ``start`` to ``stop``, already due when enqueued:
    put at once (TIMER_ENQUEUE_MS Long.MAX_VALUE, no slot), TIMER_DEQUEUE_MS ``now``."""

    cols: TimerColumns
    start: int
    stop: int
    now: int


class _Output(NamedTuple):
    """A message the dequeue puts: its output, and what its event says."""

    new: NewMessage
    uniq: str | None
    roll: bool
    roll_times: int
    slot_ms: int | None
    timer_out: int | None
    due: int
