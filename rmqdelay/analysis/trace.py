"""One message's whole life, offline: every record the broker wrote for it, in time order.

A message keeps its UNIQ_KEY through every copy the broker makes of it: the parked copy in
SCHEDULE_TOPIC_XXXX (a delay level) or rmq_sys_wheel_timer (5.x timer), the roll re-puts, a
recall marker (5.3.3 gives the marker the target's UNIQ_KEY and names it in
TIMER_DEL_UNIQKEY), the delivered copy in the real topic, and each consumer send-back
(sendMessageBack copies the properties: UNIQ_KEY stays, ORIGIN_MESSAGE_ID names the first
copy's offset msgId, RETRY_TOPIC the topic it was first sent to, REAL_TOPIC the group's
%RETRY% topic, DELAY the level it waits on, the reconsumeTimes field the attempt), the
redelivered copy in %RETRY%GROUP and finally %DLQ%GROUP. So the chain is every record with
the message's UNIQ_KEY (through the index where it covers the log, a scan elsewhere), plus
the first copy ORIGIN_MESSAGE_ID names when its UNIQ_KEY differs.

Each record gets a stage: sent, parked, rolled, cancelled, delivered, sendBack, redelivered,
dlq. Whether a copy was consumed is the committed offset of each group reading its topic
(config/consumerOffset.json) against the copy's queue offset; whether a parked copy is still
waiting is its level's delay offset (4.x) or its timer log units and the read clock (5.x).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.timerprops import CANCEL, ROLLED, timer_info
from rmqdelay.schedule.status import level_statuses
from rmqdelay.store.consumers import read_consumer_offsets
from rmqdelay.store.directory import Store
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.keylookup import by_offset_msg_id, find_by_key

STAGES = ("sent", "parked", "rolled", "cancelled", "delivered", "sendBack", "redelivered", "dlq")


@dataclass(slots=True)
class Consumption:
    group: str
    consumerOffset: int
    consumed: bool  # the group's committed offset is past this copy

    def as_json(self) -> dict:
        return {"group": self.group, "consumerOffset": self.consumerOffset, "consumed": self.consumed}


@dataclass(slots=True)
class TraceRecord:
    stage: str
    msg: Message
    attempt: int | None = None  # sendBack / redelivered / dlq: the consumer's attempt (reconsumeTimes)
    group: str | None = None  # the consumer group of a send-back, a retry copy or the DLQ
    delayLevel: int | None = None
    deliverTimestamp: int | None = None  # when a parked copy is due (tagsCode, or TIMER_OUT_MS)
    state: str | None = None  # a parked copy: waiting, delivered, rolled (re-put), recalled
    realTopic: str | None = None
    realQueueId: int | None = None
    latenessMs: int | None = None  # a delivered copy: its store time - the deliver time it waited for
    producerGroup: str | None = None  # a recall marker: who sent it
    consumers: list[Consumption] = field(default_factory=list)

    def as_json(self) -> dict:
        m = self.msg
        return {"stage": self.stage, "storeTimestamp": m.storeTimestamp, "topic": m.topic, "queueId": m.queueId,
                "queueOffset": m.queueOffset, "commitLogOffset": m.commitLogOffset, "msgId": m.msgId,
                "uniqKey": m.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
                "keys": m.properties.get(PROPERTY_KEYS), "tags": m.properties.get(PROPERTY_TAGS),
                "reconsumeTimes": m.reconsumeTimes, "attempt": self.attempt, "group": self.group,
                "delayLevel": self.delayLevel, "deliverTimestamp": self.deliverTimestamp, "state": self.state,
                "realTopic": self.realTopic, "realQueueId": self.realQueueId, "latenessMs": self.latenessMs,
                "producerGroup": self.producerGroup, "consumers": [c.as_json() for c in self.consumers]}


@dataclass(slots=True)
class Trace:
    records: list[TraceRecord]
    uniqKeys: list[str]
    indexed: bool
    scanned: list[tuple[int, int]]


def seeds_for(store: Store, target: str | None, key: str | None, topic: str | None,
              settings: IndexSettings | None = None, advance: Callable[[int], None] | None = None) -> list[Message]:
    """The records an operator's id names: a physical offset (digits), an offset msgId of this
    store, else a UNIQ_KEY; or ``key`` (KEYS or UNIQ_KEY, of ``topic`` when given)."""
    if key is not None:
        found = find_by_key(store, key, topic, settings, advance).messages
        if found or topic is None:
            return found
        # Still parked (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer) or only sent back: the index
        # holds it under those topics until it reaches ``topic``.
        return [m for m in find_by_key(store, key, None, settings, advance).messages
                if topic in (m.properties.get(PROPERTY_REAL_TOPIC), m.properties.get(PROPERTY_RETRY_TOPIC))]
    if target.isdigit():
        return [store.message_at(int(target))]
    msg = by_offset_msg_id(store, target)
    if msg is not None:
        return [msg]
    return find_by_key(store, target.upper(), topic, settings, advance, unique=True).messages


def trace(store: Store, seeds: list[Message], delay_levels: dict[int, int], now_ms: int,
          settings: IndexSettings | None = None, advance: Callable[[int], None] | None = None) -> Trace:
    """Every record of the messages ``seeds`` belong to, staged, in store time order."""
    found: dict[int, Message] = {m.commitLogOffset: m for m in seeds}
    keys: list[str] = []
    indexed, scanned = True, []
    pending = list(seeds)
    while pending:
        msg = pending.pop()
        uk = msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        related = []
        if uk and uk not in keys:
            keys.append(uk)
            lookup = find_by_key(store, uk, None, settings, advance, unique=True)
            indexed = indexed and lookup.indexed
            scanned += [s for s in lookup.scanned if s not in scanned]
            related += lookup.messages
        origin = by_offset_msg_id(store, msg.properties.get(PROPERTY_ORIGIN_MESSAGE_ID))
        if origin is not None:
            related.append(origin)
        for other in related:
            if other.commitLogOffset not in found:
                found[other.commitLogOffset] = other
                pending.append(other)
    messages = sorted(found.values(), key=lambda m: (m.storeTimestamp, m.commitLogOffset))
    return Trace(_stage(store, messages, delay_levels, now_ms), keys, indexed, scanned)


def _stage(store: Store, messages: list[Message], delay_levels: dict[int, int], now_ms: int) -> list[TraceRecord]:
    offsets = read_consumer_offsets(store).table
    level_offsets = {s.level: s.offset for s in level_statuses(store, delay_levels, now_ms)} \
        if any(m.topic == RMQ_SYS_SCHEDULE_TOPIC for m in messages) else {}
    records: list[TraceRecord] = []
    parked_due: int | None = None  # the deliver time the next delivered copy waited for
    for msg in messages:
        props = msg.properties
        topic = msg.topic
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            level = java_parse_int(props.get(PROPERTY_DELAY_TIME_LEVEL, "")) or msg.queueId + 1
            due = _tags_code(store, msg)
            waiting = level_offsets.get(msg.queueId + 1, 0) <= msg.queueOffset
            real = props.get(PROPERTY_REAL_TOPIC)
            back = PROPERTY_RETRY_TOPIC in props and real is not None and real.startswith(RETRY_GROUP_TOPIC_PREFIX)
            rec = TraceRecord("sendBack" if back else "parked", msg,
                              attempt=msg.reconsumeTimes if back else None,
                              group=real[len(RETRY_GROUP_TOPIC_PREFIX):] if back else None,
                              delayLevel=level, deliverTimestamp=due, state="waiting" if waiting else "delivered",
                              realTopic=real,
                              realQueueId=java_parse_int(props.get(PROPERTY_REAL_QUEUE_ID, "")))
            parked_due = due
        elif topic == RMQ_SYS_WHEEL_TIMER_TOPIC:
            info = timer_info(topic, props)
            stage = "cancelled" if info is not None and (info.stage == CANCEL or info.isCancel) else \
                "rolled" if info is not None and info.stage == ROLLED else "parked"
            rec = TraceRecord(stage, msg, deliverTimestamp=info.outMs if info else None,
                              realTopic=info.realTopic if info else None,
                              realQueueId=info.realQueueId if info else None,
                              producerGroup=props.get(PROPERTY_PRODUCER_GROUP) if stage == "cancelled" else None)
            if stage != "cancelled":
                parked_due = info.outMs if info else None
        elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            rec = TraceRecord("dlq", msg, attempt=msg.reconsumeTimes, group=topic[len(DLQ_GROUP_TOPIC_PREFIX):])
        elif topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and PROPERTY_RETRY_TOPIC in props:
            rec = TraceRecord("redelivered", msg, attempt=msg.reconsumeTimes,
                              group=topic[len(RETRY_GROUP_TOPIC_PREFIX):], deliverTimestamp=parked_due,
                              latenessMs=None if parked_due is None else msg.storeTimestamp - parked_due)
            parked_due = None
        else:
            info = timer_info(topic, props)
            if parked_due is not None or (info is not None and info.stage.startswith("delivered")):
                due = parked_due if parked_due is not None else info.outMs
                rec = TraceRecord("delivered", msg, deliverTimestamp=due,
                                  latenessMs=None if due is None else msg.storeTimestamp - due)
            else:
                rec = TraceRecord("sent", msg)
            parked_due = None
        if rec.stage in ("sent", "delivered", "redelivered"):
            rec.consumers = _consumers(offsets, msg, rec.group)
        records.append(rec)
    _timer_states(records)
    return records


def _timer_states(records: list[TraceRecord]) -> None:
    """What became of each parked copy. A level's: its delay offset tells, and a delivered
    copy after it (the offset the broker persisted may lag what it delivered). The timer
    wheel's: the record after it tells (a roll re-put, the delivered copy); with none, a recall
    marker means the wheel drops it when its slot is read, else it waits."""
    for n, r in enumerate(records):
        if r.msg.topic == RMQ_SYS_SCHEDULE_TOPIC and r.state == "waiting" and n + 1 < len(records) \
                and records[n + 1].stage in ("delivered", "redelivered"):
            r.state = "delivered"
    recalled = any(r.stage == "cancelled" for r in records)
    timer = [r for r in records if r.msg.topic == RMQ_SYS_WHEEL_TIMER_TOPIC and r.stage in ("parked", "rolled")]
    for r in timer:
        later = [x for x in records if x.msg.storeTimestamp >= r.msg.storeTimestamp and x is not r
                 and x.stage in ("rolled", "delivered")]
        r.state = ("rolled" if later[0].stage == "rolled" else "delivered") if later else \
            ("recalled" if recalled else "waiting")


def _tags_code(store: Store, msg: Message) -> int | None:
    """The deliver time the broker stored in the parked copy's schedule queue unit."""
    try:
        unit = store.consume_queue(RMQ_SYS_SCHEDULE_TOPIC, msg.queueId).unit(msg.queueOffset)
    except StoreError:
        return None
    return None if unit is None or unit.commitLogOffset != msg.commitLogOffset else unit.tagsCode


def _consumers(offsets: dict[tuple[str, str], dict[int, int]], msg: Message, group: str | None) -> list[Consumption]:
    """Each group that commits offsets on the copy's topic (only the group itself for its
    %RETRY% topic): consumed when its committed offset is past the copy's queue offset."""
    out = []
    for (topic, g), queues in sorted(offsets.items()):
        if topic != msg.topic or (group is not None and g != group) or msg.queueId not in queues:
            continue
        committed = queues[msg.queueId]
        out.append(Consumption(g, committed, committed > msg.queueOffset))
    return out
