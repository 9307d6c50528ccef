"""`rmqdelay inspect ...` against the real-broker samples: what a user and a script see."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from clirun import CONSOLE_SCRIPT, run_cli
from conftest import SAMPLES, load_expected

MESSAGE_FIELDS = ["msgId", "topic", "queueId", "flag", "queueOffset", "commitLogOffset", "storeSize", "sysFlag",
                  "bornTimestamp", "bornHost", "storeTimestamp", "storeHost", "reconsumeTimes",
                  "preparedTransactionOffset", "bodyCRC", "properties"]


def store(name: str):
    return SAMPLES / name / "store"


def expected_message(m: dict) -> dict:
    return {k: m[k] for k in MESSAGE_FIELDS}


# -- inspect commitlog -----------------------------------------------------------------------

def test_commitlog_json_is_every_message_as_the_broker_decoded_it(capsys, real_sample):
    name, path, expected = real_sample
    result = run_cli(capsys, "inspect", "commitlog", path, "--json", "--body")
    assert result.code == 0, result.err
    lines = result.json_lines()
    assert len(lines) == len(expected["msg"])
    for got, want in zip(lines, expected["msg"]):
        assert list(got) == MESSAGE_FIELDS + ["body"]
        assert {k: got[k] for k in MESSAGE_FIELDS} == expected_message(want)
        assert got["body"] == want["body"]


def test_commitlog_from_limit_topic_select_messages(capsys):
    expected = load_expected("delay-partial")["msg"]
    third = expected[3]["commitLogOffset"]
    result = run_cli(capsys, "inspect", "commitlog", store("delay-partial"), "--json",
                     "--offset", third, "--limit", 5, "--topic", "TopicTest")
    want = [m for m in expected if m["commitLogOffset"] >= third and m["topic"] == "TopicTest"][:5]
    assert [m["commitLogOffset"] for m in result.json_lines()] == [m["commitLogOffset"] for m in want]
    assert all("body" not in m for m in result.json_lines())


def test_commitlog_from_the_middle_of_a_record_is_a_clear_error(capsys):
    result = run_cli(capsys, "inspect", "commitlog", store("delay-partial"), "--offset", 3, "--json")
    assert result.code == 2
    assert result.out == ""
    assert result.err.count("\n") == 1 and "00000000000000000000 at byte 7: magic code" in result.err


def test_commitlog_table_lists_messages(capsys):
    result = run_cli(capsys, "inspect", "commitlog", store("delay-partial"), "--limit", 3)
    assert result.code == 0
    assert "OrderTopic" in result.out and "SCHEDULE_TOPI" in result.out
    assert "3 message(s)" in result.out


def test_verify_of_real_broker_stores_finds_nothing(capsys, real_sample):
    name, path, expected = real_sample
    result = run_cli(capsys, "inspect", "commitlog", path, "--verify")
    assert result.code == 0, result.out
    assert f"{len(expected['msg'])} message(s)" in result.out
    assert f"{len(expected['cq'])} unit(s): no problems" in result.out


def test_verify_refuses_a_partial_range(capsys):
    result = run_cli(capsys, "inspect", "commitlog", store("retry"), "--verify", "--limit", 3)
    assert result.code == 2 and "--verify" in result.err


# -- inspect cq ------------------------------------------------------------------------------

@pytest.mark.parametrize("topic,queue", [("SCHEDULE_TOPIC_XXXX", 3), ("TopicTest", 1), ("OrderTopic", 0)])
def test_cq_json_is_the_queue_as_the_broker_read_it(capsys, topic, queue):
    expected = [c for c in load_expected("delay-partial")["cq"] if c["topic"] == topic and c["queueId"] == queue]
    result = run_cli(capsys, "inspect", "cq", store("delay-partial"), "--topic", topic, "--queue", queue, "--json")
    assert result.code == 0, result.err
    got = result.json_lines()
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        want = {"topic": topic, "queueId": queue, "cqOffset": e["cqOffset"], "commitLogOffset": e["phyOffset"],
                "size": e["size"], "tagsCode": e["tagsCode"]}
        if topic == "SCHEDULE_TOPIC_XXXX":
            want["deliverTimestamp"] = e["tagsCode"]
        assert g == want


def test_cq_from_and_limit(capsys):
    result = run_cli(capsys, "inspect", "cq", store("retry"), "--topic", "TopicPay", "--queue", 0,
                     "--offset", 10, "--limit", 4, "--json")
    assert [u["cqOffset"] for u in result.json_lines()] == [10, 11, 12, 13]


def test_cq_table_shows_the_deliver_time_of_schedule_units(capsys):
    unit = next(c for c in load_expected("delay-fresh")["cq"] if c["topic"] == "SCHEDULE_TOPIC_XXXX"
                and c["queueId"] == 4)
    now = unit["tagsCode"] - 30_000
    result = run_cli(capsys, "inspect", "cq", store("delay-fresh"), "--topic", "SCHEDULE_TOPIC_XXXX",
                     "--queue", 4, "--limit", 1, "--now", now)
    assert result.code == 0
    from rmqdelay.commands.common import format_time_ms
    assert format_time_ms(unit["tagsCode"]) in result.out
    assert "in 30 s" in result.out
    assert "delay level 5" in result.out


def test_cq_shows_pre_blank_units(capsys, tmp_path):
    from rmqdelay.store import Store
    from rmqdelay.store.writer import NewMessage, StoreWriter
    path = tmp_path / "s"
    with StoreWriter(path, create=True, sync=False) as writer:
        writer.put(NewMessage("TopicA", 0, b"x"))
    # A queue that starts at logical offset 3: the broker fills 0..2 with pre-blank units.
    cq_file = path / "consumequeue" / "TopicA" / "0" / "00000000000000000000"
    data = cq_file.read_bytes()
    blank = (0).to_bytes(8, "big") + (0x7FFFFFFF).to_bytes(4, "big") + (0).to_bytes(8, "big")
    cq_file.write_bytes(blank * 3 + data[:20] + data[80:])
    with Store(path) as s:
        assert s.consume_queue("TopicA", 0).min_offset == 3
    result = run_cli(capsys, "inspect", "cq", path, "--topic", "TopicA", "--queue", 0, "--offset", 0)
    assert result.code == 0
    assert result.out.count("pre-blank") == 3


def test_cq_of_a_missing_queue_names_it(capsys):
    result = run_cli(capsys, "inspect", "cq", store("retry"), "--topic", "TopicPay", "--queue", 9)
    assert result.code == 2
    assert "TopicPay/9" in result.err and result.err.count("\n") == 1


def test_cq_refuses_a_topic_that_could_become_a_path(capsys):
    result = run_cli(capsys, "inspect", "cq", store("retry"), "--topic", "../config", "--queue", 0)
    assert result.code == 2 and "invalid topic" in result.err


# -- inspect message -------------------------------------------------------------------------

def test_message_by_offset_msgid_and_key(capsys):
    expected = load_expected("delay-fresh")["msg"]
    m = next(x for x in expected if x["properties"].get("KEYS") and x["sysFlag"] & 0x20)  # IPv6 store host
    by_offset = run_cli(capsys, "inspect", "message", store("delay-fresh"), m["commitLogOffset"], "--json")
    by_id = run_cli(capsys, "inspect", "message", store("delay-fresh"), m["msgId"].lower(), "--json", "--body")
    key = m["properties"]["KEYS"].split(" ")[0]
    by_key = run_cli(capsys, "inspect", "message", store("delay-fresh"), "--key", key, "--json")
    assert by_offset.json_lines() == [expected_message(m)]
    assert by_id.json_lines() == [dict(expected_message(m), body=m["body"])]
    want = [expected_message(x) for x in expected if key in x["properties"].get("KEYS", "").split(" ")
            or x["properties"].get("UNIQ_KEY") == key]
    assert by_key.json_lines() == want


def test_message_table_shows_every_field_and_properties(capsys):
    m = load_expected("retry")["msg"][-1]
    result = run_cli(capsys, "inspect", "message", store("retry"), m["msgId"])
    assert result.code == 0
    for value in (m["msgId"], m["topic"], str(m["storeTimestamp"]), m["bornHost"], str(m["bodyCRC"]), "(ok)"):
        assert value in result.out
    for key in m["properties"]:
        assert key in result.out


def test_message_id_of_another_host_finds_nothing_and_says_why(capsys):
    # Not this store's msgId, and no message has it as its UNIQ_KEY either: exit 1, both said.
    m = load_expected("retry")["msg"][5]
    other = "7F000001" + m["msgId"][8:]
    result = run_cli(capsys, "inspect", "message", store("retry"), other)
    assert result.code == 1 and result.err.count("\n") == 1
    assert "stored by" in result.err and "as a UNIQ_KEY" in result.err


def test_message_key_not_found_exits_1(capsys):
    result = run_cli(capsys, "inspect", "message", store("retry"), "--key", "no-such-key-anywhere")
    assert result.code == 1 and "no message with key" in result.err


def test_message_needs_exactly_one_target(capsys):
    assert run_cli(capsys, "inspect", "message", store("retry")).code == 2
    assert run_cli(capsys, "inspect", "message", store("retry"), "0", "--key", "x").code == 2
    assert run_cli(capsys, "inspect", "message", store("retry"), "not-an-id").code == 2


# -- inspect delay ---------------------------------------------------------------------------

def test_delay_json_per_level(capsys):
    exp = load_expected("delay-partial")
    offsets = {int(k): v for k, v in exp["delayOffsets"][0]["loadedTable"].items()}
    schedule = [c for c in exp["cq"] if c["topic"] == "SCHEDULE_TOPIC_XXXX"]
    now = min(c["tagsCode"] for c in schedule if c["queueId"] == 5) + 1  # level 6 has become due
    result = run_cli(capsys, "inspect", "delay", store("delay-partial"), "--json", "--now", now)
    assert result.code == 0
    levels = result.json_lines()
    assert [lv["level"] for lv in levels] == list(range(1, 19))
    for lv in levels:
        units = [c for c in schedule if c["queueId"] == lv["level"] - 1]
        offset = offsets.get(lv["level"], 0)
        pending_units = units[offset:]
        assert lv["offset"] == offset
        assert lv["maxOffset"] == len(units)
        assert lv["pending"] == len(pending_units)
        # Deliver times further ahead than now + delay count as due now (correctDeliverTimestamp).
        assert lv["dueNow"] == sum(1 for c in pending_units
                                   if c["tagsCode"] <= now or c["tagsCode"] > now + lv["delayMs"])
        assert lv["nextDueTimestamp"] == (pending_units[0]["tagsCode"] if pending_units else None)
    assert levels[5]["dueNow"] >= 1 and levels[0]["pending"] == 0


def test_delay_levels_from_option_and_broker_config(capsys, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("brokerName=b\nmessageDelayLevel=2s 4s\n")
    a = run_cli(capsys, "inspect", "delay", store("delay-partial"), "--json", "--message-delay-level", "2s 4s", "--now", 0)
    b = run_cli(capsys, "inspect", "delay", store("delay-partial"), "--json", "--broker-config", conf, "--now", 0)
    assert a.json_lines() == b.json_lines()
    assert [lv["delayMs"] for lv in a.json_lines()] == [2000, 4000]
    bad = run_cli(capsys, "inspect", "delay", store("delay-partial"), "--message-delay-level", "1x")
    assert bad.code == 2 and "1x" in bad.err


def test_delay_table(capsys):
    result = run_cli(capsys, "inspect", "delay", store("delay-partial"), "--now", "2000-01-01T00:00:00Z")
    assert result.code == 0
    assert "at 2000-01-01 00:00:00.000Z: 1251 pending, 1251 due now" in result.out
    assert "not in delayOffset.json" in result.out


# -- inspect store ---------------------------------------------------------------------------

def test_store_json_summarises_the_store(capsys, real_sample):
    name, path, expected = real_sample
    meta = expected["meta"][0]
    result = run_cli(capsys, "inspect", "store", path, "--json")
    assert result.code == 0
    [info] = result.json_lines()
    assert info["commitLogFiles"] == [{"file": f["name"], "size": f["size"]} for f in meta["commitlogFiles"]]
    assert (info["minPhysicalOffset"], info["maxPhysicalOffset"]) == (meta["minPhyOffset"], meta["maxPhyOffset"])
    assert info["queues"] == [{"topic": q["topic"], "queueId": q["queueId"], "minOffset": q["minOffset"],
                               "maxOffset": q["maxOffset"], "maxPhysicalOffset": q["maxPhysicOffset"]}
                              for q in sorted(expected["queue"], key=lambda q: (q["topic"], q["queueId"]))
                              # the broker also lists queues it only knows in memory (never written)
                              if (path / "consumequeue" / q["topic"] / str(q["queueId"])).is_dir()]
    assert info["checkpoint"] == {k: meta["checkpoint"][k]
                                  for k in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp")}
    assert info["abortPresent"] is False and info["lockHolderPid"] is None
    delay = expected.get("delayOffsets")
    if (path.parent / "store" / "config" / "delayOffset.json").exists():
        assert info["delayOffsets"] == delay[0]["loadedTable"]
    else:
        assert info["delayOffsets"] is None


def test_store_shows_who_holds_the_lock(capsys, store_copy):
    path = store_copy("retry")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from rmqdelay.store.lock import BrokerLock
        with BrokerLock({str(path)!r}):
            print("locked", flush=True)
            sys.stdin.read()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        (path / "abort").touch()
        result = run_cli(capsys, "inspect", "store", path)
        assert f"held by process {holder.pid}" in result.out
        assert "abort: present" in result.out
        [info] = run_cli(capsys, "inspect", "store", path, "--json").json_lines()
        assert info["lockHolderPid"] == holder.pid and info["abortPresent"] is True
    finally:
        holder.stdin.close()
        holder.wait(timeout=10)


def test_store_table(capsys):
    result = run_cli(capsys, "inspect", "store", store("delay-partial"))
    assert result.code == 0
    for text in ("lock: free", "abort: absent", "00000000000002097152", "SCHEDULE_TOPIC_XXXX",
                 "delay offsets (config/delayOffset.json, level:offset): 1:83  2:83  3:83",
                 "physical offsets [0, 2231268)"):
        assert text in result.out


# -- the console script itself ---------------------------------------------------------------

def test_console_script_pipes_ndjson_without_progress_bars():
    proc = subprocess.run([CONSOLE_SCRIPT, "inspect", "commitlog", str(store("retry")), "--json", "--limit", "2"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ, COLUMNS="80"))
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert len(proc.stdout.splitlines()) == 2


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", ["delay-partial", "timer-partial"])
def test_store_screen_reads_in_words_and_keeps_why(capsys, monkeypatch, sample_store, name, width):
    """No field names or byte counts on the screen, sizes and dates as people read them, and
    the retention table keeps the column an operator acts on (why) at 80 columns."""
    import re

    from rmqdelay.commands import common

    monkeypatch.setattr(common.console.made(), "width", width)
    result = run_cli(capsys, "inspect", "store", sample_store(name), "--now", "2100-01-01T00:00:00Z")
    assert result.code == 0, result.err
    screen = result.out
    assert max(len(line.rstrip()) for line in screen.splitlines()) <= width
    checkpoint = " ".join(screen[screen.index("checkpoint:"):screen.index("layout:")].split())
    for field in ("physicMsgTimestamp", "logicsMsgTimestamp", "indexMsgTimestamp", "masterFlushedOffset",
                  "confirmPhyOffset"):
        assert field not in checkpoint
    assert "(commit log)" in checkpoint and "(consume queues)" in checkpoint
    assert not re.search(r"\d{4,} bytes", screen)  # sizes in KiB/MiB, not byte counts
    assert "of 256 KiB" in screen and "max physical offset" in screen and "max physic offset" not in screen
    if name == "timer-partial":
        assert "wheel 1209600 slots (36.9 MiB)" in screen and "timer log 4 file(s) of 16 KiB" in screen
    header = next(line for line in screen.splitlines() if line.lstrip().startswith("file ") and "┃" in line)
    assert "why" in header and "deleted" in header
    rows = [line for line in screen.splitlines() if re.match(r"^ \d{20} │", line)]
    assert rows and all(re.search(r"\d\d:\d\d:\d\dZ", r) and not re.search(r"\.\d{3}Z", r) for r in rows)
    assert "the current file" in rows[-1] and "age (deleteWhen)" in rows[0]
    assert "not shown at this width: why" not in screen
