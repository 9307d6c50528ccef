"""What a 5.3.3 broker does to a timer message on receipt, as pure functions: a message in,
the message the store gets (parked in ``rmq_sys_wheel_timer``, or as it came) or the broker's
refusal out. No clock is read and no file touched: the caller gives ``now_ms`` (the broker's
clock at the put hook) and the timer settings.

``transform_timer_message`` is HookUtils.handleScheduleMessage's timer half (checkIfTimerMessage
+ transformTimerMessage); the delay-level half stays with the one writer's put.
``recall_message`` is RecallMessageProcessor: the cancellation marker a producer's recall puts.

The order of a stored properties string is that of the broker's HashMap: a message decoded from
a send request lives in MessageDecoder's ``new HashMap<>(128)`` (5.x), a message the broker
builds itself (a recall) in Message's default map of 16 buckets. Both are serialised with a
separator after every pair (messageProperties2String).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import (
    PROPERTY_BORN_TIMESTAMP,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_PRODUCER_GROUP,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TRACE_CONTEXT,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RECALL_MESSAGE_TAG,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.javanum import java_parse_int, java_parse_long
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    java_order,
    properties_to_string,
)
from rmqdelay.formats.timerprops import delete_key
from rmqdelay.store.writer import NewMessage

from .config import TimerConfig
from .store import TIMER_QUEUE_ID

# Message.properties: ``new HashMap<>()`` when the broker builds a message itself.
DEFAULT_MAP_CAPACITY = 16

# PutMessageStatus -> (ResponseCode name, SendMessageProcessor.handlePutMessageResult's remark).
WHEEL_TIMER_MSG_ILLEGAL = "WHEEL_TIMER_MSG_ILLEGAL"
WHEEL_TIMER_FLOW_CONTROL = "WHEEL_TIMER_FLOW_CONTROL"
WHEEL_TIMER_NOT_ENABLE = "WHEEL_TIMER_NOT_ENABLE"
RECALL_TIMESTAMP_INVALID = "RECALL_TIMESTAMP_INVALID"  # RecallMessageProcessor: ILLEGAL_OPERATION


class PutRefused(UsageError):
    """A put the broker refuses, with its response code and the remark it answers with."""

    def __init__(self, status: str, code: str, remark: str, detail: str = "") -> None:
        super().__init__(f"the broker refuses this message ({code}, {status}): {remark}"
                         + (f" [{detail}]" if detail else ""))
        self.status = status
        self.code = code
        self.remark = remark


def refusal(status: str, config: TimerConfig, detail: str = "") -> PutRefused:
    """The broker's answer for ``status`` under ``config`` (its remark text, word for word);
    ``detail`` says why, in rmqdelay's words."""
    if status == WHEEL_TIMER_MSG_ILLEGAL:
        return PutRefused(status, "MESSAGE_ILLEGAL",
                          "timer message illegal, the delay time should not be bigger than the max delay "
                          f"{config.maxDelaySec * 1000}ms; or if set del msg, the delay time should be bigger "
                          "than the current time", detail)
    if status == WHEEL_TIMER_FLOW_CONTROL:
        congest = config.congestNumEachSlot
        return PutRefused(status, "SYSTEM_ERROR",
                          f"timer message is under flow control, max num limit is {congest * 2} or the current "
                          f"value is greater than {congest} and less than {congest * 2}, trigger random flow "
                          "control", detail)
    if status == WHEEL_TIMER_NOT_ENABLE:
        return PutRefused(status, "SYSTEM_ERROR", "accurate timer message is not enabled, timerWheelEnable is "
                                                  f"{str(config.timerWheelEnable).lower()}", detail)
    if status == RECALL_TIMESTAMP_INVALID:
        return PutRefused(status, "ILLEGAL_OPERATION", "recall failed, timestamp invalid", detail)
    raise ValueError(status)


@dataclass(slots=True, frozen=True)
class TimerPut:
    """What the put hook made of a message."""

    message: NewMessage  # what the store writes: parked, or as it came
    parked: bool  # moved to rmq_sys_wheel_timer queue 0
    deliverMs: int | None = None  # the deliver time the hook computed (None: not a timer message)
    timerOutMs: int | None = None  # TIMER_OUT_MS when parked


def _long(value: int) -> int:
    """Java long arithmetic: wrap to 64 bits."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


def _delay_level(properties: dict[str, str]) -> int:
    """Message.getDelayTimeLevel."""
    text = properties.get(PROPERTY_DELAY_TIME_LEVEL)
    return (java_parse_int(text) or 0) if text is not None else 0


def is_timer_message(topic: str, properties: dict[str, str]) -> bool:
    """HookUtils.checkIfTimerMessage for a message without a delay level."""
    if topic == RMQ_SYS_WHEEL_TIMER_TOPIC or PROPERTY_TIMER_OUT_MS in properties:
        return False
    return (PROPERTY_TIMER_DELIVER_MS in properties or PROPERTY_TIMER_DELAY_MS in properties
            or PROPERTY_TIMER_DELAY_SEC in properties)


def deliver_time(properties: dict[str, str], now_ms: int) -> int | None:
    """transformTimerMessage's deliver time: TIMER_DELAY_SEC, else TIMER_DELAY_MS (both from
    ``now_ms``), else TIMER_DELIVER_MS; None where Long.parseLong throws."""
    for name, scale in ((PROPERTY_TIMER_DELAY_SEC, 1000), (PROPERTY_TIMER_DELAY_MS, 1)):
        text = properties.get(name)
        if text is not None:
            value = java_parse_long(text)
            return None if value is None else _long(now_ms + _long(value * scale))
    return java_parse_long(properties.get(PROPERTY_TIMER_DELIVER_MS, ""))


def timer_out_ms(deliver_ms: int, precision_ms: int) -> int:
    """The slot time: floored to the precision, an exact multiple one precision earlier."""
    if deliver_ms % precision_ms == 0:
        return deliver_ms - precision_ms
    return deliver_ms // precision_ms * precision_ms


def _is_reject(config: TimerConfig, out_ms: int, slot_num: Callable[[int], int] | None,
               draw: Callable[[], int]) -> bool:
    """TimerMessageStore.isReject: the wheel's count of the slot against timerCongestNumEachSlot
    (rejecting at twice that, at random in between)."""
    if slot_num is None:
        return False
    congest = config.congestNumEachSlot
    num = slot_num(out_ms)
    if num <= congest:
        return False
    if num >= congest * 2:
        return True
    return draw() > 1000 * (num - congest) / (congest + 0.1)


def transform_timer_message(msg: NewMessage, config: TimerConfig, now_ms: int, *,
                            map_capacity: int = DECODED_MAP_CAPACITY_5X,
                            slot_num: Callable[[int], int] | None = None,
                            draw: Callable[[], int] = lambda: random.randrange(1000)) -> TimerPut:
    """HookUtils.handleScheduleMessage for the timer: the message parked in
    ``rmq_sys_wheel_timer`` queue 0 with TIMER_OUT_MS, REAL_TOPIC and REAL_QID; or unchanged (not
    a timer message, a deliver time not in the future); or PutRefused. A delay-level message
    loses its TIMER_* properties (the writer's put then parks it by level).

    ``msg.properties`` must be in the broker map's insertion order (the request's string, then
    CLUSTER); ``map_capacity`` is that map's (128 decoded from a request, 16 built by the broker).
    ``slot_num(timeMs)`` is the wheel's count for a slot, for timerCongestNumEachSlot.
    """
    tran = msg.sysFlag & TRANSACTION_TYPE_MASK
    if tran not in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE) or msg.topic == RMQ_SYS_WHEEL_TIMER_TOPIC:
        return TimerPut(msg, False)
    props = msg.properties
    if _delay_level(props) > 0:
        timer_props = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_TIMER_DELAY_SEC, PROPERTY_TIMER_DELAY_MS)
        if any(name in props for name in timer_props):
            kept = {k: v for k, v in props.items() if k not in timer_props}
            return TimerPut(replace(msg, properties=kept, propertiesRaw=None), False)
        return TimerPut(msg, False)
    if not is_timer_message(msg.topic, props):
        return TimerPut(msg, False)
    if not config.timerWheelEnable:
        raise refusal(WHEEL_TIMER_NOT_ENABLE, config)
    deliver_ms = deliver_time(props, now_ms)
    if deliver_ms is None:
        raise refusal(WHEEL_TIMER_MSG_ILLEGAL, config, "its timer property is not a Java long")
    if deliver_ms <= now_ms:
        if PROPERTY_TIMER_DEL_UNIQKEY in props:
            raise refusal(WHEEL_TIMER_MSG_ILLEGAL, config, "a cancellation whose time is not in the future")
        return TimerPut(msg, False, deliver_ms)  # delivered at once: stored as it came
    if deliver_ms - now_ms > config.maxDelaySec * 1000:
        raise refusal(WHEEL_TIMER_MSG_ILLEGAL, config, f"due {deliver_ms - now_ms} ms from now, more than "
                                                       f"timerMaxDelaySec={config.maxDelaySec}")
    out_ms = timer_out_ms(deliver_ms, config.precisionMs)
    if _is_reject(config, out_ms, slot_num, draw):
        raise refusal(WHEEL_TIMER_FLOW_CONTROL, config, f"the wheel slot of {out_ms} holds {slot_num(out_ms)}")
    parked = dict(props)
    parked[PROPERTY_TIMER_OUT_MS] = str(out_ms)
    parked[PROPERTY_REAL_TOPIC] = msg.topic
    parked[PROPERTY_REAL_QUEUE_ID] = str(msg.queueId)
    raw = properties_to_string(java_order(parked, map_capacity))
    return TimerPut(replace(msg, topic=RMQ_SYS_WHEEL_TIMER_TOPIC, queueId=TIMER_QUEUE_ID, properties=parked,
                            propertiesRaw=raw), True, deliver_ms, out_ms)


def recall_timestamp(target_out_ms: int) -> int:
    """The timestamp of a recall handle (SendMessageProcessor.attachRecallHandle): the target's
    TIMER_OUT_MS + 1, which the hook floors back to the same slot."""
    return target_out_ms + 1


def recall_message(topic: str, uniq_key: str, timestamp_ms: int, producer_group: str, now_ms: int, *,
                   born_host: tuple[bytes, int], store_host: tuple[bytes, int],
                   config: TimerConfig) -> NewMessage:
    """RecallMessageProcessor.buildMessage, after its timestamp check: the cancellation marker
    for ``topic``'s message ``uniq_key`` due at ``timestamp_ms`` (a handle's timestamp), as the
    broker hands it to putMessage (queue 0, body "0", no CLUSTER, no WAIT)."""
    time_left = timestamp_ms - now_ms
    if time_left <= 0 or time_left >= config.maxDelaySec * 1000:
        why = "the message is not due in the future" if time_left <= 0 else \
            f"due {time_left} ms from now, not under timerMaxDelaySec={config.maxDelaySec}"
        raise refusal(RECALL_TIMESTAMP_INVALID, config, why)
    props = {PROPERTY_TAGS: RECALL_MESSAGE_TAG,
             PROPERTY_TIMER_DEL_UNIQKEY: delete_key(topic, uniq_key),
             PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: uniq_key,
             PROPERTY_TIMER_DELIVER_MS: str(timestamp_ms),
             PROPERTY_BORN_TIMESTAMP: str(now_ms),
             PROPERTY_TRACE_CONTEXT: "",
             PROPERTY_PRODUCER_GROUP: producer_group}
    return NewMessage(topic=topic, queueId=0, body=b"0", properties=props,
                      propertiesRaw=properties_to_string(java_order(props, DEFAULT_MAP_CAPACITY)),
                      bornTimestamp=now_ms, bornHost=born_host, storeHost=store_host, storeTimestamp=now_ms)
