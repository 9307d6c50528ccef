"""Commit log bytes as columns: the fast path behind scans and analyses.

``decode_message`` (commitlog.py) reads one record into a ``Message``; this module reads a
whole file's bytes into pyarrow RecordBatches of ``MESSAGE_SCHEMA``, with the same values
and the same ``FormatError`` at the first bad record. How:

1. a compiled loop (``scanloops.walk_heads``) walks the record heads (totalSize,
   magicCode) to find where records start; where it stops, the head there is read once
   more to tell the zero tail or a BLANK record (the data's end) from a bad record;
2. every fixed field is gathered for all records at once with numpy fancy indexing on the
   big-endian bytes (the host fields move with sysFlag's IPv6 bits, so positions after
   them are computed per record), and checked as decode_message checks it;
3. topic and properties become Arrow string arrays straight from their byte ranges; the
   few properties the analyses need are picked out of the properties bytes as
   MessageDecoder.string2messageProperties reads them (a later duplicate key wins, empty
   keys or values are skipped): the 0x02 separators found in one numpy pass, the pairs by
   a compiled loop (``scanloops.property_values``).

Pure: bytes in, batches out, no file I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .commitlog import MIN_MESSAGE_SIZE, decode_message
from .constants import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_ORIGIN_MESSAGE_ID,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_RETRY_TOPIC,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    STOREHOSTADDRESS_V6_FLAG,
)
from .errors import FormatError
from .javanum import java_parse_int
from .scanloops import parse_ints, property_values, upper_hex, walk_heads

MESSAGE_SCHEMA = pa.schema([
    pa.field("store", pa.string(), nullable=False),
    pa.field("file", pa.string(), nullable=False),
    pa.field("commitlog_offset", pa.int64(), nullable=False),
    pa.field("store_size", pa.int32(), nullable=False),
    pa.field("topic", pa.string(), nullable=False),
    pa.field("queue_id", pa.int32(), nullable=False),
    pa.field("queue_offset", pa.int64(), nullable=False),
    pa.field("flag", pa.int32(), nullable=False),
    pa.field("sys_flag", pa.int32(), nullable=False),
    pa.field("born_timestamp", pa.int64(), nullable=False),
    pa.field("store_timestamp", pa.int64(), nullable=False),
    pa.field("reconsume_times", pa.int32(), nullable=False),
    pa.field("body_length", pa.int32(), nullable=False),
    pa.field("msg_id", pa.string(), nullable=False),
    pa.field("tags", pa.string()),
    pa.field("keys", pa.string()),
    pa.field("uniq_key", pa.string()),
    pa.field("delay_level", pa.int32()),
    pa.field("real_topic", pa.string()),
    pa.field("real_qid", pa.int32()),
    pa.field("retry_topic", pa.string()),
    pa.field("origin_message_id", pa.string()),
    pa.field("properties_raw", pa.string(), nullable=False),
])

# Property columns of the schema and the property each one holds.
STRING_PROPERTIES = {
    "tags": PROPERTY_TAGS,
    "keys": PROPERTY_KEYS,
    "uniq_key": PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    "real_topic": PROPERTY_REAL_TOPIC,
    "retry_topic": PROPERTY_RETRY_TOPIC,
    "origin_message_id": PROPERTY_ORIGIN_MESSAGE_ID,
}
INT_PROPERTIES = {
    "delay_level": PROPERTY_DELAY_TIME_LEVEL,
    "real_qid": PROPERTY_REAL_QUEUE_ID,
}

DEFAULT_BATCH_ROWS = 65_536

_HEAD = struct.Struct(">ii")

# totalSize .. bodyLength when both hosts are IPv4 (nearly every record): 88 bytes at the
# same place in every record, so one gather per batch reads all of them.
_V4_DTYPE = np.dtype([
    ("totalSize", ">i4"), ("magicCode", ">i4"), ("bodyCRC", ">i4"), ("queueId", ">i4"),
    ("flag", ">i4"), ("queueOffset", ">i8"), ("physicalOffset", ">i8"), ("sysFlag", ">i4"),
    ("bornTimestamp", ">i8"), ("bornHost", "V8"), ("storeTimestamp", ">i8"), ("storeHost", "V8"),
    ("reconsumeTimes", ">i4"), ("preparedTransactionOffset", ">i8"), ("bodyLength", ">i4"),
])
assert _V4_DTYPE.itemsize == 88
_V4_STORE_HOST = _V4_DTYPE.fields["storeHost"][1]
_V4_PHYSICAL = _V4_DTYPE.fields["physicalOffset"][1]
# reconsumeTimes, preparedTransactionOffset, bodyLength: after the store host.
_TAIL_DTYPE = np.dtype([("reconsumeTimes", ">i4"), ("preparedTransactionOffset", ">i8"), ("bodyLength", ">i4")])



def _head_stop(buf, pos: int, limit: int) -> str | FormatError | None:
    """What the bytes at ``pos`` are: None for a message head walk_records follows,
    ``"end"`` for the zero tail or the BLANK record (or the file's end), else the
    FormatError of the record there."""
    if pos + 8 > limit:
        if pos >= limit or not any(bytes(buf[pos:limit])):
            return "end"
        return FormatError(pos, f"a record head of 8 bytes, found {limit - pos}")
    total, magic = _HEAD.unpack_from(buf, pos)
    if (magic == MESSAGE_MAGIC_CODE or magic == MESSAGE_MAGIC_CODE_V2) and MIN_MESSAGE_SIZE <= total <= limit - pos:
        return None
    if total == 0 and magic == 0:
        return "end"
    if magic == BLANK_MAGIC_CODE:
        if total != limit - pos:
            return FormatError(pos, f"a BLANK record filling the rest of the file "
                                    f"({limit - pos} bytes), found totalSize {total}")
        return "end"
    return _error_at(buf, pos, limit)


def walk_records(buf, pos: int = 0, limit: int | None = None, max_records: int = DEFAULT_BATCH_ROWS,
                 views: _Views | None = None) -> tuple[np.ndarray, int, str | FormatError | None]:
    """Start positions of up to ``max_records`` message records from ``pos``.

    Returns (positions, next position, stop): stop is None when ``max_records`` were found
    and more may follow, ``"end"`` at the zero tail or a BLANK record (nothing more in this
    file), or the FormatError of the bad record head at the next position. Only the heads
    are checked here (the compiled ``walk_heads``); ``decode_records`` checks the rest.
    """
    limit = len(buf) if limit is None else limit
    views = _Views(buf) if views is None else views
    positions = np.empty(max_records, dtype=np.int64)
    count, pos = walk_heads(views.bytes, pos, limit, positions)
    stop = None if count == max_records else _head_stop(buf, pos, limit)
    return positions[:count], pos, stop


def _error_at(buf, pos: int, limit: int) -> FormatError:
    """The FormatError decode_message gives for the record at ``pos``."""
    try:
        decode_message(buf, pos, limit)
    except FormatError as exc:
        return exc
    # Only reached if the vectorised checks and decode_message disagree: still refuse the record.
    return FormatError(pos, "a message record the fast path can decode")


class _Views:
    """The buffer seen through unaligned, byte-strided views: ``view[p]`` is the ``width``
    bytes starting at ``p``, so one fancy index gathers a field of every record at once.

    The views hold raw bytes (numpy void) and the result is reinterpreted afterwards:
    gathering plain bytes is many times faster than gathering unaligned big-endian numbers.
    """

    def __init__(self, buf) -> None:
        self.bytes = np.frombuffer(buf, dtype=np.uint8)
        self._buf = buf
        self._views: dict = {}

    def __len__(self) -> int:
        return len(self.bytes)

    def take(self, dtype, positions: np.ndarray, *, clip: bool = True) -> np.ndarray:
        """The ``dtype`` at each position. ``clip=False`` when the positions are known to be
        inside the buffer; else positions computed from a bad record's garbage are clipped
        so that they cannot fail here."""
        dtype = np.dtype(dtype)
        width = dtype.itemsize
        view = self._views.get(width)
        if view is None:
            count = max(len(self.bytes) - width + 1, 0)
            view = np.ndarray(shape=(count,), dtype=f"V{width}", buffer=self.bytes, strides=(1,))
            self._views[width] = view
        if clip:
            positions = np.clip(positions, 0, len(view) - 1)
        return view[positions].view(dtype)

    def byte_at(self, positions: np.ndarray) -> np.ndarray:
        """The byte at each position as int64 (clipped like ``take``)."""
        return self.bytes[np.clip(positions, 0, len(self.bytes) - 1)].astype(np.int64)

    def arrow_buffer(self) -> pa.Buffer:
        buf = self._buf
        return buf if isinstance(buf, pa.Buffer) else pa.py_buffer(buf)


def _ranges(data: pa.Buffer, size: int, starts: np.ndarray, ends: np.ndarray,
            valid: np.ndarray | None = None) -> pa.Array:
    """The byte ranges [start, end) of ``data`` (ascending, not overlapping) as strings.

    The ranges and the gaps between them become one string array over ``data`` without a
    copy (offsets s0, e0, s1, e1, ...); taking every other element gathers the bytes in
    C++. The result is not checked for UTF-8 here.
    """
    n = len(starts)
    offset_type = np.int32 if size < 2**31 else np.int64
    offsets = np.empty(2 * n + 1, dtype=offset_type)
    offsets[0:2 * n:2] = starts
    offsets[1:2 * n:2] = ends
    offsets[2 * n] = ends[-1] if n else 0
    kind = pa.string() if offset_type is np.int32 else pa.large_string()
    both = pa.Array.from_buffers(kind, 2 * n, [None, pa.py_buffer(offsets), data])
    mask = None if valid is None or valid.all() else ~valid
    picked = both.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64), mask=mask))
    return picked if kind == pa.string() else picked.cast(pa.string())


def _checked_utf8(strings: pa.Array) -> pa.Array:
    try:
        strings.validate(full=True)
    except pa.ArrowInvalid:
        strings = _replace_invalid_utf8(strings)
    return strings


def _replace_invalid_utf8(strings: pa.Array) -> pa.Array:
    # decode_message keeps undecodable bytes as surrogate escapes, which Arrow strings
    # cannot hold: here they become U+FFFD.
    raw = strings.view(pa.binary())
    return pa.array([None if v is None else v.decode("utf-8", "replace") for v in raw.to_pylist()],
                    type=pa.string())


def _offsets(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _string_array(data, offsets: np.ndarray) -> pa.Array:
    """ASCII text already laid out with its offsets (no check needed)."""
    n = len(offsets) - 1
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _constant_strings(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    data = raw * n
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)),
                                                  pa.py_buffer(data)])


def _upper_hex(raw: np.ndarray) -> np.ndarray:
    """(n, k) bytes -> (n, 2k) upper-case hex digits (ASCII), high nibble first."""
    out = np.empty((raw.shape[0], 2 * raw.shape[1]), dtype=np.uint8)
    upper_hex(raw, out)
    return out


def _message_ids(views: _Views, host_pos: np.ndarray, v6: np.ndarray, physical: np.ndarray,
                 ipv4: np.ndarray | None = None) -> pa.Array:
    """MessageDecoder.createMessageId: store address + port + physical offset, upper hex.

    ``ipv4``: the (n, 16) bytes already at hand when no store host is IPv6.
    """
    n = len(host_pos)
    if not v6.any():
        # IPv4: address 4 + port 4 + offset 8 = 16 bytes, 32 hex digits.
        if ipv4 is None:
            ipv4 = np.empty((n, 16), dtype=np.uint8)
            ipv4[:, :8] = views.take("V8", host_pos).view(np.uint8).reshape(n, 8)
            ipv4[:, 8:] = physical.astype(">i8").view(np.uint8).reshape(n, 8)
        return _string_array(_upper_hex(ipv4), np.arange(n + 1, dtype=np.int32) * 32)
    # IPv6: 16 + 4 + 8 = 28 bytes, 56 hex digits.
    phys = physical.astype(">i8").view(np.uint8).reshape(n, 8)
    raw = np.zeros((n, 28), dtype=np.uint8)
    host = views.take("V20", host_pos).view(np.uint8).reshape(n, 20)
    raw[:, :8] = host[:, :8]
    raw[:, 8:16] = phys
    raw[v6, :20] = host[v6]
    raw[v6, 20:28] = phys[v6]
    lengths = np.where(v6, 56, 32)
    hexed = _upper_hex(raw)
    data = hexed[np.arange(56) < lengths[:, None]]
    return _string_array(data.tobytes(), _offsets(lengths))


class _Properties:
    """The values of a few property names in every properties string of a batch, read the
    way MessageDecoder.string2messageProperties reads them (``property_values``): a later
    pair with the same name wins, empty names and values are skipped, a value may hold
    0x01. 0x01 and 0x02 never occur inside a multi-byte UTF-8 character, so byte positions
    serve as well as character positions.
    """

    def __init__(self, strings: pa.Array, names: list[str]) -> None:
        n = len(strings)
        _, offsets_buf, data_buf = strings.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int32)[strings.offset:strings.offset + n + 1].astype(np.int64)
        if data_buf is None:
            data_buf = pa.py_buffer(b"")
        self.data_buf = data_buf
        self.data = np.frombuffer(data_buf, dtype=np.uint8)
        self.n = n
        self._names = names
        raws = [name.encode("utf-8") for name in names]
        name_offsets = np.zeros(len(raws) + 1, dtype=np.int64)
        np.cumsum([len(r) for r in raws], out=name_offsets[1:])
        # One row's values side by side: the loop writes them together.
        self._starts = np.empty((n, len(names)), dtype=np.int64)
        self._ends = np.empty((n, len(names)), dtype=np.int64)
        self._found = np.empty((n, len(names)), dtype=bool)
        # The 0x02 separators in bulk (a vectorised pass), the pairs from them (a compiled loop).
        first, last = (int(offsets[0]), int(offsets[-1])) if n else (0, 0)
        twos = np.flatnonzero(self.data[first:last] == 2)
        if first:
            twos += first
        property_values(self.data, twos, offsets, np.frombuffer(b"".join(raws), dtype=np.uint8),
                        name_offsets, self._starts, self._ends, self._found)

    def value_ranges(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(valid, value starts, value ends) per row for property ``name``."""
        k = self._names.index(name)
        return self._found[:, k], self._starts[:, k], self._ends[:, k]

    def strings(self, name: str) -> pa.Array:
        # Whole segments of valid UTF-8 text cut at ASCII separators: valid UTF-8 again.
        valid, starts, ends = self.value_ranges(name)
        return _ranges(self.data_buf, len(self.data), starts, ends, valid)

    def ints(self, name: str) -> pa.Array:
        """Integer.parseInt of the value (javanum.java_parse_int); null when absent or not
        an int."""
        valid, starts, ends = self.value_ranges(name)
        values = np.empty(self.n, dtype=np.int32)
        present = np.empty(self.n, dtype=bool)
        parse_ints(self.data, starts, ends, valid, values, present)
        # What the fast path refused (rare): Java also takes leading zeros past 10 digits and
        # any Unicode decimal digit, so those values get the exact rule.
        for row in np.flatnonzero(valid & ~present).tolist():
            number = java_parse_int(self.data[starts[row]:ends[row]].tobytes().decode("utf-8", "replace"))
            if number is not None:
                values[row], present[row] = number, True
        return pa.array(values, type=pa.int32(), mask=~present)


_WANTED = [*STRING_PROPERTIES.values(), *INT_PROPERTIES.values()]


def _empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=MESSAGE_SCHEMA)


def decode_batch(buf, positions: list[int] | np.ndarray, limit: int, *, store: str, file: str,
                 views: _Views | None = None) -> tuple[pa.RecordBatch, FormatError | None]:
    """The records at ``positions`` (heads already checked by walk_records) as one batch.

    When a record is bad, the batch holds the records before it and the error is returned
    (the same FormatError decode_message raises for that record).
    """
    views = _Views(buf) if views is None else views
    pos = np.asarray(positions, dtype=np.int64)
    n = len(pos)
    if n == 0:
        return _empty_batch(), None
    # walk_records checked MIN_MESSAGE_SIZE (> 88) <= totalSize <= what is left of the buffer.
    head = views.take(_V4_DTYPE, pos, clip=False)
    total = head["totalSize"].astype(np.int64)
    sys_flag = head["sysFlag"].astype(np.int64)
    v2 = head["magicCode"] == MESSAGE_MAGIC_CODE_V2
    born_v6 = (sys_flag & BORNHOST_V6_FLAG) != 0
    store_v6 = (sys_flag & STOREHOSTADDRESS_V6_FLAG) != 0
    store_ts = head["storeTimestamp"].astype(np.int64)
    reconsume = head["reconsumeTimes"].astype(np.int32)
    body_len = head["bodyLength"].astype(np.int64)
    host_pos = pos + _V4_STORE_HOST
    body_pos = pos + _V4_DTYPE.itemsize
    shifted = np.flatnonzero(born_v6 | store_v6)
    if len(shifted):
        # IPv6 hosts move every field after them: those records one field at a time.
        ts_pos = pos[shifted] + 56 + 12 * born_v6[shifted]
        store_ts[shifted] = views.take(">i8", ts_pos)
        host_pos[shifted] = ts_pos + 8
        tail_pos = ts_pos + 16 + 12 * store_v6[shifted]
        tail = views.take(_TAIL_DTYPE, tail_pos)
        reconsume[shifted] = tail["reconsumeTimes"]
        body_len[shifted] = tail["bodyLength"]
        body_pos[shifted] = tail_pos + 16
    end = pos + total
    # The checks decode_message makes, for every record at once.
    bad = total < 91 + v2 + 12 * (born_v6.astype(np.int64) + store_v6)
    bad |= (body_len < 0) | (body_pos + body_len > end)
    tlen_pos = body_pos + np.maximum(body_len, 0)
    # The topic length (a signed byte, or a signed short in V2) and the properties length
    # (a signed short) in one gather of the three bytes from the topic length on, when no
    # topic is longer than 127 bytes and no record is V2 (the common case).
    if v2.any():
        first_byte = views.byte_at(tlen_pos)
        topic_len = np.where(first_byte >= 128, first_byte - 256, first_byte)
        topic_len = np.where(v2, (topic_len << 8) | views.byte_at(tlen_pos + 1), topic_len)
    else:
        topic_len = views.take("i1", tlen_pos).astype(np.int64)
    topic_pos = tlen_pos + 1 + v2
    topic_len = np.where(topic_pos <= end, topic_len, -1)
    bad |= (topic_len < 0) | (topic_pos + topic_len + 2 > end)
    plen_pos = topic_pos + np.maximum(topic_len, 0)
    props_len = views.take(">i2", plen_pos).astype(np.int64)
    props_pos = plen_pos + 2
    bad |= (props_len < 0) | (props_pos + props_len != end)

    error = None
    if bad.any():
        first = int(np.argmax(bad))
        error = _error_at(buf, int(pos[first]), limit)
        n = first
        if n == 0:
            return _empty_batch(), error
        head, store_ts, reconsume, body_len, host_pos = head[:n], store_ts[:n], reconsume[:n], body_len[:n], host_pos[:n]
        topic_pos, topic_len, props_pos, end = topic_pos[:n], topic_len[:n], props_pos[:n], end[:n]
        total, sys_flag, store_v6, born_v6 = total[:n], sys_flag[:n], store_v6[:n], born_v6[:n]

    data = views.arrow_buffer()
    topic = _checked_utf8(_ranges(data, len(views), topic_pos, topic_pos + topic_len))
    properties_raw = _checked_utf8(_ranges(data, len(views), props_pos, end))
    props = _Properties(properties_raw, _WANTED)
    physical = head["physicalOffset"].astype(np.int64)
    ipv4 = None
    if not (store_v6.any() or born_v6.any()):
        # Both hosts IPv4 everywhere: store host + port and the physical offset, as the big-endian bytes of the record.
        raw = head.view(np.uint8).reshape(n, _V4_DTYPE.itemsize)
        ipv4 = np.empty((n, 16), dtype=np.uint8)
        ipv4[:, :8] = raw[:, _V4_STORE_HOST:_V4_STORE_HOST + 8]
        ipv4[:, 8:] = raw[:, _V4_PHYSICAL:_V4_PHYSICAL + 8]
    columns = {
        "store": _constant_strings(store, n),
        "file": _constant_strings(file, n),
        "commitlog_offset": pa.array(physical, type=pa.int64()),
        "store_size": pa.array(total.astype(np.int32), type=pa.int32()),
        "topic": topic,
        "queue_id": pa.array(head["queueId"].astype(np.int32), type=pa.int32()),
        "queue_offset": pa.array(head["queueOffset"].astype(np.int64), type=pa.int64()),
        "flag": pa.array(head["flag"].astype(np.int32), type=pa.int32()),
        "sys_flag": pa.array(sys_flag.astype(np.int32), type=pa.int32()),
        "born_timestamp": pa.array(head["bornTimestamp"].astype(np.int64), type=pa.int64()),
        "store_timestamp": pa.array(store_ts, type=pa.int64()),
        "reconsume_times": pa.array(reconsume, type=pa.int32()),
        "body_length": pa.array(body_len.astype(np.int32), type=pa.int32()),
        "msg_id": _message_ids(views, host_pos, store_v6, physical, ipv4),
        "properties_raw": properties_raw,
    }
    for column, name in STRING_PROPERTIES.items():
        columns[column] = props.strings(name)
    for column, name in INT_PROPERTIES.items():
        columns[column] = props.ints(name)
    batch = pa.RecordBatch.from_arrays([columns[f.name] for f in MESSAGE_SCHEMA], schema=MESSAGE_SCHEMA)
    return batch, error


def decode_records(buf, *, store: str, file: str, start: int = 0, limit: int | None = None,
                   batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Every message record of one commit log file's bytes, in batches of at most ``batch_rows``.

    Stops at the zero tail or the BLANK record. At a bad record it first yields the records
    before it, then raises the FormatError decode_message raises there (offsets are
    positions in ``buf``).
    """
    limit = len(buf) if limit is None else limit
    views = _Views(buf)
    pos = start
    while True:
        positions, pos, stop = walk_records(buf, pos, limit, batch_rows, views=views)
        if len(positions):
            batch, error = decode_batch(buf, positions, limit, store=store, file=file, views=views)
            if batch.num_rows:
                yield batch
            if error is not None:
                raise error
        if isinstance(stop, FormatError):
            raise stop
        if stop == "end":
            return
