"""A store says what it is: `inspect store` names 4.x or 5.x and the 5.x features found; store
types rmqdelay does not read are refused in one line; `inspect message` shows a timer
message's stage and times."""

from __future__ import annotations

import json

import pytest
from clirun import run_cli
from conftest import REAL_BROKER_SAMPLES, load_expected

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)


@pytest.mark.parametrize("name", REAL_BROKER_SAMPLES)
def test_4x_stores_say_4x_and_keep_their_screen(capsys, sample_store, name):
    result = run_cli(capsys, "inspect", "store", sample_store(name), "--json")
    info = json.loads(result.out)
    assert info["features"]["version"] == "4.x" and info["features"]["signs"] == []
    assert info["features"]["timer"] is None and "confirmPhyOffset" not in info["checkpoint"]
    text = run_cli(capsys, "inspect", "store", sample_store(name))
    assert "kind: 4.x store" in text.out and "consume queues" in text.out


def test_5x_stores_name_their_features(capsys, timer_sample):
    name, path, expected = timer_sample
    info = json.loads(run_cli(capsys, "inspect", "store", path, "--json").out)
    f = info["features"]
    assert f["version"] == "5.x"
    assert f["timerFiles"] == ["timerlog", "timerwheel", "timercheck", "timermetrics"]
    assert f["propCrc"] is False and f["propCrcSampled"] > 0  # enabledAppendPropCRC=false in the fixtures
    retry = [q["topic"] for q in expected["queue"] if len(q["topic"]) > 127]
    assert f["v2Topics"] == retry
    config = expected["meta"][0]["timerConfig"]
    assert f["timer"]["timerPrecisionMs"] == config["timerPrecisionMs"]
    assert f["timer"]["wheelFileSize"] == config["wheelFileSize"] and f["timer"]["wheelSlots"] == config["wheelSlots"]
    assert f["timer"]["mappedFileSizeTimerLog"] == expected["meta"][0]["mappedFileSizeTimerLog"]
    cp = expected["meta"][0]["checkpoint"]
    assert info["checkpoint"]["confirmPhyOffset"] == cp["confirmPhyOffset"]
    text = run_cli(capsys, "inspect", "store", path).out
    assert "kind: 5.x store" in text and "timer: precision 1 s" in text


def test_broker_config_settings_win_over_the_files(capsys, sample_store, tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("timerPrecisionMs=500\nmappedFileSizeTimerLog : 16384\n")
    f = json.loads(run_cli(capsys, "inspect", "store", sample_store("timer-fresh"), "--json",
                           "--broker-config", conf).out)["features"]["timer"]
    assert f["timerPrecisionMs"] == 500 and f["sources"]["timerPrecisionMs"] == "brokerConfig"
    assert f["precisionInFiles"] == 1000  # what the wheel's slots were written with


def test_a_rocksdb_consume_queue_that_cannot_be_read_is_refused_in_one_line(capsys, store_copy):
    store = store_copy("delay-fresh")
    cq = store / "consumequeue"
    for name in ("CURRENT", "IDENTITY", "LOCK", "MANIFEST-000005", "000004.sst"):
        (cq / name).write_bytes(b"x")
    for args in (["inspect", "store", store], ["inspect", "delay", store], ["offsets", "show", store]):
        result = run_cli(capsys, *args)
        assert result.code == 2 and "RocksDB" in result.err and len(result.err.strip().splitlines()) == 1, args


def test_a_store_with_batch_consume_queues_is_refused_in_one_line(capsys, store_copy):
    store = store_copy("delay-fresh")
    (store / "batchconsumequeue" / "BatchTopic" / "0").mkdir(parents=True)
    result = run_cli(capsys, "inspect", "store", store)
    assert result.code == 2 and "batch consume queues" in result.err and "BatchTopic" in result.err
    assert len(result.err.strip().splitlines()) == 1


@pytest.mark.parametrize("origin, stage", [
    ("timer-parked (HookUtils)", "parked"),
    ("timer-roll (TimerMessageStore re-put into rmq_sys_wheel_timer)", "rolled"),
    ("timer-delivered", "delivered"),
    ("timer-delivered-never-enqueued (TIMER_ENQUEUE_MS=Long.MAX_VALUE)", "deliveredNeverEnqueued"),
    ("timer-parked-cancel (recall)", "cancel"),
])
def test_inspect_message_shows_a_timer_message_s_stage_and_times(capsys, sample_store, origin, stage):
    expected = load_expected("timer-partial")
    msg = next(m for m in expected["msg"] if m["origin"] == origin)
    path = sample_store("timer-partial")
    got = json.loads(run_cli(capsys, "inspect", "message", path, str(msg["commitLogOffset"]), "--json").out)
    timer = got["timer"]
    props = msg["properties"]
    assert timer["stage"] == stage
    assert timer["outMs"] == int(props["TIMER_OUT_MS"])
    assert timer["dequeueMs"] == (int(props["TIMER_DEQUEUE_MS"]) if "TIMER_DEQUEUE_MS" in props else None)
    assert timer["neverEnqueued"] == (stage == "deliveredNeverEnqueued")
    if stage in ("parked", "rolled", "cancel"):
        units = [u["offset"] for u in expected["timerlog"] if u["offsetPy"] == msg["commitLogOffset"]]
        assert [u["offset"] for u in timer["units"]] == units
    text = run_cli(capsys, "inspect", "message", path, str(msg["commitLogOffset"])).out
    assert "timer stage" in text and stage in text and "TIMER_OUT_MS (due, slot)" in text


def test_plain_messages_have_no_timer_section(capsys, sample_store):
    expected = load_expected("timer-partial")
    msg = next(m for m in expected["msg"] if m["origin"] == "plain")
    got = json.loads(run_cli(capsys, "inspect", "message", sample_store("timer-partial"),
                             str(msg["commitLogOffset"]), "--json").out)
    assert "timer" not in got
