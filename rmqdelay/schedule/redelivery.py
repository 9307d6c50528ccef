"""How the broker turns one stored message into the next one of its life:

- ``message_timeup``: a due SCHEDULE_TOPIC_XXXX message restored to its real topic
  (ScheduleMessageService.messageTimeup, 4.9.4);
- ``consumer_send_back``: a message a consumer group failed, sent back for a retry or to
  the dead-letter queue (SendMessageProcessor.asyncConsumerSendMsgBack, 4.9.4).

Both give a NewMessage for the one writer; neither writes.
"""

from __future__ import annotations

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
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.properties import broker_properties_string, reformat_properties
from rmqdelay.store.writer import NewMessage


def _real_queue_id(properties: dict[str, str]) -> int:
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
    if broker5x:
        raw = broker_properties_string(msg.properties)
    else:
        raw = reformat_properties(msg.properties, msg.propertiesRaw)
    properties = dict(msg.properties)
    for name in _CLEARED_5X if broker5x else (PROPERTY_DELAY_TIME_LEVEL,):
        properties.pop(name, None)
    return NewMessage(
        topic=properties.get(PROPERTY_REAL_TOPIC, ""),
        queueId=_real_queue_id(properties),
        body=msg.body,
        properties=properties,
        propertiesRaw=raw,
        flag=msg.flag,
        sysFlag=msg.sysFlag,
        bornTimestamp=msg.bornTimestamp,
        bornHost=(msg.bornHostAddress, msg.bornPort),
        storeHost=(msg.storeHostAddress, msg.storePort),
        reconsumeTimes=msg.reconsumeTimes,
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
