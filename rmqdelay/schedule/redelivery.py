"""How the broker turns one stored message into the next one of its life:

- ``message_timeup``: a due SCHEDULE_TOPIC_XXXX message restored to its real topic
  (ScheduleMessageService.messageTimeup, 4.9.4);
- ``restore_unit``: the message a due schedule unit delivers, or why the broker skips it
  (ScheduleMessageService.DeliverDelayedMessageTimerTask, per unit);
- ``consumer_send_back``: a message a consumer group failed, sent back for a retry or to
  the dead-letter queue (SendMessageProcessor.asyncConsumerSendMsgBack, 4.9.4).

Each gives a NewMessage for the one writer; none writes.
"""

from __future__ import annotations

from rmqdelay.errors import StoreError, StoreReadError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    DEFAULT_MAX_RECONSUME_TIMES,
    DLQ_GROUP_TOPIC_PREFIX,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_WAIT_STORE_MSG_OK,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_TRANS_HALF_TOPIC,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.properties import broker_properties_string, reformat_properties
from rmqdelay.store import Store
from rmqdelay.store.topics import long_retry_topic, topic_problem
from rmqdelay.store.writer import NewMessage


def real_queue_id(properties: dict[str, str]) -> int:
    """REAL_QID as messageTimeup reads it (Integer.parseInt); -1 when absent or no int."""
    qid = java_parse_int(properties.get(PROPERTY_REAL_QUEUE_ID, ""))
    return -1 if qid is None else qid


# What 5.x messageTimeUp clears from the map after the string is built (TIMER_DELAY_MS stays).
_CLEARED_5X = (PROPERTY_DELAY_TIME_LEVEL, PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC)


def message_timeup(msg: Message, *, broker5x: bool = False) -> NewMessage:
    """The delivered copy of a due schedule message.

    The properties string is serialised before DELAY is cleared, and that string is what
    the commit log stores: the delivered record keeps DELAY=n (a 4.9.4 quirk, kept so the
    bytes match the broker's). The map without DELAY is what put() looks at, so the
    message is not delayed again. A 5.x broker (``broker5x``) builds the string from its
    128-bucket map, and clears TIMER_DELIVER_MS and TIMER_DELAY_SEC from the map as well.
    """
    return timeup_message(dict(msg.properties), msg.propertiesRaw, msg.body, msg.flag, msg.sysFlag,
                          msg.bornTimestamp, (msg.bornHostAddress, msg.bornPort),
                          (msg.storeHostAddress, msg.storePort), msg.reconsumeTimes, broker5x=broker5x)


def timeup_message(properties: dict[str, str], properties_raw: str, body: bytes, flag: int, sys_flag: int,
                   born_timestamp: int, born_host: tuple[bytes, int], store_host: tuple[bytes, int],
                   reconsume_times: int, *, broker5x: bool = False) -> NewMessage:
    """``message_timeup`` from a stored message's parts; ``properties`` (the map parsed from
    ``properties_raw``) is the caller's own: it becomes the new message's, less DELAY."""
    if broker5x:
        raw = broker_properties_string(properties)
    else:
        raw = reformat_properties(properties, properties_raw)
    for name in _CLEARED_5X if broker5x else (PROPERTY_DELAY_TIME_LEVEL,):
        properties.pop(name, None)
    return NewMessage(
        topic=properties.get(PROPERTY_REAL_TOPIC, ""),
        queueId=real_queue_id(properties),
        body=body,
        properties=properties,
        propertiesRaw=raw,
        flag=flag,
        sysFlag=sys_flag,
        bornTimestamp=born_timestamp,
        bornHost=born_host,
        storeHost=store_host,
        reconsumeTimes=reconsume_times,
    )


def consumer_send_back(msg: Message, group: str, *, delay_level: int = 0,
                       max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES,
                       retry_queue_nums: int = 1, queue_choice: int = 0) -> NewMessage:
    """The message the broker puts when ``group`` sends ``msg`` back.

    ``delay_level`` 0 lets the broker choose 3 + reconsumeTimes; a negative one, or
    reconsumeTimes at the maximum, sends it to %DLQ%group. ``queue_choice`` stands for
    the broker's random pick among the retry queues.
    """
    # One map, shared by msgExt and msgInner in the broker: puts land in insertion order.
    properties = dict(msg.properties)
    if PROPERTY_RETRY_TOPIC not in properties:
        properties[PROPERTY_RETRY_TOPIC] = msg.topic
    properties[PROPERTY_WAIT_STORE_MSG_OK] = "false"
    if msg.reconsumeTimes >= max_reconsume_times or delay_level < 0:
        topic = DLQ_GROUP_TOPIC_PREFIX + group
        queue_id = 0
        properties[PROPERTY_DELAY_TIME_LEVEL] = "0"
    else:
        topic = RETRY_GROUP_TOPIC_PREFIX + group
        queue_id = queue_choice % retry_queue_nums
        properties[PROPERTY_DELAY_TIME_LEVEL] = str(delay_level or 3 + msg.reconsumeTimes)
    if not properties.get(PROPERTY_ORIGIN_MESSAGE_ID, "").strip():
        properties[PROPERTY_ORIGIN_MESSAGE_ID] = msg.msgId
    return NewMessage(
        topic=topic,
        queueId=queue_id,
        body=msg.body,
        properties=properties,
        flag=msg.flag,
        sysFlag=msg.sysFlag,
        bornTimestamp=msg.bornTimestamp,
        bornHost=(msg.bornHostAddress, msg.bornPort),
        storeHost=(msg.storeHostAddress, msg.storePort),
        reconsumeTimes=msg.reconsumeTimes + 1,
    )


def restore_unit(store: Store, commit_log_offset: int, size: int, *,
                 broker5x: bool = False) -> tuple[Message | None, NewMessage | None, str | None]:
    """The message a due unit delivers, or why it is skipped. Depends only on the stored
    bytes, so a replay reaches the same decision as the run that wrote the log. ``broker5x``:
    as a 5.x ScheduleMessageService restores it (its properties string, long retry topics)."""
    try:
        msg = store.commitlog.read_message(commit_log_offset, size)
    except StoreReadError:
        raise  # the file is there but out of reach now: not a reason to skip the message for good
    except StoreError as exc:
        # lookMessageByOffset finding nothing: the broker moves on to the next unit.
        return None, None, f"no readable message ({exc})"
    reason = restore_problem(msg.properties, broker5x)
    if reason is not None:
        return msg, None, reason
    return msg, message_timeup(msg, broker5x=broker5x), None


def restore_problem(props: dict[str, str], broker5x: bool) -> str | None:
    """Why the broker skips a due message with these properties (its REAL_TOPIC and
    REAL_QID), or None: it is delivered."""
    topic = props.get(PROPERTY_REAL_TOPIC)
    if topic is None:
        return "no REAL_TOPIC property"
    problem = topic_problem(topic)
    if problem and not (broker5x and long_retry_topic(topic)):
        return f"REAL_TOPIC is {problem}"
    if topic == RMQ_SYS_TRANS_HALF_TOPIC:
        return "REAL_TOPIC is the transaction half topic (the broker discards it)"
    if topic == RMQ_SYS_SCHEDULE_TOPIC:
        return "REAL_TOPIC is SCHEDULE_TOPIC_XXXX itself"
    qid_text = props.get(PROPERTY_REAL_QUEUE_ID)
    # messageTimeup: Integer.parseInt, whose NumberFormatException drops the message.
    qid = java_parse_int(qid_text) if qid_text is not None else None
    if qid is None or not 0 <= qid <= 0x7FFFFFFF:
        return f"REAL_QID is not a queue id: {qid_text!r}"
    return None
