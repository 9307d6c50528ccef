"""Metrics in the Prometheus text exposition format (version 0.0.4), as node_exporter's
textfile collector reads them: a HELP and a TYPE line per metric family, then one sample per
line, no timestamps (the collector refuses them).

Every metric is named rmqdelay_<machinery>_..., so each delay machinery keeps its own family
of names: rmqdelay_delay_level_* for the 18 levels of SCHEDULE_TOPIC_XXXX here, and
rmqdelay_timer_* for the 5.x timer wheel beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(slots=True)
class Family:
    name: str
    help: str
    type: str = "gauge"
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)

    def add(self, labels: dict[str, str], value: float) -> None:
        self.samples.append((labels, value))


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def exposition(families: Iterable[Family]) -> str:
    lines = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples:
            text = ",".join(f'{key}="{_escape_label(val)}"' for key, val in labels.items())
            lines.append(f"{family.name}{{{text}}} {_number(value)}" if text else f"{family.name} {_number(value)}")
    return "\n".join(lines) + "\n"


def delay_level_families(statuses, store: str, now_ms: int) -> list[Family]:
    """Per delay level of one store, labelled store and level: what `inspect delay` shows."""
    families = [
        Family("rmqdelay_delay_level_pending_messages",
               "Messages waiting in the delay level: schedule queue units from the delay offset to the max offset."),
        Family("rmqdelay_delay_level_due_messages",
               "Pending messages of the level whose deliver time has come (due now)."),
        Family("rmqdelay_delay_level_oldest_due_age_seconds",
               "How long the oldest due message of the level has been due (0 when none is due)."),
        Family("rmqdelay_delay_level_offset",
               "The level's delay offset: the next schedule queue unit the broker delivers (delayOffset.json, "
               "corrected into the queue as the broker does)."),
        Family("rmqdelay_delay_level_max_offset", "The max offset of the level's schedule queue."),
        Family("rmqdelay_delay_level_delay_seconds", "The level's delay (messageDelayLevel)."),
    ]
    pending, due, age, offset, max_offset, delay = families
    for s in statuses:
        labels = {"store": store, "level": str(s.level)}
        pending.add(labels, s.pending)
        due.add(labels, s.dueNow)
        oldest = s.oldestDueTimestamp
        age.add(labels, 0 if oldest is None else max(now_ms - oldest, 0) / 1000)
        offset.add(labels, s.offset)
        max_offset.add(labels, s.maxOffset)
        delay.add(labels, s.delayMs / 1000)
    return families
