"""Delay levels: messageDelayLevel of the broker config ("1s 5s ... 2h").

In the store layer because the store's own put reads the table (CommitLog.putMessage caps a
message's DELAY at the highest level and parks it in that level's SCHEDULE_TOPIC_XXXX queue);
the level scheduler (rmqdelay.schedule) delivers by the same table."""

from __future__ import annotations

from pathlib import Path

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import DEFAULT_MESSAGE_DELAY_LEVEL
from rmqdelay.store.brokerprops import read_broker_properties

_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str = DEFAULT_MESSAGE_DELAY_LEVEL) -> dict[int, int]:
    """ScheduleMessageService.parseDelayLevel: level (1-based) -> delay in ms."""
    table: dict[int, int] = {}
    for level, token in enumerate(text.split(), start=1):
        unit = token[-1:]
        number = token[:-1]
        if unit not in _UNITS or not number.isdigit():
            raise UsageError(f"delay level {level}: expected a number and a unit (s, m, h, d), found {token!r}")
        table[level] = int(number) * _UNITS[unit]
    if not table:
        raise UsageError("messageDelayLevel: expected at least one level, found none")
    return table


def delay_levels_from_broker_config(path: Path) -> dict[int, int]:
    """messageDelayLevel from a broker.conf (Java properties); the default when absent."""
    value = read_broker_properties(path).get("messageDelayLevel")
    return parse_delay_levels(value.strip()) if value is not None else parse_delay_levels()


def delay_level_queue_id(level: int) -> int:
    """ScheduleMessageService.delayLevel2QueueId."""
    return level - 1


def queue_id_delay_level(queue_id: int) -> int:
    return queue_id + 1
