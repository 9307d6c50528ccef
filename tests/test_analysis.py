"""Every figure of the embedded analysis engine, recomputed here independently in plain
Python from the samples' ground truth (expected.jsonl.gz) and FIXTURES.md facts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import SAMPLES, load_expected, load_plan

from rmqdelay.analysis import AnalysisResult, Skipped, StoreRef, analyze, store_ref
from rmqdelay.errors import StoreError, UsageError
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.scan import commitlog_files

LEVELS = parse_delay_levels()
SCHEDULE = "SCHEDULE_TOPIC_XXXX"


def ref(name: str) -> StoreRef:
    return StoreRef(name, SAMPLES / name / "store")


def last_store_time(name: str) -> int:
    return max(m["storeTimestamp"] for m in load_expected(name)["msg"])


def rank(values: list[int], num: int, den: int):
    if not values:
        return None
    values = sorted(values)
    return values[math.ceil(num * len(values) / den) - 1]


def table_rows(result: AnalysisResult, name: str) -> list[dict]:
    return result.tables[name].to_pylist()


# -- backlog ----------------------------------------------------------------------------

def expected_backlog_levels(name: str, store: str, at_ms: int) -> list[dict]:
    truth = load_expected(name)
    offsets = {int(k): v for k, v in (truth.get("delayOffsets") or [{}])[0].get("loadedTable", {}).items()}
    rows = []
    for level, delay in sorted(LEVELS.items()):
        units = [u for u in truth["cq"] if u["topic"] == SCHEDULE and u["queueId"] == level - 1]
        max_offset = max((u["cqOffset"] + 1 for u in units), default=0)
        offset = offsets.get(level, 0)
        pending = [u for u in units if offset <= u["cqOffset"] < max_offset]
        effective = [at_ms if u["tagsCode"] > at_ms + delay else u["tagsCode"] for u in pending]
        due = [e for e in effective if e <= at_ms]
        rows.append({"store": store, "level": level, "delay_ms": delay, "offset": offset, "max_offset": max_offset,
                     "pending": len(pending), "due_now": len(due),
                     "overdue_1s": sum(at_ms - e > 1000 for e in effective),
                     "overdue_1m": sum(at_ms - e > 60_000 for e in effective),
                     "overdue_1h": sum(at_ms - e > 3_600_000 for e in effective),
                     "oldest_due_ms": min(due, default=None)})
    return rows


@pytest.mark.parametrize("name", ["delay-fresh", "delay-partial", "retry"])
@pytest.mark.parametrize("ahead_ms", [0, 45_000, 2 * 3_600_000])
def test_backlog_levels_and_drain(name, ahead_ms):
    at_ms = last_store_time(name) + ahead_ms
    result = analyze("backlog", [ref(name)], at_ms)
    expected = expected_backlog_levels(name, name, at_ms)
    assert table_rows(result, "levels") == expected
    # drain: the pending units by minute ahead, adding up to pending.
    drain = table_rows(result, "drain")
    for row in expected:
        mine = [d for d in drain if d["level"] == row["level"]]
        assert sum(d["due"] for d in mine) == row["pending"]
        assert sum(d["due"] for d in mine if d["minute"] == 0) == row["due_now"]
    minutes = {}
    for m in result.messages.to_pylist():
        e = m["effective_ms"]
        minute = 0 if e <= at_ms else math.ceil((e - at_ms) / 60_000)
        minutes[(m["level"], minute)] = minutes.get((m["level"], minute), 0) + 1
    assert {(d["level"], d["minute"]): d["due"] for d in drain} == minutes
    assert result.skipped == []


def test_backlog_delay_partial_has_levels_1_to_3_drained():
    result = analyze("backlog", [ref("delay-partial")], last_store_time("delay-partial"))
    levels = {r["level"]: r for r in table_rows(result, "levels")}
    assert [levels[level]["pending"] for level in (1, 2, 3)] == [0, 0, 0]
    assert all(levels[level]["offset"] == levels[level]["max_offset"] == 83 for level in (1, 2, 3))
    assert sum(r["pending"] for r in levels.values()) == 1500 - 3 * 83


def test_retry_lag_from_disk_and_consumer_offset_json(store_copy):
    at_ms = last_store_time("retry")
    retry_deliveries = sum(1 for m in load_expected("retry")["msg"] if m["topic"] == "%RETRY%GID_ORDER")
    result = analyze("backlog", [ref("retry")], at_ms)
    assert table_rows(result, "retryLag") == [{"store": "retry", "group": "GID_ORDER", "topic": "%RETRY%GID_ORDER",
                                                "queue_id": 0, "max_offset": retry_deliveries,
                                                "consumer_offset": 0, "lag": retry_deliveries}]
    path = store_copy("retry")
    (path / "config" / "consumerOffset.json").write_text(
        '{\n\t"offsetTable":{\n\t\t"%RETRY%GID_ORDER@GID_ORDER":{0:300\n\t\t},\n'
        '\t\t"%RETRY%GID_OTHER@GID_OTHER":{0:0,1:0\n\t\t},\n\t\t"TopicPay@GID_ORDER":{0:50\n\t\t}\n\t}\n}')
    rows = table_rows(analyze("backlog", [StoreRef("copy", path)], at_ms), "retryLag")
    assert rows == [
        {"store": "copy", "group": "GID_ORDER", "topic": "%RETRY%GID_ORDER", "queue_id": 0,
         "max_offset": retry_deliveries, "consumer_offset": 300, "lag": retry_deliveries - 300},
        {"store": "copy", "group": "GID_OTHER", "topic": "%RETRY%GID_OTHER", "queue_id": 0,
         "max_offset": 0, "consumer_offset": 0, "lag": 0},
        {"store": "copy", "group": "GID_OTHER", "topic": "%RETRY%GID_OTHER", "queue_id": 1,
         "max_offset": 0, "consumer_offset": 0, "lag": 0},
    ]


# -- lateness ---------------------------------------------------------------------------

def expected_lateness(name: str, at_ms: int) -> tuple[list[dict], list[dict]]:
    truth = load_expected(name)
    units = {u["phyOffset"]: u for u in truth["cq"] if u["topic"] == SCHEDULE}
    copies: dict[tuple, list[int]] = {}
    for m in truth["msg"]:
        p = m["properties"]
        if m["topic"] != SCHEDULE and p.get("REAL_TOPIC") == m["topic"] and "DELAY" in p and "UNIQ_KEY" in p:
            copies.setdefault((p["UNIQ_KEY"], m["topic"], m["reconsumeTimes"]), []).append(m["storeTimestamp"])
    records = []
    for m in truth["msg"]:
        if m["topic"] != SCHEDULE or m["commitLogOffset"] not in units:
            continue
        unit = units[m["commitLogOffset"]]
        p = m["properties"]
        got = copies.get((p.get("UNIQ_KEY"), p.get("REAL_TOPIC"), m["reconsumeTimes"]), []) if "UNIQ_KEY" in p else []
        records.append({"level": unit["queueId"] + 1, "real_topic": p.get("REAL_TOPIC"), "intended": unit["tagsCode"],
                        "late": min(got) - unit["tagsCode"] if got else None, "deliveries": len(got)})

    def summary(group: list[dict]) -> dict:
        late = [r["late"] for r in group if r["late"] is not None]
        return {"delivered": len(late), "p50": rank(late, 1, 2), "p90": rank(late, 9, 10),
                "p99": rank(late, 99, 100), "p999": rank(late, 999, 1000),
                "max": max(late, default=None), "min": min(late, default=None),
                "early": sum(v < 0 for v in late),
                "duplicates": sum(r["deliveries"] - 1 for r in group if r["deliveries"])}

    levels = []
    for level in sorted({r["level"] for r in records}):
        group = [r for r in records if r["level"] == level]
        missing = [r["intended"] for r in group if not r["deliveries"] and r["intended"] < at_ms]
        levels.append({"store": name, "level": level, **summary(group), "undelivered_overdue": len(missing),
                       "oldest_undelivered_ms": min(missing, default=None)})
    topics = [{"store": name, "real_topic": t, **summary([r for r in records if r["real_topic"] == t])}
              for t in sorted({r["real_topic"] for r in records})]
    return levels, topics


@pytest.mark.parametrize("name", ["delay-fresh", "delay-partial", "retry"])
def test_lateness_levels_and_topics(name):
    at_ms = last_store_time(name) + 60_000
    result = analyze("lateness", [ref(name)], at_ms)
    levels, topics = expected_lateness(name, at_ms)
    assert table_rows(result, "levels") == levels
    assert table_rows(result, "topics") == topics
    assert result.messages.num_rows == sum(1 for m in load_expected(name)["msg"] if m["topic"] == SCHEDULE)


def test_lateness_delay_partial_levels_1_to_3_delivered_83_each():
    result = analyze("lateness", [ref("delay-partial")], last_store_time("delay-partial"))
    delivered = {r["level"]: r["delivered"] for r in table_rows(result, "levels")}
    assert delivered == {level: (83 if level <= 3 else 0) for level in range(1, 19)}
    assert all(r["duplicates"] == 0 and r["early"] == 0 for r in table_rows(result, "levels"))


def test_lateness_retry_copies_are_early_because_delivery_used_1s_levels():
    # FIXTURES.md: the retry sample delivered with 1 s levels, its units were computed with
    # the default ones, so every delivered %RETRY% copy is early (negative lateness).
    result = analyze("lateness", [ref("retry")], last_store_time("retry"))
    (topic,) = table_rows(result, "topics")
    assert topic["real_topic"] == "%RETRY%GID_ORDER"
    assert topic["delivered"] == topic["early"] == 368
    assert topic["max"] < 0


# -- retries ----------------------------------------------------------------------------

def test_retries_match_the_fixture_facts():
    result = analyze("retries", [ref("retry")], last_store_time("retry"))
    (group,) = table_rows(result, "groups")
    # FIXTURES.md: 200 originals, 110 never retried, 60 succeeded after retries, 20 pending, 10 in DLQ.
    assert (group["messages"], group["dlq"], group["pending"]) == (90, 10, 20)
    assert group["dlq_rate"] == pytest.approx(10 / 90)
    chains = result.messages.to_pylist()
    succeeded = [c for c in chains if not c["in_dlq"] and c["last_attempt_ms"] is not None]
    assert len(chains) - group["pending"] - group["dlq"] == 60
    assert len(succeeded) >= 60
    assert all(c["attempts"] == 16 for c in chains if c["in_dlq"])
    assert table_rows(result, "anomalies") == []


def test_retries_figures_recomputed_from_ground_truth():
    truth = load_expected("retry")["msg"]
    chains: dict[str, dict] = {}
    for m in truth:
        p = m["properties"]
        cid = p.get("ORIGIN_MESSAGE_ID") or p.get("UNIQ_KEY")
        if m["topic"] == SCHEDULE and p.get("REAL_TOPIC", "").startswith("%RETRY%"):
            chains.setdefault(cid, {"sb": [], "dlq": [], "del": []})["sb"].append(m)
        elif m["topic"].startswith("%DLQ%"):
            chains.setdefault(cid, {"sb": [], "dlq": [], "del": []})["dlq"].append(m)
    for m in truth:
        p = m["properties"]
        cid = p.get("ORIGIN_MESSAGE_ID") or p.get("UNIQ_KEY")
        if m["topic"].startswith("%RETRY%") and cid in chains:
            chains[cid]["del"].append(m)
    # The rules, checked on the data: a send-back carries reconsume times already incremented
    # and DELAY = 2 + them (3 + the times before the failure); a DLQ record carries 17 = 16 + 1.
    for c in chains.values():
        assert all(int(s["properties"]["DELAY"]) == 2 + s["reconsumeTimes"] for s in c["sb"])
        assert all(d["reconsumeTimes"] == 17 for d in c["dlq"])
    result = analyze("retries", [ref("retry")], last_store_time("retry"))
    expected_msgs = []
    to_last, to_dlq, attempts = [], [], {}
    for cid, c in chains.items():
        n = max((s["reconsumeTimes"] for s in c["sb"]), default=0)
        first = min(x["storeTimestamp"] for x in c["sb"] + c["dlq"])
        last = max((d["storeTimestamp"] for d in c["del"]), default=None)
        dlq = min((d["storeTimestamp"] for d in c["dlq"]), default=None)
        expected_msgs.append({"store": "retry", "group": "GID_ORDER", "chain": cid, "attempts": n,
                              "in_dlq": bool(c["dlq"]), "first_failure_ms": first, "last_attempt_ms": last,
                              "dlq_ms": dlq})
        attempts[n] = attempts.get(n, 0) + 1
        if last is not None:
            to_last.append(last - first)
        if dlq is not None:
            to_dlq.append(dlq - first)
    assert result.messages.to_pylist() == sorted(expected_msgs, key=lambda r: r["chain"])
    (group,) = table_rows(result, "groups")
    assert (group["to_last_attempt_p50"], group["to_last_attempt_max"]) == (rank(to_last, 1, 2), max(to_last))
    assert (group["to_dlq_p50"], group["to_dlq_max"]) == (rank(to_dlq, 1, 2), max(to_dlq))
    assert table_rows(result, "attempts") == [{"store": "retry", "group": "GID_ORDER", "attempts": a, "chains": n}
                                              for a, n in sorted(attempts.items())]


def test_no_retry_path_no_rows():
    result = analyze("retries", [ref("delay-partial")], last_store_time("delay-partial"))
    assert all(t.num_rows == 0 for t in result.tables.values()) and result.messages.num_rows == 0


# -- many stores, names, bad input ------------------------------------------------------

def test_many_stores_are_one_table_keyed_by_store():
    at_ms = last_store_time("delay-partial")
    both = analyze("lateness", [ref("delay-partial"), StoreRef("again", SAMPLES / "delay-partial" / "store")], at_ms)
    one = analyze("lateness", [ref("delay-partial")], at_ms)
    rows = table_rows(both, "levels")
    assert [r for r in rows if r["store"] == "delay-partial"] == table_rows(one, "levels")
    assert [{**r, "store": "delay-partial"} for r in rows if r["store"] == "again"] == table_rows(one, "levels")
    assert [r["store"] for r in rows] == sorted(r["store"] for r in rows)


def test_two_stores_with_one_name_is_a_usage_error():
    with pytest.raises(UsageError):
        analyze("backlog", [ref("retry"), StoreRef("retry", SAMPLES / "delay-partial" / "store")], 0)
    assert store_ref("x=/a/b") == StoreRef("x", Path("/a/b"))
    assert store_ref(str(SAMPLES / "retry" / "store")).name == "retry"
    assert store_ref(str(SAMPLES / "retry")).name == "retry"


def corrupt(path: Path, index: int, record: int) -> tuple[Path, int]:
    """Flip the magic code of the ``record``-th record of commit log file ``index``."""
    target = commitlog_files(path)[index].path
    data = bytearray(target.read_bytes())
    pos = 0
    for _ in range(record):
        pos += int.from_bytes(data[pos:pos + 4], "big")
    data[pos + 4] ^= 0xFF
    target.write_bytes(bytes(data))
    return target, pos + 4


@pytest.mark.parametrize("kind", ["lateness", "retries"])
def test_a_corrupt_file_among_stores_is_named_and_keep_going_skips_it(store_copy, kind):
    path = store_copy("retry")
    target, offset = corrupt(path, 1, 5)
    stores = [ref("delay-partial"), StoreRef("bad", path)]
    with pytest.raises(StoreError) as info:
        analyze(kind, stores, last_store_time("retry"))
    assert info.value.path == target and info.value.offset == offset
    result = analyze(kind, stores, last_store_time("retry"), keep_going=True)
    assert result.skipped == [Skipped("bad", str(target), offset, target.stat().st_size - offset, info.value.expected)]
    # The other store is all there, and the bad one keeps what comes before the bad record.
    survivor = "delay-partial" if kind == "lateness" else "bad"
    assert any(r["store"] == survivor for r in result.messages.to_pylist())


def test_keep_going_keeps_the_rows_before_the_bad_record(store_copy):
    path = store_copy("retry")
    target, offset = corrupt(path, 2, 0)  # the last file: its DLQ records are gone
    result = analyze("retries", [StoreRef("bad", path)], last_store_time("retry"), keep_going=True)
    assert [s.offset for s in result.skipped] == [offset]
    full = analyze("retries", [ref("retry")], last_store_time("retry"))
    assert result.tables["groups"].column("dlq")[0].as_py() < full.tables["groups"].column("dlq")[0].as_py()


# -- against the generator's plan -------------------------------------------------------
def test_generated_sample_figures_match_the_generators_plan():
    """samples/generated-small was written by `samples generate`, whose plan.json says what it
    put, delivered (with which lateness), sent back and dead-lettered."""
    import json

    store = SAMPLES / "generated-small" / "store"
    plan = load_plan(store)
    refs, at_ms = [StoreRef("gen", store)], plan["at_ms"]
    for row in table_rows(analyze("backlog", refs, at_ms), "levels"):
        level = plan["levels"][str(row["level"])]
        assert (row["offset"], row["max_offset"], row["pending"]) == (level["delay_offset"], level["put"], level["pending"])
    for row in table_rows(analyze("lateness", refs, at_ms), "levels"):
        late = plan["levels"][str(row["level"])]["lateness"]
        assert {k: row[k] for k in ("min", "max", "p50", "p90", "p99")} == {k: late[k] for k in ("min", "max", "p50", "p90", "p99")}
        assert row["delivered"] == late["count"] and row["duplicates"] == 0
    retries = analyze("retries", refs, at_ms)
    for row in table_rows(retries, "groups"):
        group = plan["groups"][row["group"]]
        assert (row["messages"], row["dlq"], row["pending"]) == (group["chains"], group["dlq"], group["pending"])
    attempts: dict[str, dict[str, int]] = {}
    for row in table_rows(retries, "attempts"):
        attempts.setdefault(row["group"], {})[str(row["attempts"])] = row["chains"]
    assert attempts == {g: p["attempts"] for g, p in plan["groups"].items() if p["chains"]}
    assert table_rows(retries, "anomalies") == []
    lag = {(r["topic"], r["queue_id"]): (r["max_offset"], r["consumer_offset"])
           for r in table_rows(analyze("backlog", refs, at_ms), "retryLag")}
    assert lag == {(t, int(q)): (v["max_offset"], v["consumer_offset"])
                   for t, queues in plan["retry_queues"].items() for q, v in queues.items()}
