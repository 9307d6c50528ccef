"""`rmqdelay trace`: one message's life against the real brokers' records - the retry sample's
ten chains into the DLQ attempt by attempt and its twenty with the last send-back pending,
timer-partial's recalled, rolled and delivered timer messages, and the end-to-end broker stores
against what their clients saw (delivery, send-back, redelivery, DLQ, consumed)."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict

import pytest
from clirun import console
from conftest import SAMPLES, load_expected

RETRY = SAMPLES / "retry" / "store"
NOW = "2026-11-22T12:20:00Z"


def _trace(store, *args) -> list[dict]:
    proc = console("trace", store, *args, "--json", "--now", NOW)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.fixture(scope="module")
def retry_chains():
    expected = load_expected("retry")
    chains = defaultdict(list)
    for m in expected["msg"]:
        chains[m["properties"].get("UNIQ_KEY")].append(m)
    tags = {(c["queueId"], c["cqOffset"]): c["tagsCode"] for c in expected["cq"] if c["topic"] == "SCHEDULE_TOPIC_XXXX"}
    return chains, tags


def test_the_ten_chains_into_the_dlq_attempt_by_attempt(retry_chains):
    chains, tags = retry_chains
    dead = [uk for uk, msgs in chains.items() if msgs[-1]["topic"] == "%DLQ%GID_ORDER"]
    assert len(dead) == 10
    for uk in dead:
        records = _trace(RETRY, uk)
        real = chains[uk]
        # Every record the broker wrote for the message, none other, in the order it wrote them.
        assert [r["commitLogOffset"] for r in records] == [m["commitLogOffset"] for m in real]
        assert [r["stage"] for r in records] == ["sent"] + ["sendBack", "redelivered"] * 16 + ["dlq"]
        assert records[0]["topic"] == "TopicPay"
        for n in range(1, 17):
            back, again = records[2 * n - 1], records[2 * n]
            assert back["attempt"] == again["attempt"] == back["reconsumeTimes"] == n
            assert back["delayLevel"] == 2 + n and back["group"] == "GID_ORDER" and back["state"] == "delivered"
            assert back["realTopic"] == "%RETRY%GID_ORDER"
            assert back["deliverTimestamp"] == tags[(back["queueId"], back["queueOffset"])]
            assert again["topic"] == "%RETRY%GID_ORDER" and again["deliverTimestamp"] == back["deliverTimestamp"]
            assert again["latenessMs"] == again["storeTimestamp"] - back["deliverTimestamp"]
        assert records[-1]["attempt"] == 17 and records[-1]["group"] == "GID_ORDER"
    # The same message found by its key, its first copy's offset msgId and its physical offset.
    first = chains[dead[0]][0]
    by_key = _trace(RETRY, "--key", first["properties"]["KEYS"], "--topic", "TopicPay")
    assert by_key == _trace(RETRY, first["msgId"]) == _trace(RETRY, str(first["commitLogOffset"])) \
        == _trace(RETRY, dead[0])
    # The DLQ copy names the first copy: starting there finds the same chain.
    assert _trace(RETRY, chains[dead[0]][-1]["msgId"]) == by_key


def test_the_twenty_whose_last_send_back_is_pending(retry_chains):
    chains, tags = retry_chains
    pending = [uk for uk, msgs in chains.items() if msgs[-1]["topic"] == "SCHEDULE_TOPIC_XXXX"]
    assert len(pending) == 20
    for uk in pending:
        records = _trace(RETRY, uk)
        assert [r["commitLogOffset"] for r in records] == [m["commitLogOffset"] for m in chains[uk]]
        last = records[-1]
        assert last["stage"] == "sendBack" and last["state"] == "waiting"
        assert last["deliverTimestamp"] == tags[(last["queueId"], last["queueOffset"])]
        assert all(r["state"] == "delivered" for r in records[:-1] if r["stage"] == "sendBack")
    table = console("trace", RETRY, pending[0], "--now", NOW)
    assert table.returncode == 0 and "waiting in SCHEDULE_TOPIC_XXXX" in table.stdout.splitlines()[0]


def test_timer_messages_recalled_rolled_delivered(sample_store):
    store = sample_store("timer-partial")
    by = defaultdict(list)
    for m in load_expected("timer-partial")["msg"]:
        by[m["properties"].get("UNIQ_KEY")].append(m)
    recalled = next(uk for uk, ms in by.items() if any("TIMER_DEL_UNIQKEY" in m["properties"] for m in ms)
                    and len(ms) == 2)
    records = _trace(store, recalled)
    assert [r["stage"] for r in records] == ["parked", "cancelled"]
    assert records[0]["state"] == "recalled" and records[1]["producerGroup"] == "PID_TIMER_ORACLE"
    rolled = next(uk for uk, ms in by.items() if any("TIMER_ROLL_TIMES" in m["properties"] for m in ms) and len(ms) == 2)
    records = _trace(store, rolled)
    assert [(r["stage"], r["state"]) for r in records] == [("parked", "rolled"), ("rolled", "waiting")]
    # By its key and its real topic, though the index holds it only under rmq_sys_wheel_timer.
    assert _trace(store, "--key", by[rolled][0]["properties"]["KEYS"], "--topic", "TimerTopic") == records
    assert records[0]["deliverTimestamp"] == int(by[rolled][0]["properties"]["TIMER_OUT_MS"])
    delivered = next(uk for uk, ms in by.items() if len(ms) == 2 and "TIMER_DEQUEUE_MS" in ms[1]["properties"]
                     and ms[1]["topic"] != "rmq_sys_wheel_timer")
    records = _trace(store, delivered)
    real = by[delivered]
    assert [(r["stage"], r["state"]) for r in records] == [("parked", "delivered"), ("delivered", None)]
    assert records[1]["topic"] == real[1]["topic"] and records[1]["queueOffset"] == real[1]["queueOffset"]
    assert records[1]["latenessMs"] == real[1]["storeTimestamp"] - int(real[0]["properties"]["TIMER_OUT_MS"])


@pytest.mark.parametrize("name", ["broker-e2e", "broker5-e2e"])
def test_against_what_the_clients_saw(name, sample_store):
    store = sample_store(name)

    def clients(what):
        with gzip.open(SAMPLES / name / f"{what}.jsonl.gz", "rt") as fh:
            return [json.loads(line) for line in fh if line.strip()]

    consumed = clients("consumed.fail")
    for sent in clients("produced.fail")[:3]:
        records = _trace(store, sent["msgId"])
        assert [r["stage"] for r in records] == ["sent", "sendBack", "redelivered", "sendBack", "redelivered", "dlq"]
        assert records[0]["msgId"] == sent["offsetMsgId"]
        # Each delivery the consumer got is a record of the chain: the first send, then each retry
        # (the client shows a retry under its original topic).
        got = sorted((m for m in consumed if m["msgId"] == sent["msgId"]), key=lambda m: m["reconsumeTimes"])
        assert [(r["queueOffset"], r["storeTimestamp"], r["reconsumeTimes"]) for r in records
                if r["stage"] in ("sent", "redelivered")] == \
            [(m["queueOffset"], m["storeTimestamp"], m["reconsumeTimes"]) for m in got]
        assert [r["delayLevel"] for r in records if r["stage"] == "sendBack"] == [3, 4]
        assert all(c["consumed"] for r in records for c in r["consumers"]) and records[0]["consumers"]
    orders = clients("consumed.orders")
    delayed = next(m for m in orders if "DELAY" in m["properties"])
    records = _trace(store, delayed["msgId"])
    assert [r["stage"] for r in records] == ["parked", "delivered"]
    assert records[1]["queueOffset"] == delayed["queueOffset"] and records[1]["topic"] == "TopicOrders"
    assert records[1]["consumers"] == [{"group": "GID_ORDERS", "consumerOffset": 25, "consumed": True}]


def test_what_trace_says_when_it_finds_nothing():
    missing = console("trace", RETRY, "C0000202331C5FFD2B276EC837D6FFFF")
    assert missing.returncode == 1 and missing.stderr.startswith("rmqdelay: no message with id")
    assert console("trace", RETRY, "not-an-id").returncode == 2
    assert console("trace", RETRY).returncode == 2
