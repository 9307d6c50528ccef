"""The next queue offset of a queue the store has no directory for, taken from the commit log.

A queue directory deleted by hand (or lost) looks like a queue that never had a message: the
writer would give its offsets out again from 0, and the broker's consumers, which hold offsets
in it, would never reach the records it had. Its records are still in the commit log, each with
its QUEUEOFFSET. So, the first time the writer puts to a queue it has no directory for, and the
queue is one the store knows of (another queue of its topic is there, or config/topics.json
gives the topic that many queues), the log is read back from its end, file by file, for the
last record of that topic and queue: its queue offset + 1 is where the writer goes on. A queue
that never had a record costs one read of the log, once per writer; a new topic, or a queue id
past what the topic has, costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from rmqdelay.formats.constants import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from rmqdelay.store.brokerconfig import queue_nums, read_topic_table

FAST_FROM_BYTES = 32 << 20  # from this file size on, the compiled scan reads the file


class QueueOffsets(dict):
    """{(topic, queueId): next queue offset}; a queue it does not hold is asked of ``find``
    once (0 when the log has nothing of it)."""

    def __init__(self, known: dict[tuple[str, int], int], find: Callable[[tuple[str, int]], int]) -> None:
        super().__init__(known)
        self._find = find

    def get(self, key, default=0):  # noqa: D102 - dict.get, with the log asked once
        try:
            return self[key]
        except KeyError:
            pass
        found = self._find(key)
        self[key] = found
        return found if found else default


def _dispatched(sys_flag: int) -> bool:
    return sys_flag & TRANSACTION_TYPE_MASK not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def next_offset_in_log(store, topic: str, queue_id: int, end: int) -> int:
    """The queue offset after the last record of ``topic``/``queue_id`` before ``end`` (0 when the
    store holds its queue, when the queue is one the store never knew, or when no record is
    found)."""
    if store.has_queue(topic, queue_id):
        return 0
    known = queue_id in range(max(store.topics().get(topic, []) + [-1]) + 1)
    if not known:
        entry = read_topic_table(store.path).get(topic)
        known = entry is not None and 0 <= queue_id < max(queue_nums(entry), queue_nums(entry, "readQueueNums"))
    if not known:
        return 0
    commitlog = store.commitlog
    for index in range(len(commitlog.files) - 1, -1, -1):
        mf = commitlog.files[index]
        if mf.start >= end:
            continue
        limit = min(mf.size, end - mf.start)
        found = _last_in_file(commitlog, index, mf, limit, topic, queue_id)
        if found is not None:
            return found + 1
    return 0


def _last_in_file(commitlog, index: int, mf, limit: int, topic: str, queue_id: int) -> int | None:
    if mf.size >= FAST_FROM_BYTES:
        import numpy as np
        import pyarrow.compute as pc

        from rmqdelay.formats.errors import FormatError
        from rmqdelay.formats.scan import decode_records

        last = None
        try:
            for batch in decode_records(commitlog.view(index), store="", file=mf.path.name, limit=limit,
                                        columns=("topic", "queue_id", "queue_offset", "sys_flag")):
                kind = batch.column(3).to_numpy() & TRANSACTION_TYPE_MASK
                ours = pc.and_(pc.equal(batch.column(0), topic), pc.equal(batch.column(1), queue_id))
                rows = np.flatnonzero(ours.to_numpy(zero_copy_only=False) & (kind != TRANSACTION_PREPARED_TYPE)
                                      & (kind != TRANSACTION_ROLLBACK_TYPE))
                if len(rows):
                    last = batch.column(2)[int(rows[-1])].as_py()
        except FormatError:
            pass  # the records before it are what there is
        return last
    last = None
    for record in commitlog.records(mf.start):
        if record.commitLogOffset >= mf.start + limit:
            break
        if record.topic == topic and record.queueId == queue_id and _dispatched(record.sysFlag):
            last = record.queueOffset
    return last


def log_queue_offsets(path: Path, known: dict[tuple[str, int], int], end: int) -> QueueOffsets:
    """``known`` (the plan's next offsets) with the log asked for a queue it lacks."""

    def find(key: tuple[str, int]) -> int:
        from rmqdelay.store import Store

        with Store(path) as store:
            return next_offset_in_log(store, key[0], key[1], end)

    return QueueOffsets(known, find)
