"""follow_chains (integer codes and reductions per chain) gives what following each chain
record by record gives: the same chains, figures and anomalies, whatever the rows hold --
chains of one group in two stores, one id in two groups, DLQ records with no send-back,
deliveries of no chain, repeated or missing reconsume times, levels that are off or absent,
rows with no id."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rmqdelay.analysis import retries
from rmqdelay.analysis.common import sort_table
from rmqdelay.formats.constants import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX, RMQ_SYS_SCHEDULE_TOPIC

KEYS = ["store", "group", "chain"]


def _walk(rows: pa.Table) -> tuple[list[dict], list[dict]]:
    """The chains and anomalies of ``rows``, each chain followed record by record."""
    chains: dict[tuple, dict] = {}
    deliveries: dict[tuple, list[tuple[int, int]]] = {}
    for row in rows.to_pylist():
        chain_id = row["origin_message_id"] if row["origin_message_id"] is not None else row["uniq_key"]
        if chain_id is None:
            continue
        topic = row["topic"]
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            key = (row["store"], row["real_topic"][len(RETRY_GROUP_TOPIC_PREFIX):], chain_id)
            chains.setdefault(key, {"send_backs": [], "dlq": []})["send_backs"].append(
                (row["reconsume_times"], row["delay_level"], row["store_timestamp"]))
        elif topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            key = (row["store"], topic[len(DLQ_GROUP_TOPIC_PREFIX):], chain_id)
            chains.setdefault(key, {"send_backs": [], "dlq": []})["dlq"].append(row["store_timestamp"])
        else:
            key = (row["store"], topic[len(RETRY_GROUP_TOPIC_PREFIX):], chain_id)
            deliveries.setdefault(key, []).append((row["reconsume_times"], row["store_timestamp"]))
    out, anomalies = [], []
    for (store, group, chain_id), chain in chains.items():
        names = {"store": store, "group": group, "chain": chain_id}
        send_backs = sorted(chain["send_backs"], key=lambda s: (s[0], s[1] is None, s[1] or 0, s[2]))
        delivered = deliveries.get((store, group, chain_id), [])
        attempts = max((t for t, _, _ in send_backs), default=0)
        in_dlq = bool(chain["dlq"])
        out.append({**names, "attempts": attempts, "in_dlq": in_dlq,
                    "first_failure_ms": min([ts for _, _, ts in send_backs] + chain["dlq"]),
                    "last_attempt_ms": max((ts for _, ts in delivered), default=None),
                    "dlq_ms": min(chain["dlq"], default=None),
                    "pending": bool(send_backs) and not in_dlq and attempts not in {t for t, _ in delivered}})
        for times, level, _ in send_backs:
            if level != 2 + times:
                anomalies.append({**names, "kind": "levelMismatch",
                                  "detail": f"reconsume_times={times} delay_level={level} expected={2 + times}"})
        seen = sorted(t for t, _, _ in send_backs)
        if seen != list(range(1, attempts + 1)):
            anomalies.append({**names, "kind": "gap", "detail": "reconsume_times=" + ",".join(str(t) for t in seen)})
        if in_dlq and attempts < retries.MAX_RECONSUME_TIMES:
            anomalies.append({**names, "kind": "earlyDlq", "detail": f"attempts={attempts}"})
    return out, anomalies


def _beyond_the_groups_limit(out: list[dict], anomalies: list[dict]) -> list[dict]:
    """The anomalies without the earlyDlq of chains that made as many attempts as their group's
    furthest chain in the DLQ (the group's own limit)."""
    limits: dict[tuple, int] = {}
    for c in out:
        if c["in_dlq"]:
            limits[(c["store"], c["group"])] = max(limits.get((c["store"], c["group"]), 0), c["attempts"])
    kept = []
    for a in anomalies:
        if a["kind"] == "earlyDlq":
            tries, limit = int(a["detail"].split("=")[1]), limits[(a["store"], a["group"])]
            if tries >= limit:
                continue
            a = {**a, "detail": f"attempts={tries} limit={limit}"}
        kept.append(a)
    return kept


def _rows(rng: np.random.Generator, n: int) -> pa.Table:
    """Retry-path rows as the scan selects them, drawn from few stores, groups and ids."""
    kinds = rng.choice(["send_back", "dlq", "delivery"], size=n, p=[0.5, 0.15, 0.35])
    groups = [rng.choice(["g", "h", "grüße"]) for _ in range(n)]
    ids = ["m1", "m2", "m3", "m4", None]
    rows = []
    for kind, group in zip(kinds, groups):
        times = int(rng.integers(0, 5))
        topic = {"send_back": RMQ_SYS_SCHEDULE_TOPIC, "dlq": DLQ_GROUP_TOPIC_PREFIX + group,
                 "delivery": RETRY_GROUP_TOPIC_PREFIX + group}[kind]
        rows.append({
            "store": str(rng.choice(["a", "b"])), "topic": topic, "store_timestamp": int(rng.integers(0, 50)),
            "reconsume_times": times,
            "delay_level": None if rng.random() < 0.1 else int(2 + times + (rng.random() < 0.1)),
            "real_topic": RETRY_GROUP_TOPIC_PREFIX + group if kind == "send_back" else None,
            "uniq_key": ids[rng.integers(0, len(ids))], "origin_message_id": ids[rng.integers(0, len(ids))],
        })
    return pa.Table.from_pylist(rows, schema=retries.ROWS_SCHEMA)


@pytest.mark.parametrize("seed", range(60))
def test_chains_and_anomalies_are_those_of_following_each_chain(seed):
    rng = np.random.default_rng(seed)
    rows = _rows(rng, int(rng.integers(0, 80)))
    chains, anomalies = retries.follow_chains(rows)
    expected_chains, expected_anomalies = _walk(rows)
    assert sort_table(chains, KEYS).to_pylist() == sort_table(
        pa.Table.from_pylist(expected_chains, schema=retries.CHAINS_SCHEMA), KEYS).to_pylist()
    order = [*KEYS, "kind", "detail"]
    assert sort_table(anomalies, order).to_pylist() == sort_table(
        pa.Table.from_pylist(expected_anomalies, schema=retries.ANOMALIES_SCHEMA), order).to_pylist()
    # The result's anomalies: earlyDlq only below the group's own limit.
    found = retries.tables_of({name: [table] for name, table in retries.partials(chains, anomalies).items()})
    assert found["anomalies"].to_pylist() == sort_table(pa.Table.from_pylist(
        _beyond_the_groups_limit(expected_chains, expected_anomalies), schema=retries.ANOMALIES_SCHEMA),
        order).to_pylist()


def test_a_chain_that_ended_at_the_consumers_own_limit_is_not_early():
    """maxReconsumeTimes 2 (the broker-e2e sample's GID_FAIL): every chain in the DLQ after 2
    retries; one sent straight to the DLQ at its first failure is still early."""
    rows = []
    for chain in ("m1", "m2", "m3"):
        for t in ((1, 2) if chain != "m3" else ()):
            rows.append({"store": "s", "topic": RMQ_SYS_SCHEDULE_TOPIC, "store_timestamp": 10 * t, "reconsume_times": t,
                         "delay_level": 2 + t, "real_topic": "%RETRY%g", "uniq_key": chain, "origin_message_id": chain})
        rows.append({"store": "s", "topic": "%DLQ%g", "store_timestamp": 99, "reconsume_times": 3 if chain != "m3" else 1,
                     "delay_level": None, "real_topic": None, "uniq_key": chain, "origin_message_id": chain})
    chains, anomalies = retries.follow_chains(pa.Table.from_pylist(rows, schema=retries.ROWS_SCHEMA))
    found = retries.tables_of({name: [table] for name, table in retries.partials(chains, anomalies).items()})
    assert found["anomalies"].select(["chain", "kind", "detail"]).to_pylist() == \
        [{"chain": "m3", "kind": "earlyDlq", "detail": "attempts=0 limit=2"}]


def test_a_chain_sent_back_through_every_attempt_into_the_dlq_has_no_anomaly():
    rows = [{"store": "s", "topic": RMQ_SYS_SCHEDULE_TOPIC, "store_timestamp": 10 * t, "reconsume_times": t,
             "delay_level": 2 + t, "real_topic": "%RETRY%g", "uniq_key": "u", "origin_message_id": "m"}
            for t in range(1, retries.MAX_RECONSUME_TIMES + 1)]
    rows.append({"store": "s", "topic": "%DLQ%g", "store_timestamp": 999, "reconsume_times": 16,
                 "delay_level": None, "real_topic": None, "uniq_key": "u", "origin_message_id": "m"})
    chains, anomalies = retries.follow_chains(pa.Table.from_pylist(rows, schema=retries.ROWS_SCHEMA))
    assert chains.to_pylist() == [{"store": "s", "group": "g", "chain": "m", "attempts": 16, "in_dlq": True,
                                   "first_failure_ms": 10, "last_attempt_ms": None, "dlq_ms": 999,
                                   "pending": False}]
    assert anomalies.num_rows == 0
