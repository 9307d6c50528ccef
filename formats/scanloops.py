"""The loop of the columnar scan that does not vectorise, compiled by numba.

Record heads form a chain (each head's totalSize gives the next head), so finding where
records start is a sequential walk; compiled, ``scan_records`` runs at the speed memory
delivers the bytes instead of the interpreter's few hundred nanoseconds a record. While a
record's bytes are in the cache it also reads its numbers, checks its lengths as
decode_message does, copies out its topic, properties and message id, and picks out the
values of a few property names, read exactly as MessageDecoder.string2messageProperties
reads them (some also as Integer.parseInt reads them).

It only reads its input and writes into arrays the caller allocated. The decisions around it
(what a bad head means, which FormatError, the Arrow columns) stay in ``scan.py``; the tests
hold both to ``decode_message`` and the construct definitions. Compiled on first use and
cached beside this file (``cache=True``), so a process pays the compile once per
installation, not per scan.
"""

from __future__ import annotations

import sys

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

from .commitlog import MIN_MESSAGE_SIZE
from .constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)


def _big_endian_load(bits: int):
    """An intrinsic: the ``bits``-bit big-endian signed number at ``data[pos]`` as int64, in
    one (unaligned) load."""

    @intrinsic
    def load(typingctx, data, pos):
        sig = types.int64(data, pos)

        def codegen(context, builder, signature, args):
            array = context.make_array(signature.args[0])(context, builder, args[0])
            kind = ir.IntType(bits)
            value = builder.load(builder.bitcast(builder.gep(array.data, [args[1]]), kind.as_pointer()), align=1)
            if sys.byteorder == "little":
                value = builder.bswap(value)
            return builder.sext(value, ir.IntType(64)) if bits < 64 else value

        return sig, codegen

    return load


int32_be = _big_endian_load(32)
int64_be = _big_endian_load(64)


@njit(cache=True, nogil=True, inline="always")
def int16_be(data: np.ndarray, pos: int) -> int:
    value = (np.int64(data[pos]) << 8) | np.int64(data[pos + 1])
    return value - (1 << 16) if value >= (1 << 15) else value


@njit(cache=True, nogil=True, inline="always")
def _hex_digit(nibble: int) -> int:
    return nibble + 48 + 7 * (nibble > 9)


@intrinsic
def _memcpy(typingctx, dst, dst_pos, src, src_pos, n):
    """``dst[dst_pos:dst_pos + n] = src[src_pos:src_pos + n]`` for byte arrays, as one memcpy
    (a loop of byte copies is several times slower for the lengths of properties)."""
    sig = types.void(dst, dst_pos, src, src_pos, n)

    def codegen(context, builder, signature, args):
        target = context.make_array(signature.args[0])(context, builder, args[0])
        source = context.make_array(signature.args[2])(context, builder, args[2])
        cgutils.raw_memcpy(builder, builder.gep(target.data, [args[1]]), builder.gep(source.data, [args[3]]),
                           args[4], 1)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _load_u64(typingctx, data, pos):
    """The 8 bytes ``data[pos:pos + 8]`` as one native-endian (unaligned) load."""
    sig = types.uint64(data, pos)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(64).as_pointer())
        return builder.load(pointer, align=1)

    return sig, codegen


@intrinsic
def _store_u64(typingctx, data, pos, value):
    """``data[pos:pos + 8]`` = the 8 bytes of ``value``, as one native-endian (unaligned) store."""
    sig = types.void(data, pos, types.uint64)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(64).as_pointer())
        builder.store(args[2], pointer, align=1)
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _copy(dst: np.ndarray, dst_pos: int, dst_end: int, src: np.ndarray, src_pos: int, n: int) -> None:
    """``dst[dst_pos:dst_pos + n] = src[src_pos:src_pos + n]``. Short ranges go 8 bytes at a
    time and may then write up to 7 bytes past their end, though not past ``dst_end``: the
    caller writes its ranges of ``dst[:dst_end]`` in ascending order, each over the spare
    bytes of the one before."""
    if n <= 64 and src_pos + n + 8 <= len(src) and dst_pos + n + 8 <= dst_end:
        i = 0
        while i < n:
            _store_u64(dst, dst_pos + i, _load_u64(src, src_pos + i))
            i += 8
    else:
        _memcpy(dst, dst_pos, src, src_pos, n)


_LITTLE_ENDIAN = sys.byteorder == "little"
_ONES = np.uint64(0x0101010101010101)
_HIGHS = np.uint64(0x8080808080808080)


@njit(cache=True, nogil=True, inline="always")
def _find(data: np.ndarray, start: int, end: int, byte: int) -> tuple[int, int]:
    """The first position of ``byte`` in ``data[start:end]``, else ``end``; and non-zero if
    a byte read on the way (at least those before that position) is not ASCII. Eight bytes
    at a time: in ``x`` (the word xor the byte in every lane) the lowest lane that is zero
    is the lowest high bit set in ``(x - 0x01..01) & ~x & 0x80..80``."""
    i = start
    high = np.uint64(0)
    if _LITTLE_ENDIAN:
        pattern = _ONES * np.uint64(byte)
        while i + 8 <= end:
            word = _load_u64(data, i)
            high |= word
            x = word ^ pattern
            mask = (x - _ONES) & ~x & _HIGHS
            if mask:
                return i + (np.int64(trailing_zeros(mask)) >> 3), np.int64((high & _HIGHS) != 0)
            i += 8
    seen = np.int64((high & _HIGHS) != 0)
    while i < end:
        seen |= np.int64(data[i]) & 128
        if data[i] == byte:
            return i, seen
        i += 1
    return end, seen


def name_table(names: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The wanted property names as scan_records takes them: their bytes one after
    another, the offsets of each, and for each first byte the names that start with it
    (-1 after the last)."""
    raws = [name.encode("utf-8") for name in names]
    assert all(raw and b"\x01" not in raw and b"\x02" not in raw for raw in raws)
    name_offsets = np.zeros(len(raws) + 1, dtype=np.int64)
    np.cumsum([len(r) for r in raws], out=name_offsets[1:])
    by_first = np.full((256, len(raws) + 1), -1, dtype=np.int64)
    for k, raw in enumerate(raws):
        row = by_first[raw[0]]
        row[int(np.argmax(row < 0))] = k
    return np.frombuffer(b"".join(raws), dtype=np.uint8), name_offsets, by_first


@njit(cache=True, nogil=True, inline="always")
def _segment(data: np.ndarray, segment: int, end: int, names: np.ndarray, name_offsets: np.ndarray,
             by_first: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
    """One 0x02-separated segment ``data[segment:end]``: its name is the text before its
    first 0x01, its value the rest, and the pair is kept when neither is empty. When the
    name is wanted name k, the value's range goes to ``starts[k]``, ``ends[k]`` (a later
    pair replaces an earlier one). No wanted name holds 0x01, so the segment's name is name
    k exactly when the segment starts with name k's bytes followed by 0x01."""
    if segment >= end:
        return
    byte = data[segment]
    for slot in range(by_first.shape[1]):
        k = by_first[byte, slot]
        if k < 0:
            return
        first = name_offsets[k]
        length = name_offsets[k + 1] - first
        separator = segment + length
        if separator + 1 >= end or data[separator] != 1:
            continue
        same = True
        for i in range(length):
            if data[segment + i] != names[first + i]:
                same = False
                break
        if same:
            starts[k] = separator + 1
            ends[k] = end
            return


@njit(cache=True, nogil=True, inline="always")
def _parse_int(data: np.ndarray, start: int, end: int) -> tuple[int, bool]:
    """Integer.parseInt of ``data[start:end]`` when it is an optional sign and 1 to 10
    ASCII digits within the int range; else (0, False) (the caller has the exact rule)."""
    i = start
    negative = False
    if i < end and (data[i] == 45 or data[i] == 43):  # '-' or '+'
        negative = data[i] == 45
        i += 1
    if end - i < 1 or end - i > 10:
        return 0, False
    value = np.int64(0)
    while i < end:
        digit = np.int64(data[i]) - 48
        if digit < 0 or digit > 9:
            return 0, False
        value = value * 10 + digit
        i += 1
    if negative:
        value = -value
    if value < -(1 << 31) or value >= (1 << 31):
        return 0, False
    return value, True


# DLedgerMmapFileStore.CURRENT_MAGIC: the first int of every DLedger entry.
DLEDGER_ENTRY_MAGIC = 1

# Bytes brought into the cache ahead of the walk at a time (see scan_records).
_AHEAD = 1 << 16
_CACHE_LINE = 64

# Why scan_records stopped.
FULL = 0  # ``max_records`` records read (or no room left for their text): more may follow
HEAD = 1  # the bytes at the next position are not a message head (the end, or a bad head)
BAD = 2  # the record at the next position has a good head but fails decode_message's checks

# What scan_records says of an int property of a row.
ABSENT = 0
PRESENT = 1
NOT_PLAIN = 2  # found, but not a plain int: the caller reads it with the exact Java rule


@njit(cache=True, nogil=True)
def scan_records(data: np.ndarray, pos: int, limit: int, ints: np.ndarray, longs: np.ndarray,
                 topic_offsets: np.ndarray, topic_out: np.ndarray, props_offsets: np.ndarray,
                 props_out: np.ndarray, id_offsets: np.ndarray, id_out: np.ndarray,
                 names: np.ndarray, name_offsets: np.ndarray, by_first: np.ndarray,
                 value_offsets: np.ndarray, value_out: np.ndarray, value_found: np.ndarray,
                 int_values: np.ndarray, int_state: np.ndarray, not_ascii: np.ndarray,
                 copy_props: bool = True, copy_ids: bool = True, header: int = 0) -> tuple[int, int, int]:
    """Walk the records from ``pos`` and read each while its bytes are in the cache.

    ``header``: the bytes before each record (48 in a DLedger data file: each record sits in
    an entry whose header has magic 1 at +0, the entry's size at +4 and the record's length at
    +44; the entry is followed while its magic is 1, its size is 48 + that length and the
    record inside fills it). Positions (``pos``, the one returned) are entries' then.

    A record is a message head (a message magic code, V1 or V2, at +4 and a totalSize of at
    least MIN_MESSAGE_SIZE that ends by ``limit``) whose lengths pass the checks
    decode_message makes (the hosts' IPv6 bits move the fields after them; body, topic and
    properties lengths inside the record, the properties ending it exactly).

    Per record r (at most ``ints.shape[1]``): its numbers in ``ints[:, r]`` (totalSize,
    queueId, flag, sysFlag, reconsumeTimes, bodyLength) and ``longs[:, r]`` (queueOffset,
    physicalOffset, bornTimestamp, storeTimestamp); its topic, properties and message id (upper hex, as
    MessageDecoder.createMessageId) as bytes one after another in ``*_out`` with Arrow
    offsets in ``*_offsets``; the properties and the ids only when ``copy_props`` and
    ``copy_ids`` (else their offsets stay 0); and where the record starts in ``longs[4, r]``.

    Its properties as string2messageProperties reads them: cut at each 0x02 into segments,
    a segment's name the text before its first 0x01 and its value the rest, a pair kept
    when both are non-empty, a later pair with the same name replacing an earlier one.
    0x01 and 0x02 never occur inside a multi-byte UTF-8 character, so byte positions serve
    as well as character positions. Wanted name k (bytes ``name_offsets[k]:name_offsets[k
    + 1]`` of ``names``, see name_table): for the first ``len(value_offsets)`` names the
    value in the k-th of as many equal parts of ``value_out``, with offsets (in that part)
    ``value_offsets[k]`` and ``value_found[k, r]``; for the others (j = k - len(value_offsets)) Integer.parseInt of it in ``int_values[j, r]``,
    and ``int_state[j, r]`` ABSENT, PRESENT or NOT_PLAIN. ``not_ascii[0]`` and
    ``not_ascii[1]`` (zeros when called) become non-zero if a topic or properties byte of a
    record read is not ASCII (so the UTF-8 check is needed).

    Returns (records read, the next position, why it stopped: FULL, HEAD or BAD).
    """
    count = 0
    capacity = ints.shape[1]
    wanted = len(name_offsets) - 1
    strings = value_offsets.shape[0]
    value_room = len(value_out) // max(strings, 1)
    starts = np.empty(wanted, dtype=np.int64)
    ends = np.empty(wanted, dtype=np.int64)
    value_o = np.zeros(strings, dtype=np.int64)
    topic_o = 0
    props_o = 0
    id_o = 0
    status = HEAD
    ready = pos
    touched = 0
    while True:
        if count == capacity:
            status = FULL
            break
        if pos + 8 > limit:
            status = HEAD
            break
        # Each head's address comes from the one before, so the walk alone waits for memory
        # at every record. Touching every cache line of the next 64 KiB first (loads that do
        # not depend on each other, so the CPU runs them at once) turns that into a stream.
        if pos + 8 > ready:
            ahead = min(max(ready, pos) + _AHEAD, limit)
            for i in range(max(ready, pos), ahead, _CACHE_LINE):
                touched += data[i]
            ready = ahead
        entry = pos
        body = 0
        if header:
            if pos + header + 8 > limit:
                status = HEAD
                break
            body = int32_be(data, pos + header - 4)
            if int32_be(data, pos) != DLEDGER_ENTRY_MAGIC or int32_be(data, pos + 4) != body + header:
                status = HEAD
                break
            pos += header
        total = int32_be(data, pos)
        magic = int32_be(data, pos + 4)
        if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) \
                or total < MIN_MESSAGE_SIZE or total > limit - pos or (header != 0 and total != body):
            pos = entry
            status = HEAD
            break
        v2 = 1 if magic == MESSAGE_MAGIC_CODE_V2 else 0
        sys_flag = int32_be(data, pos + 36)
        born_v6 = 1 if sys_flag & BORNHOST_V6_FLAG else 0
        store_v6 = 1 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0
        end = pos + total
        if total < 91 + v2 + 12 * (born_v6 + store_v6):
            pos = entry
            status = BAD
            break
        ts_pos = pos + 56 + 12 * born_v6
        host_pos = ts_pos + 8
        tail_pos = ts_pos + 16 + 12 * store_v6
        body_len = int32_be(data, tail_pos + 12)
        body_pos = tail_pos + 16
        if body_len < 0 or body_pos + body_len > end:
            pos = entry
            status = BAD
            break
        tlen_pos = body_pos + body_len
        topic_pos = tlen_pos + 1 + v2
        if topic_pos > end:
            pos = entry
            status = BAD
            break
        if v2:
            topic_len = int16_be(data, tlen_pos)
        else:
            topic_len = np.int64(data[tlen_pos])
            if topic_len >= 128:
                topic_len -= 256
        if topic_len < 0 or topic_pos + topic_len + 2 > end:
            pos = entry
            status = BAD
            break
        plen_pos = topic_pos + topic_len
        props_len = int16_be(data, plen_pos)
        props_pos = plen_pos + 2
        if props_len < 0 or props_pos + props_len != end:
            pos = entry
            status = BAD
            break

        # The wanted properties' ranges in data.
        for k in range(wanted):
            starts[k] = -1
            ends[k] = -1
        segment = props_pos
        while segment < end:
            segment_end, high = _find(data, segment, end, 2)
            not_ascii[1] |= high
            _segment(data, segment, segment_end, names, name_offsets, by_first, starts, ends)
            segment = segment_end + 1

        # Room for this record's text, or the batch ends before it.
        if topic_o + topic_len > len(topic_out) or (copy_props and props_o + props_len > len(props_out)):
            pos = entry
            status = FULL
            break
        room = True
        for k in range(strings):
            if starts[k] >= 0 and value_o[k] + ends[k] - starts[k] > value_room:
                room = False
        if not room:
            pos = entry
            status = FULL
            break

        ints[0, count] = total
        ints[1, count] = int32_be(data, pos + 12)
        ints[2, count] = int32_be(data, pos + 16)
        ints[3, count] = sys_flag
        ints[4, count] = int32_be(data, tail_pos)
        ints[5, count] = body_len
        physical = int64_be(data, pos + 28)
        longs[0, count] = int64_be(data, pos + 20)
        longs[1, count] = physical
        longs[2, count] = int64_be(data, pos + 40)
        longs[3, count] = int64_be(data, ts_pos)
        longs[4, count] = pos
        topic_offsets[count] = topic_o
        _copy(topic_out, topic_o, len(topic_out), data, topic_pos, topic_len)
        for i in range(topic_pos, topic_pos + topic_len):
            not_ascii[0] |= np.int64(data[i]) & 128
        topic_o += topic_len
        props_offsets[count] = props_o
        if copy_props:
            _memcpy(props_out, props_o, data, props_pos, props_len)
            props_o += props_len
        # createMessageId: the store host (address and port), then the physical offset.
        id_offsets[count] = id_o
        if copy_ids:
            for i in range(host_pos, host_pos + (20 if store_v6 else 8)):
                byte = data[i]
                id_out[id_o] = _hex_digit(byte >> 4)
                id_out[id_o + 1] = _hex_digit(byte & 15)
                id_o += 2
            for shift in range(56, -8, -8):
                byte = (physical >> shift) & 255
                id_out[id_o] = _hex_digit(byte >> 4)
                id_out[id_o + 1] = _hex_digit(byte & 15)
                id_o += 2
        for k in range(strings):
            value_offsets[k, count] = value_o[k]
            value_found[k, count] = starts[k] >= 0
            if starts[k] >= 0:
                _copy(value_out, k * value_room + value_o[k], (k + 1) * value_room, data, starts[k],
                      ends[k] - starts[k])
                value_o[k] += ends[k] - starts[k]
        for k in range(strings, wanted):
            j = k - strings
            int_values[j, count] = 0
            int_state[j, count] = ABSENT
            if starts[k] >= 0:
                value, ok = _parse_int(data, starts[k], ends[k])
                int_values[j, count] = value
                int_state[j, count] = PRESENT if ok else NOT_PLAIN
        count += 1
        pos = end
    topic_offsets[count] = topic_o
    props_offsets[count] = props_o
    id_offsets[count] = id_o
    for k in range(strings):
        value_offsets[k, count] = value_o[k]
    # ``touched`` is returned only so that the loads above are not optimised away.
    return count, pos + 0 * touched, status
