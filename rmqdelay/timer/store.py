"""The timer store of a 5.x broker store, read-only: the timer log, the wheel, the timer
checkpoint, the metrics, and the ``rmq_sys_wheel_timer`` queue they are fed from.

``TimerStore`` opens them beside a ``Store`` (the commit log and queues); a timer scheduler
reads through the same objects (timer log units by offset, wheel slots by time with
TimerWheel.getSlot's "another time => empty" rule, the checkpoint).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmqdelay.errors import NotRegularFileError, StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import RMQ_SYS_WHEEL_TIMER_TOPIC
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.timercheck import TimerCheckpoint, parse_timer_checkpoint
from rmqdelay.formats.timerlog import TimerLogUnit
from rmqdelay.formats.timermetrics import TimerMetrics, parse_timer_metrics
from rmqdelay.store.consumequeue import ConsumeQueue
from rmqdelay.store.directory import Store, load_config_file
from rmqdelay.store.fileio import read_file
from rmqdelay.store.kind import timer_files_present, timer_paths

from .config import TimerConfig, timer_config
from .timerlog import TimerLog
from .wheel import TimerWheel

# The queue the put hook parks timer messages in: queue 0 only.
TIMER_QUEUE_ID = 0


class TimerStore:
    def __init__(self, store: Store, broker_config: Path | None = None, config: TimerConfig | None = None, *,
                 lenient: bool = False) -> None:
        """``lenient`` (what `timer repair` opens, since it derives the timer log's layout,
        the wheel and the checkpoint again): timer log files of the wrong size or missing
        between others, a wheel of the wrong size and a checkpoint that does not parse are
        noted (``log.damage``, ``wheel.wrong_size``, ``checkpoint_damage``), not raised."""
        self.store = store
        self.lenient = lenient
        self.checkpoint_damage: StoreError | None = None
        paths = timer_paths(store.path)
        self.timerlog_dir = paths["timerlog"]
        self.wheel_path = paths["timerwheel"]
        self.checkpoint_path = paths["timercheck"]
        self.metrics_path = paths["timermetrics"]
        self.log = TimerLog(self.timerlog_dir, lenient=lenient)
        self._checkpoint: TimerCheckpoint | None | bool = False
        try:
            # What the files say: the precision the wheel's slots were written with.
            self.precision_in_files = self._precision_from_files()
            if config is None:
                config = timer_config(broker_config, precision_from_files=self.precision_in_files,
                                      log_file_size_from_files=self._log_file_size())
            self.config = config
            self.wheel = TimerWheel(self.wheel_path, config.precisionMs, lenient=lenient)
        except BaseException:
            self.log.close()
            raise

    def close(self) -> None:
        self.log.close()
        self.wheel.close()

    def __enter__(self) -> "TimerStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def present(self) -> bool:
        return bool(timer_files_present(self.store.path))

    # -- the small files -----------------------------------------------------------------------
    def checkpoint(self) -> TimerCheckpoint | None:
        """config/timercheck, or None when there is none."""
        if self._checkpoint is False:
            try:
                data = read_file(self.checkpoint_path)
            except NotRegularFileError as exc:
                # A FIFO, a directory, ... where the checkpoint belongs: the repair sets one
                # from the data (a rename takes the place of anything but a directory).
                how = "move it out of the store, then run" if "directory" in exc.expected else "run"
                error = StoreError(exc.path, None, f"{exc.expected}: {how} `rmqdelay timer repair "
                                                   f"{self.store.path} --execute`, which sets it from the data")
                if not self.lenient:
                    raise error from None
                self.checkpoint_damage = error
                self._checkpoint = None
                return None
            if data is None:
                self._checkpoint = None
                return None
            try:
                self._checkpoint = parse_timer_checkpoint(data)
            except FormatError as exc:
                error = StoreError(self.checkpoint_path, exc.offset, exc.expected)
                if not self.lenient:
                    raise error from None
                self.checkpoint_damage = error
                self._checkpoint = None
        return self._checkpoint

    def metrics(self) -> TimerMetrics | None:
        """config/timermetrics (with the broker's .bak fallback), or None."""
        return load_config_file(self.metrics_path, parse_timer_metrics)

    # -- the queue and the commit log ------------------------------------------------------------
    def timer_queue(self) -> ConsumeQueue | None:
        if not self.store.has_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, TIMER_QUEUE_ID):
            return None
        return self.store.consume_queue(RMQ_SYS_WHEEL_TIMER_TOPIC, TIMER_QUEUE_ID)

    def message(self, unit: TimerLogUnit) -> Message:
        """The rmq_sys_wheel_timer record a unit points at (StoreError when it is not there)."""
        return self.store.commitlog.read_message(unit.offsetPy, unit.sizePy)

    def _log_file_size(self) -> int | None:
        """The size of the timer log's files as the files say it: the size most of them have.
        Opened leniently, a lone file or files that all differ say nothing (a truncated or
        grown file): the broker's setting decides."""
        size = self.log.file_size
        if not self.lenient or size is None:
            return size
        sizes = [mf.size for mf in self.log.files]
        alone = len(sizes) == 1 and not self.log.damage and size % 4096 == 0
        return size if sizes.count(size) > 1 or alone else None

    # -- precision -------------------------------------------------------------------------------
    def _precision_from_files(self) -> int | None:
        """The precision the files were written with: a slot stores time / precision, and its
        last unit's slot time is that time. None when no slot tells (an empty wheel)."""
        try:
            wheel = TimerWheel(self.wheel_path, 1)
        except StoreError:
            return None  # the wheel itself is reported by whoever opens it
        try:
            slots = wheel.non_empty()
            slots = slots[(slots["lastPos"] >= 0) & (slots["timeSlot"] > 0)]
            for row in slots[:: max(1, len(slots) // 8)][:8]:
                try:
                    unit = self.log.unit_at(int(row["lastPos"]))
                except StoreError:
                    continue
                time_ms, stored = unit.slotTimeMs, int(row["timeSlot"])
                if time_ms > 0 and time_ms % stored == 0:
                    return time_ms // stored
            return None
        finally:
            wheel.close()


def timer_summary(store: Store, broker_config: Path | None = None, problems=None) -> dict | None:
    """The timer settings (the precision as the files say it) and the wheel and timer log sizes
    of ``store``'s timer store, for ``StoreFeatures.timer``; None without timer files. A timer
    store that cannot be opened is noted in ``problems`` when given, else raised."""
    if not timer_files_present(store.path):
        return None
    try:
        with TimerStore(store, broker_config) as ts:
            return {**ts.config.as_json(), "precisionInFiles": ts.precision_in_files,
                    "wheelFileSize": ts.wheel.size, "timerLogFiles": len(ts.log.files),
                    "timerLogBytes": ts.log.size}
    except StoreError as exc:
        if problems is None:
            raise
        problems.add("timer", exc.path, exc.offset, exc.expected)
        return None


def unit_slot_times(units: np.ndarray) -> np.ndarray:
    """currWriteTime + delayedTime of UNITS_DTYPE rows: the time of each unit's slot."""
    return units["currWriteTime"].astype(np.int64) + units["delayedTime"].astype(np.int64)
