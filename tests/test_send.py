"""`rmqdelay send`: messages put as a producer and the broker would, read back field by field."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from clirun import broker_holding_lock, run_cli
from hypothesis import given, strategies
from rmqdelay.formats.delayoffset import parse_fastjson_object
from rmqdelay.formats.properties import (
    format_properties,
    java_order,
    parse_properties,
    property_value,
)

from rmqdelay.store import Store
from rmqdelay.store.brokerconfig import read_topic_table

UNIQ_KEY = re.compile(r"^7F000001[0-9A-F]{24}$")  # IPv4 client 127.0.0.1: 16 bytes as hex


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def send(capsys, store: Path, *args: str):
    return run_cli(capsys, "send", store, "--create", "--commitlog-file-size", "65536", "--cq-file-size", "1280", *args)


def test_sent_messages_decode_back_field_by_field(tmp_path, capsys):
    store = tmp_path / "store"
    body = "订单 body ✓".encode()
    result = send(capsys, store, "--topic", "TopicA", "--tags", "TagA", "--keys", "K1 K2",
                  "--property", "region=cn-hangzhou", "--property", "中文=值", "--body", "订单 body ✓",
                  "--count", "5", "--store-host", "10.10.0.5:10911", "--json")
    assert result.code == 0, result.err
    sent = result.json_lines()
    assert [s["queueId"] for s in sent] == [0, 1, 2, 3, 0]  # round robin over 4 write queues
    assert [s["queueOffset"] for s in sent] == [0, 0, 0, 0, 1]
    keys = [s["uniqKey"] for s in sent]
    assert all(UNIQ_KEY.match(k) for k in keys) and len(set(keys)) == 5
    assert len({k[:20] for k in keys}) == 1  # one producer: one ip/pid/class loader prefix
    assert [int(k[-4:], 16) for k in keys] == [0, 1, 2, 3, 4]  # the client's counter
    with Store(store) as st:
        for s in sent:
            msg = st.message_at(s["commitLogOffset"])
            assert (msg.topic, msg.queueId, msg.queueOffset, msg.storeSize, msg.msgId) == (
                "TopicA", s["queueId"], s["queueOffset"], s["storeSize"], s["msgId"])
            assert msg.msgId.startswith("0A0A000500002A9F")
            assert (msg.bornTimestamp, msg.storeTimestamp) == (s["bornTimestamp"], s["storeTimestamp"])
            assert msg.bornTimestamp <= msg.storeTimestamp
            assert msg.body == body and msg.bodyCrcOk and msg.reconsumeTimes == 0 and msg.sysFlag == 0
            # The broker stores a plain message without WAIT and with its CLUSTER.
            assert msg.properties == {"TAGS": "TagA", "KEYS": "K1 K2", "region": "cn-hangzhou", "中文": "值",
                                      "UNIQ_KEY": s["uniqKey"], "CLUSTER": "DefaultCluster"}
            assert msg.propertiesRaw == format_properties(java_order(msg.properties))
            unit = st.consume_queue("TopicA", s["queueId"]).unit(s["queueOffset"])
            assert (unit.commitLogOffset, unit.size) == (s["commitLogOffset"], s["storeSize"])
        assert [m.msgId for m in st.messages_by_key(keys[2])] == [sent[2]["msgId"]]
    verify = run_cli(capsys, "inspect", "commitlog", store, "--verify")
    assert verify.code == 0, verify.out + verify.err


def test_a_delay_level_goes_to_the_schedule_queue_and_a_too_high_one_is_capped(tmp_path, capsys):
    store = tmp_path / "store"
    first = send(capsys, store, "--topic", "TopicA", "--queue", "1", "--delay-level", "3", "--json")
    capped = send(capsys, store, "--topic", "TopicA", "--queue", "2", "--delay-level", "25", "--json")
    assert first.code == capped.code == 0
    (a,), (b,) = first.json_lines(), capped.json_lines()
    assert (a["topic"], a["queueId"], a["delayLevel"]) == ("SCHEDULE_TOPIC_XXXX", 2, 3)
    assert a["deliverTimestamp"] == a["storeTimestamp"] + 10_000
    assert (b["queueId"], b["delayLevel"], b["deliverTimestamp"]) == (17, 18, b["storeTimestamp"] + 7_200_000)
    with Store(store) as st:
        msg = st.message_at(a["commitLogOffset"])
        assert msg.properties["REAL_TOPIC"] == "TopicA" and msg.properties["REAL_QID"] == "1"
        assert msg.properties["DELAY"] == "3" and msg.properties["WAIT"] == "true"  # re-serialised
        assert st.schedule_queue(3).unit(0).tagsCode == a["deliverTimestamp"]
        assert st.message_at(b["commitLogOffset"]).properties["DELAY"] == "18"
        assert st.schedule_queue(18).unit(0).tagsCode == b["deliverTimestamp"]
    # The real topic is what a broker must serve; the schedule topic is the broker's own.
    assert set(read_topic_table(store)) == {"TopicA"}


def test_the_topic_config_is_written_as_the_broker_does_and_kept(tmp_path, capsys):
    store = tmp_path / "store"
    assert send(capsys, store, "--topic", "TopicA").code == 0
    text = (store / "config" / "topics.json").read_text()
    assert text.startswith('{\n\t"dataVersion":{\n\t\t"counter":1,\n\t\t"timestamp":')
    assert '\t"topicConfigTable":{\n\t\t"TopicA":{\n\t\t\t"order":false,\n\t\t\t"perm":6,\n' \
           '\t\t\t"readQueueNums":4,\n\t\t\t"topicFilterType":"SINGLE_TAG",\n\t\t\t"topicName":"TopicA",\n' \
           '\t\t\t"topicSysFlag":0,\n\t\t\t"writeQueueNums":4\n\t\t}\n\t}\n}' in text
    assert send(capsys, store, "--topic", "TopicB", "--queue", "0").code == 0
    doc = parse_fastjson_object((store / "config" / "topics.json").read_text())
    assert doc["dataVersion"]["counter"] == 2 and set(doc["topicConfigTable"]) == {"TopicA", "TopicB"}
    assert (store / "config" / "topics.json.bak").read_text() == text  # the previous file kept
    # A queue the topic's config does not have is refused, as the broker refuses it.
    before = tree_digest(store)
    result = send(capsys, store, "--topic", "TopicA", "--queue", "4")
    assert result.code == 2 and result.err.count("\n") == 1 and "4 write queues" in result.err
    assert tree_digest(store) == before


@pytest.mark.parametrize("args, expected", [
    ((), "--topic: required"),
    (("--topic", "T", "--count", "0"), "--count"),
    (("--topic", "T", "--count", "x"), "--count: an integer"),
    (("--topic", "T", "--queue", "-1"), "--queue"),
    (("--topic", "T", "--delay-level", "-2"), "--delay-level"),
    (("--topic", "T", "--property", "novalue"), "--property: KEY=VALUE"),
    (("--topic", "T", "--body", "a", "--body-file", "/etc/hostname"), "give one of them"),
    (("--topic", "T", "--body", ""), "empty"),
    (("--topic", "bad topic"), "invalid topic"),
    (("--topic", "SCHEDULE_TOPIC_XXXX"), "system topic"),
    (("--topic", "T", "--store-host", "nohost"), "--store-host"),
    (("--topic", "T", "--body-file", "/nonexistent/file"), "--body-file"),
])
def test_bad_arguments_get_one_line_and_exit_2_and_create_nothing(tmp_path, capsys, args, expected):
    store = tmp_path / "store"
    result = run_cli(capsys, "send", store, *args)
    assert result.code == 2
    assert result.err.startswith("rmqdelay: ") and result.err.count("\n") == 1 and expected in result.err
    assert "Traceback" not in result.err and not store.exists()


def test_a_directory_that_is_no_store_is_refused(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a store")
    result = run_cli(capsys, "send", tmp_path, "--topic", "T")
    assert result.code == 2 and result.err.count("\n") == 1 and "commitlog" in result.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_broker_holding_the_lock_is_refused_in_one_line(tmp_path, capsys):
    store = tmp_path / "store"
    assert send(capsys, store, "--topic", "TopicA").code == 0
    before = tree_digest(store)
    with broker_holding_lock(store):
        result = send(capsys, store, "--topic", "TopicA", "--count", "3")
        assert result.code == 3 and result.err.count("\n") == 1 and "lock" in result.err
        assert tree_digest(store) == before


def test_many_messages_roll_over_files_with_blank_records(tmp_path, capsys):
    store = tmp_path / "store"
    result = send(capsys, store, "--topic", "TopicA", "--body", "x" * 3000, "--count", "60", "--json")
    assert result.code == 0
    sent = result.json_lines()
    assert len(list((store / "commitlog").iterdir())) >= 3
    with Store(store) as st:
        assert [m.commitLogOffset for m in st.commitlog.records(0)] == [s["commitLogOffset"] for s in sent]
    assert run_cli(capsys, "inspect", "commitlog", store, "--verify").code == 0


def test_a_consume_queue_file_left_empty_by_a_kill_is_grown_and_written(tmp_path, capsys):
    store = tmp_path / "store"
    assert send(capsys, store, "--topic", "TopicA", "--body", "x").code == 0
    # A kill between creating a queue's first file and sizing it leaves 0 bytes.
    empty = store / "consumequeue" / "TopicA" / "1" / ("0" * 20)
    empty.parent.mkdir(parents=True)
    empty.touch()
    result = send(capsys, store, "--topic", "TopicA", "--body", "y", "--count", "4", "--json")
    assert result.code == 0, result.err
    assert empty.stat().st_size == 1280
    with Store(store) as st:
        assert st.consume_queue("TopicA", 1).max_offset == 1
    assert run_cli(capsys, "inspect", "commitlog", store, "--verify").code == 0


@pytest.mark.parametrize("raw", [
    "", "TAGS\x01a", "A\x01b\x02TAGS\x01t\x02C\x01d", "XTAGS\x01no\x02TAGS\x01yes", "TAGS\x01\x02B\x01c",
    "TAGS\x01first\x02TAGS\x01last", "B\x01TAGS\x01inside", "TAGS\x01a\x01b", "\x02TAGS\x01x\x02",
])
def test_reading_one_property_of_a_stored_string_agrees_with_the_parser(raw):
    for key in ("TAGS", "B", "DELAY"):
        assert property_value(raw, key) == parse_properties(raw).get(key)


@given(strategies.text(alphabet="TAGSB\x01\x02x", max_size=40), strategies.sampled_from(["TAGS", "B", "T", "x"]))
def test_reading_one_property_agrees_with_the_parser_on_any_string(raw, key):
    assert property_value(raw, key) == parse_properties(raw).get(key)


def test_each_message_is_printed_with_where_it_went(tmp_path, capsys):
    store = tmp_path / "store"
    plain = send(capsys, store, "--topic", "TopicA", "--queue", "2", "--count", "2", "--store-host", "10.0.0.1:10911")
    lines = plain.out.splitlines()
    assert len(lines) == 2
    assert re.match(r"^TopicA queue 2 queueOffset 1 commitLogOffset \d+ msgId 0A00000100002A9F[0-9A-F]{16} "
                    r"uniqKey 7F000001[0-9A-F]{24}$", lines[1])
    delayed = send(capsys, store, "--topic", "TopicA", "--queue", "2", "--delay-level", "1")
    assert re.match(r"^SCHEDULE_TOPIC_XXXX queue 0 queueOffset 0 .* -> TopicA queue 2 level 1 due \d{4}-", delayed.out)
