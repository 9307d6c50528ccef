"""The rmq_sys_wheel_timer records of a batch (a batch of queue entries, or a slot's units) read
as columns (store/plainrecords.py), and the deliveries the timer puts for them built as
columns (``StoredCopies``, for ``StoreWriter.put_stored``) instead of a message object each.

A record is *ready* when what the engine decides for it and what ``convert.timer_output``
makes of it follow from its shape (its property names, REAL_TOPIC, REAL_QID) and its
TIMER_OUT_MS alone: a plain record, read whole, with a body; names each once, TIMER_OUT_MS a
number; no cancellation (TIMER_DEL_UNIQKEY), no roll so far (TIMER_ROLL_TIMES), no
TIMER_ENQUEUE_MS yet, no DELAY (which put() rewrites); a REAL_TOPIC the broker puts to and a
REAL_QID that is a queue id. The engine takes any other record the reference way
(``decode_message``, ``timer_output``), which says what becomes of it.

The delivery's properties string is the record's map with TIMER_ENQUEUE_MS and
TIMER_DEQUEUE_MS put, in the order of MessageDecoder's 128-bucket map: worked out once per
shape, then laid out for every row by a compiled loop (``reputloops.rebuild_properties``).
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rmqdelay.formats.constants import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
)
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.properties import DECODED_MAP_CAPACITY_5X, java_order
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.plainrecords import PlainRecords, read_plain

from ..convert import queue_id_of, topic_verdict
from .enqueue import topic_hash

if TYPE_CHECKING:
    from rmqdelay.store.batchencode import StoredCopies

# The properties a delivery gets (convert.timer_output), in the order it puts them.
ADDED = (PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_DEQUEUE_MS)
_NOT_READY = frozenset((PROPERTY_TIMER_DEL_UNIQKEY, PROPERTY_TIMER_ROLL_TIMES, PROPERTY_TIMER_ENQUEUE_MS,
                        PROPERTY_DELAY_TIME_LEVEL))
_TIMER_OUT = (PROPERTY_TIMER_OUT_MS + NAME_VALUE_SEPARATOR).encode()


@dataclass(slots=True, frozen=True)
class Shape:
    """What the records of one shape are delivered as."""

    topic: str  # REAL_TOPIC
    queue_id: int  # REAL_QID
    topic_hash: int  # the unit's hashCodeOfRealTopic
    codes: tuple[int, ...]  # the delivery's pairs in order: the record's i-th (i >= 0), ADDED[-i - 1]


class TimerColumns:
    """A batch of rmq_sys_wheel_timer records as columns: row i is the record at
    ``offsets[i]``, of ``sizes[i]`` bytes."""

    def __init__(self, plain: PlainRecords, offsets: list[int], sizes: list[int]) -> None:
        from rmqdelay.formats import reputloops, putloops

        self.plain = plain
        self.offsets = offsets
        self.sizes = sizes
        self.shapes = [_shape(shape) for shape in plain.shapes]
        n = len(offsets)
        starts = np.empty(n, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        putloops.property_spans(plain.props, plain.props_at, np.frombuffer(_TIMER_OUT, dtype=np.uint8), starts, ends)
        out = np.empty(n, dtype=np.int64)
        ok = np.empty(n, dtype=np.bool_)
        reputloops.small_longs(plain.props, starts, ends, out, ok)
        ready_shape = np.array([s is not None for s in self.shapes], dtype=np.bool_)[np.array(plain.kind_of)]
        self.ready = ready_shape & plain.read & (np.diff(plain.body_at) > 0)
        for row in np.flatnonzero(self.ready & ~ok).tolist():  # a number as Long.parseLong reads it, or not ready
            value = java_parse_long(plain.props[starts[row]:ends[row]].tobytes().decode("utf-8", "surrogateescape"))
            if value is None:
                self.ready[row] = False
            else:
                out[row] = value
        self._out = out
        self.out_ms = out.tolist()
        self.ready_rows = self.ready.tolist()
        self._uniq_keys: list[str | None] | None = None
        self._due_at: int | None = None
        self._stops: list[int] = []

    def shape(self, row: int) -> Shape:
        """What a ready row is delivered as."""
        return self.shapes[self.plain.kind_of[row]]

    def uniq_keys(self) -> list[str | None]:
        """Each row's UNIQ_KEY (read once)."""
        if self._uniq_keys is None:
            self._uniq_keys = self.plain.uniq_keys()
        return self._uniq_keys

    def due_run(self, row: int, write_ms: int) -> int:
        """Where the run of ready rows from ``row`` whose TIMER_OUT_MS is before ``write_ms``
        (put at once when enqueued) ends."""
        if self._due_at != write_ms:
            self._stops = np.flatnonzero(~(self.ready & (self._out < write_ms))).tolist()
            self._due_at = write_ms
        i = bisect_left(self._stops, row)
        return self._stops[i] if i < len(self._stops) else len(self.ready_rows)

    def copies(self, rows: list[int], enqueued: list[str], dequeued: list[str]) -> StoredCopies:
        """The deliveries of ready ``rows``: each to its REAL_TOPIC / REAL_QID, with
        TIMER_ENQUEUE_MS ``enqueued[k]`` and TIMER_DEQUEUE_MS ``dequeued[k]``."""
        picked = np.array(rows, dtype=np.int64)
        shapes = [self.shapes[self.plain.kind_of[r]] for r in rows]
        props = self.plain.rebuilt(picked, [s.codes for s in shapes], ADDED, [enqueued, dequeued])
        return self.plain.copies(picked, [s.topic for s in shapes], [s.queue_id for s in shapes], props)


def read_columns(log: CommitLog, offsets: list[int], sizes: list[int]) -> TimerColumns | None:
    """The records at ``offsets`` (of ``sizes`` bytes) as columns; None when there are none."""
    plain = read_plain(log, offsets, sizes, whole=False)
    return None if plain is None else TimerColumns(plain, offsets, sizes)


def _shape(shape: bytes) -> Shape | None:
    """What records of this shape (reputloops' bytes) are delivered as; None when they are not
    ready (see the module's docstring)."""
    end = shape.find(b"\x02")
    if end < 0:
        return None  # rows not read
    names = [n.decode("utf-8", "surrogateescape") for n in shape[:end].split(b"\x01")[:-1]]
    if len(set(names)) != len(names) or PROPERTY_TIMER_OUT_MS not in names or _NOT_READY.intersection(names):
        return None
    pos = end + 2
    values = []
    for _ in range(2):
        size = int.from_bytes(shape[pos:pos + 2], "big")
        values.append(shape[pos + 2:pos + 2 + size].decode("utf-8", "surrogateescape") if size else None)
        pos += 2 + size
    topic, qid_text = values
    if PROPERTY_REAL_TOPIC not in names or topic is None or topic_verdict(topic) is not None:
        return None
    queue_id = queue_id_of(qid_text) if qid_text is not None and PROPERTY_REAL_QUEUE_ID in names else None
    if queue_id is None or queue_id < 0:
        return None
    keys = names + [name for name in ADDED if name not in names]
    order = java_order(dict.fromkeys(keys, ""), DECODED_MAP_CAPACITY_5X)
    codes = tuple(-ADDED.index(k) - 1 if k in ADDED else names.index(k) for k in order)
    return Shape(topic, queue_id, topic_hash(topic), codes)
