"""Commit log bytes as columns: the fast path behind scans and analyses.

``decode_message`` (commitlog.py) reads one record into a ``Message``; this module reads a
whole file's bytes into pyarrow RecordBatches of ``MESSAGE_SCHEMA``, with the same values
and the same ``FormatError`` at the first bad record. How:

1. one compiled pass per batch (``scanloops.scan_records``) walks the record heads
   (totalSize, magicCode) and, while each record is in the cache, reads its fixed fields
   (the host fields move with sysFlag's IPv6 bits), checks its lengths as decode_message
   checks them, copies its topic, properties and message id (upper hex) into column
   buffers, and picks out the few properties the analyses need as
   MessageDecoder.string2messageProperties reads them (a later duplicate key wins, empty
   keys or values are skipped); where it stops, the bytes there are read once more to tell
   the zero tail or a BLANK record (the data's end) from a bad record, whose FormatError is
   decode_message's;
2. those buffers become Arrow arrays without a copy; text is checked for UTF-8 only in
   batches where the pass saw a byte that is not ASCII.

A scan may ask for some columns only (a projection): the pass then picks out only the
property values they hold and copies the properties and message ids only when they are
columns, which is most of what it writes.

Pure: bytes in, batches out, no file I/O.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from .commitlog import MIN_MESSAGE_SIZE, decode_message, torn_tail
from .constants import (
    BLANK_MAGIC_CODE,
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
)
from .errors import FormatError
from .javanum import java_parse_int
from .scanloops import BAD, DLEDGER_ENTRY_MAGIC, HEAD, NOT_PLAIN, PRESENT, name_table, scan_records

DLEDGER_BLANK_MAGIC = -1  # MmapFileList.BLANK_MAGIC_CODE

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
_INT = struct.Struct(">i")


def _head_stop(buf, pos: int, limit: int, header: int = 0) -> str | FormatError | None:
    """What the bytes at ``pos`` are: None for a message head scan_records follows,
    ``"end"`` for the zero tail or the BLANK record (or the file's end), else the
    FormatError of the record there. ``header``: 48 where each record sits in a DLedger
    entry (``_entry_stop``)."""
    if header:
        return _entry_stop(buf, pos, limit, header)
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


def _entry_stop(buf, pos: int, limit: int, header: int) -> str | FormatError | None:
    """``_head_stop`` of a DLedger data file: at ``pos`` an entry (magic 1, its size, ...,
    bodyLen at +44, then the record), the end mark MmapFileList.preAppend writes when the
    next entry does not fit (magic -1, then the bytes left in the file), or the zeros after
    the last entry."""
    if pos + 8 > limit:
        if pos >= limit or not any(bytes(buf[pos:limit])):
            return "end"
        return FormatError(pos, f"a DLedger entry header of {header} bytes, found {limit - pos}")
    magic, size = _HEAD.unpack_from(buf, pos)
    if magic == 0 and size == 0:
        return "end"
    if magic == DLEDGER_BLANK_MAGIC:
        if size != len(buf) - pos:
            return FormatError(pos, f"a DLedger end mark (magic -1) filling the rest of the file "
                                    f"({len(buf) - pos} bytes), found size {size}")
        return "end"
    if magic != DLEDGER_ENTRY_MAGIC:
        return FormatError(pos, f"a DLedger entry (magic 1) or end mark (magic -1), found magic {magic}")
    if pos + header > limit:
        return FormatError(pos, f"a DLedger entry header of {header} bytes, found {limit - pos}")
    body = _INT.unpack_from(buf, pos + header - 4)[0]
    if size != body + header or size > limit - pos:
        return FormatError(pos + 4, f"a DLedger entry size of {header} + bodyLen {body} within the file "
                                    f"({limit - pos} bytes left), found {size}")
    stop = _head_stop(buf, pos + header, pos + size)
    if stop is None:
        total = _INT.unpack_from(buf, pos + header)[0]
        if total != body:
            return FormatError(pos + header, f"a record of the entry's bodyLen {body} bytes, found totalSize {total}")
        return None
    return stop if isinstance(stop, FormatError) else FormatError(pos + header, "a message record inside the entry")


def _still_written(buf, pos: int, limit: int, header: int) -> bool:
    """A record that does not decode at ``pos`` of a plain commit log file is the end of the
    data when it is the torn tail a writer is still writing (commitlog.torn_tail), or when it
    decodes now (the writer finished it since): the read ends where it found the end."""
    if header:
        return False
    if torn_tail(buf, pos, limit):
        return True
    try:
        decode_message(buf, pos, limit)
    except FormatError:
        return False
    return True


def _error_at(buf, pos: int, limit: int) -> FormatError:
    """The FormatError decode_message gives for the record at ``pos``."""
    try:
        decode_message(buf, pos, limit)
    except FormatError as exc:
        return exc
    # Only reached if the vectorised checks and decode_message disagree: still refuse the record.
    return FormatError(pos, "a message record the fast path can decode")


def _checked_utf8(strings: pa.Array, maybe_not_ascii: bool = True) -> pa.Array:
    """``strings`` with any invalid UTF-8 replaced; ``maybe_not_ascii`` False: known to be
    ASCII, so valid."""
    if not maybe_not_ascii:
        return strings
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


def _string_array(data: np.ndarray, offsets: np.ndarray, n: int, valid: np.ndarray | None = None) -> pa.Array:
    """The first ``n`` strings laid out in ``data`` with their ``offsets``, null where not
    ``valid`` (not checked for UTF-8)."""
    nulls = 0 if valid is None else n - int(np.count_nonzero(valid))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(pa.string(), n, [bitmap, pa.py_buffer(offsets[:n + 1]),
                                                  pa.py_buffer(data[:offsets[n]])], null_count=nulls)


def _constant_strings(text: str, n: int) -> pa.Array:
    raw = text.encode("utf-8")
    data = raw * n
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * len(raw)),
                                                  pa.py_buffer(data)])


# Bytes of topics, of properties and of each property column one batch may hold (a
# record's are at most 32767 each, signed shorts): a batch ends early rather than grow them.
_TEXT_ROOM = 32 << 20
_VALUE_ROOM = 8 << 20
# The rows of ``ints`` and ``longs`` scan_records fills (the last long: where the record starts).
_INTS = ["store_size", "queue_id", "flag", "sys_flag", "reconsume_times", "body_length"]
_LONGS = ["queue_offset", "commitlog_offset", "born_timestamp", "store_timestamp"]
_POSITION = len(_LONGS)


class _Projection:
    """What a scan reads for ``columns`` (of MESSAGE_SCHEMA, in that order): only the
    property values they hold are picked out, and the properties and message ids are
    copied only when they are columns."""

    def __init__(self, columns: tuple[str, ...]) -> None:
        unknown = [c for c in columns if c not in MESSAGE_SCHEMA.names]
        if unknown:
            raise ValueError(f"not a column of MESSAGE_SCHEMA: {unknown[0]!r}")
        self.columns = columns
        self.schema = pa.schema([MESSAGE_SCHEMA.field(c) for c in columns])
        self.strings = [c for c in STRING_PROPERTIES if c in columns]
        self.ints = [c for c in INT_PROPERTIES if c in columns]
        self.names = name_table([STRING_PROPERTIES[c] for c in self.strings] + [INT_PROPERTIES[c] for c in self.ints])
        self.copy_props = "properties_raw" in columns
        self.copy_ids = "msg_id" in columns


_PROJECTIONS: dict[tuple[str, ...], _Projection] = {}


def _projection(columns) -> _Projection:
    key = tuple(MESSAGE_SCHEMA.names if columns is None else columns)
    if key not in _PROJECTIONS:
        _PROJECTIONS[key] = _Projection(key)
    return _PROJECTIONS[key]


def decode_records(buf, *, store: str, file: str, start: int = 0, limit: int | None = None,
                   batch_rows: int = DEFAULT_BATCH_ROWS, columns=None, header: int = 0) -> Iterator[pa.RecordBatch]:
    """Every message record of one commit log file's bytes, in batches of at most ``batch_rows``.

    Stops at the zero tail or the BLANK record. At a bad record it first yields the records
    before it, then raises the FormatError decode_message raises there (offsets are
    positions in ``buf``). ``columns``: only these columns, in this order (all of
    MESSAGE_SCHEMA when None); the same values, and what no column needs is not copied.
    ``header``: 48 for a DLedger data file, whose records each sit in an entry behind a
    48-byte header (``start`` is then an entry's position; the file's end mark is DLedger's).
    """
    if batch_rows < 1:
        raise ValueError(f"batch_rows must be at least 1, not {batch_rows}")
    projection = _projection(columns)
    limit = len(buf) if limit is None else limit
    data = np.frombuffer(buf, dtype=np.uint8)
    pos = start
    room = max(min(_TEXT_ROOM, limit - start), 0)
    handed: list[_Columns] = []  # the arrays of the batches yielded, the latest last
    while True:
        # Filling fresh memory costs the kernel's zeroing of every page first, so the arrays
        # of a batch the caller has let go of are filled again: those of the batch before the
        # latest (a loop still holds the latest when it asks for the next).
        if len(handed) == 2 and _COUNTED and handed[0].unused():
            out = handed.pop(0)
            out.not_ascii[:] = 0
        else:
            out = _Columns(projection, batch_rows, room, min(_VALUE_ROOM, room))
            if len(handed) == 2:
                handed.pop(0)
        count, pos, why = scan_records(data, pos, limit, out.ints, out.longs, out.topic_offsets,
                                       out.topic, out.props_offsets, out.props, out.id_offsets, out.ids,
                                       *projection.names, out.value_offsets, out.values, out.value_found,
                                       out.int_values, out.int_state, out.not_ascii,
                                       projection.copy_props, projection.copy_ids, header)
        if count:
            batch = out.batch(count, buf, limit, store=store, file=file)
            handed.append(out)
            yield batch
            del batch
        if why == BAD:
            if _still_written(buf, pos + header, limit, header):
                return
            raise _error_at(buf, pos + header, limit)
        if why == HEAD:
            stop = _head_stop(buf, pos, limit, header)
            if stop == "end":
                return
            if _still_written(buf, pos + header, limit, header):
                return
            raise stop if stop is not None else _error_at(buf, pos + header, limit)
        if count == 0:
            # Cannot happen (a record's text always fits): refuse rather than loop.
            raise _error_at(buf, pos + header, limit)


# Reference counts tell when nothing refers to an array any more (not so without the GIL,
# where counts may be deferred).
_COUNTED = hasattr(sys, "getrefcount") and getattr(sys, "_is_gil_enabled", lambda: True)()


class _Columns:
    """The arrays scan_records fills for one batch of a projection, and the batch made of them."""

    def __init__(self, projection: _Projection, rows: int, room: int, value_room: int) -> None:
        self.projection = projection
        strings, ints = len(projection.strings), len(projection.ints)
        self.ints = np.empty((len(_INTS), rows), dtype=np.int32)
        self.longs = np.empty((len(_LONGS) + 1, rows), dtype=np.int64)
        self.topic_offsets = np.empty(rows + 1, dtype=np.int32)
        self.topic = np.empty(room, dtype=np.uint8)
        self.props_offsets = np.empty(rows + 1, dtype=np.int32)
        self.props = np.empty(room if projection.copy_props else 0, dtype=np.uint8)
        self.id_offsets = np.empty(rows + 1, dtype=np.int32)
        self.ids = np.empty(56 * rows if projection.copy_ids else 0, dtype=np.uint8)
        self.value_offsets = np.empty((strings, rows + 1), dtype=np.int32)
        self.value_room = value_room
        self.values = np.empty(strings * value_room, dtype=np.uint8)
        self.value_found = np.empty((strings, rows), dtype=bool)
        self.int_values = np.empty((ints, rows), dtype=np.int32)
        self.int_state = np.empty((ints, rows), dtype=np.int8)
        self.not_ascii = np.zeros(2, dtype=np.int64)
        self._idle = self._references()

    def _references(self) -> list[int]:
        return [sys.getrefcount(array) for array in vars(self).values() if isinstance(array, np.ndarray)]

    def unused(self) -> bool:
        """Whether nothing refers to these arrays any more: every view of them (each
        column of a batch made of them, and so any Arrow array, buffer or slice over one)
        holds a reference, so the counts are back to what they were when nothing had been
        made of them."""
        return self._references() == self._idle

    def batch(self, n: int, buf, limit: int, *, store: str, file: str) -> pa.RecordBatch:
        """The batch of the first ``n`` records read (``buf``, ``limit``: what they were read
        from, for the rare property value only the exact rule reads)."""
        projection = self.projection
        wanted = set(projection.columns)
        columns = {}
        if "store" in wanted:
            columns["store"] = _constant_strings(store, n)
        if "file" in wanted:
            columns["file"] = _constant_strings(file, n)
        if "topic" in wanted:
            columns["topic"] = _checked_utf8(_string_array(self.topic, self.topic_offsets, n), self.not_ascii[0])
        if "msg_id" in wanted:
            columns["msg_id"] = _string_array(self.ids, self.id_offsets, n)
        if "properties_raw" in wanted:
            columns["properties_raw"] = _checked_utf8(_string_array(self.props, self.props_offsets, n),
                                                      self.not_ascii[1])
        for row, column in enumerate(_INTS):
            if column in wanted:
                columns[column] = pa.array(self.ints[row, :n], type=pa.int32())
        for row, column in enumerate(_LONGS):
            if column in wanted:
                columns[column] = pa.array(self.longs[row, :n], type=pa.int64())
        # Values are properties text cut at ASCII separators: ASCII where the properties are.
        for k, column in enumerate(projection.strings):
            part = self.values[k * self.value_room:(k + 1) * self.value_room]
            columns[column] = _checked_utf8(_string_array(part, self.value_offsets[k], n, self.value_found[k, :n]),
                                            self.not_ascii[1])
        for j, column in enumerate(projection.ints):
            values, state = self.int_values[j, :n], self.int_state[j, :n]
            # What the compiled parse refused (rare): Java also takes leading zeros past 10
            # digits and any Unicode decimal digit, so those values get the exact rule.
            name = INT_PROPERTIES[column]
            for row in np.flatnonzero(state == NOT_PLAIN).tolist():
                properties = decode_message(buf, int(self.longs[_POSITION, row]), limit).properties
                number = java_parse_int(properties[name])
                if number is not None:
                    values[row], state[row] = number, PRESENT
            columns[column] = pa.array(values, type=pa.int32(), mask=state != PRESENT)
        return pa.RecordBatch.from_arrays([columns[c] for c in projection.columns], schema=projection.schema)
