"""retries: the consumer retry path per group, chain by chain: send-backs through
%RETRY%GROUP (delayed in SCHEDULE_TOPIC_XXXX), their deliveries, and the DLQ."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.formats.constants import (
    DLQ_GROUP_TOPIC_PREFIX,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.scan import MESSAGE_SCHEMA
from rmqdelay.store.scan import Skipped

from . import AnalysisResult, StoreRef
from .common import fold, groups, nearest_rank_counted, reduce_by, row_codes, scan_stores, sort_table, starts_with
from .keycodes import key_hash
from .spill import KeyedRows, Messages, memory_budget

# SubscriptionGroupConfig.retryMaxTimes / the client's maxReconsumeTimes default.
MAX_RECONSUME_TIMES = 16
EARLY_DLQ = "earlyDlq"  # the anomaly of a chain in the DLQ before its group's limit

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
# follow_chains: a row per chain, the per-message table and whether the chain waits for the
# delivery of its last send-back.
CHAINS_SCHEMA = pa.schema([*MESSAGES_SCHEMA, ("pending", pa.bool_())])
# Per (store, group): chains, how many ended in the DLQ, how many are pending.
COUNTS_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("messages", pa.int64()),
                           ("dlq", pa.int64()), ("pending", pa.int64())])
# How many chains of a (store, group) took ``span`` ms to their last attempt or to the DLQ.
SPANS_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("kind", pa.string()),
                          ("span", pa.int64()), ("chains", pa.int64())])
ATTEMPTS_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("attempts", pa.int32()),
                             ("chains", pa.int64())])
ANOMALIES_SCHEMA = pa.schema([("store", pa.string()), ("group", pa.string()), ("chain", pa.string()),
                              ("kind", pa.string()), ("detail", pa.string())])

_COLUMNS = ["store", "topic", "store_timestamp", "reconsume_times", "delay_level", "real_topic",
            "uniq_key", "origin_message_id"]
# The retry-path rows, as the chains are followed from them.
ROWS_SCHEMA = pa.schema([(c, MESSAGE_SCHEMA.field(c).type) for c in _COLUMNS])
MESSAGES_ORDER = ["store", "group", "chain"]
# Following a partition's chains takes about this many times its rows' bytes (they become
# Python objects): the rows held are the budget over it.
_FOLLOW_FACTOR = 8
# The partial results of following some whole chains: name -> (keys to fold them by, schema);
# and "anomalies", taken as they are.
PARTIALS = {
    "counts": (["store", "group"], COUNTS_SCHEMA),
    "spans": (["store", "group", "kind", "span"], SPANS_SCHEMA),
    "attempts": (["store", "group", "attempts"], ATTEMPTS_SCHEMA),
    "dlq_attempts": (["store", "group", "attempts"], ATTEMPTS_SCHEMA),  # the chains in the DLQ alone
}


def _on_retry_path(batch: pa.RecordBatch) -> pa.Array:
    topic = batch.column("topic")
    send_back = pc.and_(pc.equal(topic, RMQ_SYS_SCHEDULE_TOPIC), starts_with(batch.column("real_topic"), RETRY_GROUP_TOPIC_PREFIX))
    return pc.fill_null(pc.or_(pc.or_(send_back, starts_with(topic, DLQ_GROUP_TOPIC_PREFIX)),
                               starts_with(topic, RETRY_GROUP_TOPIC_PREFIX)), False)


def retries(stores: list[StoreRef], at_ms: int, delay_levels: dict[int, int], *,
            keep_going: bool = False, memory: int | None = None, messages: Messages | None = None) -> AnalysisResult:
    """The retry path over ``stores``. The rows held and the following of their chains take
    about ``memory`` (spill.py): split by chain when they do not fit, each partition's chains
    followed on their own and folded. ``messages``: where the per-chain table goes (collected by default)."""
    skipped: list[Skipped] = []
    sink = messages or Messages(MESSAGES_SCHEMA, MESSAGES_ORDER)
    found: dict[str, list[pa.Table]] = {}
    with KeyedRows(ROWS_SCHEMA, buckets, memory_budget(memory) // _FOLLOW_FACTOR) as rows:
        for batch, done in scan_stores(stores, _COLUMNS, _on_retry_path, keep_going, skipped):
            rows.add(batch, done)
        for part in rows.partitions():
            chains, anomalies = follow_chains(part)
            for name, table in partials(chains, anomalies).items():
                found.setdefault(name, []).append(table)
            sink.add(chains.select(MESSAGES_SCHEMA.names))
    msgs = sink.table() if messages is None else MESSAGES_SCHEMA.empty_table()
    return AnalysisResult("retries", tables_of(found), msgs, skipped)


def buckets(rows: pa.Table, partitions: int) -> np.ndarray:
    """Where each retry-path row goes of ``partitions``: by its chain (ORIGIN_MESSAGE_ID, else
    UNIQ_KEY, as follow_chains keys it), so every record of a chain meets in one; a row with
    neither nowhere, -1 (follow_chains leaves it out)."""
    chain = pc.coalesce(rows.column("origin_message_id"), rows.column("uniq_key"))
    bucket = (key_hash(chain) % np.uint64(partitions)).astype(np.int64)
    bucket[~chain.is_valid().to_numpy(zero_copy_only=False)] = -1
    return bucket


def partials(chains: pa.Table, anomalies: pa.Table) -> dict[str, pa.Table]:
    """What the tables need from some whole chains (follow_chains): PARTIALS, and the anomalies."""
    if not chains.num_rows:
        return {}
    return {"counts": group_counts(chains), "spans": span_histogram(chains), "attempts": attempts(chains),
            "dlq_attempts": attempts(chains.filter(chains.column("in_dlq"))), "anomalies": anomalies}


def tables_of(found: dict[str, list[pa.Table]]) -> dict[str, pa.Table]:
    """The result tables from the partial results of every part of the chains (``partials``)."""
    folded = {name: sort_table(fold(pa.concat_tables(found.get(name) or [schema.empty_table()]), keys, schema), keys)
              for name, (keys, schema) in PARTIALS.items()}
    anomalies = not_the_groups_own_limit(pa.concat_tables(found.get("anomalies") or [ANOMALIES_SCHEMA.empty_table()]),
                                         folded["dlq_attempts"])
    return {
        "groups": groups_table(folded["counts"], folded["spans"]),
        "attempts": folded["attempts"],
        "anomalies": sort_table(anomalies, ["store", "group", "chain", "kind", "detail"]),
    }


def group_limits(dlq_attempts: pa.Table) -> dict[tuple[str, str], int]:
    """Per (store, group): the most attempts a chain of it made before the DLQ - the limit its
    consumers gave themselves (their maxReconsumeTimes, or the group's retryMaxTimes), as their
    attempts show."""
    limits: dict[tuple[str, str], int] = {}
    for store, group, tries in zip(*(dlq_attempts.column(c).to_pylist() for c in ("store", "group", "attempts"))):
        limits[(store, group)] = max(limits.get((store, group), 0), tries)
    return limits


def not_the_groups_own_limit(anomalies: pa.Table, dlq_attempts: pa.Table) -> pa.Table:
    """The anomalies without the ``earlyDlq`` of chains that made as many attempts as their
    group's own limit (``group_limits``): a consumer with maxReconsumeTimes 2 sends every
    message to the DLQ after 2 retries, and that is no anomaly. What stays went to the DLQ
    before its group's others did (the consumer asked for it: a delay level below 0)."""
    if not anomalies.num_rows:
        return anomalies
    limits = group_limits(dlq_attempts)
    keep, details = [], []
    for store, group, kind, detail in zip(*(anomalies.column(c).to_pylist()
                                            for c in ("store", "group", "kind", "detail"))):
        if kind != EARLY_DLQ:
            keep.append(True)
            details.append(detail)
            continue
        tries = int(re.search(r"\d+", detail).group())
        limit = limits.get((store, group), MAX_RECONSUME_TIMES)
        keep.append(tries < limit)
        details.append(f"attempts={tries} limit={limit}")
    out = anomalies.set_column(anomalies.schema.get_field_index("detail"), "detail",
                               pa.array(details, type=pa.string()))
    return out.filter(pa.array(keep))


def follow_chains(rows: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(one row per chain: ``CHAINS_SCHEMA``, its anomalies) from retry-path rows read with
    ``_COLUMNS`` that hold every record of each of their chains. Both engines call this, the
    Spark one on each partition of rows split by chain.

    A chain is (store, group, ORIGIN_MESSAGE_ID else UNIQ_KEY) with a send-back (a schedule
    record whose REAL_TOPIC is %RETRY%GROUP) or a DLQ record; deliveries (records of
    %RETRY%GROUP) count only for chains. Each row's key is an integer code, and each figure
    a reduction over the rows of a code."""
    chain_id = pc.coalesce(rows.column("origin_message_id"), rows.column("uniq_key"))
    rows = rows.append_column("chain", chain_id).filter(pc.is_valid(chain_id))  # nothing to follow the rest by
    topic = rows.column("topic")
    send_back = pc.equal(topic, RMQ_SYS_SCHEDULE_TOPIC).to_numpy(zero_copy_only=False)
    dlq = ~send_back & starts_with(topic, DLQ_GROUP_TOPIC_PREFIX).to_numpy(zero_copy_only=False)
    delivery = ~send_back & ~dlq
    group = pc.if_else(pa.array(send_back),
                       pc.utf8_slice_codeunits(rows.column("real_topic"), len(RETRY_GROUP_TOPIC_PREFIX)),
                       pc.if_else(pa.array(dlq), pc.utf8_slice_codeunits(topic, len(DLQ_GROUP_TOPIC_PREFIX)),
                                  pc.utf8_slice_codeunits(topic, len(RETRY_GROUP_TOPIC_PREFIX))))
    rows = rows.append_column("group", group)
    key, n = row_codes(rows, ["store", "group", "chain"])
    _, first_row = np.unique(key, return_index=True)
    times = rows.column("reconsume_times").to_numpy(zero_copy_only=False).astype(np.int64)
    stamps = rows.column("store_timestamp").to_numpy(zero_copy_only=False).astype(np.int64)

    sent = np.bincount(key[send_back], minlength=n)
    in_dlq = np.bincount(key[dlq], minlength=n) > 0
    attempts = reduce_by(np.maximum, key[send_back], times[send_back], n, 0)
    first_failure = reduce_by(np.minimum, key[~delivery], stamps[~delivery], n, 0)
    delivered = np.bincount(key[delivery], minlength=n) > 0
    last_attempt = reduce_by(np.maximum, key[delivery], stamps[delivery], n, 0)
    dlq_ms = reduce_by(np.minimum, key[dlq], stamps[dlq], n, 0)
    # Whether the last send-back was delivered: a delivery with the chain's attempts.
    answered = np.zeros(n, dtype=bool)
    answered[key[delivery][times[delivery] == attempts[key[delivery]]]] = True
    pending = (sent > 0) & ~in_dlq & ~answered
    # The send-backs' reconsume times are 1..attempts, each once.
    by_key = _SendBacks(key[send_back], times[send_back], n)
    gap = ~((sent == attempts) & (by_key.distinct == sent) & (by_key.lowest >= 1))

    is_chain = (sent > 0) | in_dlq
    names = rows.select(["store", "group", "chain"]).take(pa.array(first_row[is_chain]))
    chains = pa.table({
        "store": names.column("store"), "group": names.column("group"), "chain": names.column("chain"),
        "attempts": pa.array(attempts[is_chain], type=pa.int32()),
        "in_dlq": pa.array(in_dlq[is_chain]),
        "first_failure_ms": pa.array(first_failure[is_chain], type=pa.int64()),
        "last_attempt_ms": pa.array(last_attempt[is_chain], type=pa.int64(), mask=~delivered[is_chain]),
        "dlq_ms": pa.array(dlq_ms[is_chain], type=pa.int64(), mask=~in_dlq[is_chain]),
        "pending": pa.array(pending[is_chain]),
    }, schema=CHAINS_SCHEMA)
    return chains, _anomalies(rows, key, first_row, send_back, times, attempts, in_dlq, by_key, gap & is_chain)


class _SendBacks:
    """The send-backs' reconsume times sorted by chain code, then by times."""

    def __init__(self, key: np.ndarray, times: np.ndarray, n: int) -> None:
        order = np.lexsort((times, key))
        self.key, self.times = key[order], times[order]
        new = np.ones(len(order), dtype=bool)
        new[1:] = (self.key[1:] != self.key[:-1]) | (self.times[1:] != self.times[:-1])
        self.distinct = np.bincount(self.key[new], minlength=n)  # distinct times per chain
        self.lowest = reduce_by(np.minimum, self.key, self.times, n, 1)

    def of(self, k: int) -> list[int]:
        """The times of chain ``k``, ascending."""
        return self.times[np.searchsorted(self.key, k, "left"):np.searchsorted(self.key, k, "right")].tolist()


def _anomalies(rows: pa.Table, key: np.ndarray, first_row: np.ndarray, send_back: np.ndarray, times: np.ndarray,
               attempts: np.ndarray, in_dlq: np.ndarray, send_backs: _SendBacks, gap: np.ndarray) -> pa.Table:
    """The anomalies of the chains: a send-back whose level is not the broker's for its
    reconsume times (3 + the times before it: 2 + its own), reconsume times that are not
    1..attempts each once, and a chain in the DLQ before MAX_RECONSUME_TIMES attempts (kept by
    ``not_the_groups_own_limit`` only when its group's other chains went further)."""
    found = []
    levels = rows.column("delay_level")
    expected = pc.add(pa.array(times, type=pa.int64()), 2)
    wrong = pc.fill_null(pc.not_equal(pc.cast(levels, pa.int64()), expected), True).to_numpy(zero_copy_only=False)
    for row in np.flatnonzero(send_back & wrong).tolist():
        found.append((key[row], "levelMismatch", f"reconsume_times={times[row]} delay_level={levels[row].as_py()} "
                                                  f"expected={2 + times[row]}"))
    for k in np.flatnonzero(gap).tolist():
        found.append((k, "gap", "reconsume_times=" + ",".join(str(t) for t in send_backs.of(k))))
    for k in np.flatnonzero(in_dlq & (attempts < MAX_RECONSUME_TIMES)).tolist():
        found.append((k, EARLY_DLQ, f"attempts={attempts[k]}"))
    names = rows.select(["store", "group", "chain"]).take(pa.array(first_row[[k for k, _, _ in found]],
                                                                   type=pa.int64()))
    return pa.table({"store": names.column("store"), "group": names.column("group"), "chain": names.column("chain"),
                     "kind": pa.array([kind for _, kind, _ in found], type=pa.string()),
                     "detail": pa.array([detail for _, _, detail in found], type=pa.string())},
                    schema=ANOMALIES_SCHEMA)


def group_counts(chains: pa.Table) -> pa.Table:
    """Per (store, group): chains, in the DLQ, pending (``COUNTS_SCHEMA``)."""
    counted = pa.table({
        "store": chains.column("store"), "group": chains.column("group"),
        "one": pa.array(np.ones(chains.num_rows, dtype=np.int64)),
        "dlq": pc.cast(chains.column("in_dlq"), pa.int64()), "pending": pc.cast(chains.column("pending"), pa.int64()),
    }).group_by(["store", "group"]).aggregate([("one", "sum"), ("dlq", "sum"), ("pending", "sum")])
    return counted.rename_columns([{"one_sum": "messages", "dlq_sum": "dlq", "pending_sum": "pending"}.get(c, c)
                                   for c in counted.column_names]).select(COUNTS_SCHEMA.names).cast(COUNTS_SCHEMA)


def attempts(chains: pa.Table) -> pa.Table:
    """How many chains of each (store, group) made each number of attempts (``ATTEMPTS_SCHEMA``)."""
    return (chains.group_by(["store", "group", "attempts"]).aggregate([("chain", "count")])
            .rename_columns(["store", "group", "attempts", "chains"]).select(ATTEMPTS_SCHEMA.names)
            .cast(ATTEMPTS_SCHEMA))


def span_histogram(chains: pa.Table) -> pa.Table:
    """How many chains of each (store, group) took each time to their last attempt and to the
    DLQ (``SPANS_SCHEMA``): the exact medians come from it."""
    first = chains.column("first_failure_ms")
    parts = []
    for name, end in (("to_last_attempt", "last_attempt_ms"), ("to_dlq", "dlq_ms")):
        span = pc.subtract(chains.column(end), first)
        keep = pc.is_valid(span)
        part = pa.table({"store": chains.column("store"), "group": chains.column("group"),
                         "span": span}).filter(keep)
        part = part.group_by(["store", "group", "span"]).aggregate([("span", "count")])
        parts.append(part.append_column("kind", pa.array([name] * part.num_rows, type=pa.string())))
    table = pa.concat_tables([p.rename_columns([{"span_count": "chains"}.get(c, c) for c in p.column_names])
                              for p in parts])
    return table.select(SPANS_SCHEMA.names).cast(SPANS_SCHEMA)


def groups_table(counts: pa.Table, spans: pa.Table) -> pa.Table:
    """The groups table from per-group counts and the span histogram."""
    medians: dict[tuple[str, str, str], tuple[int, int]] = {}
    values = spans.column("span").to_numpy()
    chains = spans.column("chains").to_numpy()
    for key, index in groups(spans, ["store", "group", "kind"]).items():
        order = index[np.argsort(values[index], kind="stable")]
        medians[key] = (nearest_rank_counted(values[order], chains[order], 1, 2), int(values[order[-1]]))
    rows = []
    for store, group, messages, dlq, pending in zip(*(counts.column(c).to_pylist() for c in COUNTS_SCHEMA.names)):
        last = medians.get((store, group, "to_last_attempt"), (None, None))
        to_dlq = medians.get((store, group, "to_dlq"), (None, None))
        rows.append({"store": store, "group": group, "messages": messages, "dlq": dlq, "dlq_rate": dlq / messages,
                     "pending": pending, "to_last_attempt_p50": last[0], "to_last_attempt_max": last[1],
                     "to_dlq_p50": to_dlq[0], "to_dlq_max": to_dlq[1]})
    return sort_table(pa.Table.from_pylist(rows, schema=GROUPS_SCHEMA), ["store", "group"])
