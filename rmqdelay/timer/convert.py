"""What the 5.3.3 timer puts for a unit it dequeues (TimerMessageStore.convert + convertMessage):
the message delivered to REAL_TOPIC / REAL_QID, or re-put to ``rmq_sys_wheel_timer`` by a roll.

The map is MessageDecoder's (128 buckets, the stored order, empty values dropped); the timer
puts TIMER_ENQUEUE_MS (the unit's currWriteTime; Long.MAX_VALUE when the message never got a
unit), TIMER_ROLL_TIMES + 1 on a roll, then TIMER_DEQUEUE_MS (its clock). The stored string is
built from that map before REAL_TOPIC and REAL_QID are cleared, so a delivered record keeps
them (and WAIT); the cleared map is what the put looks at. Body, flag, sysFlag, born and store
hosts, born time and reconsume times are copied.
"""

from __future__ import annotations

from functools import lru_cache

from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_ROLL_TIMES,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.properties import broker_properties_string
from rmqdelay.store.topics import long_retry_topic, topic_problem
from rmqdelay.store.writer import NewMessage, without_crc


class NotDeliverable(Exception):
    """The broker cannot put this message (it drops it or retries it forever): the reason."""


def timer_output(msg: Message, enqueue_time: int, roll: bool, dequeue_ms: int) -> NewMessage:
    """The message the timer puts for ``msg`` (a rmq_sys_wheel_timer record)."""
    props = dict(msg.properties)
    if enqueue_time != -1:
        props[PROPERTY_TIMER_ENQUEUE_MS] = str(enqueue_time)
    if roll:
        current = props.get(PROPERTY_TIMER_ROLL_TIMES)
        if current is None:
            props[PROPERTY_TIMER_ROLL_TIMES] = "1"
        else:
            times = java_parse_int(current)
            if times is None:
                raise NotDeliverable(f"TIMER_ROLL_TIMES is not a number: {current!r} (the broker's "
                                     f"Integer.parseInt fails; it retries the message)")
            props[PROPERTY_TIMER_ROLL_TIMES] = str((times + 1 + 2**31) % 2**32 - 2**31)
    props[PROPERTY_TIMER_DEQUEUE_MS] = str(dequeue_ms)
    raw = broker_properties_string(props)
    if not msg.body:
        # HookUtils.checkBeforePutMessage refuses a null body: the timer drops the message.
        raise NotDeliverable("an empty body (the broker refuses to put it and drops the message)")
    if roll:
        topic, queue_id = msg.topic, msg.queueId
    else:
        topic = props.get(PROPERTY_REAL_TOPIC)
        qid_text = props.get(PROPERTY_REAL_QUEUE_ID)
        if topic is None:
            raise NotDeliverable("no REAL_TOPIC property")
        problem = topic_verdict(topic)
        if problem:
            raise NotDeliverable(f"REAL_TOPIC is {problem}")
        queue_id = queue_id_of(qid_text) if qid_text is not None else None
        if queue_id is None or queue_id < 0:
            raise NotDeliverable(f"REAL_QID is not a queue id: {qid_text!r} (the broker's Integer.parseInt "
                                 f"fails; it retries the message)")
        props.pop(PROPERTY_REAL_TOPIC, None)
        props.pop(PROPERTY_REAL_QUEUE_ID, None)
    return NewMessage(topic=topic, queueId=queue_id, body=msg.body, properties=props, propertiesRaw=raw,
                      flag=msg.flag, sysFlag=msg.sysFlag, bornTimestamp=msg.bornTimestamp,
                      bornHost=(msg.bornHostAddress, msg.bornPort), storeHost=(msg.storeHostAddress, msg.storePort),
                      reconsumeTimes=msg.reconsumeTimes)


@lru_cache(maxsize=4096)
def topic_verdict(topic: str) -> str | None:
    """Why the broker cannot put to REAL_TOPIC ``topic``, or None (once per distinct topic)."""
    problem = topic_problem(topic)
    return problem if problem and not long_retry_topic(topic) else None


@lru_cache(maxsize=4096)
def queue_id_of(text: str) -> int | None:
    """Integer.parseInt of REAL_QID (once per distinct text)."""
    return java_parse_int(text)


_DEQUEUE_ENTRY = PROPERTY_TIMER_DEQUEUE_MS + NAME_VALUE_SEPARATOR


def output_key(topic: str, queue_id: int, properties_raw: str, body_crc: int, born: int) -> tuple:
    """What identifies one put of the timer whatever its clock: the record without the
    TIMER_DEQUEUE_MS value (the clock) and the __CRC32# entry (which covers the store time)."""
    parts = without_crc(properties_raw).split(PROPERTY_SEPARATOR)
    parts = [_DEQUEUE_ENTRY if p.startswith(_DEQUEUE_ENTRY) else p for p in parts]
    return topic, queue_id, PROPERTY_SEPARATOR.join(parts), body_crc, born


def is_timer_output(record: Message) -> bool:
    """A record the timer (or rmqdelay's) dequeue put: TIMER_DEQUEUE_MS, no DELAY (a delay
    delivery of a former timer message keeps DELAY), and REAL_TOPIC (kept in the string)."""
    props = record.properties
    return (PROPERTY_TIMER_DEQUEUE_MS in props and PROPERTY_DELAY_TIME_LEVEL not in props
            and PROPERTY_REAL_TOPIC in props)
