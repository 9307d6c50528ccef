"""The dead-letter queues (`%DLQ%GROUP`) offline: every message a group gave up on, with what
it was and how it got there.

The broker's sendMessageBack (4.9.4 and 5.3.3) puts a message into its group's DLQ when its
reconsumeTimes reached the consumer's maxReconsumeTimes (16 by default; a consumer may set
fewer) or the consumer asked for it (a delay level below 0). The DLQ copy keeps the
message's properties, its UNIQ_KEY and born time; ``ORIGIN_MESSAGE_ID`` is the offset msgId of
the first copy, ``RETRY_TOPIC`` the topic it was first sent to, and its reconsumeTimes field
counts the failed attempts (the first delivery and every retry).

Why each died (``reason``), from what the broker decided on: its last delivery's reconsumeTimes
(the DLQ copy's minus one) against the limit. ``retryMaxTimes``: it reached the group's
retryMaxTimes (subscriptionGroup.json; 16 when the group is not there). ``maxReconsumeTimes``:
it reached the consumer's own maxReconsumeTimes, which no file keeps: the most retries any dead
letter of the group made, below retryMaxTimes, is that limit, as the attempts show.
``sentToDlq``: fewer retries than that (and none at all): the consumer sent it straight to the
DLQ (a delay level below 0), or a message of a client that had a lower limit then.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    CQ_PRE_BLANK_SIZE,
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RETRY_GROUP_TOPIC_PREFIX,
)
from rmqdelay.store.configs import SUBSCRIPTION_GROUPS
from rmqdelay.store.directory import Store
from rmqdelay.store.keylookup import by_offset_msg_id

DEFAULT_RETRY_MAX_TIMES = 16  # SubscriptionGroupConfig.retryMaxTimes


@dataclass(slots=True)
class DeadLetter:
    group: str
    queueId: int
    queueOffset: int
    commitLogOffset: int
    msgId: str  # the DLQ copy's offset msgId
    uniqKey: str | None
    originMsgId: str | None
    originalTopic: str | None  # RETRY_TOPIC
    keys: str | None
    tags: str | None
    reconsumeTimes: int
    bornTimestamp: int  # the producer's first send (its clock)
    firstStoreTimestamp: int | None  # the first copy's store time, when it is still in the log
    lastAttemptTimestamp: int | None  # the last %RETRY% copy's store time (its last delivery)
    dlqTimestamp: int  # when it was put into the DLQ
    inDlqMs: int
    bodySize: int
    reason: str = "sentToDlq"  # retryMaxTimes | maxReconsumeTimes | sentToDlq
    maxReconsumeTimes: int | None = None  # the limit it reached (None: sent before any)

    @property
    def retries(self) -> int:
        """The reconsumeTimes of its last delivery: the retries it had."""
        return max(self.reconsumeTimes - 1, 0)

    def as_json(self) -> dict:
        return {"group": self.group, "topic": DLQ_GROUP_TOPIC_PREFIX + self.group, "queueId": self.queueId,
                "queueOffset": self.queueOffset, "commitLogOffset": self.commitLogOffset, "msgId": self.msgId,
                "uniqKey": self.uniqKey, "originMsgId": self.originMsgId, "originalTopic": self.originalTopic,
                "keys": self.keys, "tags": self.tags, "reconsumeTimes": self.reconsumeTimes,
                "bornTimestamp": self.bornTimestamp, "firstStoreTimestamp": self.firstStoreTimestamp,
                "lastAttemptTimestamp": self.lastAttemptTimestamp, "dlqTimestamp": self.dlqTimestamp,
                "inDlqMs": self.inDlqMs, "bodySize": self.bodySize, "reason": self.reason,
                "maxReconsumeTimes": self.maxReconsumeTimes}


def _store_time(msg: Message | None) -> int | None:
    return None if msg is None else msg.storeTimestamp


def dlq_groups(store: Store) -> list[str]:
    """The groups with a %DLQ% topic on disk."""
    return sorted(t[len(DLQ_GROUP_TOPIC_PREFIX):] for t in store.topics() if t.startswith(DLQ_GROUP_TOPIC_PREFIX))


def dead_letters(store: Store, now_ms: int, group: str | None = None) -> list[DeadLetter]:
    """Every message of the DLQ queues (of ``group`` only, when given), by group, queue and
    offset, from each queue's min offset (what the broker still holds)."""
    topics = store.topics()
    retry_times = _retry_store_times(store, topics)
    out = []
    for g in dlq_groups(store):
        if group is not None and g != group:
            continue
        topic = DLQ_GROUP_TOPIC_PREFIX + g
        for qid in topics.get(topic, []):
            cq = store.consume_queue(topic, qid)
            first = cq.min_offset
            units = cq.units(first, cq.max_offset)
            for n, unit in enumerate(units):
                if int(unit["size"]) == CQ_PRE_BLANK_SIZE:
                    continue
                msg = store.commitlog.read_message(int(unit["commitLogOffset"]), int(unit["size"]))
                out.append(_dead_letter(store, g, qid, first + n, msg, now_ms, retry_times.get(g, {})))
    give_reasons(out, retry_max_times(store))
    return out


def retry_max_times(store: Store) -> dict[str, int]:
    """Each group's retryMaxTimes from subscriptionGroup.json (or the store's config source)."""
    def build(doc: dict) -> dict[str, int]:
        table = doc.get("subscriptionGroupTable", {})
        out = {}
        if isinstance(table, dict):
            for name, config in table.items():
                value = config.get("retryMaxTimes") if isinstance(config, dict) else None
                if isinstance(value, int) and not isinstance(value, bool):
                    out[str(name)] = value
        return out

    try:
        return store.configs.load(SUBSCRIPTION_GROUPS, build) or {}
    except StoreError:
        return {}  # an unreadable file: the broker's default for every group


def give_reasons(letters: list[DeadLetter], group_max: dict[str, int]) -> None:
    """Set each dead letter's ``reason`` and ``maxReconsumeTimes`` (the module's docstring)."""
    client: dict[str, int] = {}
    for d in letters:
        limit = group_max.get(d.group, DEFAULT_RETRY_MAX_TIMES)
        if d.retries < limit:
            client[d.group] = max(client.get(d.group, 0), d.retries)
    for d in letters:
        limit = group_max.get(d.group, DEFAULT_RETRY_MAX_TIMES)
        if d.retries >= limit:
            d.reason, d.maxReconsumeTimes = "retryMaxTimes", limit
        elif d.retries and d.retries == client.get(d.group):
            d.reason, d.maxReconsumeTimes = "maxReconsumeTimes", d.retries
        else:
            d.reason, d.maxReconsumeTimes = "sentToDlq", None


def _dead_letter(store: Store, group: str, qid: int, offset: int, msg: Message, now_ms: int,
                 retries: dict[str, int]) -> DeadLetter:
    props = msg.properties
    uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
    origin = props.get(PROPERTY_ORIGIN_MESSAGE_ID)
    return DeadLetter(group, qid, offset, msg.commitLogOffset, msg.msgId, uniq, origin,
                      props.get(PROPERTY_RETRY_TOPIC), props.get(PROPERTY_KEYS), props.get(PROPERTY_TAGS),
                      msg.reconsumeTimes, msg.bornTimestamp, _store_time(by_offset_msg_id(store, origin)),
                      retries.get(uniq) if uniq else None, msg.storeTimestamp,
                      max(now_ms - msg.storeTimestamp, 0), len(msg.body))


def retry_messages(store: Store, group: str, topics: dict[str, list[int]] | None = None) -> Iterator[Message]:
    """Every message the group's %RETRY% queues still hold, queue by queue, in queue order;
    a unit whose record cannot be read is passed over (``inspect commitlog --verify`` names it)."""
    topic = RETRY_GROUP_TOPIC_PREFIX + group
    for qid in (store.topics() if topics is None else topics).get(topic, []):
        cq = store.consume_queue(topic, qid)
        for unit in cq.units(cq.min_offset, cq.max_offset):
            if int(unit["size"]) == CQ_PRE_BLANK_SIZE:
                continue
            try:
                yield store.commitlog.read_message(int(unit["commitLogOffset"]), int(unit["size"]))
            except StoreError:
                continue


def _retry_store_times(store: Store, topics: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """{group: {UNIQ_KEY: store time of its last %RETRY% copy}} for the groups with a DLQ: the
    last delivery the consumer failed before the message went to the DLQ."""
    out: dict[str, dict[str, int]] = {}
    for g in dlq_groups(store):
        last: dict[str, int] = {}
        for msg in retry_messages(store, g, topics):
            key = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
            if key:
                last[key] = max(last.get(key, 0), msg.storeTimestamp)
        out[g] = last
    return out
