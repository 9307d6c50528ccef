"""The loops of the columnar scan that do not vectorise, compiled by numba.

- ``scan_records``: record heads form a chain (each head's totalSize gives the next head), so
  finding where records start is a sequential walk; compiled, it runs at the speed memory
  delivers the bytes instead of the interpreter's few hundred nanoseconds a record. While a
  record's bytes are in the cache it also reads its numbers, checks its lengths as
  decode_message does, and copies out its topic, properties and message id.
- ``property_values``: the value of each of a few property names in every properties string
  of a batch, read exactly as MessageDecoder.string2messageProperties reads them; and
  ``parse_ints`` (Integer.parseInt of some of them), ``gather_ranges`` (the values as
  strings).

They only read their inputs and write into arrays the caller allocated. The decisions around
them (what a bad head means, which FormatError, the Arrow columns) stay in ``scan.py``; the
tests hold both to ``decode_message`` and the construct definitions. Compiled on first use
and cached beside this file (``cache=True``), so a process pays the compile once per
installation, not per scan.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .commitlog import MIN_MESSAGE_SIZE
from .constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)


@njit(cache=True, nogil=True)
def _int32_be(data: np.ndarray, pos: int) -> int:
    value = (np.int64(data[pos]) << 24) | (np.int64(data[pos + 1]) << 16) | (np.int64(data[pos + 2]) << 8) \
        | np.int64(data[pos + 3])
    return value - (1 << 32) if value >= (1 << 31) else value


@njit(cache=True, nogil=True)
def _int64_be(data: np.ndarray, pos: int) -> int:
    value = np.int64(0)
    for i in range(8):
        value = (value << 8) | np.int64(data[pos + i])
    return value


@njit(cache=True, nogil=True)
def _int16_be(data: np.ndarray, pos: int) -> int:
    value = (np.int64(data[pos]) << 8) | np.int64(data[pos + 1])
    return value - (1 << 16) if value >= (1 << 15) else value


@njit(cache=True, nogil=True)
def _hex_digit(nibble: int) -> int:
    return nibble + 48 if nibble < 10 else nibble + 55


# Bytes brought into the cache ahead of the walk at a time (see scan_records).
_AHEAD = 1 << 16
_CACHE_LINE = 64


@njit(cache=True, nogil=True)
def property_values(data: np.ndarray, twos: np.ndarray, offsets: np.ndarray, names: np.ndarray,
                    name_offsets: np.ndarray, starts: np.ndarray, ends: np.ndarray, found: np.ndarray) -> None:
    """For row r (bytes ``offsets[r]:offsets[r + 1]`` of ``data``) and wanted name k (bytes
    ``name_offsets[k]:name_offsets[k + 1]`` of ``names``): the value's byte range
    ``starts[r, k]:ends[r, k]`` and ``found[r, k]`` (absent: an empty range at the row's start).

    ``twos``: the positions of every 0x02 of the rows, ascending (found in bulk by the caller).

    string2messageProperties: the string is cut at each 0x02 into segments; a segment's
    name is the text before its first 0x01 and its value the rest; the pair is kept when
    both are non-empty, and a later pair with the same name replaces an earlier one. Only a
    name as long as a wanted one matters, so the first 0x01 is looked for no further.
    """
    wanted = len(name_offsets) - 1
    longest = 0
    for k in range(wanted):
        longest = max(longest, name_offsets[k + 1] - name_offsets[k])
    # The wanted names of each length: a segment's name is compared with those only.
    of_length = np.full((longest + 1, wanted), -1, dtype=np.int64)
    for k in range(wanted):
        length = name_offsets[k + 1] - name_offsets[k]
        for slot in range(wanted):
            if of_length[length, slot] < 0:
                of_length[length, slot] = k
                break
    e = 0
    count = len(twos)
    for row in range(len(offsets) - 1):
        segment = offsets[row]
        row_end = offsets[row + 1]
        for k in range(wanted):
            starts[row, k] = segment
            ends[row, k] = segment
            found[row, k] = False
        while e < count and twos[e] < segment:
            e += 1
        while segment < row_end:
            end = twos[e] if e < count and twos[e] < row_end else row_end
            # The first 0x01 of the segment, if the name before it is not too long.
            first_01 = -1
            for p in range(segment, min(end, segment + longest + 1)):
                if data[p] == 1:
                    first_01 = p
                    break
            if first_01 > segment and end > first_01 + 1:
                length = first_01 - segment
                for slot in range(wanted):
                    k = of_length[length, slot]
                    if k < 0:
                        break
                    first = name_offsets[k]
                    same = True
                    for i in range(length):
                        if data[segment + i] != names[first + i]:
                            same = False
                            break
                    if same:
                        starts[row, k] = first_01 + 1
                        ends[row, k] = end
                        found[row, k] = True
                        break
            if end < row_end:
                e += 1
            segment = end + 1


@njit(cache=True, nogil=True)
def parse_ints(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, found: np.ndarray,
               values: np.ndarray, present: np.ndarray) -> None:
    """Integer.parseInt of each found range: an optional sign and 1 to 10 ASCII digits
    within the int range; ``present[r]`` False where it is not such an int."""
    for r in range(len(starts)):
        present[r] = False
        values[r] = 0
        if not found[r]:
            continue
        i = starts[r]
        end = ends[r]
        negative = False
        if i < end and (data[i] == 45 or data[i] == 43):  # '-' or '+'
            negative = data[i] == 45
            i += 1
        if end - i < 1 or end - i > 10:
            continue
        value = 0
        ok = True
        while i < end:
            digit = np.int64(data[i]) - 48
            if digit < 0 or digit > 9:
                ok = False
                break
            value = value * 10 + digit
            i += 1
        if not ok:
            continue
        if negative:
            value = -value
        if value < -(1 << 31) or value >= (1 << 31):
            continue
        values[r] = value
        present[r] = True


@njit(cache=True, nogil=True)
def gather_ranges(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, valid: np.ndarray,
                  offsets: np.ndarray, out: np.ndarray) -> None:
    """The byte ranges ``data[starts[i]:ends[i]]`` (where ``valid[i]``; else empty) one after
    another into ``out``, with the Arrow offsets of each (``offsets[i]``, ``offsets[n]``)."""
    o = 0
    for i in range(len(starts)):
        offsets[i] = o
        if valid[i]:
            for j in range(starts[i], ends[i]):
                out[o] = data[j]
                o += 1
    offsets[len(starts)] = o


# Why scan_records stopped.
FULL = 0  # ``max_records`` records read (or no room left for their text): more may follow
HEAD = 1  # the bytes at the next position are not a message head (the end, or a bad head)
BAD = 2  # the record at the next position has a good head but fails decode_message's checks


@njit(cache=True, nogil=True)
def scan_records(data: np.ndarray, pos: int, limit: int, positions: np.ndarray, fields: np.ndarray,
                 topic_offsets: np.ndarray, topic_out: np.ndarray, props_offsets: np.ndarray,
                 props_out: np.ndarray, id_offsets: np.ndarray, id_out: np.ndarray) -> tuple[int, int, int]:
    """Walk the records from ``pos`` and read each while its bytes are in the cache.

    Per record r: its start in ``positions[r]``; its numbers in ``fields[:, r]`` (totalSize,
    queueId, flag, queueOffset, physicalOffset, sysFlag, bornTimestamp, storeTimestamp,
    reconsumeTimes, bodyLength); its topic, properties and message id (upper hex, as
    MessageDecoder.createMessageId) as bytes one after another in ``*_out`` with Arrow
    offsets in ``*_offsets``. A record is taken only when it passes the checks decode_message
    makes of its lengths (the head as ``walk_heads``; the hosts' IPv6 bits move the fields
    after them; body, topic and properties lengths inside the record, the properties
    ending it exactly).

    Returns (records read, the next position, why it stopped: FULL, HEAD or BAD).
    """
    count = 0
    capacity = len(positions)
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
        if pos + 8 > ready:
            ahead = min(max(ready, pos) + _AHEAD, limit)
            for i in range(max(ready, pos), ahead, _CACHE_LINE):
                touched += data[i]
            ready = ahead
        total = _int32_be(data, pos)
        magic = _int32_be(data, pos + 4)
        if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) \
                or total < MIN_MESSAGE_SIZE or total > limit - pos:
            status = HEAD
            break
        v2 = 1 if magic == MESSAGE_MAGIC_CODE_V2 else 0
        sys_flag = _int32_be(data, pos + 36)
        born_v6 = 1 if sys_flag & BORNHOST_V6_FLAG else 0
        store_v6 = 1 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 0
        end = pos + total
        if total < 91 + v2 + 12 * (born_v6 + store_v6):
            status = BAD
            break
        ts_pos = pos + 56 + 12 * born_v6
        host_pos = ts_pos + 8
        tail_pos = ts_pos + 16 + 12 * store_v6
        body_len = _int32_be(data, tail_pos + 12)
        body_pos = tail_pos + 16
        if body_len < 0 or body_pos + body_len > end:
            status = BAD
            break
        tlen_pos = body_pos + body_len
        topic_pos = tlen_pos + 1 + v2
        if topic_pos > end:
            status = BAD
            break
        if v2:
            topic_len = _int16_be(data, tlen_pos)
        else:
            topic_len = np.int64(data[tlen_pos])
            if topic_len >= 128:
                topic_len -= 256
        if topic_len < 0 or topic_pos + topic_len + 2 > end:
            status = BAD
            break
        plen_pos = topic_pos + topic_len
        props_len = _int16_be(data, plen_pos)
        props_pos = plen_pos + 2
        if props_len < 0 or props_pos + props_len != end:
            status = BAD
            break
        if topic_o + topic_len > len(topic_out) or props_o + props_len > len(props_out):
            status = FULL
            break
        positions[count] = pos
        fields[0, count] = total
        fields[1, count] = _int32_be(data, pos + 12)
        fields[2, count] = _int32_be(data, pos + 16)
        fields[3, count] = _int64_be(data, pos + 20)
        physical = _int64_be(data, pos + 28)
        fields[4, count] = physical
        fields[5, count] = sys_flag
        fields[6, count] = _int64_be(data, pos + 40)
        fields[7, count] = _int64_be(data, ts_pos)
        fields[8, count] = _int32_be(data, tail_pos)
        fields[9, count] = body_len
        topic_offsets[count] = topic_o
        for i in range(topic_pos, topic_pos + topic_len):
            topic_out[topic_o] = data[i]
            topic_o += 1
        props_offsets[count] = props_o
        for i in range(props_pos, end):
            props_out[props_o] = data[i]
            props_o += 1
        # createMessageId: the store host (address and port), then the physical offset.
        id_offsets[count] = id_o
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
        count += 1
        pos = end
    topic_offsets[count] = topic_o
    props_offsets[count] = props_o
    id_offsets[count] = id_o
    # ``touched`` is returned only so that the loads above are not optimised away.
    return count, pos + 0 * touched, status
