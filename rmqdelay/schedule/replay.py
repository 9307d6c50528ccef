"""Where each level stands when a run starts, exactly, even after kill -9.

Offsets are published (``offsets.OffsetPublisher``) only after the writer has flushed and
fsynced, together with the commit log offset X where they are exact, and never after an error
(the writer is abandoned, nothing is published). Each delivered record keeps ``DELAY=<level>``
(the broker's 4.9.4 quirk), which names its level. So on start the deliveries in [X, end) are
matched, in order, against the next units of their levels - every level with a schedule queue,
whatever levels this run is given - and those offsets advanced: nothing is delivered twice and
the delivered bytes stay exactly the broker's. Records there that cannot be deliveries (what
`send` added) are passed over; a delivery that is not the next one of any level, or an X past
the end of the log, is refused in one line rather than published as exact.
"""

from __future__ import annotations

from dataclasses import dataclass

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import PROPERTY_DELAY_TIME_LEVEL, PROPERTY_REAL_TOPIC, RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.schedule.events import Notice, Replayed
from rmqdelay.schedule.offsets import read_scheduler_state, scheduler_state_path
from rmqdelay.schedule.redelivery import restore_unit
from rmqdelay.store import Store
from rmqdelay.store.layout import PLAIN
from rmqdelay.store.recovery import data_end
from rmqdelay.store.writer import NewMessage, without_crc


def _same_delivery(record: Message, new: NewMessage) -> bool:
    return (record.topic == new.topic and record.queueId == new.queueId
            and without_crc(record.propertiesRaw) == without_crc(new.propertiesRaw) and record.body == new.body
            and record.bornTimestamp == new.bornTimestamp and record.flag == new.flag
            and record.sysFlag == new.sysFlag and record.reconsumeTimes == new.reconsumeTimes)


@dataclass(slots=True)
class OffsetRecovery:
    offsets: dict[int, int]  # every configured level: where delivery resumes
    table: dict[int, int]  # what delayOffset.json should hold (levels never touched stay absent)
    published: dict[int, int] | None  # what delayOffset.json holds now
    dataVersion: DataVersion | None
    notices: list[Notice]
    replayed: Replayed | None


def exact_offsets(store: Store, delay_levels: dict[int, int], *, broker5x: bool = False) -> OffsetRecovery:
    """The offsets at the end of the commit log: delayOffset.json (or the scheduler file,
    when delayOffset.json is the table it published), clamped as correctDelayOffset does,
    then advanced over deliveries that were appended after that table was made exact.
    Reads only.

    What a writer must not guess is refused (StoreError, one line): a delayOffset.json that
    is there but unusable (the broker would take the older .bak: deliveries made again), a
    scheduler file exact at an offset past the end of the log, a replay that meets a
    delivery it cannot place. The replay depends on the store only, never on the levels
    configured for this run: every level with a schedule queue is replayed."""
    notices: list[Notice] = []
    loaded = store.delay_offsets(fallback=False)
    published = dict(loaded.offsetTable) if loaded else None
    state = read_scheduler_state(store.path)
    replay_from: int | None = None
    base = dict(published or {})
    if state is not None:
        if published is None and state.previousOffsetTable is not None:
            notices.append(Notice("delayOffsets", "no config/delayOffset.json (nor its .bak): resuming from "
                                                  "config/rmqdelay.scheduler.json, exact where it says"))
        if published is None or published == state.offsetTable or published == state.previousOffsetTable:
            base = dict(state.offsetTable)
            replay_from = state.commitLogOffset
            if state.delayLevels is not None and state.delayLevels != delay_levels:
                notices.append(Notice("delayLevels", "the delay levels differ from those of the run that wrote "
                                                      "config/rmqdelay.scheduler.json; the replay covers every "
                                                      "level of the store either way"))
        else:
            notices.append(Notice("foreignOffsets",
                                  "delayOffset.json was changed since rmqdelay last wrote it (a broker or "
                                  "another tool); taking it as it is, without replaying the commit log"))
    table = dict(base)
    offsets: dict[int, int] = {}
    levels = sorted(set(delay_levels) | set(table) | _schedule_levels(store))
    for level in levels:
        cq = store.schedule_queue(level)
        lo, hi = cq.min_offset, cq.max_offset
        if level not in table:
            offsets[level] = lo  # the broker starts at 0 and is reset to the queue's minimum
            continue
        current = table[level]
        corrected = min(max(current, lo), hi)
        if corrected != current:
            notices.append(Notice("corrected", f"level {level}: offset {current} is outside the queue "
                                               f"[{lo}, {hi}]; corrected to {corrected}", level))
            table[level] = corrected
        offsets[level] = corrected
    replayed = None
    if replay_from is not None:
        counts = _replay(store, offsets, replay_from, broker5x)
    elif state is None:
        replay_from, counts = _found_delivered(store, offsets, broker5x)
        if counts:
            notices.append(Notice("delivered", f"no config/rmqdelay.scheduler.json: {sum(counts.values())} "
                                               f"delivered copies of the next units found in the commit log after "
                                               f"offset {replay_from}; counted as delivered, not delivered again"))
    if replay_from is not None:
        for level in counts:
            table[level] = offsets[level]
        replayed = Replayed(replay_from, counts)
    return OffsetRecovery({level: offsets[level] for level in delay_levels}, table, published,
                          loaded.dataVersion if loaded else None, notices, replayed)


def _schedule_levels(store: Store) -> set[int]:
    return {queue_id + 1 for queue_id in store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []) if queue_id >= 0}


_RECOURSE = ("remove config/rmqdelay.scheduler.json to take delayOffset.json as the broker would (what it does "
             "not count is delivered again), or set the offsets with `rmqdelay offsets reset`")


def _looks_delivered(record: Message) -> bool:
    """A record the scheduler could have appended: a real topic, REAL_TOPIC, and the DELAY
    of a level (deliveries keep DELAY=<level>, the 4.9.4 quirk)."""
    if record.topic == RMQ_SYS_SCHEDULE_TOPIC:
        return False
    props = record.properties
    level = java_parse_int(props.get(PROPERTY_DELAY_TIME_LEVEL, ""))
    return PROPERTY_REAL_TOPIC in props and level is not None and level > 0


def _replay(store: Store, offsets: dict[int, int], start: int, broker5x: bool = False) -> dict[int, int]:
    """Advance ``offsets`` over the deliveries found in [start, end). Deliveries appear in
    order per level; records that cannot be deliveries (what `send` or a producer added)
    are passed over. A record that looks like a delivery but is not the next one of any
    level is a refusal: offsets published past it would not be exact."""
    counts: dict[int, int] = {}
    state_path = scheduler_state_path(store.path)
    end = store.end_offset()
    if start > end:
        raise StoreError(state_path, None, f"offsets exact at commit log offset {start}, but the log ends at "
                                           f"{end}: deliveries it counts are missing from the log; {_RECOURSE}")
    if start == end:
        return counts
    maxes = {level: store.schedule_queue(level).max_offset for level in offsets}
    for record in store.commitlog.records(start):
        if not _looks_delivered(record):
            continue
        named = java_parse_int(record.properties[PROPERTY_DELAY_TIME_LEVEL])
        # DELAY names the level; a hand-made schedule message may disagree with its queue,
        # so the other levels are tried too.
        candidates = ([named] if named in offsets else []) + [level for level in offsets if level != named]
        found = None
        for level in candidates:
            offset = _next_delivery_matching(store, level, offsets[level], maxes[level], record, broker5x)
            if offset is not None:
                found = level
                break
        if found is None:
            index = store.commitlog.file_index(record.commitLogOffset)
            mf = store.commitlog.files[index]
            raise StoreError(mf.path, record.commitLogOffset - mf.start,
                             f"the replay of deliveries after commit log offset {start} (where "
                             f"config/rmqdelay.scheduler.json is exact) found a delivery to {record.topic} that is "
                             f"not the next one of any level; {_RECOURSE}")
        offsets[found] = offset + 1
        counts[found] = counts.get(found, 0) + 1
    return counts


def _found_delivered(store: Store, offsets: dict[int, int], broker5x: bool = False) -> tuple[int | None, dict[int, int]]:
    """Without the scheduler file, where delayOffset.json is exact is not known (a kill after
    deliveries and before the next publish, then the file lost): the deliveries in the commit
    log say how far each level went. Every delivered copy of a level's unit is appended after
    the unit's record, so the log is read from the record of the earliest next unit; each
    level is advanced over its next units while each has a copy (the same delivery, after its
    record), one copy per unit. Returns where the read started (None: nothing to read) and the
    units advanced per level."""
    heads = {}
    for level, offset in offsets.items():
        cq = store.schedule_queue(level)
        if offset < cq.max_offset:
            heads[level] = cq.unit(offset).commitLogOffset
    if not heads:
        return None, {}
    start = max(min(heads.values()), store.commitlog.min_offset)
    # A torn tail after a kill is no data (the writer zeroes it when it opens); a DLedger log
    # ends where its committed index says.
    end = data_end(store) if store.layout.log == PLAIN else store.commitlog.end_offset()
    if start >= end:
        return None, {}
    copies: dict[tuple, list[Message]] = {}
    for record in store.commitlog.records(start):
        if _looks_delivered(record):
            copies.setdefault((record.topic, record.queueId, record.bornTimestamp), []).append(record)
        if record.commitLogOffset + record.storeSize >= end:
            break
    counts: dict[int, int] = {}
    if not copies:
        return start, counts
    for level in sorted(heads):
        cq = store.schedule_queue(level)
        offset, max_offset = offsets[level], cq.max_offset
        pos = offset
        while pos < max_offset:
            unit = cq.unit(pos)
            _, new, reason = restore_unit(store, unit.commitLogOffset, unit.size, broker5x=broker5x)
            pos += 1
            if reason is not None:
                continue  # skipped, as the run that delivered the next one did
            same = copies.get((new.topic, new.queueId, new.bornTimestamp), [])
            match = next((i for i, r in enumerate(same)
                          if r.commitLogOffset > unit.commitLogOffset and _same_delivery(r, new)), None)
            if match is None:
                break
            del same[match]
            offset = pos
            counts[level] = counts.get(level, 0) + 1
        offsets[level] = offset
    return start, counts


def _next_delivery_matching(store: Store, level: int, offset: int, max_offset: int, record: Message,
                            broker5x: bool = False) -> int | None:
    """The offset of the unit of ``level`` that ``record`` delivered, when it is the next
    one to deliver (after units the scheduler skips), else None."""
    cq = store.schedule_queue(level)
    while offset < max_offset:
        unit = cq.unit(offset)
        _, new, reason = restore_unit(store, unit.commitLogOffset, unit.size, broker5x=broker5x)
        if reason is None:
            return offset if _same_delivery(record, new) else None
        offset += 1  # skipped the same way by the run that wrote the log
    return None
