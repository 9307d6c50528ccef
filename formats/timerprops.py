"""The properties of timer messages, named and read as times, at every stage of their life.

A client sends ``TIMER_DELIVER_MS`` (absolute), ``TIMER_DELAY_SEC`` or ``TIMER_DELAY_MS``
(relative to the broker's clock). The put hook (HookUtils.transformTimerMessage) parks it in
``rmq_sys_wheel_timer`` with ``TIMER_OUT_MS``, ``REAL_TOPIC``, ``REAL_QID``; a deliver time not
in the future leaves it a plain message in its topic. The timer re-puts a message whose slot
is beyond its roll window (``TIMER_ROLL_TIMES``), and delivers it to its real topic with
``TIMER_ENQUEUE_MS`` (the unit's write clock, Long.MAX_VALUE when it never got a unit) and
``TIMER_DEQUEUE_MS``. A cancellation (recall) is a message with ``TIMER_DEL_UNIQKEY`` =
``realTopic + "+" + uniqKey`` parked at the same TIMER_OUT_MS as its target.

``timer_info`` reads one message's properties; ``timer_columns`` reads the same properties of
many properties strings at once (Arrow), held to identical values by the tests. pyarrow is
imported by the column functions only: who reads one message (`send`, `run`, `inspect
message`) does not load it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .constants import (
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_TIMER_ROLL_TIMES,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_NEVER_ENQUEUED,
)

if TYPE_CHECKING:
    import pyarrow as pa

# The stages, as ``TimerInfo.stage`` names them.
PARKED = "parked"  # in rmq_sys_wheel_timer, put by the hook
ROLLED = "rolled"  # in rmq_sys_wheel_timer, re-put by a roll (TIMER_ROLL_TIMES; a cancellation too)
CANCEL = "cancel"  # in rmq_sys_wheel_timer, a cancellation (TIMER_DEL_UNIQKEY) as the hook parked it
DELIVERED = "delivered"  # in its real topic, put by the timer's dequeue
DELIVERED_NEVER_ENQUEUED = "deliveredNeverEnqueued"  # delivered without a timer log unit
NOT_PARKED = "notParked"  # timer properties, but the deliver time was not in the future
STAGES = (PARKED, ROLLED, CANCEL, DELIVERED, DELIVERED_NEVER_ENQUEUED, NOT_PARKED)

# Long-valued timer properties: what each is called in TimerInfo.
TIME_PROPERTIES = {
    "deliverMs": PROPERTY_TIMER_DELIVER_MS,
    "delaySec": PROPERTY_TIMER_DELAY_SEC,
    "delayMs": PROPERTY_TIMER_DELAY_MS,
    "outMs": PROPERTY_TIMER_OUT_MS,
    "enqueueMs": PROPERTY_TIMER_ENQUEUE_MS,
    "dequeueMs": PROPERTY_TIMER_DEQUEUE_MS,
}

_LONG = re.compile(r"^[+-]?[0-9]+$")
_LONG_MAX = 2**63 - 1


def parse_long(text: str | None) -> int | None:
    """Long.parseLong of a property value (ASCII digits), or None when absent or not a long."""
    if text is None or not _LONG.match(text):
        return None
    value = int(text)
    return value if -_LONG_MAX - 1 <= value <= _LONG_MAX else None


def parse_int(text: str | None) -> int | None:
    """Integer.parseInt (TIMER_ROLL_TIMES), or None."""
    value = parse_long(text)
    return value if value is not None and -2**31 <= value < 2**31 else None


def delete_key(real_topic: str, uniq_key: str) -> str:
    """TimerMessageStore.buildDeleteKey: what TIMER_DEL_UNIQKEY holds."""
    return f"{real_topic}+{uniq_key}"


@dataclass(slots=True, frozen=True)
class TimerInfo:
    """A message's timer properties, read as times. Absent or unreadable values are None;
    ``enqueueMs`` keeps Long.MAX_VALUE (``neverEnqueued`` says so)."""

    stage: str
    deliverMs: int | None = None
    delaySec: int | None = None
    delayMs: int | None = None
    outMs: int | None = None
    enqueueMs: int | None = None
    dequeueMs: int | None = None
    rollTimes: int | None = None
    delUniqKey: str | None = None
    realTopic: str | None = None
    realQueueId: int | None = None
    uniqKey: str | None = None

    @property
    def isCancel(self) -> bool:
        return self.delUniqKey is not None

    @property
    def neverEnqueued(self) -> bool:
        return self.enqueueMs == TIMER_NEVER_ENQUEUED

    @property
    def cancelTarget(self) -> tuple[str, str] | None:
        """(realTopic, uniqKey) a cancellation names, split at the last '+' (topics never hold one)."""
        if self.delUniqKey is None or "+" not in self.delUniqKey:
            return None
        topic, _, key = self.delUniqKey.rpartition("+")
        return topic, key

    def as_json(self) -> dict:
        return {"stage": self.stage, "deliverMs": self.deliverMs, "delaySec": self.delaySec,
                "delayMs": self.delayMs, "outMs": self.outMs, "enqueueMs": self.enqueueMs,
                "neverEnqueued": self.neverEnqueued, "dequeueMs": self.dequeueMs, "rollTimes": self.rollTimes,
                "delUniqKey": self.delUniqKey, "realTopic": self.realTopic, "realQueueId": self.realQueueId}


def timer_stage(topic: str, properties: dict[str, str]) -> str | None:
    """Which stage of a timer message a record is, or None when it is not one."""
    if topic == RMQ_SYS_WHEEL_TIMER_TOPIC:
        # Who wrote the record: a roll re-puts cancellations as well (isCancel tells them apart).
        if PROPERTY_TIMER_ROLL_TIMES in properties:
            return ROLLED
        if PROPERTY_TIMER_DEL_UNIQKEY in properties:
            return CANCEL
        return PARKED
    if PROPERTY_TIMER_OUT_MS in properties:
        if PROPERTY_TIMER_DEQUEUE_MS not in properties:
            return None  # TIMER_OUT_MS alone: the hook never parks such a message (checkIfTimerMessage)
        if parse_long(properties.get(PROPERTY_TIMER_ENQUEUE_MS)) == TIMER_NEVER_ENQUEUED:
            return DELIVERED_NEVER_ENQUEUED
        return DELIVERED
    if (PROPERTY_TIMER_DELIVER_MS in properties or PROPERTY_TIMER_DELAY_SEC in properties
            or PROPERTY_TIMER_DELAY_MS in properties):
        return NOT_PARKED
    return None


def timer_info(topic: str, properties: dict[str, str]) -> TimerInfo | None:
    """The timer properties of one message (``Message.properties``), or None."""
    stage = timer_stage(topic, properties)
    if stage is None:
        return None
    return TimerInfo(
        stage=stage,
        **{name: parse_long(properties.get(prop)) for name, prop in TIME_PROPERTIES.items()},
        rollTimes=parse_int(properties.get(PROPERTY_TIMER_ROLL_TIMES)),
        delUniqKey=properties.get(PROPERTY_TIMER_DEL_UNIQKEY),
        realTopic=properties.get(PROPERTY_REAL_TOPIC),
        realQueueId=parse_int(properties.get(PROPERTY_REAL_QUEUE_ID)),
        uniqKey=properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
    )


# -- columns (Arrow) ---------------------------------------------------------------------------
def property_strings(properties_raw: pa.Array, name: str) -> pa.Array:
    """The value of property ``name`` in each properties string, as MessageDecoder reads it (the
    last non-empty ``name\\x01value`` segment wins), null when absent."""
    import pyarrow.compute as pc

    # Greedy '.*' makes RE2 take the last matching segment; a value runs to the next 0x02.
    pattern = "(?s)^(?:.*\x02)?" + re.escape(name) + "\x01(?P<v>[^\x02]+)"
    found = pc.extract_regex(properties_raw, pattern)
    return pc.struct_field(found, "v")


def property_longs(strings: pa.Array, *, bits: int = 64) -> pa.Array:
    """Long.parseLong (or Integer.parseInt for ``bits=32``) of each string; null when not one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ok = pc.fill_null(pc.match_substring_regex(strings, r"^[+-]?[0-9]+$"), False).to_numpy(zero_copy_only=False)
    texts = strings.to_numpy(zero_copy_only=False)
    values = np.zeros(len(strings), dtype=np.int64)
    present = np.zeros(len(strings), dtype=bool)
    limit = 2**(bits - 1)
    rows = np.flatnonzero(ok)
    short = np.array([len(texts[i]) <= 18 for i in rows], dtype=bool) if len(rows) else np.zeros(0, dtype=bool)
    if short.any():
        picked = rows[short]
        # Arrow's parser refuses the '+' Long.parseLong accepts.
        unsigned = pc.replace_substring_regex(pa.array(texts[picked], type=pa.string()), r"^\+", "")
        numbers = pc.cast(unsigned, pa.int64()).to_numpy()
        keep = (numbers >= -limit) & (numbers < limit)
        values[picked[keep]] = numbers[keep]
        present[picked[keep]] = True
    for i in rows[~short]:  # 19 digits and more: Long.MAX_VALUE and the like, a few
        number = int(texts[i])
        if -limit <= number < limit:
            values[i] = number
            present[i] = True
    return pa.array(values, type=pa.int64(), mask=~present)


def timer_columns(topics: pa.Array, properties_raw: pa.Array) -> dict[str, pa.Array]:
    """``timer_info`` of many records at once: one column per TimerInfo field (stage null for
    records that are not timer messages)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    strings = {name: property_strings(properties_raw, prop) for name, prop in TIME_PROPERTIES.items()}
    columns: dict[str, pa.Array] = {name: property_longs(values) for name, values in strings.items()}
    roll = property_strings(properties_raw, PROPERTY_TIMER_ROLL_TIMES)
    columns["rollTimes"] = pc.cast(property_longs(roll, bits=32), pa.int32())
    columns["delUniqKey"] = property_strings(properties_raw, PROPERTY_TIMER_DEL_UNIQKEY)
    columns["realTopic"] = property_strings(properties_raw, PROPERTY_REAL_TOPIC)
    columns["realQueueId"] = pc.cast(property_longs(property_strings(properties_raw, PROPERTY_REAL_QUEUE_ID),
                                                    bits=32), pa.int32())
    columns["uniqKey"] = property_strings(properties_raw, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)

    def has(values: pa.Array) -> np.ndarray:
        return values.is_valid().to_numpy(zero_copy_only=False)

    in_timer = pc.fill_null(pc.equal(topics, RMQ_SYS_WHEEL_TIMER_TOPIC), False).to_numpy(zero_copy_only=False)
    has_out, has_dequeue = has(strings["outMs"]), has(strings["dequeueMs"])
    never = pc.fill_null(pc.equal(columns["enqueueMs"], TIMER_NEVER_ENQUEUED), False).to_numpy(zero_copy_only=False)
    asked = has(strings["deliverMs"]) | has(strings["delaySec"]) | has(strings["delayMs"])
    stage = np.select(
        [in_timer & has(roll), in_timer & has(columns["delUniqKey"]), in_timer,
         has_out & has_dequeue & never, has_out & has_dequeue, ~has_out & asked],
        [ROLLED, CANCEL, PARKED, DELIVERED_NEVER_ENQUEUED, DELIVERED, NOT_PARKED], default="")
    columns["stage"] = pa.array(stage, type=pa.string(), mask=stage == "")
    return columns
