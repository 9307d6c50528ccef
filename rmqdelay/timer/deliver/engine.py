"""The timer wheel of a 5.x store, delivered offline as TimerMessageStore (5.3.3) delivers it.

Enqueue (``TimerEnqueueGetService`` / ``TimerEnqueuePutService``): every rmq_sys_wheel_timer
queue 0 entry from masterTimerQueueOffset on. One whose TIMER_OUT_MS is behind the write clock
(the clock floored to the precision) is put at once with TIMER_ENQUEUE_MS = Long.MAX_VALUE and
no unit (a cancellation going that way is dropped, as doPut drops it); any other gets a timer
log unit in its slot, or - TIMER_OUT_MS a roll window or more ahead - a ROLL unit in the slot
a window (half a window when less than a third remains) ahead; prevPos = the slot's lastPos,
the slot's lastPos / firstPos / num updated, timermetrics counted.

Dequeue (``dequeue``): while the read clock is behind the write clock, the slot at the read
clock: its delete units first (their TIMER_DEL_UNIQKEY), then every other unit in append
order: cancelled when ``realTopic+uniqKey`` is among the deletes, re-put to
rmq_sys_wheel_timer with TIMER_ROLL_TIMES + 1 when it is a ROLL unit, delivered to
REAL_TOPIC / REAL_QID otherwise (convert.py). Empty slots are jumped over, not walked.

Exactly once, kill -9 included. Every output (delivery or re-put) goes through the one writer;
``publish`` makes the commit log durable, then the timer log and the wheel, then renames in
``config/rmqdelay.timer.json`` (where the timer state is exact: commit log offset X, timer log
end) and ``config/timercheck`` together. A run that finds its own state file replays: units past
the published timer log end are adopted (each by the queue entry after the published queue
offset whose record - offset and size - it points at; a unit is only ever appended for a record
already written to the commit log file), and the outputs in the commit log past X are matched, by everything
but the clock, against what the engine puts again - each found one is not put twice. Its
write clock is at least the newest TIMER_DEQUEUE_MS found there, so it reaches every slot the
killed run had read.

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

import heapq
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError, StoreReadError
from rmqdelay.formats.commitlog import Message, body_crc
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_BLANK_SLOTS,
    TIMER_MAGIC_DEFAULT,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
    TIMER_NEVER_ENQUEUED,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.properties import parse_properties
from rmqdelay.formats.timercheck import (
    TimerCheckpoint,
    build_timer_checkpoint,
    parse_timer_checkpoint,
)
from rmqdelay.formats.timerlog import (
    BLANK_MAGIC_CODE,
    UNIT_SIZE,
    TimerLogUnit,
    is_magic_ok,
)
from rmqdelay.formats.timermetrics import TimerMetrics, TopicCount, format_timer_metrics
from rmqdelay.store import Store
from rmqdelay.store.durable import FileUpdate, config_dir, publish_files
from rmqdelay.store.fileio import open_for_read, read_file
from rmqdelay.store.kind import timer_paths
from rmqdelay.store.writer import StoreWriter

from .convert import NotDeliverable, is_timer_output, output_key, timer_output
from .files import TimerLogFiles, WheelFile
from .store import TimerStore
from .stranded import scan_timer_log, stranded_error

TIMER_STATE_FILE = "rmqdelay.timer.json"
MAGIC_NEUTRAL = TIMER_MAGIC_DEFAULT | TIMER_MAGIC_DELETE  # a delete unit: the dequeue puts nothing for it
_CHAIN_LIMIT = 50_000_000


# -- events ----------------------------------------------------------------------------------
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


TimerEvent = TimerDelivered | TimerCancelled | TimerSkipped | TimerNotice | TimerPersisted


# -- the state file ----------------------------------------------------------------------------
def timer_state_path(store_path: Path) -> Path:
    return config_dir(store_path) / TIMER_STATE_FILE


@dataclass(slots=True)
class TimerRunState:
    commitLogOffset: int
    timerLogEnd: int
    timercheck: dict
    previousTimercheck: dict | None
    # the engine's read clock: every slot before it was read by rmqdelay (ahead of
    # timercheck's lastReadTimeMs when it read past the wall clock)
    readTimeMs: int | None = None


def read_timer_state(store_path: Path) -> TimerRunState | None:
    path = timer_state_path(store_path)
    data = read_file(path)
    if data is None:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
        read = doc.get("readTimeMs")
        return TimerRunState(int(doc["commitLogOffset"]), int(doc["timerLogEnd"]), dict(doc["timercheck"]),
                             doc.get("previousTimercheck"), None if read is None else int(read))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise StoreError(path, 0, 'the timer state rmqdelay writes ({"commitLogOffset", "timerLogEnd", '
                                  '"timercheck", ...}); remove it to start from config/timercheck as the broker '
                                  'would') from None


def _state_bytes(state: TimerRunState) -> bytes:
    return (json.dumps({"commitLogOffset": state.commitLogOffset, "timerLogEnd": state.timerLogEnd,
                        "readTimeMs": state.readTimeMs, "timercheck": state.timercheck,
                        "previousTimercheck": state.previousTimercheck}, indent=1) + "\n").encode()


@dataclass(slots=True)
class _Entry:
    offsetPy: int
    size: int


class TimerEngine:
    """One run over the timer store. ``clock`` gives the time outputs are stamped with and the
    write clock follows; ``wall_clock`` is the real time (what a broker would resume with)."""

    def __init__(self, store: Store, writer: StoreWriter | None, *, clock: Callable[[], int],
                 wall_clock: Callable[[], int], broker_config: Path | None = None, dry_run: bool = False) -> None:
        self.store = store
        self.path = store.path
        self.writer = writer
        self.clock = clock
        self.wall_clock = wall_clock
        self.dry_run = dry_run
        self.ts = TimerStore(store, broker_config)
        cfg = self.ts.config
        self.precision = cfg.precisionMs
        self.slots_total = cfg.slotsTotal
        self.delivered = 0
        self.rolled = 0
        self.cancelled = 0
        self.skipped = 0
        self.replayed = 0
        self.lateness: list[int] = []
        self._heap: list[int] = []
        self._processed: list[int] = []  # slot times read this run (ahead ones are neutralised on publish)
        self._appended: dict[int, _Entry] = {}  # rmq_sys_wheel_timer units this run put (rolls)
        self._messages: dict[int, Message] = {}  # what those records hold, by commit log offset
        self._replay: dict[tuple, list[int]] = {}  # outputs past the published state: key -> offsets
        # units past the published timer log end, by the commit log offset they point at
        self._leftovers: dict[int, deque[TimerLogUnit]] = {}
        self._adopted: set[int] = set()  # queue offsets whose leftover unit is in the wheel
        self._warm: dict[int, Message] = {}  # the next slot's messages, read before it is due
        self._metric_steps = 0
        self._write_floor = 0
        self._dry_units: dict[int, TimerLogUnit] = {}
        self._reput_slots: dict[int, int] = {}  # re-puts of this run: commit log offset -> roll slot read  # units a dry run would have appended
        self.horizon_units = 0

    # -- setup -------------------------------------------------------------------------------
    def setup(self) -> Iterator[TimerEvent]:
        paths = timer_paths(self.path)
        cp = self.ts.checkpoint()
        state = read_timer_state(self.path)
        cq = self.ts.timer_queue()
        self._cq = cq
        self._cq_max = cq.max_offset if cq is not None else 0
        cq_min = cq.min_offset if cq is not None else 0
        ours = state is not None and cp is not None and cp.as_json() in (state.timercheck, state.previousTimercheck)
        if ours and cp.as_json() == state.previousTimercheck:
            cp = _checkpoint_from_json(state.timercheck)  # renamed first: the newer of the two
        log_file_size = self.ts.log.file_size or self.ts.config.timerLogFileSize
        self.wheel = WheelFile(paths["timerwheel"], self.precision, self.ts.wheel.non_empty())
        self.ts.wheel.close()
        if cp is None:
            first = min((s.timeSlot * self.precision for s in self.wheel.slots.values() if s.lastPos >= 0),
                        default=self._floor(self.clock()))
            read_from = first
        else:
            read_from = cp.lastReadTimeMs
            if ours and state.readTimeMs is not None and state.readTimeMs > read_from:
                read_from = state.readTimeMs
        # Before anything is read or written: every pending unit must be reachable from its slot.
        scan = scan_timer_log(self.ts.log, self.wheel, read_from, state.timerLogEnd if ours else None)
        if scan.stranded:
            raise stranded_error(paths["timerwheel"], scan.stranded, self.path)
        if ours:
            log_end = self._scan_own_tail(paths["timerlog"], log_file_size, state.timerLogEnd)
        else:
            log_end = scan.end if scan.end is not None else self.ts.log.end_offset()
        self.log = TimerLogFiles(paths["timerlog"], log_file_size, log_end)
        if ours and self._torn is not None:
            yield TimerNotice("recovery", f"timer log: a torn unit at {self._torn} (past what was published) "
                                          f"zeroed")
            if not self.dry_run:
                self.log.zero(*self._torn_range)
        if cp is None:
            cp = TimerCheckpoint(first, log_end, cq_min, cq_min, DataVersion(0, 0, 0))
            yield TimerNotice("timercheck", "no config/timercheck: reading from the first slot with units, "
                                            "enqueueing from the queue's first entry")
        self.published = cp
        self.read_ms = cp.lastReadTimeMs
        if ours and state.readTimeMs is not None and state.readTimeMs > self.read_ms:
            # Read ahead by the last run: not read again; what it did not neutralise yet is.
            self.read_ms = state.readTimeMs
            self._processed = sorted({s.timeSlot * self.precision for s in self.wheel.slots.values()
                                      if cp.lastReadTimeMs <= s.timeSlot * self.precision < self.read_ms
                                      and s.lastPos >= 0})
        self.write_ms = cp.lastReadTimeMs  # the broker's write clock is never behind its read clock
        self.queue_offset = min(max(cp.masterTimerQueueOffset, cq_min), self._cq_max)
        if self.queue_offset != cp.masterTimerQueueOffset:
            yield TimerNotice("corrected", f"masterTimerQueueOffset {cp.masterTimerQueueOffset} is outside the "
                                           f"rmq_sys_wheel_timer queue [{cq_min}, {self._cq_max}]; corrected to "
                                           f"{self.queue_offset}, as the broker's recovery does")
        self.replay_from = state.commitLogOffset if ours else 0
        if ours:
            yield from self._collect_replay(state.commitLogOffset)
            yield from self._settle_unadoptable()
        self._replaying = bool(self._replay) or bool(self._leftovers)
        self._heap = sorted({s.timeSlot * self.precision for s in self.wheel.slots.values()
                             if s.timeSlot * self.precision >= self.read_ms and s.lastPos >= 0})
        self._adopt_leftovers()
        self._metrics = self.ts.metrics() or TimerMetrics()
        yield from self._horizon_notice()
        if self.read_ms > self._floor(self.clock()):
            yield TimerNotice("read-ahead", f"the wheel was read up to {_iso(self.read_ms)} by an earlier run, ahead of "
                                            f"this run's clock {_iso(self._floor(self.clock()))}: timer messages due "
                                            f"before then are put at once")

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

    def _horizon_notice(self) -> Iterator[TimerEvent]:
        horizon = self._floor(self.wall_clock()) - (self.slots_total - TIMER_BLANK_SLOTS) * self.precision
        if self.read_ms >= horizon:
            return
        units = self._messages_in_slots([t for t in self._heap if t < horizon])
        if units:
            self.horizon_units = units
            yield TimerNotice("horizon", f"{units} timer message(s) wait in slots before "
                                         f"{_iso(horizon)}: a broker started now would skip them (its recovery reads "
                                         f"from now - 7 days + 60 s); this run delivers them")

    def _messages_in_slots(self, times: list[int]) -> int:
        """Timer messages the units of these slots stand for: each unit of a message (a
        ROLL unit or its final one), less those a cancellation among them names."""
        deletes: set[str] = set()
        keys: set[str] = set()
        for t in times:
            for unit in self._chain(t):
                try:
                    props = self._message(unit.offsetPy, unit.sizePy).properties
                except StoreError:
                    continue
                if PROPERTY_TIMER_DEL_UNIQKEY in props:
                    deletes.add(props[PROPERTY_TIMER_DEL_UNIQKEY])
                elif not unit.magic & TIMER_MAGIC_DELETE:
                    keys.add(f"{props.get(PROPERTY_REAL_TOPIC)}+{props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)}")
        return len(keys - deletes)

    # -- helpers -----------------------------------------------------------------------------
    def lateness_percentiles(self) -> tuple[float, float, int] | None:
        """p50, p99 and max (ms) of the recent deliveries' lateness past their slot's due time."""
        window = self.lateness[-65536:]
        if not window:
            return None
        values = sorted(window)
        pick = lambda q: float(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))])  # noqa: E731
        return pick(0.5), pick(0.99), values[-1]

    def _floor(self, ms: int) -> int:
        return ms // self.precision * self.precision

    def close(self) -> None:
        for closer in (getattr(self, "log", None), getattr(self, "wheel", None)):
            if closer is not None:
                closer.close()
        self.ts.close()

    def _entry(self, queue_offset: int) -> _Entry:
        mine = self._appended.get(queue_offset)
        if mine is not None:
            return mine
        unit = self._cq.unit(queue_offset)
        if unit is None:
            raise StoreError(self._cq.directory, queue_offset * 20, "a rmq_sys_wheel_timer unit")
        return _Entry(unit.commitLogOffset, unit.size)

    def _message(self, offset_py: int, size: int) -> Message:
        mine = self._messages.get(offset_py)
        if mine is not None:
            return mine
        warm = self._warm.pop(offset_py, None)
        if warm is not None and warm.storeSize == size:
            return warm
        return self.store.commitlog.read_message(offset_py, size)

    def warm(self) -> None:
        """Read the messages of the next slot before it is due (records never change once
        written; the chain itself is read again when the slot is), as the broker's
        TimerDequeueWarmService does: the slot's deliveries then only wait for the writer."""
        t = self._next_slot()
        self._warm = {}
        if t is None or self.queue_offset < self.cq_end:
            return
        try:
            for unit in self._chain(t):
                if unit.offsetPy not in self._messages:
                    self._warm[unit.offsetPy] = self.store.commitlog.read_message(unit.offsetPy, unit.sizePy)
        except StoreError:
            pass  # read (and reported) when the slot is due

    def _chain(self, time_ms: int) -> list[TimerLogUnit]:
        """The units of a slot, lastPos back to firstPos (TimerMessageStore.dequeue's walk)."""
        slot = self.wheel.get(time_ms)
        units: list[TimerLogUnit] = []
        pos = slot.lastPos if slot is not None else -1
        while pos != -1 and len(units) < _CHAIN_LIMIT:
            unit = self._dry_units.get(pos) or self.log.read(pos)
            units.append(unit)
            if unit.prevPos >= pos:
                raise StoreError(self.log.directory, pos, "a prevPos before the unit (a chain that goes back); "
                                                          "`rmqdelay timer repair` rebuilds the wheel")
            pos = unit.prevPos
        return units

    @property
    def cq_end(self) -> int:
        return max(self._cq_max, max(self._appended, default=-1) + 1)

    @property
    def drained(self) -> bool:
        return self.queue_offset >= self.cq_end and self._next_slot() is None

    def _next_slot(self) -> int | None:
        heap = self._heap
        while heap and (heap[0] < self.read_ms or self.wheel.get(heap[0]) is None):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def next_due(self) -> int | None:
        """When the next slot becomes due (read once the write clock is past it): slot + precision."""
        if self.queue_offset < self.cq_end:
            return self.clock()
        t = self._next_slot()
        return None if t is None else t + self.precision

    # -- the work ----------------------------------------------------------------------------
    def step(self) -> Iterator[TimerEvent]:
        """Enqueue what waits, then read every slot the clock has passed. Returns the number
        of outputs (deliveries and re-puts).

        Write clocks. An entry the hook parked is enqueued at the clock floored to the
        precision, as a (re)started broker enqueues its backlog. A roll's re-put is enqueued
        at the time its roll slot was read (slot + precision, the slot found from its
        TIMER_ENQUEUE_MS and TIMER_OUT_MS), as a broker that never stopped would: a rolled
        message and its rolled cancellation then meet again in one slot, and rolls repeat as
        on the broker, whatever the clock (``--now`` far ahead included) - and a rerun after a
        kill makes the same decisions from the same records.

        Read clock far behind. A unit enqueued at ``target`` goes up to a roll window ahead,
        onto the wheel index of the slot 14 days before it (index = time mod the wheel's
        span): an unread slot there would be overwritten and its messages never delivered.
        The broker's read clock never lags that far; a store left for 12 days or more (or a
        run stopped again and again before it published) does. The enqueue then waits until
        that slot is read (see ``_enqueue``)."""
        before = self.delivered + self.rolled
        target = max(self._floor(self.clock()), self._write_floor)
        # The broker's write clock is never behind its read clock (its dequeue stops there).
        # Here it can be: an earlier run read ahead (``--now`` in the future) and this one runs
        # on an earlier clock. A message due before the read clock is then past due - put at
        # once, as doEnqueue's expired path - never parked in a slot no read reaches again (or
        # over the wheel index of a later slot not read yet).
        self.write_ms = max(target, self.read_ms)
        while True:
            yield from self._enqueue_all()  # re-puts are enqueued at once, as the broker's threads do
            t = self._next_slot()
            if t is None or t >= target:
                break
            self.read_ms = t
            yield from self._dequeue_slot(t)
            self.read_ms = t + self.precision
        self.read_ms = max(self.read_ms, target)
        yield from self._enqueue_all()
        if self._replaying and self.queue_offset >= self.cq_end:
            yield from self._end_replay()
        return self.delivered + self.rolled - before

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

    def _enqueue_all(self) -> Iterator[TimerEvent]:
        while self.queue_offset < self.cq_end:
            qoff = self.queue_offset
            entry = self._entry(qoff)
            if self._replaying and qoff not in self._adopted and self._wait_for_origin(entry):
                break
            if (yield from self._enqueue(qoff, entry)) is False:
                break  # its slot's wheel index holds a slot not read yet: read first
            self.queue_offset = qoff + 1

    def _wait_for_origin(self, entry: _Entry) -> bool:
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

    def _enqueue(self, qoff: int, entry: _Entry) -> Iterator[TimerEvent]:
        """Enqueue one entry; False (nothing done) when it has to wait for a slot to be read."""
        if qoff in self._adopted:
            # Its unit, appended by the killed run, is in the wheel already (adopted in setup;
            # a resume marker's too: in a slot read already).
            self._adopted.discard(qoff)
            self._count_adopted(entry)
            return
        try:
            msg = self._message(entry.offsetPy, entry.size)
        except StoreReadError:
            raise
        except StoreError as exc:
            self.skipped += 1
            yield TimerSkipped(entry.offsetPy, f"no readable message ({exc}); the broker skips it", qoff)
            return
        props = msg.properties
        out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
        if out is None:
            self.skipped += 1
            yield TimerSkipped(entry.offsetPy, f"TIMER_OUT_MS is not a number: {props.get(PROPERTY_TIMER_OUT_MS)!r} "
                                               f"(the broker's enqueue stops at it for good)", qoff)
            return
        if PROPERTY_TIMER_DEL_UNIQKEY in props and "RMQDELAY" in props:
            return  # one of rmqdelay's markers: the units pointing at it were written with it
        write_ms = self._entry_write_ms(entry.offsetPy, props, out)
        if out < write_ms:
            if PROPERTY_TIMER_DEL_UNIQKEY in props:
                if "RMQDELAY" not in props:
                    # doPut: "Trying do put delete timer msg" - a cancellation past due is dropped.
                    yield TimerNotice("cancel-dropped", f"cancellation of {props[PROPERTY_TIMER_DEL_UNIQKEY]} "
                                                        f"reached the timer after its time: dropped, as the broker "
                                                        f"does (its target is not cancelled)")
                return
            yield from self._put(msg, TIMER_NEVER_ENQUEUED, False, None, out)
            return
        magic = TIMER_MAGIC_DEFAULT
        slot_ms = out
        roll_slot = self.ts.config.roll_slot(out, write_ms)
        if roll_slot is not None:
            magic |= TIMER_MAGIC_ROLL
            slot_ms = roll_slot
        is_delete = PROPERTY_TIMER_DEL_UNIQKEY in props
        if is_delete:
            magic |= TIMER_MAGIC_DELETE
        if self._unread_under(slot_ms):
            return False
        real_topic = props.get(PROPERTY_REAL_TOPIC)
        self._written_before_unit(entry.offsetPy)
        self._append_unit(magic, write_ms, slot_ms, entry.offsetPy, entry.size,
                          java_string_hash(real_topic) if real_topic is not None else 0)
        self._count(real_topic, -1 if is_delete else 1)

    def _count_adopted(self, entry: _Entry) -> None:
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

    def _written_before_unit(self, offset_py: int) -> None:
        """A unit may only point at a record in the commit log file: the broker enqueues
        what its consume queue shows. A re-put of this run (a roll) may still wait in the
        writer's buffer; written out first, or a kill between the two leaves a unit pointing
        where the rerun writes something else."""
        if self.writer is not None and not self.dry_run and offset_py >= self.writer.flushed_end:
            self.writer.flush()

    def _leftover_for(self, entry: _Entry) -> TimerLogUnit | None:
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
                new = _marker_message(t, "unit-without-record", self.clock())
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

    def _recount(self, t: int) -> None:
        """A slot's firstPos and num from its chain (delete units -1), as far as it reads."""
        slot = self.wheel.get(t)
        pos, first, num, seen = slot.lastPos, slot.firstPos, 0, 0
        while pos != -1 and seen < _CHAIN_LIMIT:
            try:
                unit = self.log.read(pos)
            except StoreError:
                break  # into files already deleted: the older units are not counted by anyone
            num += -1 if unit.magic & TIMER_MAGIC_DELETE else 1
            seen += 1
            if unit.prevPos == -1:
                first = unit.offset
            if unit.prevPos >= pos:
                break
            pos = unit.prevPos
        self.wheel.put(t, first, slot.lastPos, num, slot.magic)

    def _dequeue_slot(self, t: int) -> Iterator[TimerEvent]:
        units = self._chain(t)
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
        for unit in normals:
            try:
                msg = self._message(unit.offsetPy, unit.sizePy)
            except StoreReadError:
                raise
            except StoreError as exc:
                self.skipped += 1
                yield TimerSkipped(unit.offsetPy, f"timer log unit at {unit.offset}: no readable message ({exc}); "
                                                  f"the broker skips it")
                continue
            props = msg.properties
            uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            real_topic = props.get(PROPERTY_REAL_TOPIC)
            if uniq is not None and delete_keys and f"{real_topic}+{uniq}" in delete_keys:
                self.cancelled += 1
                yield TimerCancelled(uniq, real_topic or "", t)
                continue
            if java_parse_long(props.get(PROPERTY_TIMER_ENQUEUE_MS, "")) != TIMER_NEVER_ENQUEUED:
                self._count(real_topic, -1)
            out = java_parse_long(props.get(PROPERTY_TIMER_OUT_MS, ""))
            yield from self._put(msg, unit.currWriteTime, bool(unit.magic & TIMER_MAGIC_ROLL), t, out)

    def _put(self, msg: Message, enqueue_time: int, roll: bool, slot_ms: int | None,
             timer_out: int | None) -> Iterator[TimerEvent]:
        now = self.clock()
        try:
            if not roll and PROPERTY_TIMER_DEL_UNIQKEY in msg.properties:
                raise NotDeliverable("a cancellation put as a delivery (doPut refuses it)")
            new = timer_output(msg, enqueue_time, roll, now)
        except NotDeliverable as exc:
            self.skipped += 1
            yield TimerSkipped(msg.commitLogOffset, str(exc))
            return
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
                return
        if self.dry_run or self.writer is None:
            if roll:
                self.rolled += 1
            else:
                self.delivered += 1
            yield TimerDelivered(uniq, new.topic, new.queueId, None, None, None, timer_out, slot_ms, now,
                                 now - due, roll, roll_times, dryRun=True)
            return
        result = self.writer.put(new)
        if roll:
            self.rolled += 1
            self._remember(new, result)
            self._reput_slots[result.commitLogOffset] = slot_ms
        else:
            self.delivered += 1
            self.lateness.append(result.storeTimestamp - due)
            if len(self.lateness) > 1 << 17:
                del self.lateness[:1 << 16]
        yield TimerDelivered(uniq, result.topic, result.queueId, result.queueOffset, result.commitLogOffset,
                             result.msgId, timer_out, slot_ms, result.storeTimestamp, result.storeTimestamp - due,
                             roll, roll_times)

    def _count(self, topic: str | None, delta: int) -> None:
        """TimerMetrics.addAndGet: per real topic."""
        if topic is None:
            return
        now = self.wall_clock()
        counts = self._metrics.timingCount
        current = counts.get(topic)
        counts[topic] = TopicCount((current.count if current else 0) + delta, now)
        self._metric_steps += 1

    # -- publishing ---------------------------------------------------------------------------
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
        publish_files([FileUpdate(timer_state_path(self.path), _state_bytes(state)),
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
                new = _marker_message(t, "delivered-ahead", self.clock())
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
        self._appended[result.queueOffset] = _Entry(result.commitLogOffset, result.storeSize)
        self._messages[result.commitLogOffset] = _as_message(new, result)
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
        new = _marker_message(slot_ms, "resume-point", self.clock())
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


# -- small helpers -----------------------------------------------------------------------------
def _checkpoint_from_json(doc: dict) -> TimerCheckpoint:
    dv = doc.get("dataVersion", {})
    return TimerCheckpoint(int(doc["lastReadTimeMs"]), int(doc["lastTimerLogFlushPos"]),
                           int(doc["lastTimerQueueOffset"]), int(doc["masterTimerQueueOffset"]),
                           DataVersion(int(dv.get("counter", 0)), int(dv.get("stateVersion", 0)),
                                       int(dv.get("timestamp", 0))))


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


def _marker_message(slot_ms: int, why: str, now_ms: int):
    """A cancellation due in ``slot_ms`` that names no message (REAL_TOPIC is the timer's own
    topic, which nothing is delivered to): what rmqdelay points units at that the broker
    must read without putting anything. Built as the recall's message is (body "0",
    _RECALL_TAG_), with RMQDELAY saying why it is there."""
    from rmqdelay.store.writer import NewMessage

    uniq = f"524D5144454C4159{slot_ms:016X}"  # "RMQDELAY" + the slot: 32 hex digits like a key
    props = {PROPERTY_TIMER_DEL_UNIQKEY: f"{RMQ_SYS_WHEEL_TIMER_TOPIC}+{uniq}",
             PROPERTY_REAL_TOPIC: RMQ_SYS_WHEEL_TIMER_TOPIC, "TIMER_DELIVER_MS": str(slot_ms + 1),
             PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq, "TAGS": "_RECALL_TAG_", PROPERTY_TIMER_OUT_MS: str(slot_ms),
             "REAL_QID": "0", "RMQDELAY": why}
    return NewMessage(RMQ_SYS_WHEEL_TIMER_TOPIC, 0, b"0", props, bornTimestamp=now_ms)


def _as_message(new, result) -> Message:
    return Message(result.storeSize, 0, body_crc(new.body), result.queueId, new.flag, result.queueOffset,
                   result.commitLogOffset, new.sysFlag, new.bornTimestamp, new.bornHost[0], new.bornHost[1],
                   result.storeTimestamp, new.storeHost[0], new.storeHost[1], new.reconsumeTimes, 0, new.body,
                   result.topic, result.propertiesRaw, parse_properties(result.propertiesRaw))


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))


__all__ = ["TimerEngine", "TimerDelivered", "TimerCancelled", "TimerSkipped", "TimerNotice", "TimerPersisted",
           "read_timer_state", "timer_state_path", "RMQ_SYS_WHEEL_TIMER_TOPIC", "is_magic_ok",
           "parse_timer_checkpoint"]
