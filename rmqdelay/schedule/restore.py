"""Due schedule units restored a batch at a time: for each unit what ``restore_unit`` decides
(redelivery.py), read the cheap way.

A level's due units point at records one after another in a few commit log files: the file
is looked up once for a run of them, each record is read straight from the mapped file (a
plain one - IPv4 hosts, V1 - for only the parts a re-put copies; any other by
``decode_message``), the REAL_TOPIC / REAL_QID verdict is taken once per
distinct pair, and the delivered copy is built from the decoded map itself (it is not used
again). A unit the fast path cannot read as a whole message of its size - outside the
files, another record there, a damaged record - goes through ``restore_unit``, which says
exactly why. The result is the same, unit by unit, as ``restore_unit``'s.

``restore_columns`` goes further for a 4.x level's batch: its records read by a compiled pass
(formats/reputloops.py) into columns, the properties parsed, judged and ordered once per
distinct *shape* (the names of the properties in their order, REAL_TOPIC and REAL_QID), and
the deliveries handed on as columns (``StoredCopies``, for ``StoreWriter.put_stored``) with
their stored strings as they are. A batch with a unit it cannot take whole is left to
``restore_units``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rmqdelay.formats.commitlog import decode_message, plain_message_parts
from rmqdelay.formats.constants import (
    MESSAGE_MAGIC_CODE,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.properties import parse_properties, reformat_properties
from rmqdelay.schedule.redelivery import real_queue_id, restore_problem, restore_unit, timeup_message
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage

if TYPE_CHECKING:
    from rmqdelay.store.batchencode import StoredCopies

Restored = tuple[str | None, NewMessage | None, str | None]  # UNIQ_KEY, the delivery, why it is skipped


def restore_units(store: Store, offsets: list[int], sizes: list[int], *, broker5x: bool = False) -> list[Restored]:
    """``restore_unit`` of each unit (commit log offset, size), in order: the message's
    UNIQ_KEY (None when it has none or cannot be read), the message to put (None when
    skipped) and the reason it is skipped (None when delivered)."""
    out: list[Restored] = []
    verdicts: dict[tuple[str | None, str | None], str | None] = {}
    # Only a whole message record of the unit's size is read here; anything else is
    # restore_unit's to explain.
    for offset, size, (view, pos, limit, magic) in zip(offsets, sizes,
                                                        store.commitlog.message_spots(offsets, sizes)):
        if view is None:
            out.append(_slow(store, offset, size, broker5x))
            continue
        parts = plain_message_parts(view, pos, size) if magic == MESSAGE_MAGIC_CODE else None
        if parts is None:
            try:
                msg = decode_message(view, pos, limit)
            except FormatError:
                out.append(_slow(store, offset, size, broker5x))
                continue
            parts = (msg.flag, msg.sysFlag, msg.bornTimestamp, msg.bornHostAddress, msg.bornPort,
                     msg.storeHostAddress, msg.storePort, msg.reconsumeTimes, msg.body, msg.propertiesRaw)
        flag, sys_flag, born_ts, born_addr, born_port, store_addr, store_port, reconsume, body, raw = parts
        props = parse_properties(raw)
        key = (props.get(PROPERTY_REAL_TOPIC), props.get(PROPERTY_REAL_QUEUE_ID))
        try:
            reason = verdicts[key]
        except KeyError:
            reason = verdicts[key] = restore_problem(props, broker5x)
        uniq = props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        if reason is not None:
            out.append((uniq, None, reason))
            continue
        out.append((uniq, timeup_message(props, raw, body, flag, sys_flag, born_ts, (born_addr, born_port),
                                         (store_addr, store_port), reconsume, broker5x=broker5x), None))
    return out


def restore_one_by_one(store: Store, offsets: list[int], sizes: list[int], *, broker5x: bool = False) -> list[Restored]:
    """``restore_units`` by ``restore_unit`` alone, unit after unit (the reference)."""
    return [_slow(store, offset, size, broker5x) for offset, size in zip(offsets, sizes)]


def _slow(store: Store, offset: int, size: int, broker5x: bool) -> Restored:
    msg, new, reason = restore_unit(store, offset, size, broker5x=broker5x)
    return (msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) if msg is not None else None), new, reason


@dataclass(slots=True)
class RestoredColumns:
    """``restore_units`` of a batch as columns: per unit its UNIQ_KEY and why it is skipped
    (None: delivered), and the deliveries in unit order (``copies``)."""

    uniq_keys: list[str | None]
    reasons: list[str | None]
    copies: StoredCopies


def restore_columns(store: Store, offsets: list[int], sizes: list[int]) -> RestoredColumns | None:
    """``restore_units`` of a 4.x level's units (as a 4.x broker restores them), as columns; None
    when a unit is not a plain record whose properties the parser keeps whole and messageTimeup
    stores as they are (``restore_units`` then reads the batch and says why)."""
    # Imported here: the compiled loops (numba) load only in a run that delivers.
    from rmqdelay.formats import reputloops
    from rmqdelay.store.batchencode import StoredCopies

    n = len(offsets)
    log = store.commitlog
    files = log.files
    if not n or not files:
        return None
    at = np.array(offsets, dtype=np.int64)
    size = np.array(sizes, dtype=np.int64)
    file_of = np.searchsorted(np.array([f.start for f in files], dtype=np.int64), at, "right") - 1
    if int(file_of.min()) < 0:
        return None
    room = int(size.sum())
    numbers = np.empty((n, reputloops.NUMBERS), dtype=np.int64)
    born = np.empty(4 * n, dtype=np.uint8)
    stored = np.empty(4 * n, dtype=np.uint8)
    bodies = np.empty(room, dtype=np.uint8)
    props = np.empty(room, dtype=np.uint8)
    shapes = np.empty(2 * room + 8 * n, dtype=np.uint8)
    body_at = np.zeros(n + 1, dtype=np.int64)
    props_at = np.zeros(n + 1, dtype=np.int64)
    shape_at = np.zeros(n + 1, dtype=np.int64)
    uniq_start = np.empty(n, dtype=np.int64)
    uniq_end = np.empty(n, dtype=np.int64)
    cuts = [0, *(np.flatnonzero(np.diff(file_of)) + 1).tolist(), n]
    for a, b in zip(cuts, cuts[1:]):  # a run of units in one file (a batch rarely spans two)
        mf = files[int(file_of[a])]
        view = np.frombuffer(log.view(int(file_of[a])), dtype=np.uint8)
        if reputloops.plain_records(view, min(mf.size, len(view)), at[a:b] - mf.start, size[a:b], a, numbers, born,
                                    stored, bodies, body_at, props, props_at, shapes, shape_at, uniq_start,
                                    uniq_end) >= 0:
            return None
    # Once per distinct shape: the parse, messageTimeup's verdict and whether it keeps the string.
    shape_bytes = shapes[:int(shape_at[n])].tobytes()
    bounds = shape_at.tolist()
    kinds: dict[bytes, int] = {}
    kind_of = [kinds.setdefault(shape, len(kinds))
               for shape in map(shape_bytes.__getitem__, map(slice, bounds, bounds[1:]))]
    first_of = dict(zip(reversed(kind_of), range(n - 1, -1, -1)))
    verdicts: list[tuple[str | None, str, int]] = []
    text_bounds = props_at.tolist()
    for kind in range(len(kinds)):
        i = first_of[kind]
        raw = props[text_bounds[i]:text_bounds[i + 1]].tobytes().decode("utf-8", "surrogateescape")
        parsed = parse_properties(raw)
        if reformat_properties(parsed, raw) != raw:
            return None  # messageTimeup stores another string: restore_units says which
        verdicts.append((restore_problem(parsed, False), parsed.get(PROPERTY_REAL_TOPIC, ""), real_queue_id(parsed)))
    reasons = [verdicts[k][0] for k in kind_of]
    uniq_keys = _values(props[:int(props_at[n])], uniq_start, uniq_end)
    keep = np.array([r is None for r in reasons], dtype=np.bool_)
    rows = np.flatnonzero(keep)
    if len(rows) == n:
        chosen = (bodies, body_at, props, props_at)
    else:
        chosen = (*_take(bodies, body_at, rows), *_take(props, props_at, rows))
    kept = [verdicts[k] for k, r in zip(kind_of, reasons) if r is None]
    f = numbers[rows]
    four = (4 * rows[:, None] + np.arange(4)).reshape(-1)
    copies = StoredCopies([v[1] for v in kept], [v[2] for v in kept], f[:, reputloops.FLAG],
                          f[:, reputloops.SYS_FLAG], f[:, reputloops.BORN_TS], born[four], f[:, reputloops.BORN_PORT],
                          stored[four], f[:, reputloops.STORE_PORT], f[:, reputloops.RECONSUME], *chosen)
    return RestoredColumns(uniq_keys, reasons, copies)


def _values(props: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list[str | None]:
    """The property values at ``props[starts[i]:ends[i]]`` (None where ``starts[i]`` is -1)."""
    data = props.tobytes()
    text = data.decode("utf-8", "surrogateescape")
    a, b = starts.tolist(), ends.tolist()
    if len(text) != len(data):  # not ASCII: byte offsets are not character offsets
        return [None if s < 0 else data[s:e].decode("utf-8", "surrogateescape") for s, e in zip(a, b)]
    return [None if s < 0 else text[s:e] for s, e in zip(a, b)]


def _take(buf: np.ndarray, at: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from rmqdelay.formats import reputloops

    out = np.empty(int((at[rows + 1] - at[rows]).sum()), dtype=np.uint8)
    out_at = np.empty(len(rows) + 1, dtype=np.int64)
    reputloops.take_spans(buf, at, rows, out, out_at)
    return out, out_at
