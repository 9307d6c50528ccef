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
