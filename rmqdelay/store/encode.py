"""What CommitLog.putMessage makes of a message before it has a place in the log: the delay
rewrite into SCHEDULE_TOPIC_XXXX, the stored properties string, the flags, the unit's
tagsCode and the encoded record (queueOffset and physicalOffset still 0).

``StoreWriter.put`` and the writer process's ``put`` (writerprocess.py) both encode through
``PutEncoder``, so a record is the same bytes whichever of them places it."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from rmqdelay.errors import UsageError
from rmqdelay.formats.commitlog import Message, body_crc, encode_message, message_size
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CRC32,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    RMQ_SYS_SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_COMMIT_TYPE,
    TRANSACTION_NOT_TYPE,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ,
)
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.propcrc import reserved_properties, seal_record
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    delete_property,
    format_java_order,
    java_order,
    properties_to_string,
    property_value,
)
from rmqdelay.store.topics import long_retry_topic, validate_topic
from rmqdelay.store.writeformat import WriteFormat

ENCODED_HEAD = struct.Struct(">ii28xi")  # totalSize, magicCode, sysFlag (at 36)
OFFSETS = struct.Struct(">qq")  # queueOffset, physicalOffset (at 20)


@dataclass(slots=True, frozen=True)
class PutResult:
    """Where put() (or put_batch) placed one message, as the broker's PutMessageResult says."""

    topic: str
    queueId: int
    queueOffset: int
    commitLogOffset: int
    storeSize: int
    storeTimestamp: int
    tagsCode: int
    msgId: str
    propertiesRaw: str = ""  # as stored (after the delay rewrite)


@dataclass(slots=True)
class EncodedPut:
    """A message as putMessage stores it, before the log gives it a place."""

    topic: str
    queue_id: int
    record: bytearray  # queueOffset and physicalOffset 0 until ``place``
    store_ts: int
    tags_code: int  # of its unit
    keys: str | None  # KEYS and UNIQ_KEY as the index reads them from the stored properties
    uniq: str | None
    sys_flag: int
    dispatch: bool  # gets a unit and a queue offset (not a prepared or rolled back transaction)
    properties_raw: str
    sealed: bool  # ends with a reserved __CRC32# to fill in once placed
    properties_len: int  # of properties_raw encoded

    def place(self, queue_offset: int, offset: int) -> bytes | bytearray:
        """The record at its place: offsets filled in (and the CRC property sealed over them)."""
        OFFSETS.pack_into(self.record, 20, queue_offset, offset)
        if self.sealed:
            record = seal_record(self.record)
            self.properties_raw = record[len(record) - self.properties_len:].decode("utf-8", "surrogateescape")
            return record
        return self.record


class Rewritten(NamedTuple):
    """A message as putMessage rewrites it, before it is encoded."""

    topic: str
    queue_id: int
    properties: dict  # the message's, with REAL_TOPIC and REAL_QID after a delay rewrite
    properties_raw: str
    store_ts: int
    tags_code: int  # of its unit
    keys: str | None  # KEYS and UNIQ_KEY as the index reads them from the stored properties
    uniq: str | None
    dispatch: bool  # gets a unit and a queue offset (not a prepared or rolled back transaction)


class Prepared(NamedTuple):
    """A message as putMessage stores it, its pieces not yet laid out as a record."""

    topic: str
    queue_id: int
    topic_bytes: bytes
    props_raw: str  # as stored (with a reserved __CRC32# when the broker appends one)
    props_bytes: bytes
    sys_flag: int
    magic: int
    size: int
    store_ts: int
    tags_code: int
    keys: str | None
    uniq: str | None
    dispatch: bool


class PutEncoder:
    """putMessage's rewrites and encoding for one store (its write format and delay levels)."""

    def __init__(self, write_format: WriteFormat, delay_levels: dict[int, int], clock: Callable[[], int]) -> None:
        self.write_format = write_format
        self.delay_levels = delay_levels
        self.max_level = max(delay_levels)
        self.clock = clock
        self._valid_topics: set[str] = set()  # checked once each: put() is a hot path

    def check_topic(self, topic: str) -> None:
        """TopicValidator's rules; a 5.x broker also puts retry topics longer than 127 bytes (up
        to HookUtils' 255), which it writes as V2 records."""
        if topic in self._valid_topics:
            return
        if not (self.write_format.is5x and long_retry_topic(topic)):
            validate_topic(topic)
        self._valid_topics.add(topic)

    def tags_code(self, topic: str, properties, store_ts: int) -> int:
        """CommitLog.checkMessageAndReturnSize: the deliver time for SCHEDULE_TOPIC_XXXX."""
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            t = properties.get(PROPERTY_DELAY_TIME_LEVEL)
            if t is not None:
                level = java_parse_int(t)
                if level is None:
                    raise UsageError(f"a {RMQ_SYS_SCHEDULE_TOPIC} message whose DELAY {t!r} is not a number: "
                                     f"the broker cannot dispatch it")
                level = min(level, self.max_level)
                if level > 0:
                    return store_ts + self.delay_levels[level]
        return tags_code(properties.get(PROPERTY_TAGS))

    def rewrite(self, new, store_ts: int | None = None) -> Rewritten:
        """CommitLog.putMessage's rewrites of ``new`` (a NewMessage): where it is stored, the
        properties string it is stored with, its unit's tagsCode and the keys it is indexed by.
        ``store_ts``: its store timestamp when the caller read the clock for it already."""
        topic, queue_id = new.topic, new.queueId
        self.check_topic(topic)
        props = new.properties
        props_raw = new.propertiesRaw
        tran = new.sysFlag & TRANSACTION_TYPE_MASK
        if tran in (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE):
            level = _delay_level(props.get(PROPERTY_DELAY_TIME_LEVEL))
            if level > 0:
                props = dict(props)
                if level > self.max_level:
                    props[PROPERTY_DELAY_TIME_LEVEL] = str(self.max_level)
                    level = self.max_level
                props[PROPERTY_REAL_TOPIC] = topic
                props[PROPERTY_REAL_QUEUE_ID] = str(queue_id)
                if self.write_format.is5x:
                    # 5.x HookUtils.transformDelayLevelMessage: messageProperties2String of the
                    # request's decoded map (128 buckets), a separator after every pair.
                    props_raw = properties_to_string(java_order(props, DECODED_MAP_CAPACITY_5X))
                else:
                    props_raw = None
                topic, queue_id = RMQ_SYS_SCHEDULE_TOPIC, level - 1
        if props_raw is None:
            props_raw = format_java_order(props)
        if store_ts is None:
            store_ts = new.storeTimestamp if new.storeTimestamp is not None else self.clock()
        simple = new.propertiesRaw is None
        code = self.tags_code(topic, props if simple else _StoredProperties(props_raw), store_ts)
        if simple and props_raw.count(PROPERTY_SEPARATOR) == len(props) - 1 \
                and props_raw.count(NAME_VALUE_SEPARATOR) == len(props):
            # One pair per segment: the map reads back as it is (less empty values).
            keys, uniq = props.get(PROPERTY_KEYS) or None, props.get(PROPERTY_UNIQ) or None
        else:
            keys, uniq = property_value(props_raw, PROPERTY_KEYS), property_value(props_raw, PROPERTY_UNIQ)
        return Rewritten(topic, queue_id, props, props_raw, store_ts, code, keys, uniq,
                         tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE))

    def prepare(self, new, store_ts: int | None = None) -> Prepared:
        """CommitLog.putMessage up to the encoding: ``new`` is a NewMessage. What put() and
        the batch encoder (batchencode.py) lay out, each its own way, as the same bytes."""
        topic, queue_id, _props, props_raw, store_ts, code, keys, uniq, dispatch = self.rewrite(new, store_ts)
        fmt = self.write_format
        sys_flag = new.sysFlag
        sys_flag = (sys_flag | BORNHOST_V6_FLAG) if len(new.bornHost[0]) == 16 else (sys_flag & ~BORNHOST_V6_FLAG)
        sys_flag = (sys_flag | STOREHOSTADDRESS_V6_FLAG) if len(new.storeHost[0]) == 16 \
            else (sys_flag & ~STOREHOSTADDRESS_V6_FLAG)
        if fmt.propCrc:
            # CommitLog.asyncPutMessage drops a __CRC32# the message carries; the encoder
            # reserves a fresh one, sealed once the record is complete.
            props_raw = reserved_properties(delete_property(props_raw, PROPERTY_CRC32))
        topic_bytes = topic.encode("utf-8")
        props_bytes = props_raw.encode("utf-8", "surrogateescape")
        if len(props_bytes) > 32767:
            raise UsageError(f"properties of {len(props_bytes)} bytes; a record holds at most 32767")
        # CommitLog.asyncPutMessage: V2 (two-byte topic length) for a topic longer than
        # Byte.MAX_VALUE Java characters.
        magic = MESSAGE_MAGIC_CODE_V2 if fmt.autoMessageVersionOnTopicLen and java_length(topic) > 127 \
            else MESSAGE_MAGIC_CODE
        size = message_size(sys_flag, len(new.body), len(topic_bytes), len(props_bytes), magic)
        return Prepared(topic, queue_id, topic_bytes, props_raw, props_bytes, sys_flag, magic, size, store_ts,
                        code, keys, uniq, dispatch)

    def encode(self, new) -> EncodedPut:
        """CommitLog.putMessage up to the append: ``new`` is a NewMessage."""
        p = self.prepare(new)
        msg = Message(p.size, p.magic, body_crc(new.body), p.queue_id, new.flag, 0, 0, p.sys_flag,
                      new.bornTimestamp, new.bornHost[0], new.bornHost[1], p.store_ts, new.storeHost[0],
                      new.storeHost[1], new.reconsumeTimes, new.preparedTransactionOffset, new.body, p.topic,
                      p.props_raw)
        return EncodedPut(p.topic, p.queue_id, bytearray(encode_message(msg)), p.store_ts, p.tags_code, p.keys,
                          p.uniq, p.sys_flag, p.dispatch, p.props_raw, self.write_format.propCrc,
                          len(p.props_bytes))


def java_length(text: str) -> int:
    """String.length(): UTF-16 code units."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _delay_level(text: str | None) -> int:
    """Message.getDelayTimeLevel: Integer.parseInt of DELAY, which throws for a non-number,
    so the broker refuses the message."""
    if text is None:
        return 0
    level = java_parse_int(text)
    if level is None:
        raise UsageError(f"property DELAY={text!r}: not a number; the broker (Message.getDelayTimeLevel) "
                         f"refuses such a message")
    return level


class _StoredProperties:
    """The few properties put() reads (TAGS, DELAY) straight from a stored string, without
    parsing all of it: same answers as parse_properties(raw).get(key)."""

    __slots__ = ("raw",)

    def __init__(self, raw: str) -> None:
        self.raw = raw

    def get(self, key: str, default: str | None = None) -> str | None:
        value = property_value(self.raw, key)
        return default if value is None else value
