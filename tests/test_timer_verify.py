"""`inspect timer --verify`: every fault found in a corrupted copy of a real 5.3.3 store, named
by file and byte, exit 1; nothing but advisory metrics notes on the clean stores. And bad input
in the timer files anywhere else: one line, exit 2, no traceback, the store unchanged."""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import load_expected
from rmqdelay.formats import propcrc
from rmqdelay.formats.commitlog import Message, encode_message, message_size
from rmqdelay.formats.consumequeue import CqUnit, build_unit
from rmqdelay.formats.properties import parse_properties
from test_bad_input import snapshot

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

PARTIAL = load_expected("timer-partial")
READ = PARTIAL["timercheck"][0]["raw"]["lastReadTimeMs"]
NOW = READ + 1000
UNITS = PARTIAL["timerlog"]
SLOTS = PARTIAL["timerwheel"]


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def verify(capsys, store: Path, now: int = NOW):
    result = run_cli(capsys, "inspect", "timer", store, "--verify", "--json", "--now", str(now))
    return result.code, result.problems(), result


def faults(lines: list[dict]) -> list[dict]:
    return [p for p in lines if not p["advisory"]]


def unit_file(store: Path, unit: dict) -> Path:
    return store / "timerlog" / unit["file"]


def a_pending_unit(**want) -> dict:
    return next(u for u in UNITS if u["delayedTimeMs"] >= READ and all(u[k] == v for k, v in want.items()))


@pytest.mark.parametrize("name", ["timer-fresh", "timer-partial"])
def test_clean_stores_have_no_faults(capsys, sample_store, name):
    expected = load_expected(name)
    now = expected["timercheck"][0]["raw"]["lastReadTimeMs"] + 1000
    code, lines, result = verify(capsys, sample_store(name), now)
    assert code == 0, result.out
    assert faults(lines) == []
    drift = {p["expected"].split()[3] for p in lines if p["kind"] == "metricsDrift"}
    # verify.json: the real checks warned about exactly these two counts of timer-partial.
    assert drift == ({"TimerTopic", "TopicTest"} if name == "timer-partial" else set())
    text = run_cli(capsys, "inspect", "timer", sample_store(name), "--verify", "--now", str(now))
    assert text.code == 0 and "no problems" in text.out


def only(lines: list[dict], kind: str) -> list[dict]:
    found = [p for p in faults(lines) if p["kind"] == kind]
    assert found, [p["kind"] for p in lines]
    return found


def test_units_below_the_commit_log_after_retention(capsys, store_copy):
    store = store_copy("timer-partial")
    (store / "commitlog" / "00000000000000000000").unlink()  # retention deleted the oldest file
    code, lines, _ = verify(capsys, store)
    below = only(lines, "unitBelowLog")
    assert code == 1
    want = {u["offset"] for u in UNITS if u["offsetPy"] < 262144}
    assert {p["timerLogOffset"] for p in below} == want
    p = below[0]
    unit = next(u for u in UNITS if u["offset"] == p["timerLogOffset"])
    assert (p["file"], p["offset"]) == (str(unit_file(store, unit)), unit["filePos"])


def test_units_past_the_end_of_a_truncated_commit_log(capsys, store_copy):
    store = store_copy("timer-partial")
    last = max(UNITS, key=lambda u: u["offsetPy"])
    cut = last["offsetPy"]
    path = store / "commitlog" / f"{cut - cut % 262144:020d}"
    size = path.stat().st_size
    patch(path, cut % 262144, bytes(size - cut % 262144))  # the broker truncated the log here
    code, lines, _ = verify(capsys, store)
    past = only(lines, "unitPastLog")
    assert {p["timerLogOffset"] for p in past} == {u["offset"] for u in UNITS if u["offsetPy"] >= cut}
    assert code == 1


def test_a_unit_pointing_at_a_message_that_is_not_a_timer_message(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = a_pending_unit(magicRoll=False, magicDelete=False)
    plain = next(m for m in PARTIAL["msg"] if m["origin"] == "plain")
    patch(unit_file(store, unit), unit["filePos"] + 28, struct.pack(">qi", plain["commitLogOffset"], plain["storeSize"]))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "unitNotTimer")
    assert (p["file"], p["offset"], p["timerLogOffset"], p["physicalOffset"]) == \
        (str(unit_file(store, unit)), unit["filePos"], unit["offset"], plain["commitLogOffset"])
    assert code == 1


def test_a_unit_pointing_between_records(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = a_pending_unit(magicDelete=False)
    patch(unit_file(store, unit), unit["filePos"] + 28, struct.pack(">q", unit["offsetPy"] + 4))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "unitNoMessage")
    assert p["timerLogOffset"] == unit["offset"] and code == 1


def test_unit_fields_that_disagree_with_their_message(capsys, store_copy):
    store = store_copy("timer-partial")
    units = [u for u in UNITS if u["delayedTimeMs"] < READ and not u["magicRoll"] and not u["magicDelete"]]
    a, b, c = units[0], units[1], units[2]
    patch(unit_file(store, a), a["filePos"] + 36, struct.pack(">i", a["sizePy"] + 1))  # sizePy
    patch(unit_file(store, b), b["filePos"] + 40, struct.pack(">i", b["hashCodeOfRealTopic"] ^ 1))
    patch(unit_file(store, c), c["filePos"] + 12, struct.pack(">i", c["magic"] | 4))  # marked as a delete
    code, lines, _ = verify(capsys, store)
    assert [p["timerLogOffset"] for p in only(lines, "unitSize")] == [a["offset"]]
    assert [p["timerLogOffset"] for p in only(lines, "unitTopicHash")] == [b["offset"]]
    assert [p["timerLogOffset"] for p in only(lines, "unitDeleteFlag")] == [c["offset"]]
    assert code == 1


def wheel_pos(slot: dict, field: int) -> int:
    return slot["index"] * 32 + field


def test_a_slot_pointing_past_the_end_of_the_timer_log(capsys, store_copy):
    store = store_copy("timer-partial")
    slot = next(s for s in SLOTS if s["timeMs"] >= READ)
    end = PARTIAL["timerlogEnd"][0]["offset"]
    patch(store / "timerwheel", wheel_pos(slot, 16), struct.pack(">q", end + 52 * 10))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "slotOutsideLog")
    assert (p["file"], p["offset"]) == (str(store / "timerwheel"), wheel_pos(slot, 16)) and code == 1
    # The units of that slot now belong to no readable slot: the dequeue never reaches them.
    assert {q["timerLogOffset"] for q in only(lines, "unitNotInChain")} == \
        {u["offset"] for u in UNITS if u["delayedTimeMs"] == slot["timeMs"]}


def test_a_broken_prev_pos_chain(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = next(u for u in UNITS if u["prevPos"] != -1 and u["delayedTimeMs"] >= READ)
    patch(unit_file(store, unit), unit["filePos"] + 4, struct.pack(">q", -1))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "chainBroken")
    assert (p["timerLogOffset"], p["file"], p["offset"]) == (unit["offset"], str(unit_file(store, unit)),
                                                              unit["filePos"])
    assert str(unit["prevPos"]) in p["expected"] and code == 1


def test_a_slot_count_that_disagrees_with_its_chain(capsys, store_copy):
    store = store_copy("timer-partial")
    slot = max(SLOTS, key=lambda s: s["num"])
    patch(store / "timerwheel", wheel_pos(slot, 24), struct.pack(">i", slot["num"] + 3))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "slotCount")
    assert p["offset"] == wheel_pos(slot, 24) and f"num {slot['chainNetNum']}" in p["expected"] and code == 1


def test_slot_ends_that_are_not_its_chain_ends(capsys, store_copy):
    store = store_copy("timer-partial")
    slot = next(s for s in SLOTS if s["chainLength"] > 2)
    second = next(u for u in UNITS if u["delayedTimeMs"] == slot["timeMs"] and u["offset"] != slot["firstPos"])
    patch(store / "timerwheel", wheel_pos(slot, 8), struct.pack(">q", second["offset"]))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "slotEnds")
    assert p["offset"] == wheel_pos(slot, 8) and code == 1


@pytest.mark.parametrize("field, value, byte", [
    ("masterTimerQueueOffset", 5000, 24),  # past the queue (as after a commit log truncation)
    ("lastTimerLogFlushPos", 10_000_000, 8),  # past the timer log
    ("lastReadTimeMs", NOW + 3_600_000, 0),  # ahead of the clock
])
def test_a_checkpoint_beyond_the_data(capsys, store_copy, field, value, byte):
    store = store_copy("timer-partial")
    patch(store / "config" / "timercheck", byte, struct.pack(">q", value))
    code, lines, _ = verify(capsys, store)
    found = only(lines, "checkpointBeyond")
    assert [(p["file"], p["offset"]) for p in found] == [(str(store / "config" / "timercheck"), byte)]
    assert field in found[0]["expected"] and code == 1


def test_metrics_drift_is_reported_as_advisory(capsys, store_copy):
    store = store_copy("timer-fresh")
    expected = load_expected("timer-fresh")
    now = expected["timercheck"][0]["raw"]["lastReadTimeMs"] + 1000
    path = store / "config" / "timermetrics"
    path.write_text(path.read_text().replace('"OrderTopic":{"count":110', '"OrderTopic":{"count":-7'))
    code, lines, result = verify(capsys, store, now)
    (p,) = [p for p in lines if p["kind"] == "metricsDrift"]
    text = path.read_text()
    assert p["advisory"] and p["file"] == str(path) and text[p["offset"]:].startswith("-7")
    assert "-117" in p["expected"] and "OrderTopic" in p["expected"]
    assert code == 0  # 5.3.3's own counts drift: a note, not a failure
    shown = run_cli(capsys, "inspect", "timer", store, "--verify", "--now", str(now))
    assert "metricsDrift" in shown.out and "advisory" in shown.out and shown.code == 0


def test_a_unit_with_a_bad_magic_stops_the_timer_log(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = UNITS[400]
    patch(unit_file(store, unit), unit["filePos"] + 12, struct.pack(">i", 0x40))
    code, lines, _ = verify(capsys, store)
    first = only(lines, "timerLogFraming")[0]
    assert (first["file"], first["offset"]) == (str(unit_file(store, unit)), unit["filePos"] + 12) and code == 1


def test_a_full_timer_log_file_without_its_blank(capsys, store_copy):
    store = store_copy("timer-partial")
    blank = PARTIAL["timerlogBlank"][0]
    patch(store / "timerlog" / blank["file"], blank["filePos"], bytes(16))
    code, lines, _ = verify(capsys, store)
    (p,) = only(lines, "timerLogNoBlank")
    assert (p["file"], p["offset"]) == (str(store / "timerlog" / blank["file"]), blank["filePos"]) and code == 1


def test_verify_reads_nothing_but_writes_nothing(capsys, store_copy):
    store = store_copy("timer-partial")
    before = snapshot(store)
    verify(capsys, store)
    assert snapshot(store) == before


# -- bad input: one line, exit 2, nothing changed ---------------------------------------------------
def wheel_truncated(store: Path):
    with open(store / "timerwheel", "r+b") as fh:
        fh.truncate(1000)
    return store / "timerwheel", "38707200"


def unit_bad_size(store: Path):
    unit = UNITS[20]
    patch(unit_file(store, unit), unit["filePos"], struct.pack(">i", 51))
    return unit_file(store, unit), f"at byte {unit['filePos']}"


def garbage_after_the_units(store: Path):
    end = PARTIAL["timerlogEnd"][0]
    patch(store / "timerlog" / end["file"], end["filePos"] + 100, b"\x07")
    return store / "timerlog" / end["file"], f"at byte {end['filePos'] + 100}"


def timer_log_file_truncated(store: Path):
    path = store / "timerlog" / "00000000000000016384"
    with open(path, "r+b") as fh:
        fh.truncate(9000)
    return path, "at byte 9000"


def timercheck_too_short(store: Path):
    path = store / "config" / "timercheck"
    path.write_bytes(b"\x00" * 20)
    return path, "56 bytes"


def timermetrics_unreadable(store: Path):
    for name in ("timermetrics", "timermetrics.bak"):
        (store / "config" / name).write_text('{"dataVersion":{"counter":1},"timingCount":{"T":{"count":"x"}}}')
    return store / "config" / "timermetrics", "integer"


@pytest.mark.parametrize("corrupt", [wheel_truncated, unit_bad_size, garbage_after_the_units,
                                     timer_log_file_truncated, timercheck_too_short, timermetrics_unreadable])
def test_bad_timer_files_are_one_line_exit_2(capsys, store_copy, corrupt):
    store = store_copy("timer-partial")
    path, detail = corrupt(store)
    before = snapshot(store)
    commands = [["inspect", "timer", store], ["inspect", "timer", store, "--json"]]
    if corrupt not in (timercheck_too_short, timermetrics_unreadable):
        commands.append(["inspect", "timer", store, "--units"])  # the listing reads the log and the wheel only
    for args in commands:
        result = run_cli(capsys, *args)
        assert result.code == 2, (args, result.out[-500:], result.err)
        lines = result.err.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and detail in lines[0], result.err
        assert "Traceback" not in result.err
    assert snapshot(store) == before


def test_metrics_fall_back_to_the_bak_file_like_the_broker(capsys, store_copy):
    store = store_copy("timer-partial")
    (store / "config" / "timermetrics").write_text("{not json")
    got = json.loads(run_cli(capsys, "inspect", "timer", store, "--json", "--now", str(NOW)).out)
    bak = json.loads(PARTIAL["timermetrics"][0]["bakFileText"])["timingCount"]
    assert {m["topic"]: m["count"] for m in got["metrics"]} == {t: v["count"] for t, v in bak.items()}


# -- the __CRC32# property in `inspect commitlog --verify` ------------------------------------------
def crc_store(root: Path, count: int = 3) -> tuple[Path, list[int]]:
    """A store of sealed records (enabledAppendPropCRC) built with the formats' own encoders."""
    log = bytearray(4096)
    units = b""
    positions = []
    pos = 0
    for i in range(count):
        body = f"crc body {i}".encode()
        props = propcrc.reserved_properties(f"UNIQ_KEY\x01K{i}\x02WAIT\x01true")
        size = message_size(0, len(body), len(b"TopicTest"), len(props.encode()))
        msg = Message(size, -626843481, zlib.crc32(body) & 0x7FFFFFFF, 0, 0, i, pos, 0, 1795450287000 + i,
                      bytes([10, 0, 0, 1]), 5000, 1795450287100 + i, bytes([10, 10, 0, 5]), 10911, 0, 0, body,
                      "TopicTest", props, parse_properties(props))
        record = propcrc.seal_record(encode_message(msg))
        log[pos:pos + len(record)] = record
        units += build_unit(CqUnit(pos, len(record), 0))
        positions.append(pos)
        pos += len(record)
    (root / "commitlog").mkdir(parents=True)
    (root / "commitlog" / f"{0:020d}").write_bytes(bytes(log))
    (root / "consumequeue" / "TopicTest" / "0").mkdir(parents=True)
    (root / "consumequeue" / "TopicTest" / "0" / f"{0:020d}").write_bytes(units + bytes(200 - len(units)))
    return root, positions


def test_records_sealed_with_the_crc_property_verify_clean_and_a_changed_byte_is_found(capsys, tmp_path):
    store, positions = crc_store(tmp_path / "crc")
    result = run_cli(capsys, "inspect", "commitlog", store, "--verify", "--json")
    assert result.code == 0 and result.problems() == [], result.out
    features = json.loads(run_cli(capsys, "inspect", "store", store, "--json").out)["features"]
    assert features["propCrc"] and features["version"] == "5.x"
    # A changed store timestamp keeps the body CRC right but not the record's.
    patch(store / "commitlog" / f"{0:020d}", positions[1] + 56, b"\x7f")
    result = run_cli(capsys, "inspect", "commitlog", store, "--verify", "--json")
    (p,) = result.problems()
    record = (store / "commitlog" / f"{0:020d}").read_bytes()[positions[1]:positions[2]]
    assert p["kind"] == "propCrc" and p["offset"] == positions[2] - propcrc.CRC32_RESERVED_LEN
    assert str(propcrc.record_crc(record)) in p["expected"] and result.code == 1


def test_units_read_ahead_of_the_wall_clock_beyond_the_wheels_span_are_no_fault(capsys, store_copy):
    """`run --now` ahead of the wall clock turns the units of the slots it read ahead into
    delete units (the checkpoint stays at the wall clock). One due more than the wheel's 14
    days after the checkpoint is in no slot the broker reads from there, but the broker
    would put nothing for it anyway: not a unit lost from its chain."""
    import time

    from rmqdelay.store.writer import NewMessage, StoreWriter

    store = store_copy("timer-fresh")
    wall = int(time.time() * 1000)
    due = wall // 1000 * 1000 + 15 * 86_400_000 + 500
    with StoreWriter(store) as w:
        w.put(NewMessage("rmq_sys_wheel_timer", 0, b"far", {
            "TIMER_DELIVER_MS": str(due), "UNIQ_KEY": "0A0A0008000000000000000000000001",
            "TIMER_OUT_MS": str(due // 1000 * 1000), "REAL_TOPIC": "TimerTopic", "REAL_QID": "0"}))
    for now in (due - 86_400_000, 4_102_444_800_000):  # enqueued a day before, then read
        result = run_cli(capsys, "run", store, "--until-empty", "--now", str(now))
        assert result.code == 0, result.err
    code, lines, result = verify(capsys, store, int(time.time() * 1000))
    assert faults(lines) == [] and code == 0, result.out


def test_verify_of_a_damaged_timer_store_lists_every_problem_not_the_first(store_copy, capsys):
    path = store_copy("timer-partial")
    os.truncate(path / "timerwheel", 1000)  # a wheel the broker refuses
    first = sorted((path / "timerlog").iterdir())[0]
    data = bytearray(first.read_bytes())
    data[0:4] = b"\xff\xff\xff\xff"  # the first unit's size
    first.write_bytes(bytes(data))
    result = run_cli(capsys, "inspect", "timer", path, "--verify", "--now", "1795450329969", "--json")
    assert result.code == 1, result.err
    *problems, summary = result.json_lines()
    kinds = {p["kind"] for p in problems}
    assert {"wheelFile", "timerLogFraming"} <= kinds and len(kinds) >= 3, kinds
    assert summary["problems"] == sum(1 for p in problems if not p["advisory"])
    screen = run_cli(capsys, "inspect", "timer", path, "--verify", "--now", "1795450329969")
    lines = screen.out.splitlines()
    assert screen.code == 1 and f"{summary['problems']} problem(s)" in lines[0]
    assert lines[1].startswith("wheelFile: ") and lines[-1].startswith("... and ")
