"""Consume queues in RocksDB (5.x ``storeType=defaultRocksDB``): the keys and values of
RocksDBConsumeQueueTable (column family ``default``) and RocksDBConsumeQueueOffsetTable
(column family ``offset``), as 5.3.3 writes them. Every integer is big-endian; ``CTRL_1`` is
the byte 0x01.

Unit (CF ``default``)::

    key    topicLen int32 | 0x01 | topic | 0x01 | queueId int32 | 0x01 | cqOffset int64
    value  phyOffset int64 | size int32 | tagsCode int64 | storeTimestamp int64      (28 bytes)

Queue bound (CF ``offset``)::

    key    topicLen int32 | 0x01 | topic | 0x01 | "max" or "min" | 0x01 | queueId int32
    value  phyOffset int64 | cqOffset int64                                          (16 bytes)

"max" holds the queue's last unit (its cqOffset is the queue's max offset - 1), "min" its
first (or zeros where the broker only looked the queue up). One 8-byte value is no bound:
``CHECKPOINT_TOPIC`` / "max" / 0 holds the highest commit log offset dispatched.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
from construct import Bytes, Const, Int32sb, Int64sb, Struct, this

from .consumequeue import CQ_UNIT_DTYPE
from .errors import FormatError

CTRL_1 = b"\x01"
CTRL_2 = b"\x02"
MAX = b"max"
MIN = b"min"
# TopicValidator.RMQ_SYS_ROCKSDB_OFFSET_TOPIC: the dispatch checkpoint's topic in CF offset.
CHECKPOINT_TOPIC = "CHECKPOINT_TOPIC"
OFFSET_CF = "offset"

UNIT_VALUE_SIZE = 28  # RocksDBConsumeQueueTable.CQ_UNIT_SIZE
BOUND_VALUE_SIZE = 16
CHECKPOINT_VALUE_SIZE = 8
UNIT_KEY_EXTRA = 4 + 1 + 1 + 4 + 1 + 8  # CQ_KEY_LENGTH_WITHOUT_TOPIC_BYTES
BOUND_KEY_EXTRA = 4 + 1 + 1 + 3 + 1 + 4  # OFFSET_KEY_LENGTH_WITHOUT_TOPIC_BYTES

UNIT_KEY = Struct(
    "topicLength" / Int32sb, Const(CTRL_1), "topic" / Bytes(this.topicLength), Const(CTRL_1),
    "queueId" / Int32sb, Const(CTRL_1), "cqOffset" / Int64sb,
)
UNIT_VALUE = Struct(
    "commitLogOffset" / Int64sb,
    "size" / Int32sb,
    "tagsCode" / Int64sb,
    "storeTimestamp" / Int64sb,
)
BOUND_VALUE = Struct("phyOffset" / Int64sb, "cqOffset" / Int64sb)

# A unit value for bulk decoding, and the same bytes seen as the 20-byte units of a file queue.
UNIT_VALUE_DTYPE = np.dtype([("commitLogOffset", ">i8"), ("size", ">i4"), ("tagsCode", ">i8"),
                             ("storeTimestamp", ">i8")])
assert UNIT_VALUE_DTYPE.itemsize == UNIT_VALUE_SIZE
_AS_CQ_UNITS = np.dtype({"names": list(CQ_UNIT_DTYPE.names), "formats": [">i8", ">i4", ">i8"],
                         "offsets": [0, 8, 12], "itemsize": UNIT_VALUE_SIZE})

_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_BOUND = struct.Struct(">qq")


def queue_prefix(topic: bytes, queue_id: int) -> bytes:
    """What every unit key of one queue starts with (up to its cqOffset)."""
    return _I32.pack(len(topic)) + CTRL_1 + topic + CTRL_1 + _I32.pack(queue_id) + CTRL_1


def unit_key(topic: bytes, queue_id: int, cq_offset: int) -> bytes:
    return queue_prefix(topic, queue_id) + _I64.pack(cq_offset)


def queue_end_key(topic: bytes, queue_id: int) -> bytes:
    """The least key above every unit key of the queue (an iterator's upper bound)."""
    return queue_prefix(topic, queue_id)[:-1] + CTRL_2


def bound_key(topic: bytes, queue_id: int, which: bytes) -> bytes:
    return _I32.pack(len(topic)) + CTRL_1 + topic + CTRL_1 + which + CTRL_1 + _I32.pack(queue_id)


@dataclass(slots=True, frozen=True)
class UnitKey:
    topic: str
    queueId: int
    cqOffset: int


@dataclass(slots=True, frozen=True)
class BoundKey:
    topic: str
    which: str  # "max" | "min"
    queueId: int


@dataclass(slots=True, frozen=True)
class Bound:
    phyOffset: int
    cqOffset: int


def _topic(key: bytes, extra: int, what: str) -> tuple[str, int]:
    """The topic of a key and where the part after it starts."""
    if len(key) < extra:
        raise FormatError(0, f"a {what} key of at least {extra} bytes, found {len(key)}")
    n = _I32.unpack_from(key)[0]
    if n < 0 or len(key) != extra + n or key[4:5] != CTRL_1 or key[5 + n:6 + n] != CTRL_1:
        raise FormatError(0, f"a {what} key: topic length, 0x01, topic, 0x01, ... ({extra} bytes and the "
                             f"topic), found {key.hex()}")
    try:
        return key[5:5 + n].decode("utf-8"), 6 + n
    except UnicodeDecodeError:
        raise FormatError(5, f"a UTF-8 topic in the {what} key {key.hex()}") from None


def parse_unit_key(key: bytes) -> UnitKey:
    topic, at = _topic(key, UNIT_KEY_EXTRA, "consume queue unit")
    if key[at + 4:at + 5] != CTRL_1:
        raise FormatError(at + 4, f"0x01 after the queue id of the unit key {key.hex()}")
    return UnitKey(topic, _I32.unpack_from(key, at)[0], _I64.unpack_from(key, at + 5)[0])


def parse_bound_key(key: bytes) -> BoundKey:
    topic, at = _topic(key, BOUND_KEY_EXTRA, "consume queue offset")
    which = key[at:at + 3]
    if which not in (MAX, MIN) or key[at + 3:at + 4] != CTRL_1:
        raise FormatError(at, f'"max" or "min" and 0x01 in the offset key {key.hex()}')
    return BoundKey(topic, which.decode(), _I32.unpack_from(key, at + 4)[0])


def parse_bound(value: bytes) -> Bound:
    if len(value) != BOUND_VALUE_SIZE:
        raise FormatError(0, f"a {BOUND_VALUE_SIZE}-byte offset value (phyOffset, cqOffset), found {len(value)} bytes")
    return Bound(*_BOUND.unpack(value))


def parse_checkpoint(value: bytes) -> int:
    if len(value) != CHECKPOINT_VALUE_SIZE:
        raise FormatError(0, f"an {CHECKPOINT_VALUE_SIZE}-byte max physical offset, found {len(value)} bytes")
    return _I64.unpack(value)[0]


def decode_unit_values(data: bytes) -> np.ndarray:
    """Unit values back to back (28 bytes each) as one structured array, storeTimestamp too."""
    if len(data) % UNIT_VALUE_SIZE:
        raise FormatError(len(data) - len(data) % UNIT_VALUE_SIZE,
                          f"consume queue values of {UNIT_VALUE_SIZE} bytes each")
    return np.frombuffer(data, dtype=UNIT_VALUE_DTYPE)


def as_cq_units(values: np.ndarray) -> np.ndarray:
    """Values as the 20-byte units every queue reader takes (formats.consumequeue), a copy."""
    return values.view(_AS_CQ_UNITS).astype(CQ_UNIT_DTYPE)


def encode_unit_value(phy_offset: int, size: int, tags_code: int, store_timestamp: int) -> bytes:
    return struct.pack(">qiqq", phy_offset, size, tags_code, store_timestamp)


def encode_bound(phy_offset: int, cq_offset: int) -> bytes:
    return _BOUND.pack(phy_offset, cq_offset)
