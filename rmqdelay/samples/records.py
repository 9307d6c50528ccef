"""A sample record as the broker stores it, serialised by the generator itself and appended
with the writer's ``put_encoded`` (a few million per run: put()'s parsing and re-serialising
would take most of the time). ``Layout`` gets the stored properties order from the producer
and putMessage code once per kind of message; ``Content`` is what a message carries from
record to record; ``Rec`` is where a record landed."""

from __future__ import annotations

import struct
from operator import itemgetter
from typing import NamedTuple

from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_WAIT_STORE_MSG_OK,
)
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ,
)
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    java_order,
    parse_properties,
)
from rmqdelay.producer import broker_message, client_properties

from .traffic import STORE_HOST, USER_KEYS

# The record up to its body: totalSize, magicCode, bodyCRC, queueId, flag, queueOffset,
# physicalOffset (both filled in by the writer), sysFlag, bornTimestamp, bornHost, storeTimestamp,
# storeHost, reconsumeTimes, preparedTransactionOffset, bodyLength.
HEAD_V4 = struct.Struct(">iiiiiqqiq4siq4siiqi")
HEAD_V6 = struct.Struct(">iiiiiqqiq16siq4siiqi")
_SHORT = struct.Struct(">h")


class Content(NamedTuple):
    """What a message carries from record to record: a delivered copy repeats its schedule
    record's properties string byte for byte (messageTimeup re-serialises a map already in
    HashMap order), so the string is encoded once (``props_part``, with its length) and
    shared by the schedule record and its copy. (Tuples: a few million are made per run.)"""

    raw: str
    props_part: bytes
    body: bytes
    crc: int
    head: struct.Struct  # HEAD_V4 or HEAD_V6: the born host's length
    born_ts: int
    born_addr: bytes
    born_port: int
    sys_flag: int
    reconsume: int
    tags_code: int  # of TAGS, for a unit outside SCHEDULE_TOPIC_XXXX
    keys: str | None
    uniq: str | None


class Rec(NamedTuple):
    """A record in the store: its content, where it is stored and, for a schedule record,
    where it is delivered to."""

    content: Content
    topic: str
    queue_id: int
    queue_offset: int
    offset: int
    real_topic: str = ""
    real_qid: int = 0

    def message(self) -> Message:
        """The record as the broker reads it back (for a consumer's send-back): its size,
        store time and body CRC are not read by that path and left 0."""
        c = self.content
        return Message(0, MESSAGE_MAGIC_CODE, 0, self.queue_id, 0, self.queue_offset, self.offset, c.sys_flag,
                       c.born_ts, c.born_addr, c.born_port, 0, STORE_HOST[0], STORE_HOST[1],
                       c.reconsume, 0, c.body, self.topic, c.raw, parse_properties(c.raw))


def properties_part(raw: str) -> bytes:
    data = raw.encode("utf-8")
    return _SHORT.pack(len(data)) + data


class Layout:
    """One kind of producer message (topic, with or without TAGS, delayed or not): the order
    the broker's HashMap writes its stored properties in, as a %-template over the message's
    values (TAGS, KEYS, WAIT, the user's, DELAY, UNIQ_KEY, CLUSTER, REAL_TOPIC, REAL_QID).
    The order comes from running the producer and putMessage code once on stand-in values."""

    __slots__ = ("template", "pick")

    def __init__(self, topic: str, tagged: bool, delayed: bool, broker5x: bool = False) -> None:
        user = USER_KEYS[topic]
        names = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_WAIT_STORE_MSG_OK, *user, PROPERTY_DELAY_TIME_LEVEL,
                 PROPERTY_UNIQ, PROPERTY_CLUSTER, PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID)
        position = {name: i for i, name in enumerate(names)}
        client = client_properties(PROPERTY_TAGS if tagged else None, PROPERTY_KEYS, {k: k for k in user},
                                   1 if delayed else 0, PROPERTY_UNIQ)
        new = broker_message(topic, 0, b"", client, born_timestamp=0, born_host=STORE_HOST, store_host=STORE_HOST,
                             broker5x=broker5x)
        if delayed:
            # HookUtils (5.x) / putMessage (4.9.4) serialise the broker's map with REAL_TOPIC and
            # REAL_QID added: 128 buckets in 5.x (MessageDecoder's), 16 in 4.9.4.
            capacity = DECODED_MAP_CAPACITY_5X if broker5x else 16
            order = tuple(java_order(dict(new.properties, **{PROPERTY_REAL_TOPIC: "", PROPERTY_REAL_QUEUE_ID: ""}),
                                     capacity))
        else:
            order = tuple(parse_properties(new.propertiesRaw))
        # 5.x writes a separator after every pair (WAIT kept), 4.9.4 between pairs.
        self.template = PROPERTY_SEPARATOR.join(f"{name}{NAME_VALUE_SEPARATOR}%s" for name in order) \
            + (PROPERTY_SEPARATOR if broker5x else "")
        self.pick = itemgetter(*(position[name] for name in order))
