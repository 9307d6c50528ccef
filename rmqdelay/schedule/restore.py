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
"""

from __future__ import annotations

from rmqdelay.formats.commitlog import RECORD_HEAD, decode_message, plain_message_parts
from rmqdelay.formats.constants import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.properties import parse_properties
from rmqdelay.schedule.redelivery import restore_problem, restore_unit, timeup_message
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage

_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)

Restored = tuple[str | None, NewMessage | None, str | None]  # UNIQ_KEY, the delivery, why it is skipped


def restore_units(store: Store, offsets: list[int], sizes: list[int], *, broker5x: bool = False) -> list[Restored]:
    """``restore_unit`` of each unit (commit log offset, size), in order: the message's
    UNIQ_KEY (None when it has none or cannot be read), the message to put (None when
    skipped) and the reason it is skipped (None when delivered)."""
    log = store.commitlog
    out: list[Restored] = []
    verdicts: dict[tuple[str | None, str | None], str | None] = {}
    file_start = file_end = limit = -1
    view = None
    for offset, size in zip(offsets, sizes):
        if not file_start <= offset < file_end:
            index = log.file_index(offset)
            if index < 0:
                out.append(_slow(store, offset, size, broker5x))
                continue
            mf = log.files[index]
            file_start, file_end, limit, view = mf.start, mf.end, mf.size, log.view(index)
        pos = offset - file_start
        # Only a whole message record of the unit's size is read here (the head checked
        # first, as read_message checks it); anything else is restore_unit's to explain.
        if pos + 8 > limit:
            out.append(_slow(store, offset, size, broker5x))
            continue
        total, magic = RECORD_HEAD.unpack_from(view, pos)
        if total != size or magic not in _MAGICS or pos + total > limit:
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
