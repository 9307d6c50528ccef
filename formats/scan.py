"""Commit log bytes as columns: the vectorised fast path behind scans and analyses.

``decode_message`` (commitlog.py) reads one record into a ``Message``; this module reads a
whole file's bytes into pyarrow RecordBatches of ``MESSAGE_SCHEMA``, with the same values
and the same ``FormatError`` at the first bad record. How:

1. a tight loop walks only the record heads (totalSize, magicCode) to find where records
   start, and where the data stops (the zero tail, a BLANK record, or a bad head);
2. every fixed field is gathered for all records at once with numpy fancy indexing on the
   big-endian bytes (the host fields move with sysFlag's IPv6 bits, so positions after
   them are computed per record);
3. topic and properties become Arrow string arrays straight from their byte ranges, and the
   few properties the analyses need are picked out of the properties bytes with numpy
   (positions of the 0x02 / 0x01 separators), as MessageDecoder.string2messageProperties
   reads them (a later duplicate key wins, empty keys or values are skipped).

Pure: bytes in, batches out, no file I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

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

# totalSize .. bornTimestamp: 48 bytes at the same place in every record.
_HEAD_DTYPE = np.dtype([
    ("totalSize", ">i4"), ("magicCode", ">i4"), ("bodyCRC", ">i4"), ("queueId", ">i4"),
    ("flag", ">i4"), ("queueOffset", ">i8"), ("physicalOffset", ">i8"), ("sysFlag", ">i4"),
    ("bornTimestamp", ">i8"),
])
assert _HEAD_DTYPE.itemsize == 48
# reconsumeTimes, preparedTransactionOffset, bodyLength: after the store host.
_TAIL_DTYPE = np.dtype([("reconsumeTimes", ">i4"), ("preparedTransactionOffset", ">i8"), ("bodyLength", ">i4")])

_HEX = np.frombuffer(b"".join(f"{i:02X}".encode() for i in range(256)), dtype=np.uint8).reshape(256, 2)


def walk_records(buf, pos: int = 0, limit: int | None = None,
                 max_records: int = DEFAULT_BATCH_ROWS) -> tuple[list[int], int, str | FormatError | None]:
    """Start positions of up to ``max_records`` message records from ``pos``.

    Returns (positions, next position, stop): stop is None when ``max_records`` were found
    and more may follow, ``"end"`` at the zero tail or a BLANK record (nothing more in this
    file), or the FormatError of the bad record head at the next position. Only the heads
    are checked here; ``decode_records`` checks the rest of each record.
    """
    limit = len(buf) if limit is None else limit
    unpack = _HEAD.unpack_from
    positions: list[int] = []
    append = positions.append
    v1, v2 = MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
    minimum = MIN_MESSAGE_SIZE
    stop: str | FormatError | None = None
    while len(positions) < max_records:
        if pos + 8 > limit:
            if pos >= limit or not any(bytes(buf[pos:limit])):
                stop = "end"
            else:
                stop = FormatError(pos, f"a record head of 8 bytes, found {limit - pos}")
            break
        total, magic = unpack(buf, pos)
        if (magic == v1 or magic == v2) and minimum <= total <= limit - pos:
            append(pos)
            pos += total
            continue
        if total == 0 and magic == 0:
            stop = "end"
        elif magic == BLANK_MAGIC_CODE:
            if total != limit - pos:
                stop = FormatError(pos, f"a BLANK record filling the rest of the file "
                                        f"({limit - pos} bytes), found totalSize {total}")
            else:
                stop = "end"
        else:
            stop = _error_at(buf, pos, limit)
        break
    return positions, pos, stop


def _error_at(buf, pos: int, limit: int) -> FormatError:
    """The FormatError decode_message gives for the record at ``pos``."""
    try:
        decode_message(buf, pos, limit)
    except FormatError as exc:
        return exc
    # Only reached if the vectorised checks and decode_message disagree: still refuse the record.
    return FormatError(pos, "a message record the fast path can decode")


def _gather(arr: np.ndarray, starts: np.ndarray, width: int) -> np.ndarray:
    """``width`` bytes at each start as an (n, width) array; starts clipped into the buffer
    so that garbage positions of bad records read garbage instead of failing."""
    starts = np.clip(starts, 0, len(arr) - width)
    return arr[starts[:, None] + np.arange(width)]


class _Views:
    """The buffer seen through unaligned, byte-strided views: ``view[p]`` is the value whose
    first byte is at ``p``, so one fancy index gathers a field of every record at once."""

    def __init__(self, buf) -> None:
        self.bytes = np.frombuffer(buf, dtype=np.uint8)
        self._buf = buf
        self._views: dict = {}

    def __len__(self) -> int:
        return len(self.bytes)

    def take(self, dtype, positions: np.ndarray) -> np.ndarray:
        dtype = np.dtype(dtype)
        view = self._views.get(dtype)
        if view is None:
            count = max(len(self.bytes) - dtype.itemsize + 1, 0)
            view = np.ndarray(shape=(count,), dtype=dtype, buffer=self._buf, strides=(1,))
            self._views[dtype] = view
        # Clipped: positions computed from a bad record's garbage must not fail here.
        return view[np.clip(positions, 0, len(view) - 1)]


def _join(mv: memoryview, starts: np.ndarray, ends: np.ndarray) -> bytes:
    # One slice per record; the copy itself is a single join.
    return b"".join([mv[s:e] for s, e in zip(starts.tolist(), ends.tolist())])


def _byte_ranges(views: _Views, starts: np.ndarray, lengths: np.ndarray,
                 valid: np.ndarray | None = None) -> pa.Array:
    """The byte ranges as a string array, copied out of the buffer by Arrow.

    Built as Arrow string views pointing into the buffer (no Python per record), then cast
    to plain strings, which gathers the bytes in C++. Views hold int32 offsets, so beyond
    2 GiB the ranges are joined in Python instead.
    """
    n = len(starts)
    if valid is not None:
        lengths = np.where(valid, lengths, 0)
    if len(views) >= 2**31:
        ends = starts + lengths
        return _string_array(_join(memoryview(views._buf).cast("B"), starts, ends), _offsets(lengths), valid)
    # A view: length int32, then either the bytes inline (length <= 12, zero padded) or
    # a 4-byte prefix, buffer index int32 and offset int32.
    raw = np.zeros((n, 16), dtype=np.uint8)
    raw[:, 4:16] = views.take("V12", starts).view(np.uint8).reshape(n, 12)
    near_end = np.flatnonzero(starts > len(views) - 12)
    if len(near_end):
        # The 12-byte view cannot start there: those few bytes one by one.
        idx = np.minimum(starts[near_end, None] + np.arange(12), len(views) - 1)
        raw[near_end, 4:16] = views.bytes[idx]
    lengths32 = lengths.astype(np.int32)
    inline = lengths32 <= 12
    raw[inline, 4:16] *= (np.arange(12) < lengths32[inline, None])
    ints = raw.view(np.int32)
    ints[:, 0] = lengths32
    ints[~inline, 2] = 0
    ints[~inline, 3] = starts[~inline].astype(np.int32)
    data = views._buf if isinstance(views._buf, pa.Buffer) else pa.py_buffer(views._buf)
    bitmap = None
    if valid is not None and not valid.all():
        bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    viewed = pa.Array.from_buffers(pa.string_view(), n, [bitmap, pa.py_buffer(raw), data])
    strings = viewed.cast(pa.string())
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


def _string_array(data, offsets: np.ndarray, valid: np.ndarray | None = None) -> pa.Array:
    n = len(offsets) - 1
    bitmap = None
    null_count = 0
    if valid is not None:
        null_count = int(n - valid.sum())
        if null_count:
            bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    arr = pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offsets), pa.py_buffer(data)],
                                null_count=null_count)
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:
        arr = _replace_invalid_utf8(arr)
    return arr


def _constant_strings(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    data = raw * n
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)),
                                                  pa.py_buffer(data)])


def _message_ids(views: _Views, host_pos: np.ndarray, v6: np.ndarray, physical: np.ndarray) -> pa.Array:
    """MessageDecoder.createMessageId: store address + port + physical offset, upper hex."""
    n = len(host_pos)
    phys = physical.astype(">i8").view(np.uint8).reshape(n, 8)
    if not v6.any():
        # IPv4: address 4 + port 4 + offset 8 = 16 bytes, 32 hex digits.
        raw = np.empty((n, 16), dtype=np.uint8)
        raw[:, :8] = views.take(">u8", host_pos).astype(">u8").view(np.uint8).reshape(n, 8)
        raw[:, 8:] = phys
        return _string_array(_HEX[raw].tobytes(), np.arange(n + 1, dtype=np.int32) * 32)
    # IPv6: 16 + 4 + 8 = 28 bytes, 56 hex digits.
    raw = np.zeros((n, 28), dtype=np.uint8)
    host = _gather(views.bytes, host_pos, 20)
    raw[:, :8] = host[:, :8]
    raw[:, 8:16] = phys
    raw[v6, :20] = host[v6]
    raw[v6, 20:28] = phys[v6]
    lengths = np.where(v6, 56, 32)
    hexed = _HEX[raw].reshape(n, 56)
    data = hexed[np.arange(56) < lengths[:, None]]
    return _string_array(data.tobytes(), _offsets(lengths))


def _next_at_or_after(positions: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """For each start, the first of the sorted ``positions`` at or after it (or a huge value)."""
    padded = np.append(positions, np.iinfo(np.int64).max)
    return padded[np.searchsorted(positions, starts, side="left")]


class _Properties:
    """The properties bytes of a batch, split into name/value segments once."""

    def __init__(self, strings: pa.Array) -> None:
        n = len(strings)
        _, offsets_buf, data_buf = strings.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int32)[strings.offset:strings.offset + n + 1]
        if data_buf is None or data_buf.size == 0:
            data_buf = pa.py_buffer(b"\0" * 16)
        self.data = np.frombuffer(data_buf, dtype=np.uint8)
        self.views = _Views(data_buf)
        self.n = n
        seps = np.flatnonzero(self.data == 2)
        # Segments start at each row start and after each 0x02, and end at the next 0x02
        # or the row end. 0x01 and 0x02 never occur inside a multi-byte UTF-8 character,
        # so byte positions serve as well as character positions.
        seg_starts = np.concatenate([offsets[:-1].astype(np.int64), seps + 1])
        seg_rows = np.concatenate([np.arange(n), np.searchsorted(offsets, seps, side="right") - 1])
        order = np.argsort(seg_starts, kind="stable")
        seg_starts = seg_starts[order]
        seg_rows = seg_rows[order]
        seg_ends = np.minimum(_next_at_or_after(seps, seg_starts), offsets[1:][seg_rows])
        kv = _next_at_or_after(np.flatnonzero(self.data == 1), seg_starts)
        # string2messageProperties: a non-empty name, then 0x01, then a non-empty value.
        ok = (kv > seg_starts) & (kv < seg_ends - 1)
        self.seg_starts = seg_starts[ok]
        self.seg_rows = seg_rows[ok]
        self.seg_ends = seg_ends[ok]
        self.kv = kv[ok]
        self.key_len = self.kv - self.seg_starts

    def value_ranges(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(valid, value starts, value ends) per row for property ``name``; the last wins."""
        key = np.frombuffer(name.encode("utf-8"), dtype=np.uint8)
        candidates = np.flatnonzero(self.key_len == len(key))
        if len(candidates):
            names = _gather(self.data, self.seg_starts[candidates], len(key))
            candidates = candidates[(names == key).all(axis=1)]
        valid = np.zeros(self.n, dtype=bool)
        starts = np.zeros(self.n, dtype=np.int64)
        ends = np.zeros(self.n, dtype=np.int64)
        if len(candidates):
            rows = self.seg_rows[candidates]
            # The last segment of each row wins (a HashMap put overwrites).
            rev_rows, first = np.unique(rows[::-1], return_index=True)
            chosen = candidates[::-1][first]
            valid[rev_rows] = True
            starts[rev_rows] = self.kv[chosen] + 1
            ends[rev_rows] = self.seg_ends[chosen]
        return valid, starts, ends

    def strings(self, name: str) -> pa.Array:
        valid, starts, ends = self.value_ranges(name)
        return _byte_ranges(self.views, starts, ends - starts, valid)

    def ints(self, name: str) -> pa.Array:
        """Integer.parseInt of the value; null when absent or not an int."""
        values = self.strings(name)
        ok = pc.fill_null(pc.match_substring_regex(values, r"^[+-]?[0-9]{1,10}$"), False)
        numbers = pc.cast(pc.replace_substring_regex(pc.if_else(ok, values, "0"), r"^\+", ""), pa.int64())
        ok = pc.and_(ok, pc.and_(pc.greater_equal(numbers, -2**31), pc.less(numbers, 2**31)))
        return pc.if_else(ok, pc.cast(numbers, pa.int32(), safe=False), pa.scalar(None, pa.int32()))


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
    head = views.take(_HEAD_DTYPE, pos)
    total = head["totalSize"].astype(np.int64)
    sys_flag = head["sysFlag"].astype(np.int64)
    v2 = head["magicCode"] == MESSAGE_MAGIC_CODE_V2
    born_len = np.where(sys_flag & BORNHOST_V6_FLAG, 20, 8)
    store_v6 = (sys_flag & STOREHOSTADDRESS_V6_FLAG) != 0
    store_len = np.where(store_v6, 20, 8)
    end = pos + total
    # The checks decode_message makes, for every record at once.
    fixed = 48 + born_len + 8 + store_len + 4 + 8 + 4 + np.where(v2, 2, 1) + 2
    bad = total < fixed
    store_ts_pos = pos + 48 + born_len
    host_pos = store_ts_pos + 8
    tail_pos = host_pos + store_len
    store_ts = views.take(">i8", store_ts_pos).astype(np.int64)
    tail = views.take(_TAIL_DTYPE, tail_pos)
    body_len = tail["bodyLength"].astype(np.int64)
    body_pos = tail_pos + 16
    bad |= (body_len < 0) | (body_pos + body_len > end)
    tlen_pos = body_pos + np.maximum(body_len, 0)
    if v2.any():
        topic_len = np.where(v2, views.take(">i2", tlen_pos), views.take("i1", tlen_pos)).astype(np.int64)
    else:
        topic_len = views.take("i1", tlen_pos).astype(np.int64)
    topic_pos = tlen_pos + np.where(v2, 2, 1)
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
        head, store_ts, tail, store_v6, host_pos = head[:n], store_ts[:n], tail[:n], store_v6[:n], host_pos[:n]
        topic_pos, topic_len, props_pos, props_len = topic_pos[:n], topic_len[:n], props_pos[:n], props_len[:n]
        total, sys_flag = total[:n], sys_flag[:n]

    properties_raw = _byte_ranges(views, props_pos, props_len)
    props = _Properties(properties_raw)
    physical = head["physicalOffset"].astype(np.int64)
    columns = {
        "store": _constant_strings(store, n),
        "file": _constant_strings(file, n),
        "commitlog_offset": pa.array(physical, type=pa.int64()),
        "store_size": pa.array(total.astype(np.int32), type=pa.int32()),
        "topic": _byte_ranges(views, topic_pos, topic_len),
        "queue_id": pa.array(head["queueId"].astype(np.int32), type=pa.int32()),
        "queue_offset": pa.array(head["queueOffset"].astype(np.int64), type=pa.int64()),
        "flag": pa.array(head["flag"].astype(np.int32), type=pa.int32()),
        "sys_flag": pa.array(sys_flag.astype(np.int32), type=pa.int32()),
        "born_timestamp": pa.array(head["bornTimestamp"].astype(np.int64), type=pa.int64()),
        "store_timestamp": pa.array(store_ts, type=pa.int64()),
        "reconsume_times": pa.array(tail["reconsumeTimes"].astype(np.int32), type=pa.int32()),
        "body_length": pa.array(tail["bodyLength"].astype(np.int32), type=pa.int32()),
        "msg_id": _message_ids(views, host_pos, store_v6, physical),
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
        positions, next_pos, stop = walk_records(buf, pos, limit, batch_rows)
        if positions:
            batch, error = decode_batch(buf, positions, limit, store=store, file=file, views=views)
            if batch.num_rows:
                yield batch
            if error is not None:
                raise error
        if isinstance(stop, FormatError):
            raise stop
        if stop == "end":
            return
        pos = next_pos
