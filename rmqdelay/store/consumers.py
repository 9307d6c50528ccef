"""Consumer groups offline: config/consumerOffset.json as ConsumerOffsetManager keeps it, and
each group's lag against the consume queues on disk.

The file (4.9.4 and 5.3.3 alike) is fastjson's text of the manager: ``offsetTable`` keyed
``TOPIC@GROUP`` (``TOPIC_GROUP_SEPARATOR``), each a map of queue id to the committed offset
(the next message the group reads); 5.x adds ``dataVersion`` and ``groupTopicMap``, which
the broker's decode ignores but for the version. It is read as ConfigManager.load reads it:
the ``.bak`` when the file is missing, empty or unparsable.

One reader for every command: `inspect consumers`, `analyze backlog`'s retry lag and the
report all go through ``read_consumer_offsets``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.javanum import java_int_range, java_parse_int
from rmqdelay.store.configs import CONSUMER_OFFSETS
from rmqdelay.store.directory import Store

CONSUMER_OFFSET_FILE = "consumerOffset.json"
TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
_PRE_BLANK_SIZE = 0x7FFFFFFF  # ConsumeQueue.fillPreBlank: a unit that stands for nothing


@dataclass(slots=True)
class ConsumerOffsets:
    table: dict[tuple[str, str], dict[int, int]]  # (topic, group) -> {queue id: committed offset}
    dataVersion: dict | None  # 5.x: {stateVersion, timestamp, counter}; None in a 4.x file
    present: bool  # a file (or its .bak) was there
    source: str = "config/consumerOffset.json"  # where they were read from (the config source's name for it)


def read_consumer_offsets(store: Store) -> ConsumerOffsets:
    """The store's consumer offsets from its config source (config/consumerOffset.json, the
    .bak as the broker falls back); an empty table when there are none (a broker no consumer
    ever committed to)."""
    doc = store.configs.load(CONSUMER_OFFSETS, _document)
    source = store.configs.describe(CONSUMER_OFFSETS)
    if doc is None:
        return ConsumerOffsets({}, None, False, source)
    return ConsumerOffsets(doc[0], doc[1], True, source)


def consumer_offsets(store: Store) -> dict[tuple[str, str], dict[int, int]]:
    """The offset table alone: {(topic, group): {queue id: offset}}."""
    return read_consumer_offsets(store).table


def _document(doc: dict) -> tuple[dict[tuple[str, str], dict[int, int]], dict | None]:
    version = doc.get("dataVersion")
    return _offset_table(doc), version if isinstance(version, dict) else None


def _offset_table(doc: dict) -> dict[tuple[str, str], dict[int, int]]:
    table = doc.get("offsetTable", {})
    if not isinstance(table, dict):
        raise FormatError(0, 'an "offsetTable" object')
    result: dict[tuple[str, str], dict[int, int]] = {}
    for key, queues in table.items():
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
            raise FormatError(0, f'"TOPIC@GROUP": {{queueId: offset}} entries, found {key!r}')
        topic, _, group = key.rpartition(TOPIC_GROUP_SEPARATOR)
        entry: dict[int, int] = {}
        for qid, offset in queues.items():
            if isinstance(offset, bool) or not isinstance(offset, int):
                raise FormatError(0, f"an integer offset for {key} queue {qid}, found {offset!r}")
            queue_id = qid if isinstance(qid, int) and java_int_range(qid) else \
                java_parse_int(qid) if isinstance(qid, str) else None
            if queue_id is None:
                raise FormatError(0, f"integer queue ids (Java ints) for {key}, found {qid!r}")
            entry[queue_id] = offset
        result[(topic, group)] = entry
    return result


def topic_kind(topic: str) -> str:
    """"retry" for a group's %RETRY% topic, "dlq" for its %DLQ% topic, else "topic"."""
    if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
        return "retry"
    if topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
        return "dlq"
    return "topic"


@dataclass(slots=True)
class QueueLag:
    group: str
    topic: str
    queueId: int
    kind: str  # topic | retry | dlq
    consumerOffset: int | None  # committed (None: the group never committed this queue)
    minOffset: int
    maxOffset: int
    lag: int  # messages from where the group reads on to the queue's end
    oldestUnconsumedTimestamp: int | None  # store time of the next message the group reads
    lastConsumedTimestamp: int | None  # store time of the message before it
    lagMs: int | None  # now - oldestUnconsumedTimestamp (0 with no lag)

    def as_json(self) -> dict:
        return {"group": self.group, "topic": self.topic, "queueId": self.queueId, "kind": self.kind,
                "consumerOffset": self.consumerOffset, "minOffset": self.minOffset, "maxOffset": self.maxOffset,
                "lag": self.lag, "oldestUnconsumedTimestamp": self.oldestUnconsumedTimestamp,
                "lastConsumedTimestamp": self.lastConsumedTimestamp, "lagMs": self.lagMs}


@dataclass(slots=True)
class GroupTotal:
    """One group's queues summed (consumerProgress's "Diff Total"): the %DLQ% queues apart."""

    group: str
    queues: int  # queues of its topics and %RETRY% topic
    lag: int  # messages not consumed in them
    oldestUnconsumedTimestamp: int | None  # the oldest of their next messages
    lagMs: int | None  # the largest lagMs of a queue behind (0: none behind)
    dlq: int  # messages in its %DLQ% queues


def group_totals(rows: list[QueueLag]) -> list[GroupTotal]:
    """Per group of ``rows``, in the order the groups first appear."""
    totals: dict[str, GroupTotal] = {}
    for r in rows:
        t = totals.setdefault(r.group, GroupTotal(r.group, 0, 0, None, 0, 0))
        if r.kind == "dlq":
            t.dlq += r.lag
            continue
        t.queues += 1
        t.lag += r.lag
        if r.lag and r.oldestUnconsumedTimestamp is not None:
            t.oldestUnconsumedTimestamp = min(r.oldestUnconsumedTimestamp, t.oldestUnconsumedTimestamp
                                              or r.oldestUnconsumedTimestamp)
        if r.lag:
            t.lagMs = None if r.lagMs is None or t.lagMs is None else max(t.lagMs, r.lagMs)
    return list(totals.values())


def worst_group(totals: list[GroupTotal]) -> GroupTotal | None:
    """The group furthest behind: the most messages not consumed, then the oldest."""
    behind = [t for t in totals if t.lag]
    return max(behind, key=lambda t: (t.lag, t.lagMs or 0), default=None)


def sort_by_lag(rows: list[QueueLag]) -> list[QueueLag]:
    """Groups by their total lag (the most first), each group's queues by their lag."""
    totals = {t.group: t for t in group_totals(rows)}
    return sorted(rows, key=lambda r: (-totals[r.group].lag, -(totals[r.group].lagMs or 0), r.group,
                                       r.kind == "dlq", -r.lag, r.topic, r.queueId))


def consumer_lag(store: Store, offsets: ConsumerOffsets, now_ms: int, *, group: str | None = None,
                 topic: str | None = None) -> list[QueueLag]:
    """Per group, topic and queue: the committed offset against the queue on disk.

    The pairs are every offsetTable entry, and for each group found there or in the name of a
    %RETRY%/%DLQ% topic on disk, its retry and dead-letter topics (a DLQ nobody consumes is
    listed as its messages: the lag of a group that never committed a queue counts from the
    queue's min offset, where a consumer starting from the first offset would begin). A
    committed offset below the queue's min offset (its messages deleted) counts from the min
    offset; one past the max offset is no lag, as the broker corrects both on the next pull.
    """
    queues_on_disk = store.topics()
    pairs: dict[tuple[str, str], dict[int, int]] = dict(offsets.table)
    groups = {g for _, g in pairs}
    for name in queues_on_disk:
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if name.startswith(prefix):
                groups.add(name[len(prefix):])
    for g in groups:
        for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
            if prefix + g in queues_on_disk:
                pairs.setdefault((prefix + g, g), {})
    rows = []
    for (t, g), committed in sorted(pairs.items(), key=lambda kv: (kv[0][1], topic_kind(kv[0][0]), kv[0][0])):
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        for qid in sorted(set(committed) | set(queues_on_disk.get(t, []))):
            rows.append(_queue_lag(store, g, t, qid, committed.get(qid), now_ms))
    return rows


def _queue_lag(store: Store, group: str, topic: str, qid: int, committed: int | None, now_ms: int) -> QueueLag:
    min_offset = max_offset = 0
    if store.has_queue(topic, qid):
        cq = store.consume_queue(topic, qid)
        min_offset, max_offset = cq.min_offset, cq.max_offset
    reads_from = min_offset if committed is None else min(max(committed, min_offset), max_offset)
    lag = max_offset - reads_from
    oldest = _store_time(store, topic, qid, reads_from) if lag > 0 else None
    last = _store_time(store, topic, qid, reads_from - 1) if reads_from > min_offset else None
    # No lag: 0 ms behind. Lag whose next message cannot be read (a pre-blank unit): unknown.
    lag_ms = 0 if not lag else None if oldest is None else max(now_ms - oldest, 0)
    return QueueLag(group, topic, qid, topic_kind(topic), committed, min_offset, max_offset, lag, oldest, last,
                    lag_ms)


def _store_time(store: Store, topic: str, qid: int, offset: int) -> int | None:
    """The store time of the message a queue's unit points at (None for a pre-blank unit or
    a unit past the log)."""
    unit = store.consume_queue(topic, qid).unit(offset)
    if unit is None or unit.size == _PRE_BLANK_SIZE:
        return None
    try:
        return store.commitlog.read_message(unit.commitLogOffset, unit.size).storeTimestamp
    except StoreError:
        return None
