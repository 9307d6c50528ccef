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

``restore_columns`` goes further for a level's batch: its records read by a compiled pass
(store/plainrecords.py) into columns, the properties parsed, judged and ordered once per
distinct *shape* (the names of the properties in their order, REAL_TOPIC and REAL_QID), and
the deliveries handed on as columns (``StoredCopies``, for ``StoreWriter.put_stored``): with
their stored strings as they are (4.x), or rebuilt in the 5.x map's order by a compiled loop.
A batch with a unit it cannot take whole is left to ``restore_units``.
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
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    PROPERTY_SEPARATOR,
    java_order,
    parse_properties,
    reformat_properties,
)
from rmqdelay.schedule.redelivery import real_queue_id, restore_problem, restore_unit, timeup_message
from rmqdelay.store import Store
from rmqdelay.store.plainrecords import read_plain
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


def restore_columns(store: Store, offsets: list[int], sizes: list[int], *,
                    broker5x: bool = False) -> RestoredColumns | None:
    """``restore_units`` of a level's units, as columns; None when a unit is not a plain record
    whose properties the parser keeps whole, one by one, and (4.x) messageTimeup stores as
    they are (``restore_units`` then reads the batch and says why). A 5.x broker
    (``broker5x``) stores the string its 128-bucket map makes of them: rebuilt here in that
    order, worked out once per shape."""
    plain = read_plain(store.commitlog, offsets, sizes, whole=True)
    if plain is None:
        return None
    # Once per distinct shape: the parse, messageTimeup's verdict and the string it stores.
    verdicts: list[tuple[str | None, str, int]] = []
    orders: list[tuple[int, ...]] = []
    for i in plain.first_of:
        raw = plain.text(i)
        parsed = parse_properties(raw)
        if broker5x:
            names = list(parsed)
            if len(names) != raw.count(PROPERTY_SEPARATOR) + (not raw.endswith(PROPERTY_SEPARATOR)):
                return None  # a name twice: the map keeps one (restore_units)
            orders.append(tuple(map(names.index, java_order(parsed, DECODED_MAP_CAPACITY_5X))))
        elif reformat_properties(parsed, raw) != raw:
            return None  # messageTimeup stores another string: restore_units says which
        verdicts.append((restore_problem(parsed, broker5x), parsed.get(PROPERTY_REAL_TOPIC, ""),
                         real_queue_id(parsed)))
    kind_of = plain.kind_of
    reasons = [verdicts[k][0] for k in kind_of]
    uniq_keys = plain.uniq_keys()
    rows = np.flatnonzero(np.array([r is None for r in reasons], dtype=np.bool_))
    kept = [k for k, r in zip(kind_of, reasons) if r is None]
    props = plain.rebuilt(rows, [orders[k] for k in kept]) if broker5x else None
    return RestoredColumns(uniq_keys, reasons, plain.copies(rows, [verdicts[k][1] for k in kept],
                                                            [verdicts[k][2] for k in kept], props))
