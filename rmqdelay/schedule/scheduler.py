"""The level-based scheduler: what the broker's ScheduleMessageService does, offline.

Per level L (queue L-1 of SCHEDULE_TOPIC_XXXX), from its offset: read a batch of units,
take the leading units that are due (deliver time = tagsCode, corrected as the broker's
correctDeliverTimestamp does), restore each message with ``message_timeup`` (``restore_unit``) and append it
with the one writer. Deliver times never decrease within a level, so the first unit that
is not due ends the level's batch, and the engine sleeps exactly until the earliest due
unit of all levels - no polling interval. On a 5.x store the same loop steps the timer
engine (rmqdelay.timer.deliver) between the levels' batches.

Exactly once, even under kill -9: where each level resumes is replay.py's. The engine never
prints: ``Scheduler.events()`` yields what happens (events.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError, StoreReadError, UsageError
from rmqdelay.formats.constants import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, RMQ_SYS_WHEEL_TIMER_TOPIC
from rmqdelay.formats.consumequeue import CQ_EXT_MAX_ADDR
from rmqdelay.schedule.events import (
    Delivered,
    Held,
    Notice,
    Persisted,
    QueueCreated,
    Replayed,
    Skipped,
    Sleeping,
    Stopped,
)
from rmqdelay.schedule.levelstate import LevelState
from rmqdelay.schedule.offsets import OffsetPublisher
from rmqdelay.schedule.redelivery import restore_unit
from rmqdelay.schedule.restore import RestoredColumns, restore_columns, restore_one_by_one, restore_units
from rmqdelay.schedule.replay import exact_offsets
from rmqdelay.runfilter import RunFilter
from rmqdelay.schedule.status import corrected_deliver_times
from rmqdelay.schedule.waker import Waker
from rmqdelay.store import Store
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.kind import refuse_half_repaired, timer_files_present
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.writeformat import detect_write_format
from rmqdelay.store.writer import PUT_BATCH_MIN, StoreWriter
from rmqdelay.timer.deliver import TimerEngine
from rmqdelay.timer.deliver.engine import reached
from rmqdelay.timer.deliver.events import (
    TimerCancelled,
    TimerDelivered,
    TimerHeld,
    TimerNotice,
    TimerPersisted,
    TimerSkipped,
)
from rmqdelay.timer.store import TIMER_QUEUE_ID, TimerStore

MODES = ("forever", "once", "until-empty")
DELAY_OFFSET_UPDATE_VERSION_STEP = 200  # BrokerConfig.delayOffsetUpdateVersionStep

# What Scheduler.events() yields: the levels' events and, on a 5.x store, the timer engine's.
Event = (Delivered | Held | Skipped | QueueCreated | Notice | Replayed | Persisted | Sleeping | Stopped | TimerDelivered
         | TimerCancelled | TimerSkipped | TimerHeld | TimerNotice | TimerPersisted)


WAKE_LEAD_MAX_S = 0.01  # the longest a run waits running for a delivery to come due


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the engine ----------------------------------------------------------------------------
class Scheduler:
    def __init__(self, store_path: Path | str, *, delay_levels: dict[int, int] | None = None,
                 levels: list[int] | None = None, now_ms: int | None = None, mode: str = "forever",
                 dry_run: bool = False, flush_interval_ms: int = 10_000, batch_size: int = 1024,
                 sync: bool = True, clock: Callable[[], int] | None = None,
                 index: IndexSettings | None = None, broker_config: Path | None = None,
                 run_filter: RunFilter | None = None, batched: bool = True) -> None:
        """``batch_size``: the units of a level read at a time. ``batched`` False: every due
        message restored and put one at a time, on the levels and the timer wheel alike (the
        reference the batches are held to: the same bytes, the same events)."""
        if mode not in MODES:
            raise UsageError(f"mode: one of {', '.join(MODES)}, found {mode!r}")
        self.store_path = Path(store_path)
        self.delay_levels = delay_levels or parse_delay_levels()
        for level in levels or []:
            if level not in self.delay_levels:
                raise UsageError(f"--levels: level {level} is not one of the {len(self.delay_levels)} delay levels")
        self.levels = sorted(set(levels)) if levels else sorted(self.delay_levels)
        # A fixed instant (--now) for replays and tests; store times use the same clock.
        self.fixed_clock = now_ms is not None
        self.clock = clock or ((lambda: now_ms) if now_ms is not None else wall_clock_ms)
        self.mode = mode
        self.dry_run = dry_run
        self.flush_interval_ms = flush_interval_ms
        self.batch_size = batch_size
        self.batched = batched
        self.sync = sync
        self.index = index
        self.broker_config = broker_config
        self.broker5x = False  # set from the store (and broker_config) on start
        self.timer: TimerEngine | None = None  # the timer wheel of a 5.x store
        self.states: dict[int, LevelState] = {}
        self.offset_table: dict[int, int] = {}
        self.delivered = 0
        self.skipped = 0
        self._stopping = False
        self._waker = Waker()
        self.filter = run_filter or RunFilter()
        self.filter.sleep = self._waker.wait
        self._publish_s = 0.0  # how long the last publishes took (their fsyncs), decaying
        self._wake_lead_s = 0.001  # how early to wake for a delivery (see _sleep_until_due)
        self._overshoots: list[int] = []  # ns the recent early wake-ups came late
        self._checked: tuple | None = None  # the timer files as the preflight read them (timer.deliver.engine.reached)

    def stop(self) -> None:
        """Ask the engine to stop after the unit in hand; safe from a signal handler."""
        self._stopping = True
        self._waker.wake()

    # -- main loop -------------------------------------------------------------------------
    def events(self) -> Iterator[Event]:
        try:
            if self.dry_run:
                yield from self._dry_run()
            else:
                yield from self._run()
        finally:
            self._waker.close()
            if self._checked is not None:  # the run stopped before the timer engine took it
                self._checked[3].close()
                self._checked = None

    def _setup(self, store: Store) -> Iterator[Event]:
        recovery = exact_offsets(store, self.delay_levels, broker5x=self.broker5x)
        yield from recovery.notices
        if recovery.replayed is not None and recovery.replayed.perLevel:
            yield recovery.replayed
        self.offset_table = recovery.table
        if self.broker5x and recovery.dataVersion is not None:
            # A 5.x ScheduleMessageService stores every level once it ran (updateOffset is
            # called for a level whose head is not due too), at the offset it resumes from.
            for level in self.delay_levels:
                self.offset_table.setdefault(level, recovery.offsets[level])
        for level in self.levels:
            cq = store.schedule_queue(level)
            self.states[level] = LevelState(level, self.delay_levels[level], recovery.offsets[level],
                                            cq.min_offset, cq.max_offset)
        return recovery

    def _run(self) -> Iterator[Event]:
        # Each pass writes its deliveries to the files at once (page cache, visible to any
        # reader); they are fsynced right before offsets are published, which is all that
        # exactly-once needs: deliveries lost with unpublished offsets are delivered again.
        # An error anywhere leaves the block by an exception: the writer abandons what is
        # pending and nothing is published (the next run replays what was written).
        refuse_half_repaired(self.store_path)  # before anything is written
        with StoreWriter(self.store_path, delay_levels=self.delay_levels, clock=self.clock,
                         sync=False, index=self.index, broker_config=self.broker_config,
                         preflight=self._preflight) as writer:
            self.broker5x = writer.write_format.is5x
            fmt = writer.write_format
            if fmt.is5x or fmt.propCrc:  # a 4.x store is written as before: nothing to say
                yield Notice("writeFormat", "writing as the store's broker does: " + "; ".join(fmt.notes))
            for note in writer.recovery.notices:
                yield Notice("recovery", note)
            if writer.recovery.indexed:
                yield Notice("index", f"indexed {writer.recovery.indexed} records the index/ files lacked")
            store = Store(self.store_path)
            try:
                recovery = yield from self._setup(store)
                yield from self._open_timer(store, writer)
                publisher = OffsetPublisher(self.store_path, recovery.published, recovery.dataVersion,
                                            self.delay_levels,
                                            DELAY_OFFSET_UPDATE_VERSION_STEP if self.broker5x else None)
                # Publish at once: from here on every delivery is after a known, exact point.
                yield from self._publish(writer, publisher)
                known_queues = _known_queues(store)
                reason = yield from self._loop(store, writer, publisher, known_queues)
                yield from self._publish(writer, publisher)
                yield self._stopped(reason)
            finally:
                if self.timer is not None:
                    self.timer.close()
                store.close()

    def _preflight(self, store: Store, _fmt) -> None:
        """The run's refusals that read nothing the writer's recovery changes, on the store as it
        is before recovery changes a byte (a refusal after it would leave its changes): the
        timer wheel reaches every pending unit of the timer log."""
        if not timer_files_present(store.path):
            return
        ts = TimerStore(store, self.broker_config)
        try:
            precision = ts.config.precisionMs
            self._checked = reached(ts, self.clock() // precision * precision)  # the timer engine starts from it
        finally:
            ts.close()

    def _open_timer(self, store: Store, writer: StoreWriter | None) -> Iterator[Event]:
        """The timer engine, when the store has a timer store (or timer messages waiting)."""
        if not (timer_files_present(store.path) or store.has_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, TIMER_QUEUE_ID)):
            return
        checked, self._checked = self._checked, None
        self.timer = TimerEngine(store, writer, clock=self.clock, wall_clock=wall_clock_ms,
                                 broker_config=self.broker_config, dry_run=self.dry_run, gate=self.filter,
                                 batch=self.batch_size if self.batched else 1, checked=checked)
        yield from self.timer.setup()

    def _stopped(self, reason: str) -> Stopped:
        t = self.timer
        if t is None:
            return Stopped(reason, self.delivered, self.skipped, dict(self.offset_table))
        return Stopped(reason, self.delivered, self.skipped, dict(self.offset_table), t.delivered, t.rolled,
                       t.cancelled, t.skipped)

    @property
    def problems(self) -> int:
        """Messages skipped (delay levels and timer): what makes `run` exit 1."""
        return self.skipped + (self.timer.skipped if self.timer is not None else 0)

    def _publish(self, writer: StoreWriter, publisher: OffsetPublisher) -> Iterator[Event]:
        """Write, flush, then publish: the offsets name only deliveries already on disk."""
        if self.sync:
            writer.sync_to_disk()
        else:
            writer.flush()
        publisher.publish(writer.end_offset, self.offset_table, self.delivered + self.skipped)
        yield Persisted(writer.end_offset, dict(self.offset_table))
        if self.timer is not None:
            persisted = self.timer.publish(writer.end_offset)
            if persisted is not None:
                yield persisted

    def _loop(self, store: Store, writer: StoreWriter, publisher: OffsetPublisher,
              known_queues: set[tuple[str, int]]) -> Iterator[Event]:
        last_publish = time.monotonic()
        dirty = False
        while not self._stopping:
            more_now = False
            for level in self.levels:
                if self._stopping:
                    break
                state = self.states[level]
                n, more = yield from self._deliver_batch(store, state, writer, known_queues)
                dirty = dirty or n > 0
                more_now = more_now or more
            if self.timer is not None and not self._stopping:
                n = yield from self.timer.step()
                dirty = dirty or n > 0
            writer.flush()
            deferred = False
            since_ms = (time.monotonic() - last_publish) * 1000
            if dirty and since_ms >= self.flush_interval_ms:
                # The fsyncs of a publish take a while: not when a delivery comes due before
                # they would be done (it would wait for them); right after that delivery
                # (never more than one more interval late).
                deferred = not (self._stopping or more_now or since_ms >= 2 * self.flush_interval_ms) \
                    and self._due_within(2 * self._publish_s + 0.005)
                if not deferred:
                    started = time.monotonic()
                    yield from self._publish(writer, publisher)
                    last_publish = time.monotonic()
                    self._publish_s = max(last_publish - started, 0.8 * self._publish_s)
                    dirty = False
            if self._stopping:
                break
            if more_now:
                continue
            drained = all(s.pending == 0 for s in self.states.values())
            if self.timer is not None:
                drained = drained and self.timer.drained
            if self.mode == "once":
                return "nothing more is due"
            if self._all_held():
                return "held back by the run's filters: " + "; ".join(self._held_reasons())
            if self.mode == "until-empty" and drained:
                return "every level and the timer wheel are drained" if self.timer else "every level is drained"
            next_due = self._next_due()
            if self.fixed_clock and self.mode == "until-empty":
                # A fixed clock never reaches the next deliver time.
                return "nothing more is due at the fixed time"
            wait_s = None
            if next_due is not None and not self.fixed_clock:
                wait_s = self._seconds_until(next_due)
            if dirty and not deferred:
                remaining = self.flush_interval_ms / 1000 - (time.monotonic() - last_publish)
                wait_s = remaining if wait_s is None else min(wait_s, remaining)
            yield Sleeping(next_due)
            if wait_s is not None and next_due is not None and self.clock is wall_clock_ms \
                    and wait_s >= self._seconds_until(next_due):
                self._sleep_until_due(next_due)
            else:
                self._waker.wait(None if wait_s is None else max(wait_s, 0.0))
        return "stopped by a signal"

    def _sleep_until_due(self, due_ms: int) -> None:
        """Sleep until a delivery is due, on the wall clock. A process woken from sleep on a
        busy machine runs a few ms late, and so would the delivery: wake early by what the
        recent wake-ups overshot, read what the next timer slot holds meanwhile, and wait
        out the rest running (at most WAKE_LEAD_MAX_S)."""
        due_ns = due_ms * 1_000_000
        lead_ns = int(self._wake_lead_s * 1e9)
        planned = due_ns - lead_ns
        if self._waker.wait(max((planned - time.time_ns()) / 1e9, 0.0)):
            return  # stopped
        now = time.time_ns()
        if now >= planned:
            overshoots = self._overshoots
            overshoots.append(now - planned)
            if len(overshoots) > 32:
                del overshoots[0]
            recent = sorted(overshoots)
            self._wake_lead_s = min(WAKE_LEAD_MAX_S, recent[int(0.9 * (len(recent) - 1))] / 1e9 + 0.0005)
        if self.timer is not None and now < due_ns:
            self.timer.warm()
        # Bounded on the monotonic clock too: a wall clock stepped back never makes it a spin.
        limit = time.monotonic() + 2 * WAKE_LEAD_MAX_S
        while not self._stopping and time.time_ns() < due_ns and time.monotonic() < limit:
            pass

    def _all_held(self) -> bool:
        """Every level and the wheel drained or stopped by a filter, one of them by a filter:
        the run has nothing left it may deliver."""
        levels = [s.pending == 0 or s.held is not None for s in self.states.values()]
        timer = self.timer is None or self.timer.drained or self.timer.held is not None
        held = any(s.held for s in self.states.values()) or (self.timer is not None and self.timer.held is not None)
        return held and all(levels) and timer

    def _held_reasons(self) -> list[str]:
        out = [f"level {s.level} at offset {s.offset} ({s.held})" for s in self.states.values() if s.held]
        if self.timer is not None and self.timer.held is not None:
            out.append(f"timer wheel at {self.timer.held}")
        return out

    def _next_due(self) -> int | None:
        dues = [s.nextDueTimestamp for s in self.states.values() if s.nextDueTimestamp is not None]
        if self.timer is not None and self.timer.next_due() is not None:
            dues.append(self.timer.next_due())
        return min(dues, default=None)

    def _due_within(self, seconds: float) -> bool:
        """A delivery comes due within ``seconds`` (on a running clock)."""
        if self.fixed_clock:
            return False
        due = self._next_due()
        return due is not None and self._seconds_until(due) < seconds

    def _seconds_until(self, timestamp_ms: int) -> float:
        if self.clock is wall_clock_ms:
            # Wake at the exact millisecond boundary the unit becomes due, not a poll later.
            return (timestamp_ms * 1_000_000 - time.time_ns()) / 1e9
        return (timestamp_ms - self.clock()) / 1000

    def _due_prefix(self, store: Store, state: LevelState, units: np.ndarray) -> tuple[int, np.ndarray, int]:
        now = self.clock()
        tags = units["tagsCode"]
        times = corrected_deliver_times(tags, now, state.delayMs)
        ext = tags <= CQ_EXT_MAX_ADDR
        if ext.any():
            # No ConsumeQueueExt here: the broker's fallback is store time + the level's delay.
            for i in np.flatnonzero(ext):
                try:
                    msg = store.commitlog.read_message(int(units["commitLogOffset"][i]), int(units["size"][i]))
                    times[i] = msg.storeTimestamp + state.delayMs
                except StoreReadError:
                    raise
                except StoreError:
                    times[i] = now
        late = np.flatnonzero(times > now)
        n_due = int(late[0]) if len(late) else len(units)
        return n_due, times, now

    def _deliver_batch(self, store: Store, state: LevelState, writer: StoreWriter,
                       known_queues: set[tuple[str, int]]) -> Iterator[Event]:
        start = state.offset
        if start >= state.maxOffset or state.held is not None:
            state.nextDueTimestamp = None
            return 0, False
        units = store.schedule_queue(state.level).units(start, min(start + self.batch_size, state.maxOffset))
        n_due, times, _ = self._due_prefix(store, state, units)
        n_due = yield from self._filter_prefix(state, units, times, n_due, start)
        offsets_py = units["commitLogOffset"][:n_due].tolist()
        sizes_py = units["size"][:n_due].tolist()
        times_py = times[:n_due].tolist()
        lateness_batch: list[int] = []
        try:
            yield from self._deliver_units(store, state, writer, known_queues, start, offsets_py, sizes_py,
                                           times_py, lateness_batch)
        finally:
            state.record_lateness(lateness_batch)
        if (self._stopping or state.held is not None) and state.offset < start + n_due:
            state.nextDueTimestamp = None
            return state.offset - start, False
        if state.held is not None:
            state.nextDueTimestamp = None
            return n_due, False
        state.nextDueTimestamp = int(times[n_due]) if n_due < len(units) else None
        more = n_due == len(units) and state.offset < state.maxOffset
        return n_due, more

    def _deliver_units(self, store: Store, state: LevelState, writer: StoreWriter,
                       known_queues: set[tuple[str, int]], start: int, offsets_py: list[int],
                       sizes_py: list[int], times_py: list[int], lateness_batch: list[int]) -> Iterator[Event]:
        """The due units of one batch: every message restored first (up to the first one a run
        filter holds back), then the deliveries put with the one writer at once (put_all: the
        bytes put() writes; one at a time under --rate, each after its turn), then the events,
        in unit order. A stop asked for meanwhile takes effect after the batch: what is
        written is counted, so the offsets published name exactly the deliveries on disk."""
        gate = self.filter
        # As columns: a batch worth its fixed cost (a few due units, as a live run meets them,
        # go as put_all puts a few: one by one).
        if self.batched and len(offsets_py) >= PUT_BATCH_MIN and not gate.rate and not writer.write_format.propCrc:
            columns = restore_columns(store, offsets_py, sizes_py, broker5x=self.broker5x)
            if columns is not None:
                yield from self._deliver_columns(state, writer, known_queues, start, offsets_py, times_py,
                                                 lateness_batch, columns)
                return
        level = state.level
        table = self.offset_table
        restored = []
        held = None
        deliveries = 0  # of the batch so far: --limit counts them before they are written
        restore = restore_units if self.batched else restore_one_by_one
        for i, (uniq, new, reason) in enumerate(restore(store, offsets_py, sizes_py, broker5x=self.broker5x)):
            if reason is None:
                if gate.holds_any:
                    held = gate.held_by_time(times_py[i]) or gate.held_by_topic(new.topic) \
                        or gate.held_by_limit(deliveries + 1)
                    if held is not None:
                        held_topic = new.topic
                        break
                deliveries += 1
            restored.append((uniq, new, reason))
        step = 1 if self.filter.rate or not self.batched else max(len(restored), 1)
        for first in range(0, len(restored), step):
            part = restored[first:first + step]
            news = [new for _, new, reason in part if reason is None]
            if self.filter.rate and news and self.filter.pace():
                return  # stopped while waiting for its turn: not written
            puts = writer.put_all(news) if news else None
            j = 0
            for i, (uniq, new, reason) in enumerate(part, first):
                cl_offset = offsets_py[i]
                offset = start + i
                state.offset = table[level] = offset + 1
                if reason is not None:
                    state.skipped += 1
                    self.skipped += 1
                    yield Skipped(level, offset, cl_offset, reason)
                    continue
                key = (new.topic, new.queueId)
                if key not in known_queues:
                    known_queues.add(key)
                    yield QueueCreated(new.topic, new.queueId, level, offset)
                state.delivered += 1
                self.delivered += 1
                self.filter.delivered += 1
                store_ts = puts.store_timestamps[j]
                lateness = store_ts - times_py[i]
                lateness_batch.append(lateness)
                yield Delivered(level, offset, cl_offset, uniq, puts.topics[j],
                                puts.queue_ids[j], puts.queue_offsets[j], puts.commit_log_offsets[j],
                                puts.msg_ids[j],
                                times_py[i], store_ts, lateness)
                j += 1
        if held is not None:
            i = len(restored)
            state.held = held
            yield Held(level, start + i, offsets_py[i], held_topic, times_py[i], held)

    def _deliver_columns(self, state: LevelState, writer: StoreWriter, known_queues: set[tuple[str, int]],
                         start: int, offsets_py: list[int], times_py: list[int], lateness_batch: list[int],
                         columns: RestoredColumns) -> Iterator[Event]:
        """``_deliver_units`` of a batch restored as columns (no --rate): the deliveries up to
        the first one a run filter holds back put at once (put_stored), then the events in
        unit order."""
        level = state.level
        table = self.offset_table
        copies = columns.copies
        gate = self.filter
        held = None
        if gate.holds_any:
            j = 0
            for i, reason in enumerate(columns.reasons):
                if reason is None:
                    held = gate.held_by_time(times_py[i]) or gate.held_by_topic(copies.topics[j]) \
                        or gate.held_by_limit(j + 1)
                    if held is not None:
                        held_at, held_topic = i, copies.topics[j]
                        columns = RestoredColumns(columns.uniq_keys[:i], columns.reasons[:i], copies.head(j))
                        copies = columns.copies
                        break
                    j += 1
        if len(copies):
            puts = writer.put_stored(copies)
            topics, queue_ids, msg_ids = puts.topics, puts.queue_ids, puts.msg_ids()
            queue_offsets = puts.queue_offsets.tolist()
            cl_offsets = puts.commit_log_offsets.tolist()
            store_ts = puts.store_timestamps.tolist()
        j = 0
        for i, (uniq, reason) in enumerate(zip(columns.uniq_keys, columns.reasons)):
            offset = start + i
            state.offset = table[level] = offset + 1
            if reason is not None:
                state.skipped += 1
                self.skipped += 1
                yield Skipped(level, offset, offsets_py[i], reason)
                continue
            topic, queue_id = topics[j], queue_ids[j]
            if (topic, queue_id) not in known_queues:
                known_queues.add((topic, queue_id))
                yield QueueCreated(topic, queue_id, level, offset)
            state.delivered += 1
            self.delivered += 1
            self.filter.delivered += 1
            lateness = store_ts[j] - times_py[i]
            lateness_batch.append(lateness)
            yield Delivered(level, offset, offsets_py[i], uniq, topic, queue_id, queue_offsets[j], cl_offsets[j],
                            msg_ids[j], times_py[i], store_ts[j], lateness)
            j += 1
        if held is not None:
            state.held = held
            yield Held(level, start + held_at, offsets_py[held_at], held_topic, times_py[held_at], held)

    def _filter_prefix(self, state: LevelState, units: np.ndarray, times: np.ndarray, n_due: int,
                       start: int) -> Iterator[Event]:
        """--until: the level stops at its first unit due after the instant, due yet or not
        (deliver times never decrease within a level: nothing after it may go). Returns the
        units that may be delivered."""
        until = self.filter.until_ms
        if until is None:
            return n_due
        late = np.flatnonzero(times > until)
        first = int(late[0]) if len(late) else len(units)
        if first >= len(units) or first > n_due:
            return n_due  # nothing after --until in this batch (or not due yet: judged when it is)
        reason = self.filter.held_by_time(int(times[first]))
        state.held = reason
        yield Held(state.level, start + first, int(units["commitLogOffset"][first]), None, int(times[first]), reason)
        return first

    def _dry_run(self) -> Iterator[Event]:
        """What a --once run would deliver now; reads only, takes no lock."""
        with Store(self.store_path) as store:
            self.broker5x = detect_write_format(store, self.broker_config).is5x
            yield from self._setup(store)
            for level in self.levels:
                state = self.states[level]
                while state.offset < state.maxOffset and not self._stopping:
                    start = state.offset
                    units = store.schedule_queue(level).units(start, min(start + self.batch_size, state.maxOffset))
                    n_due, times, now = self._due_prefix(store, state, units)
                    n_due = yield from self._filter_prefix(state, units, times, n_due, start)
                    for i in range(n_due):
                        u = units[i]
                        cl_offset = int(u["commitLogOffset"])
                        msg, new, reason = restore_unit(store, cl_offset, int(u["size"]), broker5x=self.broker5x)
                        if reason is not None:
                            state.skipped += 1
                            self.skipped += 1
                            yield Skipped(level, start + i, cl_offset, reason)
                            continue
                        held = self.filter.holds(new.topic, int(times[i])) if self.filter.holds_any else None
                        if held is not None:
                            state.held = held
                            n_due = i
                            yield Held(level, start + i, cl_offset, new.topic, int(times[i]), held)
                            break
                        state.delivered += 1
                        self.delivered += 1
                        self.filter.delivered += 1
                        yield Delivered(level, start + i, cl_offset,
                                        msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                                        new.topic, new.queueId, None, None, None, int(times[i]), now,
                                        now - int(times[i]), dryRun=True)
                    state.offset = start + n_due
                    if state.held is not None:
                        break
                    if n_due < len(units):
                        state.nextDueTimestamp = int(times[n_due])
                        break
            yield from self._open_timer(store, None)
            if self.timer is not None:
                try:
                    yield from self.timer.step()
                finally:
                    self.timer.close()
            yield self._stopped("dry run")


def _known_queues(store) -> set[tuple[str, int]]:
    """The (topic, queue) pairs a delivery may go to without a word: a topic's queues as the
    store's config/topics.json gives them (the queue ids below its read and write queue
    numbers, what consumers and producers use), and for a topic it does not list, the queues
    it has on disk. A REAL_QID outside is delivered all the same, as the broker does, and said
    once per topic and queue."""
    from rmqdelay.store.brokerconfig import queue_nums, read_topic_table

    try:
        table = read_topic_table(store.path)
    except StoreError:
        table = {}  # an unreadable topics.json: the queues on disk say it
    known = {(t, q) for t, ids in store.topics().items() if t not in table for q in ids}
    for topic, entry in table.items():
        count = max(queue_nums(entry, "readQueueNums"), queue_nums(entry, "writeQueueNums"))
        known.update((topic, q) for q in range(min(count, 1 << 16)))
    return known
