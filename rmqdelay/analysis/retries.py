"""retries: the consumer retry path per group, chain by chain: send-backs through
%RETRY%GROUP (delayed in SCHEDULE_TOPIC_XXXX), their deliveries, and the DLQ."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.store.scan import Skipped

from . import AnalysisResult, StoreRef
from .common import nearest_rank, read_messages, sort_table, starts_with

# SubscriptionGroupConfig.retryMaxTimes / the client's maxReconsumeTimes default.
MAX_RECONSUME_TIMES = 16

MESSAGES_SCHEMA = pa.schema([
    ("store", pa.string()), ("group", pa.string()), ("chain", pa.string()), ("attempts", pa.int32()),
    ("in_dlq", pa.bool_()), ("first_failure_ms", pa.int64()), ("last_attempt_ms", pa.int64()),
    ("dlq_ms", pa.int64()),
])
GROUPS_SCHEMA = pa.schema([
    ("store", pa.string()), ("group", pa.string()), ("messages", pa.int64()), ("dlq", pa.int64()),
    ("dlq_rate", pa.float64()), ("pending", pa.int64()),
    ("to_last_attempt_p50", pa.int64()), ("to_last_attempt_max", pa.int64()),
    ("to_dlq_p50", pa.int64()), ("to_dlq_max", pa.int64()),
])
ATTEMPTS_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("attempts", pa.int32()),
                             ("chains", pa.int64())])
ANOMALIES_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("chain", pa.string()),
                              ("kind", pa.string()), ("detail", pa.string())])

_COLUMNS = ["store", "topic", "store_timestamp", "reconsume_times", "delay_level", "real_topic",
            "uniq_key", "origin_message_id"]


def _on_retry_path(batch: pa.RecordBatch) -> pa.Array:
    topic = batch.column("topic")
    send_back = pc.and_(pc.equal(topic, RMQ_SYS_SCHEDULE_TOPIC), starts_with(batch.column("real_topic"), RETRY_GROUP_TOPIC_PREFIX))
    return pc.fill_null(pc.or_(pc.or_(send_back, starts_with(topic, DLQ_GROUP_TOPIC_PREFIX)),
                               starts_with(topic, RETRY_GROUP_TOPIC_PREFIX)), False)


def retries(stores: list[StoreRef], at_ms: int, delay_levels: dict[int, int], *,
            keep_going: bool = False) -> AnalysisResult:
    skipped: list[Skipped] = []
    rows = read_messages(stores, _COLUMNS, _on_retry_path, keep_going=keep_going, skipped=skipped).to_pydict()
    chains: dict[tuple[str, str, str], dict] = {}
    deliveries: dict[tuple[str, str, str], list[tuple[int, int]]] = {}
    for store, topic, ts, times, level, real_topic, uniq, origin in zip(*(rows[c] for c in _COLUMNS)):
        chain_id = origin if origin is not None else uniq
        if chain_id is None:
            continue  # nothing to follow the message by
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            key = (store, real_topic[len(RETRY_GROUP_TOPIC_PREFIX):], chain_id)
            chains.setdefault(key, _new_chain())["send_backs"].append((times, level, ts))
        elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            key = (store, topic[len(DLQ_GROUP_TOPIC_PREFIX):], chain_id)
            chains.setdefault(key, _new_chain())["dlq"].append(ts)
        else:
            key = (store, topic[len(RETRY_GROUP_TOPIC_PREFIX):], chain_id)
            deliveries.setdefault(key, []).append((times, ts))

    messages, anomalies = [], []
    per_group: dict[tuple[str, str], dict] = {}
    for key, chain in chains.items():
        store, group, chain_id = key
        send_backs = sorted(chain["send_backs"])
        delivered = deliveries.get(key, [])
        attempts = max((t for t, _, _ in send_backs), default=0)
        failures = [ts for _, _, ts in send_backs] + chain["dlq"]
        first_failure = min(failures)
        last_attempt = max((ts for _, ts in delivered), default=None)
        dlq_ms = min(chain["dlq"], default=None)
        in_dlq = bool(chain["dlq"])
        delivered_times = {t for t, _ in delivered}
        pending = bool(send_backs) and not in_dlq and attempts not in delivered_times
        messages.append({"store": store, "group": group, "chain": chain_id, "attempts": attempts,
                         "in_dlq": in_dlq, "first_failure_ms": first_failure,
                         "last_attempt_ms": last_attempt, "dlq_ms": dlq_ms})
        g = per_group.setdefault((store, group), {"messages": 0, "dlq": 0, "pending": 0, "to_last": [],
                                                 "to_dlq": [], "attempts": {}})
        g["messages"] += 1
        g["dlq"] += in_dlq
        g["pending"] += pending
        g["attempts"][attempts] = g["attempts"].get(attempts, 0) + 1
        if last_attempt is not None:
            g["to_last"].append(last_attempt - first_failure)
        if dlq_ms is not None:
            g["to_dlq"].append(dlq_ms - first_failure)
        anomalies.extend(_anomalies(store, group, chain_id, send_backs, attempts, in_dlq))

    group_rows, attempt_rows = [], []
    for (store, group), g in per_group.items():
        to_last = np.sort(np.asarray(g["to_last"], dtype=np.int64))
        to_dlq = np.sort(np.asarray(g["to_dlq"], dtype=np.int64))
        group_rows.append({
            "store": store, "group": group, "messages": g["messages"], "dlq": g["dlq"],
            "dlq_rate": g["dlq"] / g["messages"], "pending": g["pending"],
            "to_last_attempt_p50": nearest_rank(to_last, 1, 2),
            "to_last_attempt_max": int(to_last[-1]) if len(to_last) else None,
            "to_dlq_p50": nearest_rank(to_dlq, 1, 2),
            "to_dlq_max": int(to_dlq[-1]) if len(to_dlq) else None,
        })
        attempt_rows.extend({"store": store, "group": group, "attempts": a, "chains": n}
                            for a, n in g["attempts"].items())
    tables = {
        "groups": sort_table(pa.Table.from_pylist(group_rows, schema=GROUPS_SCHEMA), ["store", "group"]),
        "attempts": sort_table(pa.Table.from_pylist(attempt_rows, schema=ATTEMPTS_SCHEMA), ["store", "group", "attempts"]),
        "anomalies": sort_table(pa.Table.from_pylist(anomalies, schema=ANOMALIES_SCHEMA),
                                ["store", "group", "chain", "kind", "detail"]),
    }
    msgs = sort_table(pa.Table.from_pylist(messages, schema=MESSAGES_SCHEMA), ["store", "group", "chain"])
    return AnalysisResult("retries", tables, msgs, skipped)


def _new_chain() -> dict:
    return {"send_backs": [], "dlq": []}


def _anomalies(store: str, group: str, chain: str, send_backs: list[tuple[int, int, int]],
               attempts: int, in_dlq: bool) -> list[dict]:
    found = []
    for times, level, _ in send_backs:
        # A send-back record carries the reconsume times it was sent back with, already
        # incremented, and the broker asks for level 3 + the times before: 2 + its own.
        if level != 2 + times:
            found.append({"store": store, "group": group, "chain": chain, "kind": "level_mismatch",
                          "detail": f"reconsume_times={times} delay_level={level} expected={2 + times}"})
    seen = sorted(t for t, _, _ in send_backs)
    if seen != list(range(1, attempts + 1)):
        found.append({"store": store, "group": group, "chain": chain, "kind": "gap",
                      "detail": "reconsume_times=" + ",".join(str(t) for t in seen)})
    if in_dlq and attempts < MAX_RECONSUME_TIMES:
        found.append({"store": store, "group": group, "chain": chain, "kind": "early_dlq",
                      "detail": f"attempts={attempts}"})
    return found
