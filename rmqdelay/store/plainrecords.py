"""The plain message records of a batch of units read as columns (``reputloops.plain_records``):
what a re-put copies from each - its numbers, hosts, body and properties string back to back -
and its *shape* (its property names in order, a trailing separator or not, REAL_TOPIC and
REAL_QID), which the caller judges once per distinct shape.

A record the compiled pass cannot take whole (outside the files, another kind, lengths that do
not add up, a properties segment the parser would skip) is either the end of the batch
(``whole``) or a row of its own marked unread (``read[row]`` False, its spans empty), for the
caller to read the reference way, which says why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .commitlog import CommitLog

if TYPE_CHECKING:
    from .batchencode import StoredCopies


@dataclass(slots=True)
class PlainRecords:
    """The records of a batch, a row each (``reputloops``' columns)."""

    numbers: np.ndarray  # int64 (rows, reputloops.NUMBERS)
    born: np.ndarray  # the born hosts' addresses back to back (4 bytes, 16 for IPv6)
    born_at: np.ndarray
    stored: np.ndarray  # the store hosts' addresses, the same way
    stored_at: np.ndarray
    bodies: np.ndarray
    body_at: np.ndarray
    props: np.ndarray
    props_at: np.ndarray
    uniq_start: np.ndarray  # where each UNIQ_KEY value is in ``props`` (-1: none)
    uniq_end: np.ndarray
    kind_of: list[int]  # each row's shape, numbered in order of appearance
    first_of: list[int]  # the first row of each shape
    shapes: list[bytes]  # each shape's bytes
    read: np.ndarray  # bool: the row was read (False: the reference way says why not)

    def text(self, row: int) -> str:
        """A row's properties string as stored."""
        return self.props[int(self.props_at[row]):int(self.props_at[row + 1])].tobytes().decode("utf-8",
                                                                                                "surrogateescape")

    def uniq_keys(self) -> list[str | None]:
        """Each row's UNIQ_KEY (None: it has none)."""
        data = self.props[:int(self.props_at[-1])].tobytes()
        text = data.decode("utf-8", "surrogateescape")
        a, b = self.uniq_start.tolist(), self.uniq_end.tolist()
        if len(text) != len(data):  # not ASCII: byte offsets are not character offsets
            return [None if s < 0 else data[s:e].decode("utf-8", "surrogateescape") for s, e in zip(a, b)]
        return [None if s < 0 else text[s:e] for s, e in zip(a, b)]

    def rebuilt(self, rows: np.ndarray, codes: list[tuple[int, ...]], added: tuple[str, ...] = (),
                values: list[list[str]] | tuple = ()) -> tuple[np.ndarray, np.ndarray]:
        """The properties strings of ``rows`` rebuilt as a 5.x broker stores a map it filled
        from them (``reputloops.rebuild_properties``): row k's pairs in the order of
        ``codes[k]`` (i >= 0: its i-th pair as stored; i < 0: ``added[-i - 1]`` with the value
        ``values[-i - 1][k]``), each followed by a separator. Back to back, and where each
        starts (one more: the end)."""
        from rmqdelay.formats import reputloops

        n = len(rows)
        distinct = list(dict.fromkeys(codes))
        slot = {c: i for i, c in enumerate(distinct)}
        codes_at = np.cumsum([0, *map(len, distinct)], dtype=np.int64)
        flat = np.array([c for cs in distinct for c in cs], dtype=np.int64)
        names = "".join(name + "\x01" for name in added).encode()
        names_at = np.cumsum([0, *(len(name.encode()) + 1 for name in added)], dtype=np.int64)
        data, value_at = _laid_out(values, n)
        room = int((self.props_at[rows + 1] - self.props_at[rows]).sum()) + n * (len(names) + len(added) + 1) \
            + int((value_at[:, 1::2] - value_at[:, 0::2]).sum())
        out = np.empty(room, dtype=np.uint8)
        out_at = np.empty(n + 1, dtype=np.int64)
        reputloops.rebuild_properties(self.props, self.props_at, rows, np.array([slot[c] for c in codes], dtype=np.int64),
                                      flat, codes_at, np.frombuffer(names or b"\0", dtype=np.uint8), names_at, data,
                                      value_at, out, out_at)
        return out, out_at

    def copies(self, rows: np.ndarray, topics: list[str], queue_ids: list[int],
               props: tuple[np.ndarray, np.ndarray] | None = None) -> StoredCopies:
        """The messages of ``rows`` put to ``topics`` / ``queue_ids`` as columns: each with its
        numbers, hosts and body, and its stored properties string (``props``: other strings
        for those rows, back to back, and where each starts)."""
        from rmqdelay.formats import reputloops

        from .batchencode import StoredCopies

        every = np.array_equal(rows, np.arange(len(self.kind_of)))  # all of them, in order

        def taken(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return (buf, at) if every else _take(buf, at, rows)

        if props is None:
            props = taken(self.props, self.props_at)
        f = self.numbers[rows]
        return StoredCopies(topics, queue_ids, f[:, reputloops.FLAG], f[:, reputloops.SYS_FLAG],
                            f[:, reputloops.BORN_TS], *taken(self.born, self.born_at), f[:, reputloops.BORN_PORT],
                            *taken(self.stored, self.stored_at), f[:, reputloops.STORE_PORT],
                            f[:, reputloops.RECONSUME], *taken(self.bodies, self.body_at), *props)


def read_plain(log: CommitLog, offsets: list[int], sizes: list[int], *, whole: bool) -> PlainRecords | None:
    """The records at ``offsets`` (of ``sizes`` bytes) as columns; None when there are none, or
    ``whole`` and one cannot be read this way."""
    # Imported here: the compiled loops (numba) load only in a run that delivers.
    from rmqdelay.formats import reputloops

    n = len(offsets)
    files = log.files
    if not n or not files:
        return None
    at = np.array(offsets, dtype=np.int64)
    size = np.array(sizes, dtype=np.int64)
    file_of = np.searchsorted(np.array([f.start for f in files], dtype=np.int64), at, "right") - 1
    room = int(size.sum())
    numbers = np.empty((n, reputloops.NUMBERS), dtype=np.int64)
    born = np.empty(16 * n, dtype=np.uint8)
    stored = np.empty(16 * n, dtype=np.uint8)
    born_at = np.zeros(n + 1, dtype=np.int64)
    stored_at = np.zeros(n + 1, dtype=np.int64)
    bodies = np.empty(room, dtype=np.uint8)
    props = np.empty(room, dtype=np.uint8)
    shapes = np.empty(2 * room + 8 * n, dtype=np.uint8)
    body_at = np.zeros(n + 1, dtype=np.int64)
    props_at = np.zeros(n + 1, dtype=np.int64)
    shape_at = np.zeros(n + 1, dtype=np.int64)
    uniq_start = np.full(n, -1, dtype=np.int64)
    uniq_end = np.full(n, -1, dtype=np.int64)
    read = np.ones(n, dtype=np.bool_)
    cuts = [0, *(np.flatnonzero(np.diff(file_of)) + 1).tolist(), n]
    for a, b in zip(cuts, cuts[1:]):  # a run of units in one file (a batch rarely spans two)
        index = int(file_of[a])
        if index < 0:
            if whole:
                return None
            _unread(read, (born_at, stored_at, body_at, props_at, shape_at), a, b)
            continue
        mf = files[index]
        view = np.frombuffer(log.view(index), dtype=np.uint8)
        limit = min(mf.size, len(view))
        first = a
        while first < b:
            bad = reputloops.plain_records(view, limit, at[first:b] - mf.start, size[first:b], first, numbers, born,
                                           born_at, stored, stored_at, bodies, body_at, props, props_at, shapes,
                                           shape_at, uniq_start, uniq_end)
            if bad < 0:
                break
            if whole:
                return None
            _unread(read, (born_at, stored_at, body_at, props_at, shape_at), bad, bad + 1)
            uniq_start[bad] = uniq_end[bad] = -1
            first = bad + 1
    shape_bytes = shapes[:int(shape_at[n])].tobytes()
    bounds = shape_at.tolist()
    kinds: dict[bytes, int] = {}
    kind_of = [kinds.setdefault(shape, len(kinds))
               for shape in map(shape_bytes.__getitem__, map(slice, bounds, bounds[1:]))]
    first_of = [0] * len(kinds)
    for row in range(n - 1, -1, -1):
        first_of[kind_of[row]] = row
    return PlainRecords(numbers, born, born_at, stored, stored_at, bodies, body_at, props, props_at, uniq_start,
                        uniq_end, kind_of, first_of, list(kinds), read)


def _unread(read: np.ndarray, spans: tuple[np.ndarray, ...], a: int, b: int) -> None:
    """Rows ``a`` to ``b`` not read: marked, their spans (where each starts) empty."""
    read[a:b] = False
    for at in spans:
        at[a + 1:b + 1] = at[a]


def _laid_out(columns: list[list[str]] | tuple, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The values of ``columns`` (n each) back to back, and where each is: column j's k-th at
    ``value_at[k, 2 * j]`` to ``value_at[k, 2 * j + 1]``. A column of one value is laid out
    once."""
    parts: list[bytes] = []
    value_at = np.empty((n, 2 * len(columns)), dtype=np.int64)
    pos = 0
    for j, column in enumerate(columns):
        if column.count(column[0]) == n:
            data = column[0].encode()
            value_at[:, 2 * j] = pos
            value_at[:, 2 * j + 1] = pos + len(data)
        else:
            encoded = [v.encode() for v in column]
            data = b"".join(encoded)
            sizes = np.array([len(v) for v in encoded], dtype=np.int64)
            value_at[:, 2 * j + 1] = np.cumsum(sizes) + pos
            value_at[:, 2 * j] = value_at[:, 2 * j + 1] - sizes
        parts.append(data)
        pos += len(data)
    return np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8), value_at


def _take(buf: np.ndarray, at: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The spans ``buf[at[i]:at[i + 1]]`` of ``rows`` back to back, and where each starts."""
    from rmqdelay.formats import reputloops

    out = np.empty(int((at[rows + 1] - at[rows]).sum()), dtype=np.uint8)
    out_at = np.empty(len(rows) + 1, dtype=np.int64)
    reputloops.take_spans(buf, at, rows, out, out_at)
    return out, out_at
