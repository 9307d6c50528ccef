"""`inspect consumers` and `inspect dlq` on stores written end to end by real 4.9.4 and 5.3.3
brokers with real clients (samples/broker-e2e, samples/broker5-e2e: their own
consumerOffset.json, a group whose consumer gave up after 2 retries), the `--fail-if-*`
checks, and the Prometheus output (the client library's parser, and `promtool check metrics`
where Debian's prometheus package put it)."""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess

import pytest
from clirun import console
from conftest import SAMPLES
from prometheus_client.parser import text_string_to_metric_families

BROKERS = ["broker-e2e", "broker5-e2e"]


def _lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _clients(name: str, what: str) -> list[dict]:
    with gzip.open(SAMPLES / name / f"{what}.jsonl.gz", "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _promtool(text: str) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        return
    proc = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", BROKERS)
def test_consumers_read_the_brokers_own_offsets(name, sample_store):
    store = sample_store(name)
    rows = _lines(console("inspect", "consumers", store, "--json", "--now", "2026-11-27T12:00:00Z"))
    by = {(r["group"], r["topic"], r["queueId"]): r for r in rows}
    # What the clients consumed is what the broker committed: TopicOrders 25 on each of 4 queues.
    consumed = _clients(name, "consumed.orders")
    for qid in range(4):
        row = by[("GID_ORDERS", "TopicOrders", qid)]
        assert row["consumerOffset"] == row["maxOffset"] == 25 == sum(1 for m in consumed if m["queueId"] == qid)
        assert row["lag"] == 0 and row["lagMs"] == 0 and row["kind"] == "topic"
    # The retry topic the client subscribed by itself, the DLQ nobody consumes, marked.
    assert by[("GID_FAIL", "%RETRY%GID_FAIL", 0)]["kind"] == "retry"
    assert by[("GID_FAIL", "%RETRY%GID_FAIL", 0)]["consumerOffset"] == 16
    dlq = by[("GID_FAIL", "%DLQ%GID_FAIL", 0)]
    assert dlq["kind"] == "dlq" and dlq["consumerOffset"] is None and dlq["lag"] == 8
    assert dlq["oldestUnconsumedTimestamp"] is not None
    # --group and --topic narrow it.
    only = _lines(console("inspect", "consumers", store, "--json", "--group", "GID_FAIL", "--topic", "TopicFail"))
    assert {(r["group"], r["topic"]) for r in only} == {("GID_FAIL", "TopicFail")} and len(only) == 4
    table = console("inspect", "consumers", store, "--now", "2026-11-27T12:00:00Z")
    assert table.returncode == 0 and "GID_ORDERS" in table.stdout and "DLQ" in table.stdout


def test_lag_in_messages_and_time_from_a_committed_offset_behind(tmp_path, sample_store):
    store = tmp_path / "store"
    shutil.copytree(sample_store("broker-e2e"), store, ignore=shutil.ignore_patterns("index"))
    # As ConsumerOffsetManager would persist it after the group committed 20 on queue 1 only;
    # the .bak is what the broker falls back to when the file is unreadable.
    path = store / "config" / "consumerOffset.json"
    text = path.read_text().replace('"TopicOrders@GID_ORDERS":{0:25,1:25,', '"TopicOrders@GID_ORDERS":{0:25,1:20,')
    assert text != path.read_text()
    path.write_text(text)
    rows = _lines(console("inspect", "consumers", store, "--json", "--group", "GID_ORDERS", "--topic",
                          "TopicOrders", "--now", "1795760000000"))
    [row] = [r for r in rows if r["queueId"] == 1]
    assert row["consumerOffset"] == 20 and row["lag"] == 5
    produced = sorted((m for m in _clients("broker-e2e", "consumed.orders") if m["queueId"] == 1),
                      key=lambda m: m["queueOffset"])
    assert row["oldestUnconsumedTimestamp"] == produced[20]["storeTimestamp"]
    assert row["lagMs"] == 1795760000000 - produced[20]["storeTimestamp"]
    # Thresholds: over 4 messages pages, 5 does not; a time threshold judged at --now.
    over = console("inspect", "consumers", store, "--fail-if-lag", "4", "--now", "1795760000000")
    assert over.returncode == 1
    assert over.stderr.splitlines() == [
        "rmqdelay: inspect consumers --fail-if-lag 4: group GID_ORDERS is 5 message(s) behind on TopicOrders queue 1"]
    assert console("inspect", "consumers", store, "--fail-if-lag", "5").returncode == 0
    late = console("inspect", "consumers", store, "--fail-if-lag", "10m", "--json", "--now", "1795760000000")
    assert late.returncode == 1 and "TopicOrders queue 1" in late.stderr and len(late.stderr.splitlines()) == 1
    assert console("inspect", "consumers", store, "--fail-if-lag", "1d", "--now", "1795760000000").returncode == 0
    assert console("inspect", "consumers", store, "--fail-if-lag", "ten").returncode == 2
    # An unparsable file: the broker's .bak, said in one line.
    path.write_text("{not json")
    fallback = console("inspect", "consumers", store, "--json", "--group", "GID_ORDERS")
    assert fallback.returncode == 0 and "consumerOffset.json.bak" in fallback.stderr
    assert {r["consumerOffset"] for r in _lines(fallback) if r["topic"] == "TopicOrders"} == {25}


@pytest.mark.parametrize("name", BROKERS)
def test_dlq_lists_what_the_consumer_gave_up_on(name, sample_store):
    store = sample_store(name)
    letters = _lines(console("inspect", "dlq", store, "--json", "--now", "2026-11-27T12:00:00Z"))
    produced = {m["msgId"]: m for m in _clients(name, "produced.fail")}
    consumed = _clients(name, "consumed.fail")
    assert len(letters) == 8 and {d["uniqKey"] for d in letters} == set(produced)
    for d in letters:
        sent = produced[d["uniqKey"]]
        tries = [m for m in consumed if m["msgId"] == d["uniqKey"]]
        # maxReconsumeTimes 2: delivered 3 times (reconsumeTimes 0, 1, 2), then the DLQ.
        assert sorted(m["reconsumeTimes"] for m in tries) == [0, 1, 2] and d["reconsumeTimes"] == 3
        assert d["originalTopic"] == "TopicFail" and d["keys"] == sent["keys"] and d["tags"] == sent["tags"]
        assert d["originMsgId"] == sent["offsetMsgId"] and d["firstStoreTimestamp"] >= sent["bornTimestamp"]
        assert d["bornTimestamp"] == sent["bornTimestamp"]
        last = max(tries, key=lambda m: m["reconsumeTimes"])
        assert d["lastAttemptTimestamp"] == last["storeTimestamp"] < d["dlqTimestamp"]
        assert d["bodySize"] > 0 and d["group"] == "GID_FAIL" and d["topic"] == "%DLQ%GID_FAIL"
    assert _lines(console("inspect", "dlq", store, "--json", "--group", "GID_ORDERS")) == []
    over = console("inspect", "dlq", store, "--fail-if-dlq", "0")
    assert over.returncode == 1 and over.stderr.splitlines()[-1] == \
        "rmqdelay: inspect dlq --fail-if-dlq 0: 8 dead-lettered message(s): %DLQ%GID_FAIL 8"
    assert "8 dead-lettered message(s)" in over.stdout
    assert console("inspect", "dlq", store, "--fail-if-dlq", "8").returncode == 0


def test_dlq_of_the_retry_sample_sixteen_attempts(sample_store):
    letters = _lines(console("inspect", "dlq", SAMPLES / "retry" / "store", "--json"))
    assert len(letters) == 10
    assert {d["reconsumeTimes"] for d in letters} == {17} and {d["originalTopic"] for d in letters} == {"TopicPay"}
    assert all(d["firstStoreTimestamp"] < d["lastAttemptTimestamp"] < d["dlqTimestamp"] for d in letters)


def test_prometheus_for_consumers_dlq_and_the_timer_wheel(sample_store):
    now = 1795760000000
    text = console("inspect", "consumers", sample_store("broker-e2e"), "--format", "prometheus",
                   "--now", now).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    lag = {(s.labels["topic"], s.labels["queue"]): s.value for s in families["rmqdelay_consumer_lag_messages"].samples}
    assert lag[("%DLQ%GID_FAIL", "0")] == 8 and lag[("TopicOrders", "0")] == 0
    assert families["rmqdelay_reading_timestamp_seconds"].samples[0].value == now / 1000
    _promtool(text)

    text = console("inspect", "dlq", sample_store("broker5-e2e"), "--format", "prometheus", "--now", now).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    [count] = families["rmqdelay_dlq_messages"].samples
    assert count.labels == {"store": "store", "group": "GID_FAIL"} or count.labels["group"] == "GID_FAIL"
    assert count.value == 8
    _promtool(text)

    store = sample_store("timer-partial")
    status = json.loads(console("inspect", "timer", store, "--json", "--now", now).stdout)
    text = console("inspect", "timer", store, "--format", "prometheus", "--now", now).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    pending = {s.labels["due"]: s.value for s in families["rmqdelay_timer_pending_messages"].samples}
    assert sum(pending.values()) == status["pending"]["units"] + status["pending"]["notEnqueued"]
    assert pending["roll"] == status["pending"]["beyondRollWindow"]
    [age] = families["rmqdelay_timer_oldest_due_age_seconds"].samples
    assert age.value == (now - status["pending"]["oldestDueTimestamp"]) / 1000
    [read_lag] = families["rmqdelay_timer_read_lag_seconds"].samples
    assert read_lag.value == status["dequeue"]["behindMs"] / 1000
    rolls = {s.labels["state"]: s.value for s in families["rmqdelay_timer_rolls"].samples}
    assert rolls == {"pending": status["rolls"]["pending"], "done": status["rolls"]["done"]}
    cancels = {s.labels["state"]: s.value for s in families["rmqdelay_timer_cancellations"].samples}
    assert cancels == status["cancellations"]
    _promtool(text)


def test_overdue_checks_on_the_levels_and_the_wheel(sample_store):
    delay = SAMPLES / "delay-partial" / "store"
    # Level 4's first unit fell due at 12:17:06Z: 4 s overdue at --now, 1m 44s a bit later.
    assert console("inspect", "delay", delay, "--now", 1795349830000, "--fail-if-overdue", "10s").returncode == 0
    late = console("inspect", "delay", delay, "--now", 1795349930000, "--fail-if-overdue", "1m", "--json")
    assert late.returncode == 1 and len(late.stdout.splitlines()) == 18
    assert late.stderr.startswith("rmqdelay: inspect delay --fail-if-overdue 1m: level 4's oldest due message "
                                  "has been due 1m 43s") and len(late.stderr.splitlines()) == 1
    assert console("inspect", "delay", delay, "--fail-if-overdue", "soon").returncode == 2

    timer = sample_store("timer-partial")
    status = json.loads(console("inspect", "timer", timer, "--json", "--now", 1795450400000).stdout)
    oldest = status["pending"]["oldestDueTimestamp"]
    ok = console("inspect", "timer", timer, "--now", oldest + 59_000, "--fail-if-overdue", "1m")
    assert ok.returncode == 0, ok.stderr
    over = console("inspect", "timer", timer, "--now", oldest + 61_000, "--fail-if-overdue", "1m")
    assert over.returncode == 1 and over.stderr.splitlines() == [
        "rmqdelay: inspect timer --fail-if-overdue 1m: the oldest due timer message has been due 1m 1s "
        "(slot 2026-11-23 16:12:09Z; the wheel has read up to 2026-11-23 16:12:09Z)"]
    assert console("inspect", "timer", timer, "--slots", "--fail-if-overdue", "1m").returncode == 2


def test_consumers_total_per_group_sort_by_lag_and_the_worst_group_named(store_copy, capsys):
    from clirun import run_cli

    store = store_copy("broker-e2e")
    # GID_ORDERS made 100 behind (all 4 queues back to the start), GID_FAIL 4 behind.
    for group, topic, target in (("GID_ORDERS", "TopicOrders", "--to-earliest"), ("GID_FAIL", "TopicFail",
                                                                                   "--to-earliest")):
        assert run_cli(capsys, "consumers", "reset", store, "--group", group, "--topic", topic, target,
                       "--queues", "0-3" if group == "GID_ORDERS" else "0,1", "--execute").code == 0
    now = "2026-11-27T12:00:00Z"
    rows = run_cli(capsys, "inspect", "consumers", store, "--json", "--sort", "lag", "--now", now).json_lines()
    assert [r["group"] for r in rows][:5] == ["GID_ORDERS"] * 5 and rows[0]["lag"] == 25
    assert rows[5]["group"] == "GID_FAIL"
    assert len(run_cli(capsys, "inspect", "consumers", store, "--json", "--limit", "3").json_lines()) == 3
    table = run_cli(capsys, "inspect", "consumers", store, "--sort", "lag", "--now", now, "--limit", "4")
    lines = table.out.splitlines()
    assert "104 message(s) not consumed in 6 queue(s)" in lines[0]
    assert "furthest behind: GID_ORDERS, 100 message(s), oldest" in lines[0]
    total = next(line for line in lines[1:] if "all 5 queue(s)" in line and "GID_ORDERS" in line)
    assert " 100 " in total
    assert "more queue(s) (--limit, --json)" in table.out
    bad = run_cli(capsys, "inspect", "consumers", store, "--sort", "age")
    assert bad.code == 2 and "--sort" in bad.err


@pytest.mark.parametrize("name", BROKERS)
def test_dlq_says_why_each_died_and_retries_does_not_call_the_clients_limit_early(name, sample_store, capsys,
                                                                                 monkeypatch):
    from clirun import run_cli

    store = sample_store(name)
    letters = run_cli(capsys, "inspect", "dlq", store, "--json").json_lines()
    # GID_FAIL's consumer set maxReconsumeTimes 2: deliveries 0, 1, 2, then the DLQ (its copy says 3).
    assert len(letters) == 8
    assert {(d["reason"], d["maxReconsumeTimes"], d["reconsumeTimes"]) for d in letters} == {("maxReconsumeTimes", 2, 3)}
    rows = run_cli(capsys, "analyze", "retries", store, "--json").json_lines()
    assert not [r for r in rows if r.get("table") == "anomalies" and "early" in str(r.get("kind")).lower()]
    # At 80 columns the keys and UNIQ_KEY stay and the times go.
    from rmqdelay.commands import common

    monkeypatch.setattr(common.console.made(), "width", 80)
    table = run_cli(capsys, "inspect", "dlq", store, "--now", "2026-11-27T12:00:00Z").out
    assert "uniq key" in table and letters[0]["uniqKey"] in table and letters[0]["keys"] in table
    assert "client" in table and "last attempt (--wide" in " ".join(table.split())


def test_dlq_reasons_from_the_groups_limit_and_sent_straight():
    from rmqdelay.store.deadletter import DeadLetter, give_reasons

    def letter(group, times):
        return DeadLetter(group, 0, 0, 0, "id", None, None, "T", None, None, times, 0, None, None, 0, 0, 0)

    letters = [letter("a", 17), letter("a", 1), letter("b", 6), letter("b", 4), letter("c", 1)]
    give_reasons(letters, {"b": 5})
    assert [(d.reason, d.maxReconsumeTimes) for d in letters] == [
        ("retryMaxTimes", 16), ("sentToDlq", None), ("retryMaxTimes", 5), ("maxReconsumeTimes", 3),
        ("sentToDlq", None)]


@pytest.mark.parametrize("width", [80, 120])
def test_the_screens_keep_each_total_and_each_reason_on_one_line(capsys, monkeypatch, sample_store, width):
    from clirun import run_cli

    from rmqdelay.commands import common

    monkeypatch.setattr(common.console.made(), "width", width)
    store = sample_store("broker-e2e")
    dead = run_cli(capsys, "inspect", "dlq", store, "--now", "2026-11-27T12:00:00Z").out
    assert "8 at the client's limit of 2" in " ".join(dead.split()[:20])  # the headline counts them by why
    rows = [line for line in dead.splitlines() if line.startswith(" GID_FAIL")]
    assert len(rows) == 8 and all("client 2" in line for line in rows)  # one line each, why beside the key
    lag = run_cli(capsys, "inspect", "consumers", store, "--sort", "lag", "--limit", "5").out.splitlines()
    total = [line for line in lag if "all 5 queue(s)" in line]
    assert len(total) == 1 and "GID_FAIL" in total[0]
