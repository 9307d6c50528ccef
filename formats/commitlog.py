"""Commit log records (CommitLog.calMsgLength, MessageDecoder.decode).

``MESSAGE`` is the construct definition and the reference; ``decode_message`` /
``encode_message`` are the fast paths beside it, held to identical output by the tests.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from construct import (
    Bytes,
    Const,
    GreedyBytes,
    IfThenElse,
    Int8sb,
    Int16sb,
    Int32sb,
    Int64sb,
    OneOf,
    Prefixed,
    Struct,
    this,
)

from .constants import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)
from .errors import FormatError
from .msgid import create_message_id, format_host
from .properties import parse_properties

MESSAGE = Struct(
    "totalSize" / Int32sb,
    "magicCode" / OneOf(Int32sb, [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]),
    "bodyCRC" / Int32sb,
    "queueId" / Int32sb,
    "flag" / Int32sb,
    "queueOffset" / Int64sb,
    "physicalOffset" / Int64sb,
    "sysFlag" / Int32sb,
    "bornTimestamp" / Int64sb,
    "bornHost" / IfThenElse(this.sysFlag & BORNHOST_V6_FLAG, Bytes(16), Bytes(4)),
    "bornPort" / Int32sb,
    "storeTimestamp" / Int64sb,
    "storeHost" / IfThenElse(this.sysFlag & STOREHOSTADDRESS_V6_FLAG, Bytes(16), Bytes(4)),
    "storePort" / Int32sb,
    "reconsumeTimes" / Int32sb,
    "preparedTransactionOffset" / Int64sb,
    "body" / Prefixed(Int32sb, GreedyBytes),
    "topic" / IfThenElse(
        this.magicCode == MESSAGE_MAGIC_CODE_V2,
        Prefixed(Int16sb, GreedyBytes),
        Prefixed(Int8sb, GreedyBytes),
    ),
    "properties" / Prefixed(Int16sb, GreedyBytes),
)

# The end-of-file filler: only these 8 bytes are written; the rest of the file stays zero.
BLANK = Struct("totalSize" / Int32sb, "magicCode" / Const(BLANK_MAGIC_CODE, Int32sb))

RECORD_HEAD = struct.Struct(">ii")

# totalSize .. bornTimestamp: the fixed part before the first host.
_FIXED_HEAD = struct.Struct(">iiiiiqqiq")
# Everything up to the body of a record whose two hosts are IPv4 (88 bytes, < MIN_MESSAGE_SIZE).
_IPV4_HEAD = struct.Struct(">iiiiiqqiq4siq4siiqi")
_V6_FLAGS = BORNHOST_V6_FLAG | STOREHOSTADDRESS_V6_FLAG
_INT = struct.Struct(">i")
_QI = struct.Struct(">q")
_SHORT = struct.Struct(">h")
_BYTE = struct.Struct(">b")
MIN_MESSAGE_SIZE = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + 1 + 2


def parse_blank(data) -> int:
    """The totalSize of a BLANK record at the start of ``data``."""
    if len(data) < 8:
        raise FormatError(0, f"a BLANK record head of 8 bytes, found {len(data)}")
    total, magic = RECORD_HEAD.unpack_from(data, 0)
    if magic != BLANK_MAGIC_CODE:
        raise FormatError(4, f"the BLANK magic code 0xCBD43194, found 0x{magic & 0xFFFFFFFF:08X}")
    return total


def body_crc(body: bytes) -> int:
    """UtilAll.crc32: CRC-32 with the sign bit masked off."""
    return zlib.crc32(body) & 0x7FFFFFFF


@dataclass(slots=True)
class Message:
    """One message record as the broker stored it."""

    storeSize: int
    magicCode: int
    bodyCRC: int
    queueId: int
    flag: int
    queueOffset: int
    commitLogOffset: int
    sysFlag: int
    bornTimestamp: int
    bornHostAddress: bytes
    bornPort: int
    storeTimestamp: int
    storeHostAddress: bytes
    storePort: int
    reconsumeTimes: int
    preparedTransactionOffset: int
    body: bytes
    topic: str
    propertiesRaw: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def bornHost(self) -> str:
        return format_host(self.bornHostAddress, self.bornPort)

    @property
    def storeHost(self) -> str:
        return format_host(self.storeHostAddress, self.storePort)

    @property
    def msgId(self) -> str:
        return create_message_id(self.storeHostAddress, self.storePort, self.commitLogOffset)

    @property
    def bodyCrcOk(self) -> bool:
        return body_crc(self.body) == self.bodyCRC


@dataclass(slots=True, frozen=True)
class Blank:
    """The BLANK record that closes a commit log file."""

    physicalOffset: int
    totalSize: int


def _text(raw: bytes) -> str:
    # surrogateescape keeps undecodable bytes so a record rebuilds byte for byte.
    return raw.decode("utf-8", "surrogateescape")


def _raw(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


def message_size(sys_flag: int, body_len: int, topic_len: int, properties_len: int, magic: int = MESSAGE_MAGIC_CODE) -> int:
    """CommitLog.calMsgLength."""
    born = 20 if sys_flag & BORNHOST_V6_FLAG else 8
    store = 20 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 8
    topic_prefix = 2 if magic == MESSAGE_MAGIC_CODE_V2 else 1
    return (4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + born + 8 + store + 4 + 8
            + 4 + body_len + topic_prefix + topic_len + 2 + properties_len)


def from_construct(parsed) -> Message:
    """A construct parse result as a Message record."""
    props = _text(parsed.properties)
    return Message(
        storeSize=parsed.totalSize,
        magicCode=parsed.magicCode,
        bodyCRC=parsed.bodyCRC,
        queueId=parsed.queueId,
        flag=parsed.flag,
        queueOffset=parsed.queueOffset,
        commitLogOffset=parsed.physicalOffset,
        sysFlag=parsed.sysFlag,
        bornTimestamp=parsed.bornTimestamp,
        bornHostAddress=bytes(parsed.bornHost),
        bornPort=parsed.bornPort,
        storeTimestamp=parsed.storeTimestamp,
        storeHostAddress=bytes(parsed.storeHost),
        storePort=parsed.storePort,
        reconsumeTimes=parsed.reconsumeTimes,
        preparedTransactionOffset=parsed.preparedTransactionOffset,
        body=bytes(parsed.body),
        topic=_text(parsed.topic),
        propertiesRaw=props,
        properties=parse_properties(props),
    )


def to_construct(msg: Message) -> dict:
    """A Message as the dict MESSAGE.build takes."""
    return dict(
        totalSize=msg.storeSize, magicCode=msg.magicCode, bodyCRC=msg.bodyCRC,
        queueId=msg.queueId, flag=msg.flag, queueOffset=msg.queueOffset,
        physicalOffset=msg.commitLogOffset, sysFlag=msg.sysFlag,
        bornTimestamp=msg.bornTimestamp, bornHost=msg.bornHostAddress, bornPort=msg.bornPort,
        storeTimestamp=msg.storeTimestamp, storeHost=msg.storeHostAddress,
        storePort=msg.storePort, reconsumeTimes=msg.reconsumeTimes,
        preparedTransactionOffset=msg.preparedTransactionOffset, body=msg.body,
        topic=_raw(msg.topic), properties=_raw(msg.propertiesRaw),
    )


def check_message_bounds(buf, pos: int, limit: int) -> int:
    """Validate the head of a message record at ``pos``; returns its totalSize.

    ``limit`` is where the record must end at the latest (the end of its file).
    """
    if pos + 8 > limit:
        raise FormatError(pos, f"a record head of 8 bytes, but only {limit - pos} remain")
    total, magic = RECORD_HEAD.unpack_from(buf, pos)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2):
        raise FormatError(pos + 4, f"magic code 0xDAA320A7 or 0xCBD43194, found 0x{magic & 0xFFFFFFFF:08X}")
    if total < MIN_MESSAGE_SIZE or pos + total > limit:
        raise FormatError(pos, f"a message size within the file (at most {limit - pos} bytes), found totalSize {total}")
    return total


# How far after a record that does not decode the bytes must be zeros for it to be the tail a
# writer is still writing (the same bound as a scan's look for data after the end).
TORN_TAIL_WINDOW = 1 << 20


def torn_tail(buf, pos: int, limit: int) -> bool:
    """Whether the record at ``pos`` that does not decode is the last of the data, cut short:
    a message head whose totalSize fits the file, and zeros after that size (TORN_TAIL_WINDOW of them,
    or to ``limit``). That is a record being written while it is read -- a writer copies a
    record's bytes in order, so nothing after it is written yet -- or one a writer killed
    mid-write left; the broker's recovery ends the log there and drops nothing else. Either
    way the data ends at ``pos``, it is not damage. A record that does not decode with data
    after it (a zeroed size, a broken record in the middle) is not a torn tail."""
    if pos + 8 > limit:
        return False
    total = int.from_bytes(bytes(buf[pos:pos + 4]), "big", signed=True)
    magic = int.from_bytes(bytes(buf[pos + 4:pos + 8]), "big", signed=True)
    if magic not in (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2) or not 8 <= total <= limit - pos:
        return False
    end = pos + total
    stop = min(limit, end + TORN_TAIL_WINDOW)
    return not any(bytes(buf[end:stop]))


def parse_message_construct(buf, pos: int, limit: int) -> Message:
    """The reference decoder: construct over one record."""
    total = check_message_bounds(buf, pos, limit)
    try:
        parsed = MESSAGE.parse(bytes(buf[pos:pos + total]))
    except Exception as exc:  # construct raises its own hierarchy; the caller wants one type
        raise FormatError(pos, f"a whole message record of {total} bytes ({exc.__class__.__name__})") from None
    msg = from_construct(parsed)
    _check_lengths(msg, pos)
    return msg


def _check_lengths(msg: Message, pos: int) -> None:
    computed = message_size(msg.sysFlag, len(msg.body), len(_raw(msg.topic)), len(_raw(msg.propertiesRaw)), msg.magicCode)
    if computed != msg.storeSize:
        raise FormatError(pos, f"field lengths adding up to totalSize {msg.storeSize}, found {computed}")


def decode_message(buf, pos: int, limit: int) -> Message:
    """The fast decoder: same result as parse_message_construct."""
    total = check_message_bounds(buf, pos, limit)
    end = pos + total
    (_, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag, born_ts, born_addr, born_port,
     store_ts, store_addr, store_port, reconsume, prepared, body_len) = _IPV4_HEAD.unpack_from(buf, pos)
    p = pos + _IPV4_HEAD.size
    if sys_flag & _V6_FLAGS:
        # IPv6 hosts make the fixed part longer than MIN_MESSAGE_SIZE: it must fit the record.
        fixed = message_size(sys_flag, 0, 0, 0, magic)
        if total < fixed:
            raise FormatError(pos, f"a totalSize of at least {fixed} for sysFlag 0x{sys_flag & 0xFFFFFFFF:X}, "
                                   f"found {total}")
        p = pos + 48
        alen = 16 if sys_flag & BORNHOST_V6_FLAG else 4
        born_addr = bytes(buf[p:p + alen])
        born_port = _INT.unpack_from(buf, p + alen)[0]
        p += alen + 4
        store_ts = _QI.unpack_from(buf, p)[0]
        p += 8
        alen = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
        store_addr = bytes(buf[p:p + alen])
        store_port, reconsume = struct.unpack_from(">ii", buf, p + alen)
        p += alen + 8
        prepared, body_len = struct.unpack_from(">qi", buf, p)
        p += 12
    if body_len < 0 or p + body_len > end:
        raise FormatError(p - 4, f"a body length within the record, found {body_len}")
    body = bytes(buf[p:p + body_len])
    p += body_len
    if magic == MESSAGE_MAGIC_CODE_V2:
        topic_len = _SHORT.unpack_from(buf, p)[0] if p + 2 <= end else -1
        p += 2
    else:
        topic_len = _BYTE.unpack_from(buf, p)[0] if p + 1 <= end else -1
        p += 1
    if topic_len < 0 or p + topic_len + 2 > end:
        raise FormatError(p - 1, f"a topic length within the record, found {topic_len}")
    topic = _text(bytes(buf[p:p + topic_len]))
    p += topic_len
    props_len = _SHORT.unpack_from(buf, p)[0]
    p += 2
    if props_len < 0 or p + props_len != end:
        raise FormatError(p - 2, f"a properties length ending the record at totalSize {total}, found {props_len}")
    props = _text(bytes(buf[p:end]))
    return Message(total, magic, crc, queue_id, flag, queue_offset, physical_offset, sys_flag,
                   born_ts, born_addr, born_port, store_ts, store_addr, store_port, reconsume,
                   prepared, body, topic, props, parse_properties(props))


def plain_message_parts(buf, pos: int, total: int) -> tuple | None:
    """What a re-put copies from the message record of ``total`` bytes at ``pos`` (inside
    ``buf``, its magic code V1 already seen): (flag, sysFlag, bornTimestamp, bornHost,
    bornPort, storeHost, storePort, reconsumeTimes, body, propertiesRaw), or None when the
    record is not of the plain kind (IPv4 hosts) or its lengths do not add up as
    decode_message checks them - decode_message then reads it, or says why it cannot."""
    if total < MIN_MESSAGE_SIZE:
        return None
    (_, _, _, _, flag, _, _, sys_flag, born_ts, born_addr, born_port, _, store_addr, store_port, reconsume, _,
     body_len) = _IPV4_HEAD.unpack_from(buf, pos)
    end = pos + total
    p = pos + _IPV4_HEAD.size
    if sys_flag & _V6_FLAGS or body_len < 0 or p + body_len + 1 > end:
        return None
    body = bytes(buf[p:p + body_len])
    p += body_len
    topic_len = buf[p] if buf[p] < 128 else -1  # a signed byte
    p += 1 + topic_len
    if topic_len < 0 or p + 2 > end or _SHORT.unpack_from(buf, p)[0] != end - p - 2:
        return None
    return (flag, sys_flag, born_ts, born_addr, born_port, store_addr, store_port, reconsume, body,
            _text(bytes(buf[p + 2:end])))


def encode_message(msg: Message) -> bytes:
    """The fast encoder: the record bytes, with storeSize taken as given."""
    topic = _raw(msg.topic)
    props = _raw(msg.propertiesRaw)
    topic_prefix = struct.pack(">h", len(topic)) if msg.magicCode == MESSAGE_MAGIC_CODE_V2 else struct.pack(">b", len(topic))
    return b"".join((
        _FIXED_HEAD.pack(msg.storeSize, msg.magicCode, msg.bodyCRC, msg.queueId, msg.flag,
                         msg.queueOffset, msg.commitLogOffset, msg.sysFlag, msg.bornTimestamp),
        msg.bornHostAddress, _INT.pack(msg.bornPort), _QI.pack(msg.storeTimestamp),
        msg.storeHostAddress, struct.pack(">iiqi", msg.storePort, msg.reconsumeTimes,
                                          msg.preparedTransactionOffset, len(msg.body)),
        msg.body, topic_prefix, topic, _SHORT.pack(len(props)), props,
    ))


def build_message_construct(msg: Message) -> bytes:
    """The reference encoder."""
    return MESSAGE.build(to_construct(msg))
