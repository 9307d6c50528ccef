"""The timer store of a generated 5.x store: timer log, wheel, timercheck and timermetrics, as
a 5.3.3 TimerMessageStore leaves them after enqueueing and dequeueing a given timeline.

The generator decides what happens when (a message parked at its store time is enqueued at
once, a slot is read once the write clock is past it); this builder keeps what doEnqueue
writes — units appended to the log, each slot's first/last/num — and hands each due slot's
units back in append order for the dequeue. A new store is written in one go at the end:
the units in order (a BLANK where 52 + 16 bytes no longer fit a file, as TimerLog.append),
the non-empty slots into a sparse wheel, the checkpoint, the metrics. Memory holds the units
as rows of a few ints (10 M units are a few hundred MB as numpy columns at the end).
"""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import (
    TIMER_MAGIC_DEFAULT,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.timercheck import TimerCheckpoint, build_timer_checkpoint
from rmqdelay.formats.timerlog import (
    MIN_BLANK_LEN,
    UNIT_SIZE,
    UNITS_DTYPE,
    build_blank,
    encode_units,
)
from rmqdelay.formats.timermetrics import TimerMetrics, TopicCount, format_timer_metrics
from rmqdelay.formats.timerwheel import (
    SLOT_DTYPE,
    SLOT_SIZE,
    WHEEL_FILE_SIZE,
    WHEEL_SLOTS,
)
from rmqdelay.store import fileio
from rmqdelay.store.durable import atomic_write
from rmqdelay.store.kind import timer_paths
from rmqdelay.timer.config import TimerConfig, timer_config


class TimerStoreBuilder:
    """doEnqueue's bookkeeping for a new timer store; ``write`` puts the files on disk."""

    def __init__(self, config: TimerConfig | None = None) -> None:
        """``config``: the broker's timer settings the store is made for (default: 5.3.3's)."""
        config = config or timer_config()
        if config.timerLogFileSize < UNIT_SIZE + MIN_BLANK_LEN:
            raise UsageError(f"mappedFileSizeTimerLog: at least {UNIT_SIZE + MIN_BLANK_LEN} bytes, "
                             f"found {config.timerLogFileSize}")
        self.config = config
        self._window_ms = config.rollWindowMs
        self._half_ms = config.rollWindowSlots // 2 * config.precisionMs
        self._third_ms = config.rollWindowSlots // 3 * config.precisionMs
        # One list per column: appends are cheap, numpy takes them at the end.
        self._cols: dict[str, list[int]] = {name: [] for name in UNITS_DTYPE.names}
        self.end = 0  # where the next unit goes (global timer log offset)
        self._slots: dict[int, list[int]] = {}  # slot time -> [firstPos, lastPos, num]
        self._due: dict[int, list] = defaultdict(list)  # slot time -> (magic, payload) not yet dequeued
        self._hashes: dict[str, int] = {}
        self.counts: Counter[str] = Counter()  # TimerMetrics.timingCount: enqueued - deleted - delivered
        self.counter = 0  # TimerMetrics' dataVersion: one step per enqueue and per dequeue
        self.enqueued = 0  # rmq_sys_wheel_timer queue entries enqueued (masterTimerQueueOffset)

    @property
    def units(self) -> int:
        return len(self._cols["offset"])

    def enqueue(self, write_ms: int, out_ms: int, offset_py: int, size_py: int, real_topic: str, delete: bool,
                payload=None) -> tuple[int, int]:
        """doEnqueue of the queue's next entry at write clock ``write_ms`` (a multiple of the
        precision): returns (slot time, magic). ``payload`` comes back from ``dequeue``."""
        magic = TIMER_MAGIC_DEFAULT
        slot = out_ms
        if out_ms - write_ms >= self._window_ms:
            magic |= TIMER_MAGIC_ROLL
            # TimerConfig.roll_slot, with its figures kept (the generator's hot path)
            slot = write_ms + (self._half_ms if out_ms - write_ms - self._window_ms < self._third_ms
                               else self._window_ms)
        if delete:
            magic |= TIMER_MAGIC_DELETE
        pos = self._next_pos()
        state = self._slots.get(slot)
        if state is None:
            state = self._slots[slot] = [pos, -1, 0]
        h = self._hashes.get(real_topic)
        if h is None:
            h = self._hashes[real_topic] = java_string_hash(real_topic)
        cols = self._cols
        for name, value in (("offset", pos), ("prevPos", state[1]), ("magic", magic), ("currWriteTime", write_ms),
                            ("delayedTime", slot - write_ms), ("offsetPy", offset_py), ("sizePy", size_py),
                            ("hashCodeOfRealTopic", h), ("reservedValue", 0)):
            cols[name].append(value)
        state[1] = pos
        state[2] += -1 if delete else 1
        self._due[slot].append((magic, payload))
        self.counts[real_topic] += -1 if delete else 1
        self.counter += 1
        self.enqueued += 1
        return slot, magic

    def _next_pos(self) -> int:
        size = self.config.timerLogFileSize
        at = self.end % size
        if at + UNIT_SIZE + MIN_BLANK_LEN > size:  # TimerLog.append: a BLANK, then the next file
            self.end += size - at
        pos = self.end
        self.end += UNIT_SIZE
        return pos

    def dequeue(self, slot_ms: int) -> list:
        """The (magic, payload) of the slot's units in append order, as the dequeue reads its
        chain (reversed); the slot itself stays in the wheel (the checkpoint says it is read)."""
        self.counter += 1
        return self._due.pop(slot_ms, [])

    def delivered(self, real_topic: str) -> None:
        """A message put to its real topic (or re-put by a roll) at dequeue: its count goes down."""
        self.counts[real_topic] -= 1
        self.counter += 1

    def due_slots(self) -> list[int]:
        return sorted(self._due)

    # -- the files -------------------------------------------------------------------------------
    def write(self, store: Path, read_ms: int, at_ms: int) -> None:
        """Write the timer log, wheel, timercheck and timermetrics of ``store`` (whose commit
        log and ``rmq_sys_wheel_timer`` queue are written): the dequeue has read every slot
        before ``read_ms``; ``at_ms`` stamps the checkpoint and metrics."""
        paths = timer_paths(store)
        self._write_log(paths["timerlog"])
        self._write_wheel(paths["timerwheel"])
        cp = TimerCheckpoint(read_ms, self.end, self.enqueued, self.enqueued, DataVersion(self.counter, 0, at_ms))
        atomic_write(paths["timercheck"], build_timer_checkpoint(cp))
        metrics = TimerMetrics({topic: TopicCount(n, at_ms) for topic, n in self.counts.items()},
                               DataVersion(self.counter, 0, at_ms))
        atomic_write(paths["timermetrics"], format_timer_metrics(metrics).encode("utf-8"))

    def _write_log(self, directory: Path) -> None:
        fileio.make_dirs(directory)
        size = self.config.timerLogFileSize
        units = np.zeros(self.units, dtype=UNITS_DTYPE)
        for name, values in self._cols.items():
            units[name] = values
        data = encode_units(units)
        offsets = units["offset"]
        file_starts = offsets - offsets % size
        bounds = np.flatnonzero(np.diff(file_starts)) + 1
        for first, last in zip(np.concatenate(([0], bounds)), np.concatenate((bounds, [len(units)]))):
            if first == last:
                continue
            start = int(file_starts[first])
            path = directory / f"{start:020d}"
            fd, _ = fileio.open_for_write(path)
            try:
                fileio.ftruncate(fd, size, path)
                fileio.write_all(fd, data[first * UNIT_SIZE:last * UNIT_SIZE], 0, path)
                used = (last - first) * UNIT_SIZE
                if int(last) < len(units):  # a full file: the BLANK TimerLog.append wrote before rolling
                    fileio.write_all(fd, build_blank(size - used), used, path)
                fileio.fsync(fd, path)
            finally:
                os.close(fd)
        fileio.fsync_dir(directory)

    def _write_wheel(self, path: Path) -> None:
        """The non-empty slots at (time / precision) mod slots, in a sparse file of the wheel's size."""
        p = self.config.precisionMs
        times = np.array(sorted(self._slots), dtype=np.int64)
        rows = np.zeros(len(times), dtype=SLOT_DTYPE)
        rows["timeSlot"] = times // p
        rows["firstPos"] = [self._slots[int(t)][0] for t in times]
        rows["lastPos"] = [self._slots[int(t)][1] for t in times]
        rows["num"] = [self._slots[int(t)][2] for t in times]
        index = (times // p) % WHEEL_SLOTS
        fd, _ = fileio.open_for_write(path)
        try:
            fileio.ftruncate(fd, WHEEL_FILE_SIZE, path)
            order = np.argsort(index, kind="stable")
            for i in order.tolist():
                fileio.write_all(fd, rows[i:i + 1].tobytes(), int(index[i]) * SLOT_SIZE, path)
            fileio.fsync(fd, path)
        finally:
            os.close(fd)
        fileio.fsync_dir(path.parent)
