"""The index file, ``index/yyyyMMddHHmmssSSS`` (IndexFile, IndexHeader, IndexService).

A hash table on disk that maps ``topic#key`` to commit log offsets, for queryMessage by key
and by message id (UNIQ_KEY)::

    header   40 B   beginTimestamp, endTimestamp, beginPhyOffset, endPhyOffset (int64),
                    hashSlotCount, indexCount (int32)
    slots    maxHashSlotNum x int32: the position of the newest entry of the slot, 0 = empty
    entries  maxIndexNum x 20 B: keyHash int32, phyOffset int64, timeDiff int32 (seconds
             after beginTimestamp), prevIndex int32 (the slot's previous entry, 0 = none)

Entry positions start at 1 (``indexCount`` starts at 1; 0 is the invalid index), so a file
holds at most maxIndexNum - 1 entries. ``INDEX_FILE`` is the construct definition and the
reference; ``append_entries`` (the writer), ``select_phy_offsets`` (look-ups) and the numpy
views are the fast paths beside it, held to the same bytes by the tests. Pure: no file I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from construct import Array, Int32sb, Int64sb, Struct, this

from .constants import KEY_SEPARATOR, TRANSACTION_ROLLBACK_TYPE, TRANSACTION_TYPE_MASK
from .errors import FormatError
from .javahash import java_string_hash

INDEX_HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_ENTRY_SIZE = 20
INVALID_INDEX = 0
# MessageStoreConfig defaults.
DEFAULT_MAX_HASH_SLOT_NUM = 5_000_000
DEFAULT_MAX_INDEX_NUM = 5_000_000 * 4
# MessageStoreConfig.maxMsgsNumBatch: queryOffset returns at most this many offsets.
DEFAULT_MAX_MSGS_NUM_BATCH = 64
INT_MAX = 0x7FFFFFFF
LONG_MAX = 0x7FFFFFFFFFFFFFFF

INDEX_HEADER = Struct(
    "beginTimestamp" / Int64sb,
    "endTimestamp" / Int64sb,
    "beginPhyOffset" / Int64sb,
    "endPhyOffset" / Int64sb,
    "hashSlotCount" / Int32sb,
    "indexCount" / Int32sb,
)
INDEX_ENTRY = Struct(
    "keyHash" / Int32sb,
    "phyOffset" / Int64sb,
    "timeDiff" / Int32sb,
    "prevIndex" / Int32sb,
)
# parse(data, hashSlotNum=..., indexNum=...): the geometry is the broker's config, not in the file.
INDEX_FILE = Struct(
    "header" / INDEX_HEADER,
    "hashSlots" / Array(this._params.hashSlotNum, Int32sb),
    "entries" / Array(this._params.indexNum, INDEX_ENTRY),
)

_HEADER = struct.Struct(">qqqqii")
assert _HEADER.size == INDEX_HEADER_SIZE
SLOT_DTYPE = np.dtype(">i4")
ENTRY_DTYPE = np.dtype([("keyHash", ">i4"), ("phyOffset", ">i8"), ("timeDiff", ">i4"), ("prevIndex", ">i4")])
assert ENTRY_DTYPE.itemsize == INDEX_ENTRY_SIZE


@dataclass(slots=True)
class IndexHeader:
    beginTimestamp: int = 0
    endTimestamp: int = 0
    beginPhyOffset: int = 0
    endPhyOffset: int = 0
    hashSlotCount: int = 0
    indexCount: int = 0  # as stored: 0 in a file that never got an entry

    @property
    def count(self) -> int:
        """IndexHeader.load: the position of the next entry (a stored 0 or less reads as 1)."""
        return self.indexCount if self.indexCount > 0 else 1

    @property
    def entries(self) -> int:
        return self.count - 1


def index_file_size(hash_slot_num: int, index_num: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_ENTRY_SIZE


def slots_position(slot: int) -> int:
    return INDEX_HEADER_SIZE + slot * HASH_SLOT_SIZE


def entry_position(hash_slot_num: int, index: int) -> int:
    return INDEX_HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index * INDEX_ENTRY_SIZE


def parse_index_header(data) -> IndexHeader:
    if len(data) < INDEX_HEADER_SIZE:
        raise FormatError(len(data), f"an index header of {INDEX_HEADER_SIZE} bytes, found {len(data)}")
    return IndexHeader(*_HEADER.unpack_from(data, 0))


def build_index_header(header: IndexHeader) -> bytes:
    return _HEADER.pack(header.beginTimestamp, header.endTimestamp, header.beginPhyOffset,
                        header.endPhyOffset, header.hashSlotCount, header.indexCount)


def parse_index_header_construct(data) -> IndexHeader:
    parsed = INDEX_HEADER.parse(bytes(data[:INDEX_HEADER_SIZE]))
    return IndexHeader(parsed.beginTimestamp, parsed.endTimestamp, parsed.beginPhyOffset,
                       parsed.endPhyOffset, parsed.hashSlotCount, parsed.indexCount)


def slots_view(buf, hash_slot_num: int) -> np.ndarray:
    """The hash slots of a whole file's bytes, big-endian int32, without a copy."""
    return np.frombuffer(buf, dtype=SLOT_DTYPE, count=hash_slot_num, offset=INDEX_HEADER_SIZE)


def entries_view(buf, hash_slot_num: int, first: int, stop: int) -> np.ndarray:
    """Entries at positions [first, stop) of a whole file's bytes, as ENTRY_DTYPE, without a copy."""
    return np.frombuffer(buf, dtype=ENTRY_DTYPE, count=max(stop - first, 0),
                         offset=entry_position(hash_slot_num, first))


# -- what IndexService.buildIndex puts ---------------------------------------------------------

def indexed_by_broker(sys_flag: int) -> bool:
    """buildIndex skips only TRANSACTION_ROLLBACK_TYPE (prepared messages are indexed, though
    they get no consume queue unit)."""
    return sys_flag & TRANSACTION_TYPE_MASK != TRANSACTION_ROLLBACK_TYPE


def index_key(topic: str, key: str) -> str:
    """IndexService.buildKey."""
    return f"{topic}#{key}"


def message_index_keys(topic: str, keys: str | None, uniq_key: str | None) -> list[str]:
    """The keys buildIndex puts for one message, in its order: ``topic#UNIQ_KEY`` (when the
    property is there, even empty), then ``topic#k`` for every non-empty token of KEYS split
    at single spaces."""
    result = [] if uniq_key is None else [f"{topic}#{uniq_key}"]
    if keys:
        result.extend(f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k)
    return result


# -- the key hash --------------------------------------------------------------------------------

def _java_text(text: str) -> str:
    # The broker decodes properties with new String(bytes, UTF_8): undecodable bytes, kept
    # here as surrogate escapes, are U+FFFD there.
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def key_hashes(keys: Sequence[str]) -> np.ndarray:
    """IndexFile.indexKeyHashMethod of many keys at once: abs(String.hashCode), with
    Integer.MIN_VALUE (whose abs is still negative) as 0. int64 array.

    hashCode is h = 31 * h + c over UTF-16 code units, mod 2**32. ASCII keys (code unit =
    byte) are encoded together and hashed a length at a time, one column of characters per
    step across all keys of that length (uint32 wraps as Java's int does); others one by one."""
    n = len(keys)
    result = np.zeros(n, dtype=np.int64)
    if n == 0:
        return result
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=n)
    joined = "".join(keys)
    if joined.isascii():
        rows = np.arange(n)
    else:
        ascii_rows = np.fromiter(map(str.isascii, keys), dtype=bool, count=n)
        for i in np.flatnonzero(~ascii_rows).tolist():
            result[i] = java_string_hash(_java_text(keys[i]))
        rows = np.flatnonzero(ascii_rows)
        joined = "".join([keys[i] for i in rows.tolist()])
    data = np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    row_lengths = lengths[rows]
    starts = np.zeros(len(rows), dtype=np.int64)
    np.cumsum(row_lengths[:-1], out=starts[1:])
    for length in np.flatnonzero(np.bincount(row_lengths)).tolist():  # the lengths there are, in order
        if length == 0:
            continue
        group = np.flatnonzero(row_lengths == length)
        codes = data[starts[group][:, None] + np.arange(length)]
        h = np.zeros(len(group), dtype=np.uint32)
        for column in range(length):
            h = h * np.uint32(31) + codes[:, column]
        result[rows[group]] = h
    signed = np.where(result >= 0x80000000, result - 0x100000000, result)
    hashes = np.abs(signed)
    hashes[hashes == 0x80000000] = 0
    return hashes


# -- IndexFile.putKey, many at once -------------------------------------------------------------

def time_diffs(store_timestamps: np.ndarray, begin_timestamp: int | np.ndarray) -> np.ndarray:
    """putKey's timeDiff: (storeTimestamp - beginTimestamp) / 1000 in whole seconds, 0 when the
    file has no beginTimestamp yet or the difference is negative, at most Integer.MAX_VALUE."""
    diff = np.asarray(store_timestamps, dtype=np.int64) - begin_timestamp
    seconds = np.where(diff < 0, 0, diff // 1000)  # Java truncates; negatives become 0 either way
    seconds = np.minimum(seconds, INT_MAX)
    return np.where(np.asarray(begin_timestamp) <= 0, 0, seconds)


def append_entries(header: IndexHeader, slots: np.ndarray, hashes: np.ndarray, phy_offsets: np.ndarray,
                   store_timestamps: np.ndarray, index_num: int) -> tuple[np.ndarray, np.ndarray]:
    """IndexFile.putKey for as many keys as the file has room for, in order.

    ``slots`` (the file's hash slots, native int32, modified in place) and ``header`` are
    updated as the keys are put one by one; returns (entries as ENTRY_DTYPE, the slot numbers
    changed). Fewer entries than keys when the file fills up (indexCount reaches
    ``index_num``): the caller rolls to a new file for the rest.
    """
    count = header.count
    n = min(len(hashes), max(index_num - count, 0))
    entries = np.zeros(n, dtype=ENTRY_DTYPE)
    if n == 0:
        return entries, np.zeros(0, dtype=np.int64)
    hashes = np.asarray(hashes[:n], dtype=np.int64)
    phy = np.asarray(phy_offsets[:n], dtype=np.int64)
    ts = np.asarray(store_timestamps[:n], dtype=np.int64)
    positions = np.arange(count, count + n, dtype=np.int64)
    slot_of = hashes % len(slots)

    # prevIndex: the previous key of the same slot in this batch, else what the slot held
    # (a value <= 0 or > indexCount at the time is the invalid index).
    order = np.argsort(slot_of, kind="stable")
    sorted_slots = slot_of[order]
    first = np.ones(n, dtype=bool)
    first[1:] = sorted_slots[1:] != sorted_slots[:-1]
    last = np.ones(n, dtype=bool)
    last[:-1] = first[1:]
    prev_sorted = np.empty(n, dtype=np.int64)
    prev_sorted[1:] = positions[order][:-1]
    held = slots[sorted_slots[first]].astype(np.int64)
    held_at = positions[order][first]
    prev_sorted[first] = np.where((held <= INVALID_INDEX) | (held > held_at), INVALID_INDEX, held)
    prev = np.empty(n, dtype=np.int64)
    prev[order] = prev_sorted
    changed = sorted_slots[last]
    slots[changed] = positions[order][last]

    # timeDiff against beginTimestamp as it stands when each key is put: the first key of an
    # empty file sees the begin it was created with (0, or the previous file's end), and
    # then sets beginTimestamp to its own store time.
    begin = np.full(n, header.beginTimestamp, dtype=np.int64)
    if count <= 1:
        begin[1:] = ts[0]
        header.beginPhyOffset = int(phy[0])
        header.beginTimestamp = int(ts[0])
    entries["keyHash"] = hashes
    entries["phyOffset"] = phy
    entries["timeDiff"] = time_diffs(ts, begin)
    entries["prevIndex"] = prev
    header.hashSlotCount += int((prev == INVALID_INDEX).sum())
    header.indexCount = count + n
    header.endPhyOffset = int(phy[-1])
    header.endTimestamp = int(ts[-1])
    return entries, changed


def new_file_header(previous: IndexHeader | None) -> IndexHeader:
    """IndexFile's constructor for the file after ``previous`` (getAndCreateLastIndexFile):
    begin and end are the previous file's end offset and time, when those are > 0."""
    header = IndexHeader()
    if previous is not None:
        if previous.endPhyOffset > 0:
            header.beginPhyOffset = header.endPhyOffset = previous.endPhyOffset
        if previous.endTimestamp > 0:
            header.beginTimestamp = header.endTimestamp = previous.endTimestamp
    return header


# -- IndexFile.selectPhyOffset ---------------------------------------------------------------------

def is_time_matched(header: IndexHeader, begin: int, end: int) -> bool:
    """IndexFile.isTimeMatched."""
    b, e = header.beginTimestamp, header.endTimestamp
    return (begin < b and end > e) or (b <= begin <= e) or (b <= end <= e)


def select_phy_offsets(buf, header: IndexHeader, hash_slot_num: int, key_hash: int, out: list[int],
                       max_num: int, begin: int, end: int) -> None:
    """Walk the slot chain of ``key_hash`` newest first, appending the phyOffset of every entry
    of that hash whose time lies in [begin, end], as selectPhyOffset does (a chain stops at
    an invalid prevIndex, a self-reference, an entry older than ``begin`` or a negative
    timeDiff). Colliding keys of the same hash are the caller's to filter out."""
    count = header.count
    slot_value = struct.unpack_from(">i", buf, slots_position(key_hash % hash_slot_num))[0]
    if slot_value <= INVALID_INDEX or slot_value > count or count <= 1:
        return
    base = entry_position(hash_slot_num, 0)
    index = slot_value
    for _ in range(count):  # a cycle in a damaged file must not hang the walk
        if len(out) >= max_num:
            return
        key_hash_read, phy, time_diff, prev = struct.unpack_from(">iqii", buf, base + index * INDEX_ENTRY_SIZE)
        if time_diff < 0:
            return
        time_read = header.beginTimestamp + time_diff * 1000
        if key_hash_read == key_hash and begin <= time_read <= end:
            out.append(phy)
        if prev <= INVALID_INDEX or prev > count or prev == index or time_read < begin:
            return
        index = prev
