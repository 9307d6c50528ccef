"""What a store the level scheduler delivered must show, read from its bytes alone: every delay
message delivered exactly once (below its level's offset) or pending (at or after it), no torn
record, every consume queue unit pointing at a message of its own topic, queue and queue
offset, every key of every record in the index once. The exactly-once check of the scheduler's
fault and kill -9 tests (tests/support/kill9_soak.py); in the package, since both need it and it
reads nothing but the store (timer/audit.py is its counterpart for the 5.x timer wheel)."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.formats.constants import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.store import Store
from rmqdelay.store.index_verify import iter_index_problems
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.verify import verify_store


@dataclass
class StoreCheck:
    scheduled: int = 0
    delivered: int = 0
    pending: int = 0
    duplicated: int = 0  # deliveries beyond the first of a message
    lost: int = 0  # messages below their level's offset never delivered
    problems: list[str] = field(default_factory=list)


def check_store(path: Path, *, drained: bool = True) -> StoreCheck:
    """Exactly once, whole records, valid units. Delivered copies are counted per
    UNIQ_KEY + level (each delivered record keeps DELAY=<level>)."""
    result = StoreCheck()
    levels = parse_delay_levels()
    with Store(path) as store:
        scheduled: dict[tuple[str, int], int] = {}
        delivered: collections.Counter = collections.Counter()
        for msg in store.commitlog.records():  # raises on a torn or corrupt record
            props = msg.properties
            level = java_parse_int(props.get(PROPERTY_DELAY_TIME_LEVEL, "0"))
            if level is None:
                continue  # a DELAY the broker cannot read: never dispatched, never delivered
            key = (props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), level)
            if msg.topic == RMQ_SYS_SCHEDULE_TOPIC:
                scheduled[key] = msg.commitLogOffset
            elif PROPERTY_REAL_TOPIC in props and key[1] > 0:
                delivered[key] += 1
        result.scheduled = len(scheduled)
        result.delivered = sum(delivered.values())
        for key, n in delivered.items():
            if n > 1:
                result.duplicated += n - 1
                result.problems.append(f"{key} delivered {n} times")
            if key not in scheduled:
                result.problems.append(f"{key} delivered but never scheduled")
        offsets = store.delay_offsets()
        table = offsets.offsetTable if offsets else {}
        for level in levels:
            cq = store.schedule_queue(level)
            done = table.get(level, cq.min_offset)
            for i, u in enumerate(cq.units(cq.min_offset, cq.max_offset), start=cq.min_offset):
                msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                key = (msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), level)
                if i < done and delivered[key] == 0:
                    result.lost += 1
                if i < done and delivered[key] != 1:
                    result.problems.append(f"level {level} offset {i} {key}: below the offset, delivered "
                                           f"{delivered[key]} times")
                if i >= done:
                    result.pending += 1
                    if delivered[key]:
                        result.problems.append(f"level {level} offset {i} {key}: pending but delivered")
        if drained and result.pending:
            result.problems.append(f"{result.pending} units still pending")
        result.problems += [str(p) for p in verify_store(store)]
        # The index: every key of every record indexed once, chains and slots whole.
        result.problems += [f"{p.kind}: {p}" for p in iter_index_problems(store)]
        # Every unit points at a message of its own topic / queue / queueOffset.
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                for i, u in enumerate(cq.units(cq.min_offset, cq.max_offset), start=cq.min_offset):
                    msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                    if (msg.topic, msg.queueId, msg.queueOffset) != (topic, qid, i):
                        result.problems.append(f"{topic}/{qid} unit {i} points at {msg.topic}/{msg.queueId}/"
                                               f"{msg.queueOffset}")
    return result
