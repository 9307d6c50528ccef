"""The loops that read due schedule messages back for their re-put, compiled by numba (the read
side of ``putloops``).

``plain_records`` reads the records the units of a batch name in one mapped commit log file,
checking each as ``decode_message`` checks a V1 record (the unit's size, lengths adding up;
IPv4 or IPv6 hosts), and hands back what a re-put copies from it as columns: its numbers,
its hosts, its body and properties copied back to back, where its UNIQ_KEY value is, and its
*shape*: the names of its properties in their order, whether the string ends with a
separator (as a 5.x broker stores it), and the values of REAL_TOPIC and REAL_QID, copied back
to back too. Two records of one shape get the same verdict and the same properties order from
messageTimeup, so the caller works once per distinct shape, not once per record.

A record these loops cannot take whole - another kind (V2), lengths that do not add up, a
properties segment the parser would skip (no name, no value, an empty segment) - is marked
and the caller reads it the reference way, which says why.
Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_SEPARATOR,
    STOREHOSTADDRESS_V6_FLAG,
)
from .commitlog import MIN_MESSAGE_SIZE
from .putloops import copy_span
from .scanloops import int16_be, int32_be, int64_be

# The columns of ``numbers`` (int64, one row per record).
FLAG, SYS_FLAG, BORN_TS, BORN_PORT, STORE_PORT, RECONSUME = range(6)
NUMBERS = 6

_BORN_HOST = 48  # where a record's born host starts
_NV = ord(NAME_VALUE_SEPARATOR)
_PS = ord(PROPERTY_SEPARATOR)
_NAMES_END = _PS  # ends the names of a shape (a name holds neither separator)

_REAL_TOPIC = np.frombuffer(b"REAL_TOPIC", dtype=np.uint8)
_REAL_QID = np.frombuffer(b"REAL_QID", dtype=np.uint8)
_UNIQ_KEY = np.frombuffer(b"UNIQ_KEY", dtype=np.uint8)


@njit(cache=True, nogil=True, inline="always")
def _named(buf: np.ndarray, start: int, end: int, name: np.ndarray) -> bool:
    if end - start != name.shape[0]:
        return False
    for k in range(name.shape[0]):
        if buf[start + k] != name[k]:
            return False
    return True


@njit(cache=True, nogil=True, inline="always")
def _put_value(shape: np.ndarray, s: int, props: np.ndarray, start: int, end: int) -> int:
    """A value into a shape, its length first (two bytes; 0: none)."""
    n = end - start if start >= 0 else 0
    shape[s] = (n >> 8) & 0xFF
    shape[s + 1] = n & 0xFF
    if n:
        copy_span(shape, s + 2, props, start, n)
    return s + 2 + n


@njit(cache=True, nogil=True)
def plain_records(buf: np.ndarray, limit: int, positions: np.ndarray, sizes: np.ndarray, first: int,
                  numbers: np.ndarray, born: np.ndarray, born_at: np.ndarray, stored: np.ndarray,
                  stored_at: np.ndarray, bodies: np.ndarray, body_at: np.ndarray, props: np.ndarray,
                  props_at: np.ndarray, shapes: np.ndarray, shape_at: np.ndarray, uniq_start: np.ndarray,
                  uniq_end: np.ndarray) -> int:
    """The records at ``positions[j]`` of ``sizes[j]`` bytes in ``buf`` (a commit log file of
    ``limit`` bytes) as rows ``first + j`` of the outputs; each row's hosts (4 bytes, 16 for
    IPv6), body, properties and shape go at ``x_at[row]`` (set by the caller for the first
    row; the next rows' set here). Returns the first row it cannot read (a record of another
    kind, or not whole), or -1 when every record was read."""
    for j in range(positions.shape[0]):
        row = first + j
        pos = positions[j]
        total = sizes[j]
        if pos < 0 or pos + 8 > limit or total < MIN_MESSAGE_SIZE or pos + total > limit:
            return row
        end = pos + total
        if int32_be(buf, pos) != total or int32_be(buf, pos + 4) != MESSAGE_MAGIC_CODE:
            return row
        sys_flag = int32_be(buf, pos + 36)
        born_len = 16 if sys_flag & BORNHOST_V6_FLAG else 4
        store_len = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
        host = pos + _BORN_HOST
        store_host = host + born_len + 12  # after the born port and the store timestamp
        after = store_host + store_len  # the store port, reconsume times, prepared offset, body length
        if after + 20 > end:
            return row
        body_len = int32_be(buf, after + 16)
        p = after + 20
        if body_len < 0 or p + body_len + 1 > end:
            return row
        topic_len = np.int64(buf[p + body_len])
        if topic_len >= 128:  # a signed byte
            return row
        q = p + body_len + 1 + topic_len
        if q + 2 > end or int16_be(buf, q) != end - q - 2:
            return row
        f = numbers[row]
        f[FLAG] = int32_be(buf, pos + 16)
        f[SYS_FLAG] = sys_flag
        f[BORN_TS] = int64_be(buf, pos + 40)
        f[BORN_PORT] = int32_be(buf, host + born_len)
        f[STORE_PORT] = int32_be(buf, after)
        f[RECONSUME] = int32_be(buf, after + 4)
        copy_span(born, born_at[row], buf, host, born_len)
        born_at[row + 1] = born_at[row] + born_len
        copy_span(stored, stored_at[row], buf, store_host, store_len)
        stored_at[row + 1] = stored_at[row] + store_len
        b = body_at[row]
        copy_span(bodies, b, buf, p, body_len)
        body_at[row + 1] = b + body_len
        a = props_at[row]
        n = end - q - 2
        copy_span(props, a, buf, q + 2, n)
        props_at[row + 1] = a + n
        # The segments: each must be one the parser keeps (a name, then a value); a 5.x
        # string ends with a separator (an empty last segment, which the parser drops).
        s = shape_at[row]
        topic0 = topic1 = qid0 = qid1 = uniq0 = uniq1 = -1
        seg = a
        trailing = n > 0 and props[a + n - 1] == _PS
        stop = a + n - 1 if trailing else a + n
        while True:
            e = seg
            while e < stop and props[e] != _PS:
                e += 1
            kv = seg
            while kv < e and props[kv] != _NV:
                kv += 1
            if kv == seg or kv >= e - 1:
                return row  # no name, no value or no separator: the parser skips it
            copy_span(shapes, s, props, seg, kv - seg)
            s += kv - seg
            shapes[s] = _NV
            s += 1
            if _named(props, seg, kv, _REAL_TOPIC):
                topic0, topic1 = kv + 1, e
            elif _named(props, seg, kv, _REAL_QID):
                qid0, qid1 = kv + 1, e
            elif _named(props, seg, kv, _UNIQ_KEY):
                uniq0, uniq1 = kv + 1, e
            if e >= stop:
                break
            seg = e + 1
        shapes[s] = _NAMES_END
        shapes[s + 1] = 1 if trailing else 0
        s = _put_value(shapes, s + 2, props, topic0, topic1)
        s = _put_value(shapes, s, props, qid0, qid1)
        shape_at[row + 1] = s
        uniq_start[row] = uniq0
        uniq_end[row] = uniq1
    return -1


@njit(cache=True, nogil=True)
def take_spans(src: np.ndarray, at: np.ndarray, rows: np.ndarray, out: np.ndarray, out_at: np.ndarray) -> None:
    """The spans ``src[at[i]:at[i + 1]]`` of ``rows``, back to back into ``out`` (``out_at``:
    where each starts, and the end)."""
    o = 0
    out_at[0] = 0
    for k in range(rows.shape[0]):
        i = rows[k]
        n = at[i + 1] - at[i]
        copy_span(out, o, src, at[i], n)
        o += n
        out_at[k + 1] = o


@njit(cache=True, nogil=True)
def rebuild_properties(props: np.ndarray, props_at: np.ndarray, rows: np.ndarray, kinds: np.ndarray,
                       codes: np.ndarray, codes_at: np.ndarray, names: np.ndarray, names_at: np.ndarray,
                       values: np.ndarray, value_at: np.ndarray, out: np.ndarray, out_at: np.ndarray) -> None:
    """The properties string of each of ``rows`` (read by ``plain_records``) rebuilt as a 5.x
    broker stores a map it filled from it: pair after pair in the order of its kind's codes
    (``codes[codes_at[kind]:codes_at[kind + 1]]``, ``kinds[k]`` the kind of ``rows[k]``), each
    followed by PROPERTY_SEPARATOR. A code c >= 0 is the row's c-th pair as stored; c < 0 the
    name ``-c - 1`` (``names[names_at[j]:names_at[j + 1]]``, NAME_VALUE_SEPARATOR included)
    with its value for that row, ``values[value_at[k, 2 * j]:value_at[k, 2 * j + 1]]``. String
    k goes at ``out_at[k]``
    (``out_at`` filled here, one more entry: the end)."""
    segs = np.empty(128, dtype=np.int64)
    o = 0
    for k in range(rows.shape[0]):
        i = rows[k]
        out_at[k] = o
        seg = props_at[i]
        stop = props_at[i + 1]
        if stop > seg and props[stop - 1] == _PS:
            stop -= 1
        m = 0
        while True:
            e = seg
            while e < stop and props[e] != _PS:
                e += 1
            if 2 * m + 2 > segs.shape[0]:
                grown = np.empty(2 * segs.shape[0], dtype=np.int64)
                grown[:segs.shape[0]] = segs
                segs = grown
            segs[2 * m] = seg
            segs[2 * m + 1] = e
            m += 1
            if e >= stop:
                break
            seg = e + 1
        kind = kinds[k]
        for c in range(codes_at[kind], codes_at[kind + 1]):
            code = codes[c]
            if code >= 0:
                n = segs[2 * code + 1] - segs[2 * code]
                copy_span(out, o, props, segs[2 * code], n)
            else:
                j = -code - 1
                n = names_at[j + 1] - names_at[j]
                copy_span(out, o, names, names_at[j], n)
                o += n
                n = value_at[k, 2 * j + 1] - value_at[k, 2 * j]
                copy_span(out, o, values, value_at[k, 2 * j], n)
            o += n
            out[o] = _PS
            o += 1
    out_at[rows.shape[0]] = o


@njit(cache=True, nogil=True)
def small_longs(props: np.ndarray, starts: np.ndarray, ends: np.ndarray, out: np.ndarray, ok: np.ndarray) -> None:
    """Long.parseLong of the values ``props[starts[i]:ends[i]]`` that are an optional sign and
    1 to 18 ASCII digits (no overflow there), into ``out[i]``; ``ok[i]`` False for any other
    (none: ``starts[i]`` -1), which the caller parses the reference way."""
    for i in range(starts.shape[0]):
        a = starts[i]
        b = ends[i]
        ok[i] = False
        out[i] = 0
        if a < 0 or b <= a:
            continue
        sign = 1
        if props[a] == 45 or props[a] == 43:  # '-', '+'
            if props[a] == 45:
                sign = -1
            a += 1
        if b - a < 1 or b - a > 18:
            continue
        v = 0
        good = True
        for p in range(a, b):
            d = np.int64(props[p]) - 48
            if d < 0 or d > 9:
                good = False
                break
            v = v * 10 + d
        if good:
            out[i] = sign * v
            ok[i] = True
