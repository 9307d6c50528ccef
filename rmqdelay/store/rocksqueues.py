"""The queue source of a store whose consume queues are a RocksDB database at
``consumequeue/`` (5.x ``storeType=defaultRocksDB``; layout.py has the contract every queue
source keeps, formats/rocksqueue.py the keys and values).

A queue is what the broker's RocksDBConsumeQueueStore serves: its max offset is the "max"
entry's cqOffset + 1 (0 without one), its min offset the "min" entry's cqOffset while that
entry's unit is still in the commit log, else the first unit at or after the log's first
offset (RocksDBConsumeQueueOffsetTable.getMinCqOffset) -- a missing "min" (the broker adds it
when it loads) or a zeroed one (a queue the broker only looked up) reads as the broker's does.
The queues of the store are those with a "max" entry or with units; a "min" entry alone is no
queue.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.consumequeue import CqUnit, decode_units
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.rocksqueue import (
    CHECKPOINT_TOPIC,
    MAX,
    MIN,
    OFFSET_CF,
    UNIT_VALUE_SIZE,
    Bound,
    as_cq_units,
    bound_key,
    decode_unit_values,
    parse_bound,
    parse_bound_key,
    parse_checkpoint,
    parse_unit_key,
    queue_end_key,
    queue_prefix,
    unit_key,
)
from rmqdelay.store.consumequeue import first_bad_deliver_time
from rmqdelay.store.problems import Problems
from rmqdelay.store.rocksdatabase import RocksDatabase, database_facts

DEFAULT_CF = "default"


class RocksQueues:
    def __init__(self, directory: Path, log_min_offset: Callable[[], int], problems: Problems | None = None) -> None:
        """``log_min_offset``: the commit log's first offset (what a queue's min is measured
        against, as the broker's getMinPhyOffset)."""
        self.directory = directory
        self.problems = problems
        self.database = RocksDatabase(directory)
        self._log_min_offset = log_min_offset
        self._queues: dict[tuple[str, int], RocksConsumeQueue] = {}
        self._topics: dict[str, list[int]] | None = None

    def describe(self) -> str:
        return f"{self.directory.name}/ (a RocksDB database)"

    def databases(self) -> list:
        """What `inspect store` says of the database (rocksdatabase.DatabaseFacts)."""
        return [database_facts(self.directory)]

    def topics(self) -> dict[str, list[int]]:
        """{topic: queue ids}: every queue with a "max" entry or a unit."""
        if self._topics is None:
            found: set[tuple[str, int]] = set()
            for key, value in self.database.items(OFFSET_CF):
                bound = self._bound_key(key)
                if bound.which == "max" and bound.topic != CHECKPOINT_TOPIC:
                    found.add((bound.topic, bound.queueId))
            found |= self._queues_with_units()
            result: dict[str, list[int]] = {}
            for topic, qid in sorted(found):
                result.setdefault(topic, []).append(qid)
            self._topics = result
        return self._topics

    def _queues_with_units(self) -> set[tuple[str, int]]:
        """The queues of the default CF, one seek each (past a queue's last possible key)."""
        found = set()
        at = self.database.seek(DEFAULT_CF, None)
        while at is not None:
            key = at[0]
            try:
                unit = parse_unit_key(key)
            except FormatError as exc:
                raise StoreError(self.directory, None, f"{exc.expected} (column family default)") from None
            found.add((unit.topic, unit.queueId))
            at = self.database.seek(DEFAULT_CF, queue_end_key(unit.topic.encode(), unit.queueId))
        return found

    def _bound_key(self, key: bytes):
        try:
            return parse_bound_key(key)
        except FormatError as exc:
            raise StoreError(self.directory, None, f"{exc.expected} (column family offset)") from None

    def max_physic_offset(self) -> int | None:
        """The highest commit log offset the broker dispatched (CHECKPOINT_TOPIC's entry)."""
        value = self.database.get(OFFSET_CF, bound_key(CHECKPOINT_TOPIC.encode(), 0, MAX))
        if value is None:
            return None
        try:
            return parse_checkpoint(value)
        except FormatError as exc:
            raise StoreError(self.directory, None, f"{exc.expected} (CHECKPOINT_TOPIC in column family offset)") \
                from None

    def queue(self, topic: str, queue_id: int) -> "RocksConsumeQueue":
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = RocksConsumeQueue(self, topic, queue_id)
            self._queues[key] = cq
        return cq

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return queue_id in self.topics().get(topic, ())

    def queue_path(self, topic: str, queue_id: int) -> Path:
        """What a message about the queue names: the database (a queue has no files)."""
        return self.directory

    def log_min_offset(self) -> int:
        return self._log_min_offset()

    def close(self) -> None:
        self._queues.clear()
        self._topics = None
        self.database.close()


class RocksConsumeQueue:
    """One queue of the RocksDB table, with the interface of ``ConsumeQueue``."""

    def __init__(self, source: RocksQueues, topic: str, queue_id: int) -> None:
        self.source = source
        self.db = source.database
        self.topic = topic
        self.queue_id = queue_id
        self.directory = source.directory
        self._topic = topic.encode("utf-8")
        self._max: Bound | None | bool = False  # False: not read yet
        self._min: int | None = None

    file_size = None

    def close(self) -> None:
        pass

    def release(self, stop: int) -> None:
        pass  # nothing mapped

    # -- bounds -------------------------------------------------------------------------
    def _bound(self, which: bytes) -> Bound | None:
        value = self.db.get(OFFSET_CF, bound_key(self._topic, self.queue_id, which))
        if value is None:
            return None
        try:
            return parse_bound(value)
        except FormatError as exc:
            raise StoreError(self.directory, None, f"{exc.expected} ({which.decode()} of {self.topic}/"
                                                   f"{self.queue_id} in column family offset)") from None

    @property
    def max_bound(self) -> Bound | None:
        """The "max" entry: the queue's last unit (phyOffset, cqOffset)."""
        if self._max is False:
            self._max = self._bound(MAX)
        return self._max

    @property
    def min_bound(self) -> Bound | None:
        return self._bound(MIN)

    @property
    def max_offset(self) -> int:
        """RocksDBConsumeQueueStore.getMaxOffsetInQueue: the last unit's cqOffset + 1."""
        bound = self.max_bound
        return 0 if bound is None else bound.cqOffset + 1

    @property
    def min_offset(self) -> int:
        """RocksDBConsumeQueueOffsetTable.getMinCqOffset against the commit log's first offset."""
        if self._min is None:
            self._min = self._find_min()
        return self._min

    def _find_min(self) -> int:
        log_min = self.source.log_min_offset()
        low = self.min_bound
        if low is not None and low.phyOffset >= log_min:
            return low.cqOffset
        cq_offset = 0 if low is None else low.cqOffset
        high = self.max_bound
        if high is None:
            return 0
        if high.phyOffset < log_min:
            return high.cqOffset + 1
        # binarySearchInCQ(min=true): the first unit at or after the log's start.
        lo, hi, found = cq_offset, high.cqOffset, -1
        while hi >= lo:
            mid = lo + (hi - lo) // 2
            unit = self.unit(mid)
            if unit is None:
                lo = mid + 1
                continue
            if unit.commitLogOffset == log_min:
                found = mid
                break
            if unit.commitLogOffset > log_min:
                hi, found = mid - 1, mid
            else:
                lo = mid + 1
        return cq_offset if found == -1 else found

    @property
    def max_physic_offset(self) -> int:
        """The commit log offset just after the last unit's message (-1 with no unit)."""
        if self.max_offset == 0:
            return -1
        unit = self.unit(self.max_offset - 1)
        if unit is None:
            return -1
        return unit.commitLogOffset + unit.size

    # -- units --------------------------------------------------------------------------
    def values(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """The unit values [start, stop) that are there, storeTimestamp too (formats.rocksqueue)."""
        stop = self.max_offset if stop is None else min(stop, self.max_offset)
        start = max(start, 0)
        if start >= stop:
            return decode_unit_values(b"")
        values = self.db.values(DEFAULT_CF, unit_key(self._topic, self.queue_id, start),
                                unit_key(self._topic, self.queue_id, stop))
        data = b"".join(values)
        if len(data) != len(values) * UNIT_VALUE_SIZE:
            self._bad_value(start, stop)
        return decode_unit_values(data)

    def _bad_value(self, start: int, stop: int) -> None:
        for key, value in self.db.items(DEFAULT_CF, unit_key(self._topic, self.queue_id, start),
                                        unit_key(self._topic, self.queue_id, stop)):
            if len(value) != UNIT_VALUE_SIZE:
                offset = parse_unit_key(key).cqOffset
                raise StoreError(self.directory, None,
                                 f"a {UNIT_VALUE_SIZE}-byte consume queue value for unit {offset} of "
                                 f"{self.topic}/{self.queue_id}, found {len(value)} bytes (key {key.hex()})")

    def units(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Units [start, stop) as one array of formats.consumequeue units (stop defaults to
        max_offset); where keys are missing, the units that are there, in order (``runs``)."""
        values = self.values(start, stop)
        return as_cq_units(values) if len(values) else decode_units(b"")

    def unit(self, offset: int) -> CqUnit | None:
        if offset < 0:
            return None
        value = self.db.get(DEFAULT_CF, unit_key(self._topic, self.queue_id, offset))
        if value is None:
            return None
        if len(value) != UNIT_VALUE_SIZE:
            self._bad_value(offset, offset + 1)
        u = decode_unit_values(value)[0]
        return CqUnit(int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"]))

    def runs(self) -> list[tuple[int, int]]:
        """[first, stop) logical offsets of each run of keys that follow each other."""
        keys = self.db.keys(DEFAULT_CF, queue_prefix(self._topic, self.queue_id),
                            queue_end_key(self._topic, self.queue_id))
        if not keys:
            return []
        offsets = np.frombuffer(b"".join(k[-8:] for k in keys), dtype=">i8").astype(np.int64)
        breaks = np.flatnonzero(np.diff(offsets) != 1) + 1
        firsts = np.concatenate(([0], breaks))
        lasts = np.concatenate((breaks, [len(offsets)])) - 1
        return [(int(offsets[a]), int(offsets[b]) + 1) for a, b in zip(firsts, lasts)]

    @property
    def byte_size(self) -> int:
        """What a verify reads of the queue: its values."""
        return self.max_offset * UNIT_VALUE_SIZE

    def locate(self, logical: int) -> tuple[Path, int | None]:
        """Where unit ``logical`` is: the database (a key, not a byte offset)."""
        return self.directory, None

    def check_deliver_times(self, units: np.ndarray, first: int, *, ext_ok: bool = False) -> None:
        """As ConsumeQueue.check_deliver_times: a StoreError naming the first unit whose
        tagsCode is no deliver time."""
        bad = first_bad_deliver_time(units, ext_ok=ext_ok)
        if bad is None:
            return
        row, code, what = bad
        key = unit_key(self._topic, self.queue_id, first + row)
        raise StoreError(self.directory, None,
                         f"a deliver time (tagsCode of unit {first + row} of {self.topic}/{self.queue_id}, key "
                         f"{key.hex()}) in epoch milliseconds, found {code}: {what}")
