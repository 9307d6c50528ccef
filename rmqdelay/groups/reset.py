"""`consumers reset`: where a consumer group's committed offsets move, per queue, and what the
move means (messages its consumers get again, or never get), then config/consumerOffset.json
written as the broker's ConsumerOffsetManager writes it.

The targets are `offsets reset`'s (schedule/reset.py), over a consumer's queue instead of a
delay level: ``--to-datetime`` is the first message *stored* at or after the instant, as the
5.x broker's resetOffsetByTime finds it (ConsumeQueue.getOffsetInQueueByTime with
BoundaryType.LOWER: a bisection over the queue's units, each read's store time taken from the
commit log); an instant after the last message is the queue's end. A target outside the queue
is clamped into ``[minOffset, maxOffset]`` with a warning, as the broker corrects such an
offset on the consumer's next pull.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError, UsageError
from rmqdelay.formats.consumeroffset import (
    ConsumerOffsetFile,
    format_consumer_offsets,
    parse_consumer_offset_file,
    set_offsets,
)
from rmqdelay.formats.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rmqdelay.formats.delayoffset import DataVersion, parse_fastjson_object
from rmqdelay.schedule.reset import ResetTarget, clamp_warning, requested_offset
from rmqdelay.store import Store
from rmqdelay.store.configs import load_config_file
from rmqdelay.store.consumers import ConsumerOffsets, topic_kind
from rmqdelay.store.durable import atomic_write, config_dir

_PRE_BLANK_SIZE = 0x7FFFFFFF
CONSUMER_OFFSET_FILE = "consumerOffset.json"


@dataclass(slots=True, frozen=True)
class QueueReset:
    group: str
    topic: str
    queueId: int
    kind: str  # topic | retry | dlq
    before: int | None  # the committed offset (None: the group never committed this queue)
    reads: int  # where the group reads from now (inspect consumers' rule)
    requested: int
    after: int
    minOffset: int
    maxOffset: int
    warning: str | None

    @property
    def consumedAgain(self) -> int:
        """Messages the group consumed already that its consumers will get again."""
        return max(self.reads - self.after, 0)

    @property
    def skipped(self) -> int:
        """Messages the group has not consumed that its consumers will never get."""
        return max(self.after - self.reads, 0)

    def as_json(self) -> dict:
        return {"group": self.group, "topic": self.topic, "queueId": self.queueId, "kind": self.kind,
                "before": self.before, "after": self.after, "requested": self.requested,
                "minOffset": self.minOffset, "maxOffset": self.maxOffset, "consumedAgain": self.consumedAgain,
                "skipped": self.skipped, "warning": self.warning}


def group_topics(offsets: ConsumerOffsets, group: str, *, include_retry: bool) -> list[str]:
    """The topics ``group`` has committed offsets of (its %RETRY% topic only when asked; its
    %DLQ% topic never: no consumer reads it)."""
    topics = sorted(t for t, g in offsets.table if g == group and topic_kind(t) == "topic")
    retry = RETRY_GROUP_TOPIC_PREFIX + group
    if include_retry and retry not in topics:
        topics.append(retry)
    return topics


def first_stored_at_or_after(store: Store, topic: str, qid: int, lo: int, hi: int, instant: int) -> int:
    """The offset of the first unit in ``[lo, hi)`` whose message was stored at or after
    ``instant`` (``hi`` when none), by bisection: store times never decrease along a queue.
    A unit whose message cannot be read (a pre-blank unit, one past the log) counts as before."""
    cq = store.consume_queue(topic, qid)

    def stored(offset: int) -> int:
        unit = cq.unit(offset)
        if unit is None or unit.size == _PRE_BLANK_SIZE:
            return -1
        try:
            return store.commitlog.read_message(unit.commitLogOffset, unit.size).storeTimestamp
        except StoreError:
            return -1

    low, high = lo, hi
    while low < high:
        mid = (low + high) // 2
        if stored(mid) >= instant:
            high = mid
        else:
            low = mid + 1
    return low


def plan_group_reset(store: Store, offsets: ConsumerOffsets, group: str, topics: list[str],
                     queues: list[int] | None, target: ResetTarget, now_ms: int) -> list[QueueReset]:
    """Per topic and queue of ``group``: before, after, and what it means. The queues are the
    ones committed and the ones on disk (``queues`` narrows them)."""
    on_disk = store.topics()
    plan = []
    for topic in topics:
        committed = offsets.table.get((topic, group), {})
        qids = sorted(set(committed) | set(on_disk.get(topic, [])))
        if queues is not None:
            qids = [q for q in qids if q in queues]
        for qid in qids:
            lo = hi = 0
            if store.has_queue(topic, qid):
                cq = store.consume_queue(topic, qid)
                lo, hi = cq.min_offset, cq.max_offset
            before = committed.get(qid)
            reads = lo if before is None else min(max(before, lo), hi)
            requested = requested_offset(target, lo, hi, reads, now_ms,
                                         lambda instant: first_stored_at_or_after(store, topic, qid, lo, hi, instant))
            after = min(max(requested, lo), hi)
            warning = clamp_warning(f"{topic} queue {qid}", requested, lo, hi, after,
                                    "as the broker corrects an offset outside its queue on the next pull")
            plan.append(QueueReset(group, topic, qid, topic_kind(topic), before, reads, requested, after, lo, hi,
                                   warning))
    return plan


def check_topics(store: Store, offsets: ConsumerOffsets, group: str, topics: list[str]) -> None:
    """A topic named that neither the store nor the group's offsets know is a usage error."""
    on_disk = store.topics()
    for topic in topics:
        if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            raise UsageError(f"--topic: {topic} is a dead-letter topic, which no consumer reads "
                             f"(`dlq resend` puts its messages back)")
        if topic not in on_disk and (topic, group) not in offsets.table:
            raise UsageError(f"--topic: no topic {topic} in the store or in group {group}'s offsets")


def offset_file_path(store_path: Path | str) -> Path:
    return config_dir(store_path) / CONSUMER_OFFSET_FILE


def read_offset_file(store_path: Path | str, fresh_5x: bool) -> ConsumerOffsetFile:
    """The file as the writer starts from: the file itself (an unreadable one refused, as an
    older ``.bak`` would undo commits), its ``.bak`` only when it is missing, or a new document
    (a 5.x one with a dataVersion on a 5.x store)."""
    path = offset_file_path(store_path)
    doc = load_config_file(path, lambda text: parse_consumer_offset_file(parse_fastjson_object(text)),
                           fallback=False)
    if doc is None:
        return ConsumerOffsetFile({}, DataVersion(0, 0, time.time_ns() // 1_000_000) if fresh_5x else None, fresh_5x)
    return doc


def apply_reset(doc: ConsumerOffsetFile, plan: list[QueueReset]) -> ConsumerOffsetFile:
    """The plan committed into ``doc``; a 5.x dataVersion moves on (nextVersion: counter + 1,
    the wall clock's time), as a change of the table is announced to the broker's slaves."""
    by_key: dict[tuple[str, str], dict[int, int]] = {}
    for row in plan:
        by_key.setdefault((row.topic, row.group), {})[row.queueId] = row.after
    for (topic, group), queues in by_key.items():
        set_offsets(doc, topic, group, queues)
    if doc.dataVersion is not None:
        dv = doc.dataVersion
        doc.dataVersion = DataVersion(dv.counter + 1, dv.stateVersion, time.time_ns() // 1_000_000)
    return doc


def publish_reset(store_path: Path | str, doc: ConsumerOffsetFile) -> None:
    """Temp file, fsync, rename, the old file kept as ``.bak`` (MixAll.string2File)."""
    atomic_write(offset_file_path(store_path), format_consumer_offsets(doc).encode("utf-8"), keep_bak=True)
