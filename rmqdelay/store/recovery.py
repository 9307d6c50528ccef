"""What the writer does on open before anything else: finish what a crash or a failed write
left, the way the broker's recovery and reput service would, or refuse and change nothing.

The plan is made by reading only; it is applied only when the whole of it is known:

1. The end of the log. Only the LAST file can end in a torn tail: bytes after its last
   whole record, with nothing but zeros after them, where no consume queue unit points.
   That is what an interrupted append leaves, and it is zeroed. A record that cannot be
   framed (bad magic code, a size past the file) with data after it, a file before the
   last one that does not end in a BLANK record, a commit log missing while queues point
   into it: damage, not a torn tail. rmqdelay then refuses to write to the store, in one
   line, and changes nothing (the broker's recovery would truncate the log there and
   delete every later file; rmqdelay never deletes or truncates a file of valid records).
2. Units past the end. Consume queue units that point past the end of the log describe
   records that were never written (ConsumeQueue.truncateDirtyLogicFiles): each queue's
   units past the end, however many, are zeroed.
3. Dispatch. As the broker's ReputMessageService starts from the highest commit log
   offset any queue covers (or the log's first offset when no queue does - a deleted
   consumequeue/ is rebuilt from the whole log), every record from there to the end gets
   its unit at its queueOffset. Like reput (checkMessageAndReturnSize without the CRC
   check) a record whose body fails its CRC is dispatched all the same; a
   SCHEDULE_TOPIC_XXXX record whose DELAY is not a number is not (Integer.parseInt throws
   and the broker builds no unit for it) and is reported. Where the broker's reput would
   then skip the rest of that file, rmqdelay dispatches the records after it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import RECORD_HEAD, Message
from rmqdelay.formats.constants import (
    CQ_STORE_UNIT_SIZE,
    PROPERTY_DELAY_TIME_LEVEL,
    RMQ_SYS_SCHEDULE_TOPIC,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.store import Store
from rmqdelay.store.brokercut import broker_cut
from rmqdelay.store.commitlog import Blank, End, first_nonzero
from rmqdelay.store.mappedfiles import MappedFile

_CHUNK_UNITS = 1 << 16  # units read at a time when looking for units past the log
MAX_REPORTED = 5  # records named one by one in the notices; the rest are counted


@dataclass(slots=True)
class TornTail:
    file: MappedFile
    start: int  # physical offset of the first byte that is not part of a whole record
    stop: int  # physical offset after the last non-zero byte


@dataclass(slots=True)
class QueueCut:
    """Units [first, last) of a queue point past the end of the log."""

    topic: str
    queueId: int
    first: int
    last: int


@dataclass(slots=True)
class RecoveryPlan:
    end: int  # where the next record goes
    torn: TornTail | None
    cuts: list[QueueCut]
    queue_offsets: dict[tuple[str, int], int]  # after the cuts
    dispatch_from: int
    notices: list[str] = field(default_factory=list)


@dataclass(slots=True)
class RecoveryReport:
    valid_end: int = 0
    wiped_bytes: int = 0
    redispatched: int = 0
    truncated_units: int = 0
    dispatchedFrom: int = 0
    notices: list[str] = field(default_factory=list)
    indexed: int = 0  # records the index lacked (a lost batch, or appended by an older rmqdelay)

    @property
    def changed(self) -> bool:
        return bool(self.wiped_bytes or self.redispatched or self.truncated_units)


def _refuse(path, offset: int | None, what: str) -> StoreError:
    return StoreError(path, offset, f"{what}; rmqdelay does not write to this store, and changed nothing "
                                    f"(inspect commitlog --verify lists the damage)")


def _first_nonzero(view: memoryview, pos: int, stop: int) -> int | None:
    """The first non-zero byte in [pos, stop), or None."""
    return first_nonzero(view, pos, stop - pos) if pos < stop else None


def _last_nonzero(view: memoryview, pos: int, stop: int) -> int:
    """The position after the last non-zero byte in [pos, stop) (``pos`` when none)."""
    step = 1 << 22
    end = stop
    while end > pos:
        start = max(pos, end - step)
        hits = np.flatnonzero(np.frombuffer(view[start:end], dtype=np.uint8))
        if len(hits):
            return start + int(hits[-1]) + 1
        end = start
    return pos


# -- the plan ------------------------------------------------------------------------------
def plan_recovery(store: Store) -> RecoveryPlan:
    """Read the store and decide; raises StoreError (a refusal) when it cannot be written
    safely."""
    commitlog = store.commitlog
    infos = list(store.queue_infos())
    queue_offsets = {(i.topic, i.queueId): i.maxOffset for i in infos}
    files = commitlog.files
    if not files:
        covered = [i for i in infos if i.maxOffset > i.minOffset]
        if covered:
            q = covered[0]
            raise _refuse(store.consumequeue_dir / q.topic / str(q.queueId), None,
                          f"units into a commit log, but {store.commitlog_dir} holds no file")
        return RecoveryPlan(0, None, [], queue_offsets, 0)
    walk_from = _checked_top(store, infos, files[-1])
    end, torn, notices = _walk_last_file(store, files[-1], walk_from)
    if end == files[-1].end:
        _refuse_missing_file(store, infos, files[-1])
    cut = broker_cut(store, end)
    if cut is not None:
        raise StoreError(cut.path, cut.byte,
                         f"{cut.why} (damage, not a torn tail): a broker starting now would cut the log there and "
                         f"drop {cut.dropped} records, and deliveries appended after it with them; rmqdelay does not "
                         f"write to this store, and changed nothing: restore {cut.path.name} from a replica or "
                         f"backup, or start the broker once to let its recovery cut the log first")
    holes = _queue_holes(store, infos, end)
    damaged = {(h.topic, h.queueId) for h in holes}
    cuts = _units_past(store, [i for i in infos if (i.topic, i.queueId) not in damaged], end)
    for cut in cuts:
        queue_offsets[(cut.topic, cut.queueId)] = cut.first
    dispatch_from = _dispatch_start(store, infos, cuts, end)
    for hole in holes:  # rebuilt from the log: its records carry their queue offsets
        queue_offsets[(hole.topic, hole.queueId)] = hole.first
        dispatch_from = min(dispatch_from, hole.since)
    plan = RecoveryPlan(end, torn, cuts, queue_offsets, dispatch_from, notices)
    # Framing of everything to dispatch, checked before anything is changed; and every unit
    # of a hole found among the records.
    found = {key: 0 for key in damaged}
    for msg in _records(store, dispatch_from, end):
        key = (msg.topic, msg.queueId)
        if key in found and dispatchable(msg) and msg.queueOffset >= queue_offsets[key]:
            found[key] += 1
    for hole in holes:
        have = found[(hole.topic, hole.queueId)]
        if have < hole.last - hole.first:
            raise _refuse(hole.path, hole.byte,
                          f"units {hole.first}..{hole.last - 1} of {hole.topic}/{hole.queueId} are {hole.what}, and "
                          f"the commit log from offset {hole.since} holds {have} of their records: the queue "
                          f"cannot be rebuilt from it (restore the queue file, or the commit log, from a replica or "
                          f"backup)")
        plan.notices.append(f"{hole.path} at byte {hole.byte}: units {hole.first}..{hole.bad_end - 1} of "
                            f"{hole.topic}/{hole.queueId} were {hole.what}, with written units after them; units "
                            f"{hole.first}..{hole.last - 1} rebuilt from their records in the commit log (from "
                            f"offset {hole.since}), as the broker wrote them")
    return plan


@dataclass(slots=True)
class QueueHole:
    """Units [first, last) of a queue are zeroed or garbage while written units follow them:
    the broker's ConsumeQueue.recover would end the queue at ``first`` and the units after it
    would be lost (a SCHEDULE_TOPIC_XXXX level's parked messages never delivered, a topic's
    queue offsets given out again). Rebuilt from the records in the log from ``since``."""

    topic: str
    queueId: int
    first: int
    last: int
    since: int  # where the records of the queue's units from ``first`` begin (a record boundary)
    path: object
    byte: int
    what: str
    bad_end: int  # the first written unit after the bad ones


def _queue_holes(store: Store, infos, end: int) -> list[QueueHole]:
    """The queues whose last files hold written units after units that are not (zeros, or
    units that do not follow the log: pointing back before the unit before them or past the
    end of the data). A queue ends in zeros normally, and units past the end of the log after
    a power loss are cut (``_units_past``): only a bad run with good units after it is a hole."""
    holes = []
    pending = _pending_schedule_units(store)
    for info in infos:
        cq = store.consume_queue(info.topic, info.queueId)
        units, base = _last_units(cq, info.minOffset,
                                  pending.get(info.queueId, info.minOffset)
                                  if info.topic == RMQ_SYS_SCHEDULE_TOPIC else None)
        if units is None:
            continue
        offsets = units["commitLogOffset"].astype(np.int64)
        ends = offsets + units["size"]
        written = (offsets >= 0) & (units["size"] > 0)
        # Garbage among the written units: not after the unit before it, or past the data.
        follows = np.ones(len(units), dtype=bool)
        follows[1:] = offsets[1:] >= ends[:-1]
        bad_at = np.flatnonzero(~written | (ends > end) | ~follows)
        first = base + int(bad_at[0]) if len(bad_at) else base + len(units)
        if first <= max(info.minOffset, base):  # nothing before it to go by
            continue
        good_after = np.flatnonzero(written & (ends <= end) & (np.arange(len(units)) > first - base)
                                    & (offsets >= ends[first - base - 1]))
        if not len(good_after):
            continue  # zeros after the end, or units past the log: not a hole
        last = base + int(good_after[-1]) + 1
        bad_end = base + int(good_after[0])
        what = "zeroed" if not written[first - base] else "not units of the log (garbage)"
        path, byte = _unit_place(cq, first)
        holes.append(QueueHole(info.topic, info.queueId, first, last, int(ends[first - base - 1]), path, byte, what,
                               bad_end))
    return holes


def _pending_schedule_units(store: Store) -> dict[int, int]:
    """{SCHEDULE_TOPIC_XXXX queue id: the unit before the first one still to deliver} by
    delayOffset.json (the scheduler reads every unit from there, whatever file it is in; a
    level it lacks, from the queue's first unit); {} when the file cannot be read (the
    scheduler says why)."""
    try:
        loaded = store.delay_offsets(fallback=False)  # no warning here: the scheduler's to give
    except StoreError:
        return {}
    if loaded is None:
        return {}
    return {level - 1: max(offset - 1, 0) for level, offset in loaded.offsetTable.items() if level > 0}


def _last_units(cq, min_offset: int, from_offset: int | None = None):
    """The units of a queue's last file with written units and of the two files before it (the
    files ConsumeQueue.recover checks, stopping at the first unit that is not written), and the
    logical offset of the first; from ``from_offset`` when that is earlier (a schedule queue's
    units still to deliver, and the one before them)."""
    files = cq.files
    for index in range(len(files) - 1, -1, -1):
        units = cq.file_units(index)
        if ((units["commitLogOffset"] >= 0) & (units["size"] > 0)).any():
            first = max(index - 2, 0)
            if from_offset is not None:
                at = max(from_offset, min_offset) * CQ_STORE_UNIT_SIZE
                first = min(first, next((i for i, mf in enumerate(files) if mf.start <= at < mf.start + mf.size),
                                        first))
            parts = [cq.file_units(i) for i in range(first, index + 1)]
            base = files[first].start // CQ_STORE_UNIT_SIZE
            joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
            skip = max(min_offset - base, 0)
            return joined[skip:], base + skip
    return None, 0


def _unit_place(cq, offset: int):
    """The file holding a queue's unit ``offset`` and the unit's byte in it."""
    at = offset * CQ_STORE_UNIT_SIZE
    for mf in cq.files:
        if mf.start <= at < mf.start + mf.size:
            return mf.path, at - mf.start
    return cq.files[-1].path, at - cq.files[-1].start


def _refuse_missing_file(store: Store, infos, last: MappedFile) -> None:
    """Units past the end of the last commit log file, closed by its BLANK: a file after it held
    their records (a file is begun only when a record is appended to it), and it is gone or not
    a file. That is no torn tail (a last file whose data ends in zeros is: units past it describe
    records a power loss took, dropped as the broker drops them): cutting the units loses what
    the file held, and a rerun with the file back would deliver again. Refused before anything
    changes."""
    beyond = [i for i in infos if i.maxOffset > i.minOffset and i.maxPhysicOffset > last.end]
    if not beyond:
        return
    top = max(beyond, key=lambda i: i.maxPhysicOffset)
    missing = last.path.with_name(f"{last.end:020d}")
    what = "a directory" if missing.is_dir() else "none"
    raise StoreError(missing, None,
                     f"a commit log file after {last.path.name}: {len(beyond)} queue(s) point past its end, "
                     f"{top.topic}/{top.queueId} up to commit log offset {top.maxPhysicOffset}; found {what}. "
                     f"rmqdelay does not write to this store, and changed nothing: put the file back (a broker "
                     f"starting without it would cut every queue at offset {last.end})")


def data_end(store: Store) -> int:
    """Where the log's data ends, reading only: a torn tail of the last file (what an
    interrupted append leaves, zeroed when the writer next opens the store) is not data.
    Raises StoreError where the writer would refuse."""
    files = store.commitlog.files
    if not files:
        return 0
    return _walk_last_file(store, files[-1], _checked_top(store, list(store.queue_infos()), files[-1]))[0]


def store_cut(store: Store):
    """Where a broker starting now would cut the store's log (brokercut.BrokerCut), or None; a
    DLedger log (it ends where its committed index says) and a log whose end cannot be told
    (left to the problems that say why) give None."""
    from rmqdelay.store.layout import PLAIN

    if store.layout.log != PLAIN:
        return None
    try:
        return broker_cut(store, data_end(store))
    except StoreError:
        return None


def _checked_top(store: Store, infos, last: MappedFile) -> int:
    """Where to start looking for the end of the log: after the message the highest unit
    points at, when that is a whole record of the unit's size in the last file; else the
    last file's start."""
    top = max(infos, key=lambda i: i.maxPhysicOffset, default=None)
    if top is None or not last.start < top.maxPhysicOffset <= last.end:
        return last.start
    unit = store.consume_queue(top.topic, top.queueId).unit(top.maxOffset - 1)
    try:
        record = store.commitlog.read_record(unit.commitLogOffset)
    except StoreError:
        return last.start
    if isinstance(record, Message) and record.storeSize == unit.size:
        return unit.commitLogOffset + unit.size
    return last.start


def _walk_last_file(store: Store, last: MappedFile, walk_from: int) -> tuple[int, TornTail | None, list[str]]:
    """The end of the log's data in the last file, and the torn tail after it, if any."""
    commitlog = store.commitlog
    view = commitlog._reader.view(len(commitlog.files) - 1)
    notices: list[str] = []
    pos = walk_from - last.start
    size = last.size
    while pos < size:
        try:
            record = commitlog._decode_at(last, view, pos, False)
        except StoreError as exc:
            return _torn_or_refuse(last, view, pos, exc.offset, exc.expected), _tail(last, view, pos), notices
        if isinstance(record, End):
            # A last record cut short is the end of the data to a reader; to the writer it is
            # the torn tail it zeroes before it appends.
            return record.physicalOffset, _tail(last, view, pos) if record.torn else None, notices
        if isinstance(record, Blank):
            return last.end, None, notices
        end = pos + record.storeSize
        if not record.bodyCrcOk:
            if _first_nonzero(view, end, size) is None:
                # The last thing in the log, never dispatched, its body not what its CRC
                # says: what an interrupted append leaves (the broker's recovery drops it too).
                return last.start + pos, _tail(last, view, pos), notices
        pos = end
    return last.end, None, notices


def _tail(last: MappedFile, view: memoryview, pos: int) -> TornTail:
    return TornTail(last, last.start + pos, last.start + _last_nonzero(view, pos, last.size))


def _torn_or_refuse(last: MappedFile, view: memoryview, pos: int, bad_at: int | None, expected: str) -> int:
    """A record that cannot be framed at ``pos`` of the last file: a torn tail when nothing
    but zeros follows what its head claims, else a refusal."""
    total = RECORD_HEAD.unpack_from(view, pos)[0] if pos + 8 <= last.size else 0
    extent = total if 8 <= total <= last.size - pos else 8
    after = _first_nonzero(view, pos + min(extent, last.size - pos), last.size)
    if after is None:
        return last.start + pos
    raise _refuse(last.path, bad_at if bad_at is not None else pos,
                  f"{expected}; {last.size - after} more bytes of data follow at byte {after}, so this is "
                  f"damage, not a torn tail")


def _units_past(store: Store, infos, end: int) -> list[QueueCut]:
    """Per queue, the units (a suffix: a queue's units follow the log's order) whose
    message ends past ``end``."""
    cuts = []
    for info in infos:
        if info.maxPhysicOffset <= end or info.maxOffset <= info.minOffset:
            continue
        cq = store.consume_queue(info.topic, info.queueId)
        first = info.maxOffset
        while first > info.minOffset:
            start = max(info.minOffset, first - _CHUNK_UNITS)
            units = cq.units(start, first)
            ends = units["commitLogOffset"].astype(np.int64) + units["size"]
            inside = np.flatnonzero(ends <= end)
            if len(inside):
                first = start + int(inside[-1]) + 1
                break
            first = start
        cuts.append(QueueCut(info.topic, info.queueId, first, info.maxOffset))
    return cuts


def _dispatch_start(store: Store, infos, cuts: list[QueueCut], end: int) -> int:
    """The broker's reput start: the highest offset a queue covers (after the cuts), at
    least the log's first offset. The unit that says so must point at a whole record."""
    cut_at = {(c.topic, c.queueId): c.first for c in cuts}
    best, best_unit = store.commitlog.min_offset, None
    for info in infos:
        top = cut_at.get((info.topic, info.queueId), info.maxOffset)
        if top <= info.minOffset:
            continue
        if (info.topic, info.queueId) in cut_at:
            unit = store.consume_queue(info.topic, info.queueId).unit(top - 1)
            covered = unit.commitLogOffset + unit.size
        else:
            covered = info.maxPhysicOffset
        if covered > best:
            best = covered
            best_unit = (info, top - 1)
    if best_unit is not None:
        info, offset = best_unit
        unit = store.consume_queue(info.topic, info.queueId).unit(offset)
        try:
            record = store.commitlog.read_record(unit.commitLogOffset)
            whole = isinstance(record, Message) and record.storeSize == unit.size
        except StoreError:
            whole = False
        if not whole:
            raise _refuse(store.consumequeue_dir / info.topic / str(info.queueId), offset * CQ_STORE_UNIT_SIZE,
                          f"unit {offset} points at a message of {unit.size} bytes at commit log offset "
                          f"{unit.commitLogOffset}, where the log holds none: the queues do not describe this log")
    return min(best, end)


def _records(store: Store, start: int, end: int) -> Iterator[Message]:
    """Every message in [start, end), file by file, as reput walks them; a record that
    cannot be framed, or a file before the last that does not end in a BLANK, is a refusal."""
    commitlog = store.commitlog
    files = commitlog.files
    offset = start
    index = commitlog.file_index(offset) if files else -1
    while 0 <= index < len(files) and offset < end:
        mf = files[index]
        view = commitlog._reader.view(index)
        pos = offset - mf.start
        while mf.start + pos < end:
            try:
                record = commitlog._decode_at(mf, view, pos, False)
            except StoreError as exc:
                raise _refuse(mf.path, exc.offset, f"{exc.expected}; the commit log goes on to offset {end}, so "
                                                   f"this is damage, not a torn tail") from None
            if isinstance(record, Blank):
                break
            if isinstance(record, End):
                raise _refuse(mf.path, pos, f"a BLANK record closing the file, found zeros; the commit log goes "
                                            f"on in {files[index + 1].path.name}")
            yield record
            pos += record.storeSize
        index += 1
        if index < len(files):
            offset = files[index].start


# -- applying it --------------------------------------------------------------------------
class RecoveryTarget:
    """What the writer lends recovery: checked writes into its files."""

    def wipe(self, tail: TornTail) -> int: ...

    def zero_units(self, topic: str, queue_id: int, first: int, count: int) -> None: ...

    def write_unit(self, topic: str, queue_id: int, queue_offset: int, msg: Message) -> None: ...

    def sync_queues(self) -> None: ...


def dispatchable(msg: Message) -> bool:
    """The broker builds a unit for the record (prepared and rolled back transactions wait)."""
    tran = msg.sysFlag & TRANSACTION_TYPE_MASK
    return tran not in (TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE)


def schedule_delay_ok(msg: Message) -> bool:
    """checkMessageAndReturnSize: Integer.parseInt of DELAY on a SCHEDULE_TOPIC_XXXX record;
    when it throws, the broker builds no unit."""
    if msg.topic != RMQ_SYS_SCHEDULE_TOPIC:
        return True
    text = msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)
    return text is None or java_parse_int(text) is not None


def apply_recovery(store: Store, plan: RecoveryPlan, target: RecoveryTarget) -> RecoveryReport:
    report = RecoveryReport(valid_end=plan.end, dispatchedFrom=plan.dispatch_from, notices=list(plan.notices))
    if plan.torn is not None:
        report.wiped_bytes = target.wipe(plan.torn)
        report.notices.append(f"{plan.torn.file.path} at byte {plan.torn.start - plan.torn.file.start}: "
                              f"{report.wiped_bytes} bytes of a torn record after the last whole one zeroed")
    for cut in plan.cuts:
        target.zero_units(cut.topic, cut.queueId, cut.first, cut.last - cut.first)
        report.truncated_units += cut.last - cut.first
    queue_offsets = plan.queue_offsets
    refused = crc = 0
    for msg in _records(store, plan.dispatch_from, plan.end):
        if not dispatchable(msg):
            continue
        key = (msg.topic, msg.queueId)
        if msg.queueOffset < queue_offsets.get(key, 0):
            continue  # already has its unit
        if not schedule_delay_ok(msg):
            refused += 1
            if refused <= MAX_REPORTED:
                report.notices.append(
                    f"{_where(store, msg)}: a {RMQ_SYS_SCHEDULE_TOPIC} record whose DELAY "
                    f"{msg.properties.get(PROPERTY_DELAY_TIME_LEVEL)!r} is not a number; not dispatched, as the "
                    f"broker does not dispatch it")
            continue
        if not msg.bodyCrcOk:
            crc += 1
            if crc <= MAX_REPORTED:
                report.notices.append(f"{_where(store, msg)}: body CRC mismatch; dispatched all the same, as "
                                      f"the broker's reput does")
        target.write_unit(msg.topic, msg.queueId, msg.queueOffset, msg)
        queue_offsets[key] = msg.queueOffset + 1
        report.redispatched += 1
    if refused > MAX_REPORTED:
        report.notices.append(f"... and {refused - MAX_REPORTED} more such records not dispatched")
    if crc > MAX_REPORTED:
        report.notices.append(f"... and {crc - MAX_REPORTED} more records with a body CRC mismatch dispatched")
    target.sync_queues()
    if report.changed:
        report.notices.append(f"recovered the store: the commit log is valid up to {report.valid_end}, "
                              f"{report.wiped_bytes} torn bytes zeroed, {report.truncated_units} units past it "
                              f"dropped, {report.redispatched} units dispatched from commit log offset "
                              f"{report.dispatchedFrom}")
    return report


def _where(store: Store, msg: Message) -> str:
    mf = store.commitlog.files[store.commitlog.file_index(msg.commitLogOffset)]
    return f"{mf.path} at byte {msg.commitLogOffset - mf.start}"
