"""Publishing: what makes a run's work durable and what a broker resumes from.

``publish`` runs after the writer made every output durable: the timer log and the wheel
(fsync), then config/rmqdelay.timer.json and config/timercheck together, then the metrics.

What the broker resumes from (TimerMessageStore.recover):
- ``lastReadTimeMs`` is never published beyond the wall clock (a broker would deliver nothing
  new until its clock got there). Slots read ahead of it (``--now`` in the future) are
  neutralised: each of their units becomes a DELETE unit (its magic rewritten in place,
  4 bytes) whose message names nothing to cancel, so the broker reading the slot puts nothing,
  and the slot's num is set as the broker counts it (delete units -1).
- recovery resumes the queue after the message of the timer log's last unit (then the
  checkpoint's offset, whichever is smaller): when the last entries took the immediate path,
  a DELETE unit pointing at the last entry's message is appended in a slot already read, so
  the broker resumes after it instead of putting those messages again.
- a store down longer than the wheel spans: the broker would restart reading at now - 7 days
  + 60 s and never deliver the older slots; the engine reads them all and says how many.
"""

from __future__ import annotations

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message, body_crc
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DEFAULT,
    TIMER_MAGIC_DELETE,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.properties import parse_properties
from rmqdelay.formats.timercheck import TimerCheckpoint, build_timer_checkpoint
from rmqdelay.formats.timerlog import UNIT_SIZE, TimerLogUnit
from rmqdelay.formats.timermetrics import format_timer_metrics
from rmqdelay.store.durable import FileUpdate, publish_files
from rmqdelay.store.writer import NewMessage

from .enqueue import QueueEntry
from .events import TimerPersisted
from ..runstate import TimerRunState, state_bytes, timer_state_path

MAGIC_NEUTRAL = TIMER_MAGIC_DEFAULT | TIMER_MAGIC_DELETE  # a delete unit: the dequeue puts nothing for it


class Publish:
    """TimerEngine's publishing, the neutralising of slots read ahead of the wall clock and the
    broker's resume point. A part of TimerEngine (whose state it works on), not used alone."""

    def publish(self, commit_log_offset: int) -> TimerPersisted | None:
        """After the writer made every output durable: neutralise the slots read ahead of the
        wall clock, mark where the broker resumes the queue, then the timer log and the wheel
        (fsync), then the checkpoint with the state file, then the metrics."""
        if self.dry_run or self.writer is None or self._replaying:
            # Until the replay has met every slot the killed run read, the published state
            # stays where that run left it: a stop now replays the same outputs again.
            return None
        read_pub = max(self.published.lastReadTimeMs, min(self.read_ms, self._floor(self.wall_clock())))
        self.log.sync()
        self.wheel.sync()
        self._publish_state(commit_log_offset, read_pub)
        neutralised = 0
        if self.queue_offset >= self.cq_end:
            # Both put records into rmq_sys_wheel_timer: only once every entry before is
            # enqueued; and only after the state above (which says how far this run read),
            # so that a stop in between finishes them instead of reading those slots again.
            end = self.log.end
            neutralised = self._neutralise(read_pub)
            self._mark_resume_point(read_pub)
            if neutralised or self.log.end != end or self.wheel.dirty:
                commit_log_offset = self.writer.end_offset
                self.log.sync()
                self.wheel.sync()
                self._publish_state(commit_log_offset, read_pub)
        if self._metric_steps:
            m = self._metrics
            dv = m.dataVersion
            m.dataVersion = DataVersion(dv.counter + self._metric_steps, dv.stateVersion, self.wall_clock())
            self._metric_steps = 0
            publish_files([FileUpdate(self.ts.metrics_path, format_timer_metrics(m).encode("utf-8"),
                                      keep_bak=True)])
        return TimerPersisted(commit_log_offset, read_pub, self.queue_offset, self.log.end, neutralised)

    def _publish_state(self, commit_log_offset: int, read_pub: int) -> None:
        """config/rmqdelay.timer.json, then config/timercheck (both durable before either is
        renamed): the checkpoint names only what is on disk."""
        previous = self.published
        cp = TimerCheckpoint(read_pub, self.log.end, self.queue_offset, self.queue_offset, previous.dataVersion)
        state = TimerRunState(commit_log_offset, self.log.end, cp.as_json(), previous.as_json(), self.read_ms)
        publish_files([FileUpdate(timer_state_path(self.path), state_bytes(state)),
                       FileUpdate(self.ts.checkpoint_path, build_timer_checkpoint(cp), keep_bak=True)])
        self.published = cp

    def _is_marker_record(self, unit: TimerLogUnit, slot_ms: int) -> bool:
        """A delete unit whose record is a cancellation due in its own slot: what the
        broker reads without putting anything (a real cancellation, or one of ours)."""
        if unit.magic != MAGIC_NEUTRAL:
            return False
        try:
            msg = self._message(unit.offsetPy, unit.sizePy)
        except StoreError:
            return False
        props = msg.properties
        return (PROPERTY_TIMER_DEL_UNIQKEY in props
                and java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, "")) == slot_ms)

    def _neutralise(self, read_pub: int) -> int:
        """Slots this run read at or after ``read_pub`` (ahead of the wall clock): a broker
        resuming at ``read_pub`` reads them again. Every unit in them becomes a delete unit
        pointing at a cancellation record due in that slot (one per slot, naming no message),
        as a cancellation's own unit is: the broker puts nothing for it, and the store reads
        as consistent (unit in its record's slot, delete flag as the record says)."""
        ahead = sorted({t for t in self._processed if t >= read_pub})
        self._processed = []
        todo: list[tuple[int, list[TimerLogUnit], TimerLogUnit | None]] = []
        for t in ahead:
            units = self._chain(t)
            neutral = [u for u in units if self._is_marker_record(u, t)]
            rest = [u for u in units if not self._is_marker_record(u, t)]
            if rest:
                todo.append((t, rest, neutral[0] if neutral else None))
            else:
                # Neutralised by a run killed before its wheel was written: the count too.
                slot = self.wheel.get(t)
                if slot is not None and slot.num != -len(units):
                    self.wheel.put(t, slot.firstPos, slot.lastPos, -len(units), slot.magic)
        if not todo:
            return 0
        targets: dict[int, tuple[int, int, int]] = {}
        for t, _, existing in todo:
            if existing is not None:
                targets[t] = (existing.offsetPy, existing.sizePy, existing.hashCodeOfRealTopic)
            else:
                new = marker_message(t, "delivered-ahead", self.clock())
                self._remember(new, self.writer.put(new))
                result = self._last_put
                targets[t] = (result.commitLogOffset, result.storeSize, java_string_hash(RMQ_SYS_WHEEL_TIMER_TOPIC))
        self.writer.sync_to_disk()  # the records the units will point at, durable first
        self._consume_own_entries()
        count = 0
        for t, rest, _ in todo:
            offset_py, size_py, topic_hash = targets[t]
            for unit in rest:
                self.log.set_target(unit.offset, offset_py, size_py, topic_hash)
                self.log.set_magic(unit.offset, MAGIC_NEUTRAL)
                count += 1
            slot = self.wheel.get(t)
            total = len(self._chain(t))
            self.wheel.put(t, slot.firstPos, slot.lastPos, -total, slot.magic)
        return count

    def _remember(self, new, result) -> None:
        """A record this run put into rmq_sys_wheel_timer: its queue entry and its content."""
        self._appended[result.queueOffset] = QueueEntry(result.commitLogOffset, result.storeSize)
        self._appended_end = max(self._appended_end, result.queueOffset + 1)
        self._messages[result.commitLogOffset] = as_message(new, result)
        self._last_put = result

    def _consume_own_entries(self) -> None:
        """The marker records just put are rmq_sys_wheel_timer entries due in a slot already
        read: the enqueue drops them (a cancellation past its time). The queue offset moves
        past them without a unit, as the broker's would."""
        self.queue_offset = self.cq_end

    def _mark_resume_point(self, read_pub: int) -> None:
        """Make the broker's recovery resume the queue at ``queue_offset``: it resumes after
        the message of the timer log's last unit (reviseQueueOffset), so that must be the last
        entry. When it is not (the last entries took the immediate path, or were markers), a
        marker cancellation due in the slot before ``read_pub`` is put, with its delete unit in
        that slot: read already, never again."""
        cq_min = self._cq.min_offset if self._cq is not None else 0
        if self.queue_offset <= cq_min:
            return
        last_entry = self._entry(self.queue_offset - 1)
        last = self._last_unit()
        if last is not None and last.offsetPy == last_entry.offsetPy:
            return
        slot_ms = read_pub - self.precision
        if last is not None and last.slotTimeMs == slot_ms and last.magic == MAGIC_NEUTRAL \
                and last.prevPos == -1 and self.wheel.get(slot_ms) is None:
            # The last unit is an earlier run's marker in this very slot (a run published in
            # the same wall second), left out of the wheel while its index held a later slot
            # not read: it goes in first (when it may now), so the new marker chains to it.
            self._adopt(last)
        new = marker_message(slot_ms, "resume-point", self.clock())
        result = self.writer.put(new)
        self._remember(new, result)
        self.writer.sync_to_disk()
        self._append_unit(MAGIC_NEUTRAL, slot_ms, slot_ms, result.commitLogOffset, result.storeSize,
                          java_string_hash(RMQ_SYS_WHEEL_TIMER_TOPIC), read_slot=True)
        self.queue_offset = result.queueOffset + 1

    def _last_unit(self) -> TimerLogUnit | None:
        end = self.log.end
        size = self.log.file_size
        if end <= self.ts.log.min_offset:
            return None
        pos = end - UNIT_SIZE
        if end % size == 0:
            # a full file: its last unit sits before its BLANK
            start = end - size
            pos = start + ((size - 16) // UNIT_SIZE - 1) * UNIT_SIZE
        try:
            return self.log.read(pos)
        except StoreError:
            return None


def marker_message(slot_ms: int, why: str, now_ms: int):
    """A cancellation due in ``slot_ms`` that names no message (REAL_TOPIC is the timer's own
    topic, which nothing is delivered to): what rmqdelay points units at that the broker
    must read without putting anything. Built as the recall's message is (body "0",
    _RECALL_TAG_), with RMQDELAY saying why it is there."""
    uniq = f"524D5144454C4159{slot_ms:016X}"  # "RMQDELAY" + the slot: 32 hex digits like a key
    props = {PROPERTY_TIMER_DEL_UNIQKEY: f"{RMQ_SYS_WHEEL_TIMER_TOPIC}+{uniq}",
             PROPERTY_REAL_TOPIC: RMQ_SYS_WHEEL_TIMER_TOPIC, "TIMER_DELIVER_MS": str(slot_ms + 1),
             PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, "TAGS": "_RECALL_TAG_", PROPERTY_TIMER_OUT_MS: str(slot_ms),
             "REAL_QID": "0", "RMQDELAY": why}
    return NewMessage(RMQ_SYS_WHEEL_TIMER_TOPIC, 0, b"0", props, bornTimestamp=now_ms)


def as_message(new, result) -> Message:
    return Message(result.storeSize, 0, body_crc(new.body), result.queueId, new.flag, result.queueOffset,
                   result.commitLogOffset, new.sysFlag, new.bornTimestamp, new.bornHost[0], new.bornHost[1],
                   result.storeTimestamp, new.storeHost[0], new.storeHost[1], new.reconsumeTimes, 0, new.body,
                   result.topic, result.propertiesRaw, parse_properties(result.propertiesRaw))
