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


def delay_level_families(statuses, store: str, now_ms: int, problems: list[str] = (), cut=None) -> list[Family]:
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
    return families + [broker_cut_family(store, cut), problems_family(store, "delay", list(problems)),
                       reading_family(store, now_ms, "delay")]


def broker_cut_family(store: str, cut) -> Family:
    """The records a broker starting now would drop, cutting its commit log at a record its
    recovery stops at (store/brokercut.py): 0 on a log it keeps whole."""
    family = Family("rmqdelay_broker_cut_records",
                    "Records a broker starting now would drop: its recovery cuts the commit log at a broken record "
                    "(inspect store names it) and every queue unit after it goes; 0 when it keeps the log whole.")
    family.add({"store": store}, 0 if cut is None else cut.dropped)
    return family


def problems_family(store: str, source: str, problems: list[str]) -> Family:
    """What could not be read, as a figure: 0 on a store read clean, so an alert can say
    `rmqdelay_problems > 0` instead of waiting for a file to go stale."""
    family = Family("rmqdelay_problems",
                    "Problems rmqdelay found reading the store for this output: damaged or unreadable files, each "
                    "also one line on stderr. The figures that depend on them are left out; the rest are shown.")
    family.add({"store": store, "source": source}, len(problems))
    return family


def reading_family(store: str, now_ms: int, source: str) -> Family:
    """The moment of the reading (`--now`, else the wall clock), so a dashboard can tell a
    stale file from a quiet store; ``source`` names the command (delay, timer, consumers,
    dlq), so the files of several commands in one collector directory never repeat a series."""
    family = Family("rmqdelay_reading_timestamp_seconds",
                    "When rmqdelay read the store: the clock the figures are judged at (epoch seconds).")
    family.add({"store": store, "source": source}, now_ms / 1000)
    return family


_TIMER_BUCKETS = ("dueNow", "nextMinute", "nextHour", "nextDay", "later")
_TIMER_BUCKET_LABELS = {"dueNow": "due", "nextMinute": "1m", "nextHour": "1h", "nextDay": "1d", "later": "later"}


def timer_families(status: dict | None, store: str, now_ms: int, problems: list[str] = ()) -> list[Family]:
    """The 5.x timer wheel of one store, labelled store: what `inspect timer --json` shows
    (``status`` None: the timer store could not be read, ``problems`` say why)."""
    if status is None:
        return [problems_family(store, "timer", list(problems)), reading_family(store, now_ms, "timer")]
    pending = status["pending"]
    labels = {"store": store}
    families = []

    def gauge(name: str, help: str, value, extra: dict[str, str] | None = None) -> Family:
        family = next((f for f in families if f.name == name), None)
        if family is None:
            family = Family(name, help)
            families.append(family)
        family.add(labels | (extra or {}), value)
        return family

    for bucket in _TIMER_BUCKETS:
        gauge("rmqdelay_timer_pending_messages",
              "Timer messages waiting, by when they are due: due (now or overdue), 1m, 1h, 1d (within the next "
              "minute, hour, day), later, roll (beyond the roll window, re-put when their slot comes), "
              "the not enqueued ones (still in rmq_sys_wheel_timer) counted by their TIMER_OUT_MS.",
              pending[bucket] + pending["notEnqueuedByDue"].get(bucket, 0), {"due": _TIMER_BUCKET_LABELS[bucket]})
    gauge("rmqdelay_timer_pending_messages", "", pending["beyondRollWindow"], {"due": "roll"})
    gauge("rmqdelay_timer_due_messages", "Pending timer messages whose deliver time has come (due now).",
          pending["dueNow"] + pending["notEnqueuedByDue"].get("dueNow", 0))
    oldest = pending["oldestDueTimestamp"]
    gauge("rmqdelay_timer_oldest_due_age_seconds",
          "How long the oldest due timer message has been due (0 when none is).",
          0 if oldest is None else max(now_ms - oldest, 0) / 1000)
    gauge("rmqdelay_timer_not_enqueued_messages",
          "Timer messages in rmq_sys_wheel_timer the timer has not enqueued into its log yet.",
          pending["notEnqueued"])
    gauge("rmqdelay_timer_rolls", "Roll units: pending (waiting to be re-put) and done (re-put already).",
          status["rolls"]["pending"], {"state": "pending"})
    gauge("rmqdelay_timer_rolls", "", status["rolls"]["done"], {"state": "done"})
    for state, count in status["cancellations"].items():
        gauge("rmqdelay_timer_cancellations",
              "Cancellation markers (TIMER_DEL_UNIQKEY) by state, as `inspect timer` names them.", count,
              {"state": state})
    dequeue, enqueue = status["dequeue"], status["enqueue"]
    gauge("rmqdelay_timer_read_lag_seconds",
          "How far the wheel's read clock (timercheck lastReadTimeMs) is behind the clock.",
          max(dequeue["behindMs"], 0) / 1000 if dequeue["behindMs"] is not None else 0)
    gauge("rmqdelay_timer_write_lag_messages",
          "Messages in rmq_sys_wheel_timer past the timer's enqueue offset (masterTimerQueueOffset).",
          enqueue["behindMessages"] or 0)
    gauge("rmqdelay_timer_skipped_messages",
          "Pending messages in slots a broker started now would never read: a restart skips them (inspect timer "
          "warns and exits 1; its --format prometheus exits 0 and says it here).",
          status["horizon"]["skipped"])
    families.append(problems_family(store, "timer", list(problems)))
    families.append(reading_family(store, now_ms, "timer"))
    return families


def consumer_families(rows, store: str, now_ms: int, problems: list[str] = ()) -> list[Family]:
    """Per group, topic and queue: what `inspect consumers` shows."""
    lag = Family("rmqdelay_consumer_lag_messages",
                 "Messages of the queue the group has not consumed: max offset - committed offset.")
    lag_age = Family("rmqdelay_consumer_lag_seconds",
                     "Age of the oldest message the group has not consumed (0 with no lag).")
    committed = Family("rmqdelay_consumer_offset",
                       "The group's committed offset (config/consumerOffset.json; absent when never committed).")
    max_offset = Family("rmqdelay_consumer_queue_max_offset", "The queue's max offset.")
    for r in rows:
        labels = {"store": store, "group": r.group, "topic": r.topic, "queue": str(r.queueId), "kind": r.kind}
        lag.add(labels, r.lag)
        lag_age.add(labels, (r.lagMs or 0) / 1000)
        if r.consumerOffset is not None:
            committed.add(labels, r.consumerOffset)
        max_offset.add(labels, r.maxOffset)
    return [lag, lag_age, committed, max_offset, problems_family(store, "consumers", list(problems)),
            reading_family(store, now_ms, "consumers")]


def dlq_families(letters, store: str, now_ms: int, problems: list[str] = ()) -> list[Family]:
    """Per group: how many messages its %DLQ% topic holds and how old the newest and oldest are."""
    count = Family("rmqdelay_dlq_messages", "Messages in the group's dead-letter queue (%DLQ%GROUP).")
    oldest = Family("rmqdelay_dlq_oldest_age_seconds", "How long the oldest dead-lettered message has sat there.")
    newest = Family("rmqdelay_dlq_newest_timestamp_seconds",
                    "When the newest message was dead-lettered (epoch seconds): a new one moves it.")
    groups: dict[str, list] = {}
    for d in letters:
        groups.setdefault(d.group, []).append(d)
    for group, items in sorted(groups.items()):
        labels = {"store": store, "group": group}
        count.add(labels, len(items))
        oldest.add(labels, max(d.inDlqMs for d in items) / 1000)
        newest.add(labels, max(d.dlqTimestamp for d in items) / 1000)
    return [count, oldest, newest, problems_family(store, "dlq", list(problems)), reading_family(store, now_ms, "dlq")]


def retention_families(kept: dict | None, store: str) -> list[Family]:
    """What `inspect store` says of retention: when each commit log file is deleted, and the
    messages not yet read or due that go with them."""
    if kept is None:
        return []
    files = Family("rmqdelay_retention_file_delete_timestamp_seconds",
                   "When the broker's retention deletes the commit log file (epoch seconds); the current file has none.")
    for f in kept["files"]:
        if f["deleteTimestamp"] is not None:
            files.add({"store": store, "file": f["file"]}, f["deleteTimestamp"] / 1000)
    groups = Family("rmqdelay_retention_unconsumed_messages",
                    "Messages a consumer group has not consumed yet that live in commit log files retention deletes.")
    for g in kept["consumers"]:
        groups.add({"store": store, "group": g["group"]}, g["messages"])
    parked = Family("rmqdelay_retention_parked_messages",
                    "Delay-level and timer messages waiting in commit log files deleted before they are due.")
    for kind in ("delay", "timer"):
        if kept.get(kind) is not None:
            parked.add({"store": store, "kind": kind}, kept[kind]["messages"])
    return [files, groups, parked]
