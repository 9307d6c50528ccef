"""The loops of the columnar scan that do not vectorise, compiled by numba.

- ``walk_heads``: record heads form a chain (each head's totalSize gives the next head), so
  finding where records start is a sequential walk; compiled, it runs at the speed memory
  delivers the bytes instead of the interpreter's few hundred nanoseconds a record.
- ``property_values``: the value of each of a few property names in every properties string
  of a batch, read exactly as MessageDecoder.string2messageProperties reads them; and
  ``parse_ints`` (Integer.parseInt of some of them), ``upper_hex`` (message ids).

Both only read their inputs and write into arrays the caller allocated. The checks and
decisions around them (what a bad head means, which FormatError, the Arrow columns) stay in
``scan.py``; the tests hold both to ``decode_message`` and the construct definitions.
Compiled on first use and cached beside this file (``cache=True``), so a process pays the
compile once per installation, not per scan.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .commitlog import MIN_MESSAGE_SIZE
from .constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2


@njit(cache=True, nogil=True)
def _int32_be(data: np.ndarray, pos: int) -> int:
    value = (np.int64(data[pos]) << 24) | (np.int64(data[pos + 1]) << 16) | (np.int64(data[pos + 2]) << 8) \
        | np.int64(data[pos + 3])
    return value - (1 << 32) if value >= (1 << 31) else value


# Bytes brought into the cache ahead of the walk at a time (see walk_heads).
_AHEAD = 1 << 16
_CACHE_LINE = 64


@njit(cache=True, nogil=True)
def walk_heads(data: np.ndarray, pos: int, limit: int, out: np.ndarray) -> tuple[int, int]:
    """Follow message heads from ``pos``: a head is a message magic code (V1 or V2) at +4
    and a totalSize of at least MIN_MESSAGE_SIZE that ends by ``limit``.

    Writes the start of each into ``out`` until ``out`` is full or the bytes at the next
    position are not such a head; returns (how many, the next position).
    """
    count = 0
    capacity = len(out)
    # Each head's address comes from the one before, so the walk alone waits for memory at
    # every record. Touching every cache line of the next 64 KiB first (loads that do not
    # depend on each other, so the CPU runs them at once) turns that into a stream.
    ready = pos
    touched = 0
    while count < capacity and pos + 8 <= limit:
        if pos + 8 > ready:
            ahead = min(max(ready, pos) + _AHEAD, limit)
            for i in range(max(ready, pos), ahead, _CACHE_LINE):
                touched += data[i]
            ready = ahead
        total = _int32_be(data, pos)
        magic = _int32_be(data, pos + 4)
        if (magic != MESSAGE_MAGIC_CODE and magic != MESSAGE_MAGIC_CODE_V2) \
                or total < MIN_MESSAGE_SIZE or total > limit - pos:
            break
        out[count] = pos
        count += 1
        pos += total
    # ``touched`` is returned only so that the loads above are not optimised away.
    return count, pos + 0 * touched


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
def upper_hex(raw: np.ndarray, out: np.ndarray) -> None:
    """``out[i]``: the bytes of ``raw[i]`` as upper-case hex digits (ASCII), high nibble first."""
    for i in range(raw.shape[0]):
        for j in range(raw.shape[1]):
            byte = raw[i, j]
            high = byte >> 4
            low = byte & 15
            out[i, 2 * j] = high + 48 if high < 10 else high + 55
            out[i, 2 * j + 1] = low + 48 if low < 10 else low + 55
