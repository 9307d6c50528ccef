"""The loops of the batch encoder (the write side of ``scanloops``), compiled by numba.

``encode_records`` lays out a batch of message records back to back, exactly as
``commitlog.encode_message`` lays out one, from columns the caller gathered: the numbers of
every record, and its host addresses, body, topic and properties as slices of four
concatenated buffers. ``seal_crc_digits`` writes the ``__CRC32#`` digits of records whose
CRC the caller computed (``propcrc``: UtilAll.crc32 of the record but its last 20 bytes).
``units`` lays out consume queue units (CqUnit: offset, size, tagsCode, big-endian);
``fill_template`` makes the stored properties strings of a batch that shares one key set
from its template and their values; ``property_spans`` finds a property's value in stored
properties strings, ``tags_codes`` hashes TAGS, ``index_key_hashes`` hashes the index keys
of records (IndexService.buildIndex) from their KEYS and UNIQ_KEY, without making the
``topic#key`` strings.

They only read their inputs and write into arrays the caller allocated; what goes in (the
delay rewrite, the properties string, the tagsCode) is decided by the caller
(``rmqdelay.store.batchencode``), and a test holds the bytes to put()'s record by record.
Compiled on first use and cached beside this file (``cache=True``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .constants import (
    BORNHOST_V6_FLAG,
    KEY_SEPARATOR,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_SEPARATOR,
    STOREHOSTADDRESS_V6_FLAG,
)

# The columns of ``fields`` (int64, one row per record).
SIZE, MAGIC, BODY_CRC, QUEUE_ID, FLAG, QUEUE_OFFSET, PHYSICAL_OFFSET, SYS_FLAG, BORN_TS, \
    BORN_PORT, STORE_TS, STORE_PORT, RECONSUME, PREPARED_OFFSET = range(14)
FIELDS = 14

KEY_SEPARATOR_BYTE = ord(KEY_SEPARATOR)
PROPERTY_SEPARATOR_BYTE = ord(PROPERTY_SEPARATOR)
CRC_DIGITS_AT = 11  # the ten digits start 11 bytes before the record's end (then 0x02)


@njit(cache=True, nogil=True, inline="always")
def _put_be(out: np.ndarray, pos: int, value: int, nbytes: int) -> None:
    for k in range(nbytes):
        out[pos + k] = (value >> (8 * (nbytes - 1 - k))) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def copy_span(out: np.ndarray, pos: int, src: np.ndarray, start: int, n: int) -> None:
    # A loop over two views, not a slice assignment nor indices computed per byte: numba
    # compiles this one to a vectorised copy, over ten times faster on a record's body.
    to = out[pos:pos + n]
    part = src[start:start + n]
    for k in range(part.shape[0]):
        to[k] = part[k]


@njit(cache=True, nogil=True)
def encode_records(out: np.ndarray, at: np.ndarray, fields: np.ndarray, born: np.ndarray, born_at: np.ndarray,
                   stored: np.ndarray, stored_at: np.ndarray, bodies: np.ndarray, body_at: np.ndarray,
                   topics: np.ndarray, topic_at: np.ndarray, topic_len: np.ndarray, props: np.ndarray,
                   props_at: np.ndarray) -> None:
    """Record i at ``out[at[i]:]``: its numbers from ``fields[i]``, its born and store
    addresses from ``born[born_at[i]:]`` and ``stored[stored_at[i]:]`` (4 or 16 bytes each as
    its sysFlag says), its topic from ``topics[topic_at[i]:][:topic_len[i]]`` (a buffer of the
    batch's distinct topics), its body and properties from slices ``[x_at[i], x_at[i + 1])``
    of their buffers."""
    for i in range(fields.shape[0]):
        f = fields[i]
        pos = at[i]
        sys_flag = f[SYS_FLAG]
        _put_be(out, pos, f[SIZE], 4)
        _put_be(out, pos + 4, f[MAGIC], 4)
        _put_be(out, pos + 8, f[BODY_CRC], 4)
        _put_be(out, pos + 12, f[QUEUE_ID], 4)
        _put_be(out, pos + 16, f[FLAG], 4)
        _put_be(out, pos + 20, f[QUEUE_OFFSET], 8)
        _put_be(out, pos + 28, f[PHYSICAL_OFFSET], 8)
        _put_be(out, pos + 36, sys_flag, 4)
        _put_be(out, pos + 40, f[BORN_TS], 8)
        pos += 48
        h = born_at[i]
        n = 16 if sys_flag & BORNHOST_V6_FLAG else 4
        copy_span(out, pos, born, h, n)
        pos += n
        _put_be(out, pos, f[BORN_PORT], 4)
        _put_be(out, pos + 4, f[STORE_TS], 8)
        pos += 12
        h = stored_at[i]
        n = 16 if sys_flag & STOREHOSTADDRESS_V6_FLAG else 4
        copy_span(out, pos, stored, h, n)
        pos += n
        _put_be(out, pos, f[STORE_PORT], 4)
        _put_be(out, pos + 4, f[RECONSUME], 4)
        _put_be(out, pos + 8, f[PREPARED_OFFSET], 8)
        b0, b1 = body_at[i], body_at[i + 1]
        _put_be(out, pos + 16, b1 - b0, 4)
        pos += 20
        copy_span(out, pos, bodies, b0, b1 - b0)
        pos += b1 - b0
        t0 = topic_at[i]
        t1 = t0 + topic_len[i]
        if f[MAGIC] == MESSAGE_MAGIC_CODE_V2:
            _put_be(out, pos, t1 - t0, 2)
            pos += 2
        else:
            out[pos] = t1 - t0
            pos += 1
        copy_span(out, pos, topics, t0, t1 - t0)
        pos += t1 - t0
        p0, p1 = props_at[i], props_at[i + 1]
        _put_be(out, pos, p1 - p0, 2)
        pos += 2
        copy_span(out, pos, props, p0, p1 - p0)


@njit(cache=True, nogil=True)
def seal_crc_digits(out: np.ndarray, ends: np.ndarray, crcs: np.ndarray) -> None:
    """MessageDecoder.createCrc32's ten digits of ``crcs[i]`` (least significant first, padded
    with '0') into the reserved property of the record ending at ``out[ends[i]]``."""
    for i in range(ends.shape[0]):
        crc = crcs[i]
        pos = ends[i] - CRC_DIGITS_AT
        for k in range(10):
            out[pos + k] = 48 + (crc % 10 if crc > 0 else 0)
            crc //= 10


@njit(cache=True, nogil=True)
def units(out: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray) -> None:
    """CqUnits (20 bytes each: commit log offset, size, tagsCode) of the records, back to back."""
    for i in range(offsets.shape[0]):
        pos = 20 * i
        _put_be(out, pos, offsets[i], 8)
        _put_be(out, pos + 8, sizes[i], 4)
        _put_be(out, pos + 12, tags_codes[i], 8)


@njit(cache=True, nogil=True)
def queue_offsets(queue_index: np.ndarray, dispatch: np.ndarray, next_offsets: np.ndarray,
                  out: np.ndarray) -> None:
    """Each dispatched record's queue offset, in order: the next of its queue
    (``next_offsets[queue_index[i]]``, moved on); 0 for a record that gets no unit."""
    for i in range(queue_index.shape[0]):
        if dispatch[i]:
            q = queue_index[i]
            out[i] = next_offsets[q]
            next_offsets[q] += 1
        else:
            out[i] = 0


@njit(cache=True, nogil=True, inline="always")
def _index_hash(h: int) -> int:
    """IndexFile.indexKeyHashMethod of a String.hashCode kept as an unsigned 32-bit value:
    abs of the signed int, Integer.MIN_VALUE (whose abs stays negative) as 0."""
    if h >= 0x80000000:
        h = 0x100000000 - h
    return 0 if h == 0x80000000 else h


@njit(cache=True, nogil=True)
def property_spans(props: np.ndarray, props_at: np.ndarray, needle: np.ndarray, starts: np.ndarray,
                   ends: np.ndarray) -> None:
    """Where the value of one property is in each stored properties string
    ``props[props_at[i]:props_at[i + 1]]``, as MessageDecoder.string2messageProperties reads
    it (``properties.property_value``): the last segment (between PROPERTY_SEPARATORs) that
    starts with ``needle`` (the name and NAME_VALUE_SEPARATOR) and has a value after it.
    ``starts[i]``/``ends[i]``; -1 and -1 when there is none."""
    m = needle.shape[0]
    for i in range(props_at.shape[0] - 1):
        starts[i] = -1
        ends[i] = -1
        seg = props_at[i]
        stop = props_at[i + 1]
        while seg < stop:
            end = seg
            while end < stop and props[end] != PROPERTY_SEPARATOR_BYTE:
                end += 1
            if end - seg > m:
                same = True
                for k in range(m):
                    if props[seg + k] != needle[k]:
                        same = False
                        break
                if same:
                    starts[i] = seg + m
                    ends[i] = end
            seg = end + 1


@njit(cache=True, nogil=True)
def fill_template(out: np.ndarray, at: np.ndarray, pieces: np.ndarray, pieces_at: np.ndarray, values: np.ndarray,
                  bounds: np.ndarray, order: np.ndarray, value_starts: np.ndarray) -> None:
    """Properties strings of one template, back to back in ``out``, message i's from
    ``at[i]`` (``at`` filled here, one more entry: the end): piece 0, its value 0, piece 1,
    ..., its last value, the last piece (piece j: ``pieces[pieces_at[j]:pieces_at[j + 1]]``;
    k + 1 of them for k values). The values are ``values`` split at ``bounds`` (value v:
    ``values[bounds[v] + 1:bounds[v + 1]]``), k a message, its value j the ``order[j]``-th of
    its k; where it lands in ``out`` goes into ``value_starts[i * k + j]``."""
    k = order.shape[0]
    pos = 0
    n = (bounds.shape[0] - 1) // k
    for i in range(n):
        at[i] = pos
        for j in range(k + 1):
            p0 = pieces_at[j]
            size = pieces_at[j + 1] - p0
            copy_span(out, pos, pieces, p0, size)
            pos += size
            if j < k:
                v = i * k + order[j]
                a = bounds[v] + 1
                size = bounds[v + 1] - a
                value_starts[i * k + j] = pos
                copy_span(out, pos, values, a, size)
                pos += size
    at[n] = pos


@njit(cache=True, nogil=True)
def tags_codes(props: np.ndarray, starts: np.ndarray, ends: np.ndarray, rows: np.ndarray, out: np.ndarray) -> bool:
    """MessageExtBrokerInner.tagsString2tagsCode (String.hashCode, 0 for none) of the TAGS
    at ``props[starts[i]:ends[i]]`` of each of ``rows``, into ``out[i]``; False (and the rest
    not done) at a tag that is not ASCII (its UTF-16 code units are not its bytes)."""
    for i in rows:
        h = 0
        for j in range(starts[i], ends[i]):
            c = props[j]
            if c >= 0x80:
                return False
            h = (31 * h + c) & 0xFFFFFFFF
        out[i] = h - 0x100000000 if h >= 0x80000000 else h
    return True


@njit(cache=True, nogil=True)
def index_key_hashes(indexed: np.ndarray, seeds: np.ndarray, props: np.ndarray, uniq_starts: np.ndarray,
                     uniq_ends: np.ndarray, keys_starts: np.ndarray, keys_ends: np.ndarray, records: np.ndarray,
                     hashes: np.ndarray) -> int:
    """IndexService.buildIndex's keys of every record ``indexed[i]``, hashed, in its order:
    ``topic#UNIQ_KEY`` when it has one (``props[uniq_starts[i]:uniq_ends[i]]``), then
    ``topic#k`` for every non-empty token of its KEYS (``props[keys_starts[i]:keys_ends[i]]``)
    split at single spaces. ``seeds[i]`` is String.hashCode of ``topic#`` (unsigned 32-bit),
    so each hash goes on from it over the key's bytes. Writes (record, hash) pairs into
    ``records``/``hashes``; returns how many, or -1 at a key that is not ASCII (its UTF-16
    code units are not its bytes: the caller hashes that batch key string by key string)."""
    k = 0
    for i in range(indexed.shape[0]):
        if not indexed[i]:
            continue
        seed = seeds[i]
        if uniq_starts[i] >= 0:
            h = seed
            for j in range(uniq_starts[i], uniq_ends[i]):
                if props[j] >= 0x80:
                    return -1
                h = (31 * h + props[j]) & 0xFFFFFFFF
            records[k] = i
            hashes[k] = _index_hash(h)
            k += 1
        if keys_starts[i] < 0:
            continue
        h = seed
        empty = True
        for j in range(keys_starts[i], keys_ends[i] + 1):
            if j == keys_ends[i] or props[j] == KEY_SEPARATOR_BYTE:
                if not empty:
                    records[k] = i
                    hashes[k] = _index_hash(h)
                    k += 1
                h = seed
                empty = True
            elif props[j] >= 0x80:
                return -1
            else:
                h = (31 * h + props[j]) & 0xFFFFFFFF
                empty = False
    return k
