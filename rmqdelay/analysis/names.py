"""The names the analyses' columns go out under: in `analyze --json`, in the Parquet files of
`--output` and in the report (docs/cli.md, "JSON and Parquet"). camelCase, as RocketMQ's own
JSON is (consumerOffset.json, topics.json, the admin tools' output), the figures of
`inspect` and the analyses under one name each, every millisecond figure under a name that
says so. Inside the engines (embedded and Spark) the Arrow tables keep their snake_case
names; they are renamed only where they leave.

Every column needs an entry: a new column without one fails the test that holds this table
to docs/cli.md, instead of going out under a name nobody chose.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

PUBLIC_NAMES: dict[str, str] = {
    # keys
    "store": "store", "level": "level", "group": "group", "topic": "topic", "real_topic": "realTopic",
    "queue_id": "queueId", "minute": "minute", "chain": "chain", "kind": "kind", "state": "state",
    "source": "source", "position": "position", "uniq_key": "uniqKey", "reconsume_times": "reconsumeTimes",
    "queue_offset": "queueOffset", "commitlog_offset": "commitLogOffset",
    "schedule_offset": "scheduleCommitLogOffset", "parked_offset": "parkedCommitLogOffset",
    # counts and offsets
    "offset": "offset", "max_offset": "maxOffset", "consumer_offset": "consumerOffset", "lag": "lag",
    "pending": "pending", "due": "due", "due_now": "dueNow", "overdue_1s": "overdue1s", "overdue_1m": "overdue1m",
    "overdue_1h": "overdue1h", "rolling": "rolling", "not_enqueued": "notEnqueued", "cancel_markers": "cancelMarkers",
    "cancelled": "cancelled", "delivered": "delivered", "early": "early", "duplicates": "duplicates",
    "undelivered_overdue": "undeliveredOverdue", "messages": "messages", "never_enqueued": "neverEnqueued",
    "rolled": "rolled", "dequeue_early": "dequeueEarly", "rolls": "rolls", "cancellations": "cancellations",
    "dlq": "dlq", "dlq_rate": "dlqRate", "attempts": "attempts", "chains": "chains", "detail": "detail",
    "deliveries": "deliveries", "roll": "roll", "cancel": "cancel", "in_dlq": "inDlq",
    # durations (ms)
    "delay_ms": "delayMs", "behind_ms": "behindMs", "lateness_ms": "latenessMs",
    "dequeue_lateness_ms": "dequeueLatenessMs",
    "p50": "p50Ms", "p90": "p90Ms", "p99": "p99Ms", "p999": "p999Ms", "max": "maxMs", "min": "minMs",
    "dequeue_p50": "dequeueP50Ms", "dequeue_p90": "dequeueP90Ms", "dequeue_p99": "dequeueP99Ms",
    "dequeue_p999": "dequeueP999Ms", "dequeue_max": "dequeueMaxMs", "dequeue_min": "dequeueMinMs",
    "to_last_attempt_p50": "toLastAttemptP50Ms", "to_last_attempt_max": "toLastAttemptMaxMs",
    "to_dlq_p50": "toDlqP50Ms", "to_dlq_max": "toDlqMaxMs",
    # instants (epoch ms): ...Timestamp; the timer's own, as the broker names them
    "oldest_due_ms": "oldestDueTimestamp", "oldest_undelivered_ms": "oldestUndeliveredTimestamp",
    "deliver_ms": "deliverTimestamp", "effective_ms": "effectiveDeliverTimestamp",
    "intended_ms": "deliverTimestamp", "actual_ms": "deliveredTimestamp", "due_ms": "dueTimestamp",
    "first_failure_ms": "firstFailureTimestamp", "last_attempt_ms": "lastAttemptTimestamp",
    "dlq_ms": "dlqTimestamp",
    "read_ms": "lastReadTimeMs", "slot_ms": "slotTimeMs", "out_ms": "timerOutMs", "dequeue_ms": "dequeueMs",
}


# How a column reads to a person, on a terminal and in the report: its header, what its values
# are (text, count, duration in ms, instant in epoch ms, rate), and when it goes on a narrow
# terminal (the higher, the sooner; 0 never). One place, so a figure has one name everywhere.
TEXT, COUNT, DURATION, INSTANT, RATE = "text", "count", "duration", "instant", "rate"


@dataclass(frozen=True, slots=True)
class View:
    header: str
    kind: str = COUNT
    drop: int = 0


VIEWS: dict[str, View] = {
    "store": View("store", TEXT), "level": View("level"), "group": View("group", TEXT),
    "topic": View("topic", TEXT, 3), "real_topic": View("real topic", TEXT), "queue_id": View("queue"),
    "state": View("state", TEXT), "chain": View("chain", TEXT), "kind": View("kind", TEXT),
    "detail": View("detail", TEXT), "attempts": View("attempts"), "chains": View("chains"),
    "delay_ms": View("delay", DURATION, 4), "offset": View("offset", drop=6), "max_offset": View("max offset", drop=5),
    "pending": View("pending"), "due_now": View("due now"), "overdue_1s": View("overdue >1s", drop=3),
    "overdue_1m": View("overdue >1m", drop=2), "overdue_1h": View("overdue >1h"),
    "oldest_due_ms": View("oldest due", INSTANT, 1),
    "consumer_offset": View("consumer offset", drop=1), "lag": View("lag"),
    "read_ms": View("read up to", INSTANT, 6), "behind_ms": View("behind", DURATION),
    "rolling": View("rolling", drop=4), "not_enqueued": View("not enqueued", drop=5),
    "cancel_markers": View("markers", drop=7), "cancelled": View("cancelled", drop=8),
    "delivered": View("delivered"), "messages": View("messages"),
    "p50": View("p50", DURATION, 2), "p90": View("p90", DURATION, 4), "p99": View("p99", DURATION),
    "p999": View("p99.9", DURATION, 3), "max": View("max", DURATION, 1), "min": View("min", DURATION, 5),
    "early": View("early", drop=6), "duplicates": View("dupes", drop=7),
    "undelivered_overdue": View("overdue undelivered"), "oldest_undelivered_ms": View("oldest undelivered", INSTANT, 8),
    "dequeue_p50": View("dequeue p50", DURATION, 9), "dequeue_p90": View("dequeue p90", DURATION, 10),
    "dequeue_p99": View("dequeue p99", DURATION, 11), "dequeue_p999": View("dequeue p99.9", DURATION, 12),
    "dequeue_max": View("dequeue max", DURATION, 13), "dequeue_min": View("dequeue min", DURATION, 14),
    "dequeue_early": View("dequeue early", drop=15), "never_enqueued": View("never enqueued", drop=16),
    "rolled": View("rolled", drop=17), "rolls": View("rolls"), "cancellations": View("cancellations"),
    "dlq": View("in DLQ"), "dlq_rate": View("DLQ rate", RATE),
    "to_last_attempt_p50": View("to last attempt p50", DURATION, 2),
    "to_last_attempt_max": View("to last attempt max", DURATION, 3),
    "to_dlq_p50": View("to DLQ p50", DURATION, 1), "to_dlq_max": View("to DLQ max", DURATION, 4),
}


def public_name(name: str) -> str:
    return PUBLIC_NAMES[name]


def public_table(table: pa.Table) -> pa.Table:
    """The table with the names it goes out under."""
    return table.rename_columns([PUBLIC_NAMES[n] for n in table.column_names])


def internal_names(public: list[str]) -> dict[str, str]:
    """public name -> the engines' name, for reading back what --output wrote."""
    back = {}
    for inner, outer in PUBLIC_NAMES.items():
        back.setdefault(outer, inner)
    return {p: back[p] for p in public}
