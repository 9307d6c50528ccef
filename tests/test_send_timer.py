"""`rmqdelay send` of timer messages into 5.x stores: parked as the 5.3.3 broker parks them
(the fixtures' records are the reference), refused with the broker's words where it refuses,
cancellations as a recall writes them, and nothing of it on a 4.x store."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import shutil
import time
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import load_expected
from rmqdelay.formats.constants import RMQ_SYS_WHEEL_TIMER_TOPIC

from rmqdelay.producer import broker_message
from rmqdelay.samples.pack import unpack
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer.config import timer_config
from rmqdelay.timer.transform import PutRefused, recall_message, transform_timer_message

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CONFIG = timer_config(None)
MAX_DELAY_TEXT = ("timer message illegal, the delay time should not be bigger than the max delay 259200000ms; "
                  "or if set del msg, the delay time should be bigger than the current time")


def pairs(raw: str) -> list[tuple[str, str]]:
    return [tuple(p.split("\x01", 1)) for p in raw.split("\x02") if p]


@pytest.fixture(scope="module")
def fresh_records():
    return [o for o in load_expected("timer-fresh")["msg"]]


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def cli_json(capsys, *args) -> list[dict]:
    result = run_cli(capsys, *args)
    assert result.code == 0, result.err
    return [json.loads(line) for line in result.out.splitlines() if line.strip()]


# -- the pure transform against every real record ------------------------------------------------
def test_every_parked_timer_record_of_the_fixture_is_what_the_transform_makes(fresh_records):
    checked = 0
    for o in fresh_records:
        if not o["origin"].startswith("timer-parked (HookUtils)"):
            continue
        stored = dict(pairs(o["propertiesRaw"]))
        # What SendMessageProcessor handed to the hook: the map without the hook's three.
        sent = {k: v for k, v in pairs(o["propertiesRaw"]) if k not in ("TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID")}
        msg = NewMessage(stored["REAL_TOPIC"], int(stored["REAL_QID"]), b"x", sent, None)
        # The hook's clock is a few ms before the store time: for a relative delay take the one
        # that gives the stored TIMER_OUT_MS; an absolute time does not depend on it.
        now = o["storeTimestamp"]
        if "TIMER_DELIVER_MS" not in sent:
            delay = int(sent.get("TIMER_DELAY_MS") or int(sent["TIMER_DELAY_SEC"]) * 1000)
            assert 1 <= now + delay - int(stored["TIMER_OUT_MS"]) <= 1000 + 50
            now = int(stored["TIMER_OUT_MS"]) + 1 - delay
        put = transform_timer_message(msg, CONFIG, now)
        assert put.parked and put.message.topic == RMQ_SYS_WHEEL_TIMER_TOPIC and put.message.queueId == 0
        assert put.message.propertiesRaw == o["propertiesRaw"]
        checked += 1
    assert checked == 1160


def test_every_cancellation_of_the_fixture_is_what_a_recall_makes(fresh_records):
    cancels = [o for o in fresh_records if o["origin"].startswith("timer-parked-cancel")]
    assert len(cancels) == 50
    for o in cancels:
        p = dict(pairs(o["propertiesRaw"]))
        born = int(p["BORN_TIMESTAMP"])
        marker = recall_message(p["REAL_TOPIC"], p["UNIQ_KEY"], int(p["TIMER_DELIVER_MS"]), p["PGROUP"], born,
                                born_host=(b"\x7f\0\0\1", 1), store_host=(b"\x7f\0\0\1", 2), config=CONFIG)
        put = transform_timer_message(marker, CONFIG, born, map_capacity=16)
        assert put.message.propertiesRaw == o["propertiesRaw"]
        assert put.message.body == b"0" and put.message.queueId == 0 and put.message.bornTimestamp == born


def test_the_exact_second_case_is_one_precision_earlier_and_a_past_time_stays_a_plain_message():
    msg = NewMessage("TopicTest", 1, b"x", {"TIMER_DELIVER_MS": "1795450309000", "UNIQ_KEY": "K"}, "raw")
    assert transform_timer_message(msg, CONFIG, 1795450300000).timerOutMs == 1795450308000
    past = transform_timer_message(msg, CONFIG, 1795450309000)
    assert not past.parked and past.message is msg and past.deliverMs == 1795450309000
    # Long arithmetic wraps as in Java: a huge TIMER_DELAY_SEC lands in the past.
    huge = NewMessage("TopicTest", 1, b"x", {"TIMER_DELAY_SEC": str(2**63 // 1000)}, "raw")
    assert not transform_timer_message(huge, CONFIG, 1795450300000).parked
    # A delay level wins: the TIMER_* properties are dropped, the level path takes it.
    level = NewMessage("TopicTest", 1, b"x", {"DELAY": "3", "TIMER_DELAY_SEC": "5", "UNIQ_KEY": "K"}, "raw")
    put = transform_timer_message(level, CONFIG, 1795450300000)
    assert put.message.properties == {"DELAY": "3", "UNIQ_KEY": "K"} and put.message.propertiesRaw is None


@pytest.mark.parametrize("props, status", [
    ({"TIMER_DELAY_SEC": "259201"}, "WHEEL_TIMER_MSG_ILLEGAL"),
    ({"TIMER_DELAY_SEC": "1.5"}, "WHEEL_TIMER_MSG_ILLEGAL"),
    ({"TIMER_DELIVER_MS": "soon"}, "WHEEL_TIMER_MSG_ILLEGAL"),
    ({"TIMER_DELAY_MS": "-1", "TIMER_DEL_UNIQKEY": "T+K"}, "WHEEL_TIMER_MSG_ILLEGAL"),
])
def test_the_broker_refusals_carry_its_text(props, status):
    with pytest.raises(PutRefused) as info:
        transform_timer_message(NewMessage("TopicTest", 0, b"x", props, None), CONFIG, 1795450300000)
    assert info.value.status == status and info.value.remark == MAX_DELAY_TEXT
    off = dataclasses.replace(CONFIG, timerWheelEnable=False)
    with pytest.raises(PutRefused, match="accurate timer message is not enabled, timerWheelEnable is false"):
        transform_timer_message(NewMessage("TopicTest", 0, b"x", {"TIMER_DELAY_SEC": "5"}, None), off, 1)


def test_a_parked_record_is_byte_for_byte_the_brokers_but_for_its_offsets(fresh_records, tmp_path):
    """One real parked record, rebuilt from what the client sent and put by the one writer:
    every field and byte of the record as the 5.3.3 broker stored it, queueOffset and
    physicalOffset aside (they are where the record lands)."""
    o = next(r for r in fresh_records if r["origin"].startswith("timer-parked (HookUtils)")
             and "TIMER_DELIVER_MS" in r["properties"] and r["sysFlag"] == 0)
    stored = dict(pairs(o["propertiesRaw"]))
    client = {k: v for k, v in pairs(o["propertiesRaw"])
              if k not in ("TIMER_OUT_MS", "REAL_TOPIC", "REAL_QID", "CLUSTER")}
    host, port = o["bornHost"].rsplit(":", 1)
    shost, sport = o["storeHost"].rsplit(":", 1)
    msg = broker_message(stored["REAL_TOPIC"], int(stored["REAL_QID"]), base64.b64decode(o["body"]),
                         client, born_timestamp=o["bornTimestamp"],
                         born_host=(bytes(map(int, host.split("."))), int(port)),
                         store_host=(bytes(map(int, shost.split("."))), int(sport)),
                         store_timestamp=o["storeTimestamp"], broker5x=True, flag=o["flag"])
    put = transform_timer_message(msg, CONFIG, o["storeTimestamp"])
    store = tmp_path / "store"
    unpack(SAMPLES / "timer-fresh" / "store.tar.xz", store)
    with StoreWriter(store) as w:
        result = w.put(put.message)
    with Store(store) as s:
        mine = s.commitlog.read_message(result.commitLogOffset)
    for name in ("magic", "topic", "queueId", "flag", "storeSize", "sysFlag", "bornTimestamp", "bornHost",
                 "storeTimestamp", "storeHost", "reconsumeTimes", "preparedTransactionOffset", "bodyCRC"):
        if name == "magic":
            assert f"0x{mine.magicCode & 0xFFFFFFFF:08X}" == o["magic"]
            continue
        assert getattr(mine, name) == o[name], name
    assert mine.propertiesRaw == o["propertiesRaw"]
    assert result.tagsCode == o["dispatch"]["tagsCode"]


# -- the command ---------------------------------------------------------------------------------
@pytest.fixture
def fresh(tmp_path):
    store = tmp_path / "timer-fresh"
    unpack(SAMPLES / "timer-fresh" / "store.tar.xz", store)
    return store


def fixture_order(records, keys: set[str]) -> list[str]:
    """The property order of a fixture parked record with exactly these keys."""
    for o in records:
        if o["origin"].startswith("timer-parked (HookUtils)"):
            names = [k for k, _ in pairs(o["propertiesRaw"])]
            if set(names) == keys:
                return names
    raise AssertionError(f"no fixture record with {sorted(keys)}")


@pytest.mark.parametrize("option, value, prop, bucket", [
    ("--delay-sec", "600", "TIMER_DELAY_SEC", "nextHour"),
    ("--delay-ms", "4000", "TIMER_DELAY_MS", "nextMinute"),
    ("--deliver-at", "+7200000", "TIMER_DELIVER_MS", "nextDay"),
])
def test_a_timer_message_is_parked_as_the_broker_parks_it(fresh, capsys, fresh_records, option, value, prop,
                                                          bucket):
    if option == "--deliver-at":
        value = str(time.time_ns() // 1_000_000 + 7_200_000)
    # Both judged at the test's start: a loaded machine must not make a near message due.
    at = str(time.time_ns() // 1_000_000)
    before = cli_json(capsys, "inspect", "timer", fresh, "--json", "--now", at)[0]["pending"]
    result = run_cli(capsys, "send", fresh, "--topic", "TimerTopic", "--queue", "1", "--tags", "TagA",
                     "--keys", "K1", option, value, "--json")
    assert result.code == 0, result.err
    assert result.err == ""  # what the store is, is no news on success
    sent = json.loads(result.out)
    assert sent["topic"] == RMQ_SYS_WHEEL_TIMER_TOPIC and sent["queueId"] == 0 and sent["parked"]
    assert sent["realTopic"] == "TimerTopic" and sent["realQueueId"] == 1
    with Store(fresh) as s:
        msg = s.commitlog.read_message(sent["commitLogOffset"])
    props = pairs(msg.propertiesRaw)
    assert msg.propertiesRaw.endswith("\x02")
    assert [k for k, _ in props] == fixture_order(fresh_records, {k for k, _ in props})
    stored = dict(props)
    assert stored[prop] == value and stored["WAIT"] == "true" and stored["CLUSTER"] == "DefaultCluster"
    assert stored["REAL_TOPIC"] == "TimerTopic" and stored["REAL_QID"] == "1" and stored["TAGS"] == "TagA"
    out = int(stored["TIMER_OUT_MS"])
    assert out == sent["timerOutMs"] and out % 1000 == 0
    deliver = int(value) if option == "--deliver-at" else msg.storeTimestamp + int(value) * (
        1000 if option == "--delay-sec" else 1)
    assert 1 <= deliver - out <= 1000
    assert msg.storeHost == "10.10.0.5:10911"  # the store's own broker
    after = cli_json(capsys, "inspect", "timer", fresh, "--json", "--now", at)[0]["pending"]
    assert after["notEnqueued"] == before["notEnqueued"] + 1
    assert after["notEnqueuedByDue"][bucket] == before["notEnqueuedByDue"][bucket] + 1
    shown = run_cli(capsys, "inspect", "message", fresh, str(sent["commitLogOffset"]))
    assert shown.code == 0 and "parked" in shown.out and str(out) in shown.out
    assert run_cli(capsys, "inspect", "commitlog", fresh, "--verify").code == 0
    assert run_cli(capsys, "inspect", "timer", fresh, "--verify").code == 0


def test_a_deliver_time_not_in_the_future_is_stored_in_its_topic_at_once(fresh, capsys):
    sent = cli_json(capsys, "send", fresh, "--topic", "TopicTest", "--delay-sec", "-2", "--json")[0]
    assert sent["topic"] == "TopicTest" and not sent["parked"] and sent["timerOutMs"] is None
    with Store(fresh) as s:
        msg = s.commitlog.read_message(sent["commitLogOffset"])
    assert msg.properties["TIMER_DELAY_SEC"] == "-2" and "TIMER_OUT_MS" not in msg.properties
    assert msg.propertiesRaw.endswith("WAIT\x01true\x02")


@pytest.mark.parametrize("args, fragments", [
    (["--delay-sec", "259201"], ["(MESSAGE_ILLEGAL, WHEEL_TIMER_MSG_ILLEGAL): " + MAX_DELAY_TEXT]),
    (["--delay-ms", "259200001"], [MAX_DELAY_TEXT]),
    (["--deliver-at", "2100-01-01T00:00:00Z"], [MAX_DELAY_TEXT]),
    (["--delay-sec", "abc"], ["--delay-sec: an integer", "(a Java long)"]),
    (["--delay-sec", "99999999999999999999"], ["(a Java long)"]),
    (["--deliver-at", "tomorrow"], ["--deliver-at: a time as ISO 8601 or epoch milliseconds"]),
    (["--delay-sec", "5", "--delay-ms", "5"], ["--delay-sec and --delay-ms"]),
    (["--delay-sec", "5", "--delay-level", "3"], ["--delay-sec and --delay-level"]),
    (["--cancel", "C0000202511E5FFD2B2774C54ED1048A", "--delay-sec", "5"], ["--cancel and --delay-sec"]),
    (["--cancel", "NOSUCHKEY"], ["--cancel NOSUCHKEY: no timer message parked"]),
    (["--cancel", "C0000202511E5FFD2B2774C54ED1048A", "--body", "x"], ["--cancel and --body"]),
])
def test_limits_and_bad_values_are_one_line_exit_2_and_change_nothing(fresh, capsys, args, fragments):
    before = tree_digest(fresh)
    topic = [] if "--cancel" in args else ["--topic", "TopicTest"]
    result = run_cli(capsys, "send", fresh, *topic, *args)
    assert result.code == 2, result.err
    assert result.err.startswith("rmqdelay: ") and result.err.count("\n") == 1 and "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in result.err, result.err
    assert tree_digest(fresh) == before


def test_the_brokers_limits_come_from_its_config(fresh, capsys, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("timerMaxDelaySec=60\nbrokerClusterName=ClusterB\n")
    refused = run_cli(capsys, "send", fresh, "--topic", "TopicTest", "--delay-sec", "61", "--broker-config", conf)
    assert refused.code == 2 and "the max delay 60000ms" in refused.err
    sent = cli_json(capsys, "send", fresh, "--topic", "TopicTest", "--delay-sec", "59", "--broker-config", conf,
                    "--json")[0]
    with Store(fresh) as s:
        assert s.commitlog.read_message(sent["commitLogOffset"]).properties["CLUSTER"] == "ClusterB"
    conf.write_text("timerWheelEnable=false\n")
    off = run_cli(capsys, "send", fresh, "--topic", "TopicTest", "--delay-sec", "5", "--broker-config", conf)
    assert off.code == 2 and "accurate timer message is not enabled, timerWheelEnable is false" in off.err


def test_a_4x_store_refuses_timer_options_saying_what_it_found(tmp_path, capsys, sample_store):
    store = tmp_path / "delay-fresh"
    shutil.copytree(sample_store("delay-fresh"), store)
    before = tree_digest(store)
    for args in (["--delay-sec", "10"], ["--cancel", "ABC"]):
        result = run_cli(capsys, "send", store, "--topic", "TopicTest", *args)
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert "a 4.x store (no timer files" in result.err and "a 4.9.4 broker has no timer wheel" in result.err
    assert tree_digest(store) == before
    missing = run_cli(capsys, "send", tmp_path / "new", "--topic", "TopicTest", "--delay-sec", "10")
    assert missing.code == 2 and "--create makes a new store" in missing.err and not (tmp_path / "new").exists()
    created = run_cli(capsys, "send", tmp_path / "new", "--create", "--topic", "TopicTest", "--delay-sec", "10")
    assert created.code == 2 and "no store here" in created.err and not (tmp_path / "new").exists()


def test_a_cancellation_is_found_by_inspect_timer_with_its_target(fresh, capsys, fresh_records):
    target = cli_json(capsys, "send", fresh, "--topic", "TimerTopic", "--delay-sec", "900", "--json")[0]
    result = run_cli(capsys, "send", fresh, "--cancel", target["uniqKey"], "--json")
    assert result.code == 0, result.err
    marker = json.loads(result.out)
    assert marker["cancels"] == f"TimerTopic+{target['uniqKey']}" and marker["timerOutMs"] == target["timerOutMs"]
    with Store(fresh) as s:
        msg = s.commitlog.read_message(marker["commitLogOffset"])
    names = [k for k, _ in pairs(msg.propertiesRaw)]
    real = next(o for o in fresh_records if o["origin"].startswith("timer-parked-cancel"))
    assert names == [k for k, _ in pairs(real["propertiesRaw"])]  # the recall's own map order
    assert msg.properties["TIMER_DELIVER_MS"] == str(target["timerOutMs"] + 1)
    assert msg.body == b"0" and msg.properties["PGROUP"] == "DEFAULT_PRODUCER" and "CLUSTER" not in msg.properties
    status = cli_json(capsys, "inspect", "timer", fresh, "--json")[0]
    assert status["cancellations"]["queued"] == 1 and status["cancellations"]["queuedNoTarget"] == 0
    text = run_cli(capsys, "inspect", "timer", fresh).out
    assert "not enqueued yet, target parked at its time" in " ".join(text.split())
    # A message far beyond the roll window: its target sits in a roll slot, still found.
    far = next((o for o in fresh_records if o["origin"].startswith("timer-parked (HookUtils)")
                and int(o["properties"]["TIMER_OUT_MS"]) > time.time() * 1000 + 600_000), None)
    if far is None:
        return  # the fixture's messages are all due by now (it was made in Nov 2026)
    again = run_cli(capsys, "send", fresh, "--cancel", far["properties"]["UNIQ_KEY"])
    assert again.code == 0, again.err
    status = cli_json(capsys, "inspect", "timer", fresh, "--json")[0]
    assert status["cancellations"]["queued"] == 2, status["cancellations"]
    assert run_cli(capsys, "inspect", "timer", fresh, "--verify").code == 0


def test_a_cancellation_of_a_message_due_already_gets_the_recall_refusal(fresh, capsys):
    before = tree_digest(fresh)
    result = run_cli(capsys, "send", fresh, "--cancel", "C0000202511E5FFD2B2774C54ED1048A")
    assert result.code == 2 and "recall failed, timestamp invalid" in result.err
    assert tree_digest(fresh) == before


def test_flow_control_weighs_the_slot_count_as_the_broker_does():
    congested = dataclasses.replace(CONFIG, congestNumEachSlot=10)
    msg = NewMessage("TopicTest", 0, b"x", {"TIMER_DELAY_SEC": "60"}, None)
    now = 1795450300500
    assert transform_timer_message(msg, congested, now, slot_num=lambda t: 10).parked
    with pytest.raises(PutRefused) as info:
        transform_timer_message(msg, congested, now, slot_num=lambda t: 20)
    assert info.value.remark == ("timer message is under flow control, max num limit is 20 or the current value is "
                                 "greater than 10 and less than 20, trigger random flow control")
    # In between, at random: rejected when nextInt(1000) is above 1000 * (num - limit) / (limit + 0.1).
    assert transform_timer_message(msg, congested, now, slot_num=lambda t: 15, draw=lambda: 0).parked
    with pytest.raises(PutRefused):
        transform_timer_message(msg, congested, now, slot_num=lambda t: 15, draw=lambda: 999)
    # The slot asked about is the one TIMER_OUT_MS names.
    asked = []
    transform_timer_message(msg, congested, now, slot_num=lambda t: asked.append(t) or 0)
    assert asked == [1795450360000]
