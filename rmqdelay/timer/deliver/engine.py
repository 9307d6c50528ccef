"""TimerEngine: one run over a 5.x store's timer wheel, as TimerMessageStore (5.3.3) runs it:
``setup`` (the published state, the replay of a killed run's work), then ``step`` after step
(enqueue what waits, read every slot the clock has passed), ``publish`` whenever the run's
outputs are durable. The parts live beside it: enqueue.py, dequeue.py, replay.py, publish.py."""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    TIMER_BLANK_SLOTS,
    TIMER_MAGIC_DELETE,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.timercheck import TimerCheckpoint
from rmqdelay.formats.timerlog import TimerLogUnit
from rmqdelay.formats.timermetrics import TimerMetrics
from rmqdelay.runfilter import RunFilter
from rmqdelay.store import Store
from rmqdelay.store.kind import timer_paths
from rmqdelay.store.writer import PUT_BATCH_MIN, StoreWriter

from ..files import TimerLogFiles, WheelFile
from ..store import TimerStore
from ..stranded import DeferredSlot, broken_chain_error, scan_timer_log, stranded_error
from .columns import TimerColumns, read_columns
from .dequeue import Dequeue
from .enqueue import Enqueue, QueueEntry
from .events import TimerEvent, TimerHeld, TimerNotice
from .publish import Publish
from .reads import read_ahead
from .replay import Replay
from ..runstate import own_checkpoint, read_timer_state

CHAIN_LIMIT = 50_000_000  # the most units a slot's chain is walked for
ENQUEUE_BATCH = 1024  # queue entries read, and outputs put at once, a batch at a time


def reached(ts: TimerStore, now_floor_ms: int):
    """The published state and the wheel, and the one pass over the timer log (its end and what
    the wheel does not reach); a pending unit the wheel does not reach, or a chain broken
    before one, is a refusal (StoreError, one line naming `timer repair`). Reads only: what
    `run` checks before the writer changes a byte, and what ``setup`` starts from. Returns
    (checkpoint, run state, whether the checkpoint is rmqdelay's own, the wheel, the first
    slot time with units or None, the scan)."""
    path = ts.store.path
    paths = timer_paths(path)
    cp = ts.checkpoint()
    state = read_timer_state(path)
    own = own_checkpoint(state, cp)
    ours = own is not None
    if ours:
        cp = own
    precision = ts.config.precisionMs
    wheel = WheelFile(paths["timerwheel"], precision, ts.wheel.non_empty())
    ts.wheel.close()
    first = None
    if cp is None:
        first = min((s.timeSlot * precision for s in wheel.slots.values() if s.lastPos >= 0), default=now_floor_ms)
        read_from = first
    else:
        read_from = cp.lastReadTimeMs
        if ours and state.readTimeMs is not None and state.readTimeMs > read_from:
            read_from = state.readTimeMs
    try:
        scan = scan_timer_log(ts.log, wheel, read_from, state.timerLogEnd if ours else None)
        if scan.stranded:
            raise stranded_error(paths["timerwheel"], scan.stranded, path)
        if scan.broken:
            raise broken_chain_error(scan.broken, path)
    except BaseException:
        wheel.close()
        raise
    return cp, state, ours, wheel, first, scan


class TimerEngine(Enqueue, Dequeue, Replay, Publish):
    """One run over the timer store. ``clock`` gives the time outputs are stamped with and the
    write clock follows; ``wall_clock`` is the real time (what a broker would resume with)."""

    def __init__(self, store: Store, writer: StoreWriter | None, *, clock: Callable[[], int],
                 wall_clock: Callable[[], int], broker_config: Path | None = None, dry_run: bool = False,
                 gate: RunFilter | None = None, batch: int = ENQUEUE_BATCH, checked: tuple | None = None) -> None:
        """``batch``: how many queue entries are read, and how many outputs put at once, in one
        go (1: one at a time; the same bytes either way). ``checked``: what ``reached`` gave for
        these timer files already (the run checks them before its writer opens), else read in
        ``setup``."""
        self._checked = checked
        self.store = store
        self.path = store.path
        self.writer = writer
        self.clock = clock
        self.wall_clock = wall_clock
        self.dry_run = dry_run
        self.gate = gate if gate is not None and (gate.holds_any or gate.rate) else None
        self.held: str | None = None  # where and why a run filter stopped the wheel (rmqdelay/runfilter.py)
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
        self._deferred: dict[int, DeferredSlot] = {}  # wheel index -> the slot one turn on, put once read
        self._processed: list[int] = []  # slot times read this run (ahead ones are neutralised on publish)
        self._appended: dict[int, QueueEntry] = {}  # rmq_sys_wheel_timer units this run put (rolls)
        self._appended_end = 0  # the queue offset after the last of them
        self._messages: dict[int, Message] = {}  # what those records hold, by commit log offset
        self._replay: dict[tuple, list[int]] = {}  # outputs past the published state: key -> offsets
        # units past the published timer log end, by the commit log offset they point at
        self._leftovers: dict[int, deque[TimerLogUnit]] = {}
        self._adopted: set[int] = set()  # queue offsets whose leftover unit is in the wheel
        self._warm: dict[int, Message] = {}  # the next slot's messages, read before it is due
        self._metric_steps = 0
        # recalls not enqueued yet, in time for their slots (enqueue.py): (key, slot) -> queue offsets
        self._recalls: dict[tuple[str, int], list[int]] = {}
        self._recall_at: dict[int, int] = {}  # those used: recall queue offset -> its message's
        self._recall_scan_at = 0
        self._recall_end = -1  # the write clock the queue was read for recalls to
        self._write_floor = 0
        self._dry_units: dict[int, TimerLogUnit] = {}
        self._reput_slots: dict[int, int] = {}  # re-puts of this run: commit log offset -> roll slot read  # units a dry run would have appended
        self.horizon_units = 0
        self.enqueue_batch = max(batch, 1)
        self._entries_at = 0  # the queue's units from this logical offset, read a batch at a time
        self._entries: tuple[list[int], list[int]] = ([], [])  # their commit log offsets and sizes
        self._ahead: dict[int, Message] = {}  # the records of those entries, read at once
        self._entry_columns: TimerColumns | None = None  # or as columns (ready ones, columns.py)
        self._slot_columns: TimerColumns | None = None  # the same of the slot being read
        self._slot_rows: dict[int, int] = {}  # its ready rows, by commit log offset
        self._slot_read: set[int] = set()  # the commit log offsets those were read for
        self._target = 0  # the step's write clock floor: slots before it are read this step
        self._chains: dict[int, tuple[int, list[TimerLogUnit]]] = {}  # slots read ahead: lastPos, chain
        self._slot_ahead: dict[int, Message] = {}  # the records of the slot being read, read at once
        self._pending_outcomes: list = []  # of slots read, not put yet (dequeue.py)
        self._rolls_pending = False  # among them a re-put, which is enqueued at once

    # -- setup -------------------------------------------------------------------------------
    def setup(self) -> Iterator[TimerEvent]:
        paths = timer_paths(self.path)
        cq = self.ts.timer_queue()
        self._cq = cq
        self._cq_max = cq.max_offset if cq is not None else 0
        cq_min = cq.min_offset if cq is not None else 0
        log_file_size = self.ts.log.file_size or self.ts.config.timerLogFileSize
        # Before anything is read or written: every pending unit must be reachable from its slot.
        cp, state, ours, self.wheel, first, scan = self._checked or reached(self.ts, self._floor(self.clock()))
        self._checked = None
        self._deferred = {self.wheel.index(d.timeMs): d for d in scan.deferred}
        if ours:
            log_end = self._scan_own_tail(paths["timerlog"], log_file_size, state.timerLogEnd)
        else:
            log_end = scan.end if scan.end is not None else self.ts.log.end_offset()
        self.log = TimerLogFiles(paths["timerlog"], log_file_size, log_end)
        self._log_start = self.ts.log.min_offset
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
            yield TimerNotice("readAhead", f"the wheel was read up to {_iso(self.read_ms)} by an earlier run, ahead of "
                                            f"this run's clock {_iso(self._floor(self.clock()))}: timer messages due "
                                            f"before then are put at once")

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

    def _entry(self, queue_offset: int) -> QueueEntry:
        mine = self._appended.get(queue_offset)
        if mine is not None:
            return mine
        offsets, sizes = self._entries
        row = queue_offset - self._entries_at
        if not 0 <= row < len(offsets):
            units = self._cq.units(queue_offset, min(queue_offset + self.enqueue_batch, self._cq_max))
            if not len(units):
                raise StoreError(self._cq.directory, queue_offset * 20, "a rmq_sys_wheel_timer unit")
            offsets, sizes = self._entries = units["commitLogOffset"].tolist(), units["size"].tolist()
            self._entries_at, row = queue_offset, 0
            if self.enqueue_batch > 1:
                self._ahead = {}
                self._entry_columns = self._columns(offsets, sizes, self._ahead)
        return QueueEntry(offsets[row], sizes[row])

    def _columns(self, offsets: list[int], sizes: list[int], ahead: dict[int, Message]) -> TimerColumns | None:
        """The records at ``offsets`` read at once: as columns when the run puts ready ones
        that way (columns.py), and into ``ahead`` the messages of the others."""
        cols = read_columns(self.store.commitlog, offsets, sizes) if self._by_columns() else None
        if cols is not None:
            rest = [i for i, ready in enumerate(cols.ready_rows) if not ready]
            offsets, sizes = [offsets[i] for i in rest], [sizes[i] for i in rest]
        read_ahead(self.store.commitlog, offsets, sizes, ahead)
        return cols

    def _by_columns(self) -> bool:
        """Ready records are delivered as columns: a batched run that writes, with no run filter
        and nothing to replay, on a store whose records carry no CRC property."""
        return (self.enqueue_batch > 1 and self.writer is not None and not self.dry_run and self.gate is None
                and not self._replay and not self._replaying and not self.writer.write_format.propCrc)

    def _entry_row(self, queue_offset: int) -> int | None:
        """The row of a ready record in the queue batch's columns, or None."""
        cols = self._entry_columns
        row = queue_offset - self._entries_at
        if cols is None or self._replaying or self._adopted or not 0 <= row < len(cols.ready_rows) \
                or not cols.ready_rows[row] or queue_offset >= self._cq_max:
            return None
        return row

    def _message(self, offset_py: int, size: int) -> Message:
        mine = self._messages.get(offset_py)
        if mine is not None:
            return mine
        warm = self._warm.pop(offset_py, None)
        if warm is not None and warm.storeSize == size:
            return warm
        ahead = self._slot_ahead.pop(offset_py, None) or self._ahead.pop(offset_py, None)
        if ahead is not None and ahead.storeSize == size:
            return ahead
        return self.store.commitlog.read_message(offset_py, size)

    def _read_slot_ahead(self, units: list[TimerLogUnit]) -> None:
        """The messages of a slot's units read at once (not those this run put), with those
        of the slots due after it before ``_target`` (a batch at most; records never change
        once written, and each chain is read again when its slot is): the ready ones as
        columns (``_slot_rows``: their rows by commit log offset), the others decoded."""
        if self.enqueue_batch <= 1:
            return
        wanted = [u for u in units if u.offsetPy not in self._messages]
        if all(u.offsetPy in self._slot_read for u in wanted):
            return  # read with an earlier slot
        last = None
        for t in _ascending(self._heap):
            if len(wanted) >= self.enqueue_batch or t >= self._target:
                break
            if t == last or t <= self.read_ms or self.wheel.get(t) is None:
                continue
            last = t
            try:
                chain = self._chain(t)
            except StoreError:
                break  # said when that slot is read
            self._chains[t] = (chain[0].offset if chain else -1, chain)
            wanted.extend(u for u in chain if u.offsetPy not in self._messages)
        wanted.sort(key=_offset_py)  # a run of records in one commit log file is read at once
        offsets, sizes = [u.offsetPy for u in wanted], [u.sizePy for u in wanted]
        self._slot_ahead = {}
        self._slot_read = set(offsets)
        self._slot_columns, self._slot_rows = None, {}
        if len(wanted) < PUT_BATCH_MIN:  # too few to repay the columns' fixed cost
            read_ahead(self.store.commitlog, offsets, sizes, self._slot_ahead)
            return
        cols = self._columns(offsets, sizes, self._slot_ahead)
        if cols is not None:
            self._slot_columns = cols
            self._slot_rows = {offsets[i]: i for i, ready in enumerate(cols.ready_rows) if ready}

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
        read = self._chains.pop(time_ms, None)
        if read is not None and read[0] == pos:
            return read[1]  # read ahead with an earlier slot, and nothing linked into it since
        while pos != -1 and len(units) < CHAIN_LIMIT:
            if pos < self._log_start and pos not in self._dry_units:
                break  # into files already deleted: the broker's getWholeBuffer finds none and stops there
            unit = self._dry_units.get(pos) or self.log.read(pos)
            units.append(unit)
            if unit.prevPos >= pos:
                raise StoreError(self.log.directory, pos, "a prevPos before the unit (a chain that goes back); "
                                                          "`rmqdelay timer repair` rebuilds the wheel")
            pos = unit.prevPos
        return units

    @property
    def cq_end(self) -> int:
        return max(self._cq_max, self._appended_end)

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

    def _come_round(self, t: int) -> None:
        """Slot ``t`` read: a later time waiting for its wheel index (a DeferredSlot) takes it,
        as the broker's putSlot would have, and is read in its turn."""
        later = self._deferred.get(self.wheel.index(t)) if self._deferred else None
        if later is None or later.timeMs <= t:
            return
        del self._deferred[self.wheel.index(t)]
        self.wheel.put(later.timeMs, later.firstPos, later.lastPos, later.num)
        heapq.heappush(self._heap, later.timeMs)

    def _recount(self, t: int) -> None:
        """A slot's firstPos and num from its chain (delete units -1), as far as it reads."""
        slot = self.wheel.get(t)
        pos, first, num, seen = slot.lastPos, slot.firstPos, 0, 0
        while pos != -1 and seen < CHAIN_LIMIT:
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
        if self.held is not None:
            return 0  # a run filter stopped the wheel: nothing read or enqueued past it
        target = self._target = max(self._floor(self.clock()), self._write_floor)
        self._chains = {}
        # The broker's write clock is never behind its read clock (its dequeue stops there).
        # Here it can be: an earlier run read ahead (``--now`` in the future) and this one runs
        # on an earlier clock. A message due before the read clock is then past due - put at
        # once, as doEnqueue's expired path - never parked in a slot no read reaches again (or
        # over the wheel index of a later slot not read yet).
        self.write_ms = max(target, self.read_ms)
        # The outputs of slot after slot are put together (``batch`` at most) while the queue
        # has nothing to enqueue: before an enqueue (a re-put is enqueued at once, at its
        # slot's clock, as the broker's threads do; the queue's own puts follow in order), a
        # hold and the end of the step, whatever was read is put. Nothing is published
        # between steps' ends, so the state published never names an output not written.
        one_by_one = self.enqueue_batch == 1 or (self.gate is not None and self.gate.rate)
        while True:
            if self._rolls_pending or self.queue_offset < self.cq_end:
                yield from self._put_pending()
            yield from self._enqueue_all()
            if self.held is not None:
                yield from self._put_pending()
                return self.delivered + self.rolled - before  # held at an entry enqueue would put
            t = self._next_slot()
            if t is None or t >= target:
                break
            if self.gate is not None and self.gate.holds_any:
                reason = self._slot_held(t)
                if reason is not None:
                    yield from self._put_pending()
                    self.held = f"slot {_iso(t)}: {reason}"
                    yield TimerHeld(t, None, None, reason)
                    return self.delivered + self.rolled - before  # the read clock stays before the slot
            self.read_ms = t
            self._dequeue_slot(t)
            self._come_round(t)
            if one_by_one or len(self._pending_outcomes) >= self.enqueue_batch:
                yield from self._put_pending()
            self.read_ms = t + self.precision
        yield from self._put_pending()
        self.read_ms = max(self.read_ms, target)
        yield from self._enqueue_all()
        if self._replaying and self.queue_offset >= self.cq_end:
            yield from self._end_replay()
        return self.delivered + self.rolled - before


def _offset_py(unit: TimerLogUnit) -> int:
    return unit.offsetPy


def _ascending(heap: list[int]) -> Iterator[int]:
    """The items of a heap in ascending order, lazily (the first k cost k log k)."""
    if not heap:
        return
    frontier = [(heap[0], 0)]
    while frontier:
        value, i = heapq.heappop(frontier)
        yield value
        for child in (2 * i + 1, 2 * i + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ms / 1000))
