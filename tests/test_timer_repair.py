"""`rmqdelay timer repair`: for every fault `inspect timer --verify` finds, a corrupted copy of a
real 5.3.3 store is shown in a dry run (no byte changed), then restored by --execute to one
that --verify passes; a second repair finds nothing. Clean stores stay byte for byte. Units
are dropped only when they point outside the commit log (each reported with what it pointed
at); a unit whose chain or fields are wrong is kept and mended from its message."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import load_expected
from test_bad_input import snapshot

from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

PARTIAL = load_expected("timer-partial")
READ = PARTIAL["timercheck"][0]["raw"]["lastReadTimeMs"]
NOW = READ + 1000
UNITS = PARTIAL["timerlog"]
SLOTS = PARTIAL["timerwheel"]
END = PARTIAL["timerlogEnd"][0]
CHECK = PARTIAL["timercheck"][0]["raw"]
TIMER_FILES = ("timerwheel", "config/timercheck", "config/timermetrics")


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def unit_file(store: Path, unit: dict) -> Path:
    return store / "timerlog" / unit["file"]


def wheel_pos(slot: dict, field: int) -> int:
    return slot["index"] * 32 + field


def faults(capsys, store: Path, now: int = NOW) -> list[dict]:
    result = run_cli(capsys, "inspect", "timer", store, "--verify", "--json", "--now", str(now))
    found = [p for p in result.problems() if not p["advisory"]]
    assert result.code == (1 if found else 0), result.out[-2000:]
    return found


def repair(capsys, store: Path, *extra: str, now: int = NOW) -> tuple[int, dict]:
    result = run_cli(capsys, "timer", "repair", store, "--json", "--now", str(now), *extra)
    assert result.err == "" or "warning" in result.err, result.err
    return result.code, json.loads(result.out)


def repaired(capsys, store: Path, kind: str, now: int = NOW) -> tuple[list[dict], dict, dict]:
    """The fault is there; the dry run shows a change and writes nothing; --execute leaves a
    store --verify passes and a second repair with nothing to do. Returns (faults before,
    the dry run, the executed plan)."""
    before = faults(capsys, store, now)
    assert kind in {p["kind"] for p in before}, [p["kind"] for p in before]
    files = snapshot(store)
    code, dry = repair(capsys, store, now=now)
    assert code == 1 and dry["changed"] and not dry["executed"] and dry["changes"]
    assert snapshot(store) == files  # the dry run changes no byte
    code, done = repair(capsys, store, "--execute", now=now)
    assert code == 0 and done["executed"] and done["leftAlone"] == [], done
    assert {k: v for k, v in done.items() if k not in ("executed", "changes")} == \
        {k: v for k, v in dry.items() if k not in ("executed", "changes")}
    assert faults(capsys, store, now) == []
    assert not (store / ".timer-repair").exists()
    code, again = repair(capsys, store, now=now)
    assert code == 0 and not again["changed"], again
    return before, dry, done


def timer_bytes(store: Path) -> dict[str, bytes]:
    files = {f"timerlog/{p.name}": p.read_bytes() for p in sorted((store / "timerlog").iterdir())}
    return files | {name: (store / name).read_bytes() for name in TIMER_FILES}


# -- clean stores ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["timer-fresh", "timer-partial"])
def test_a_clean_store_is_left_byte_for_byte_and_says_so(capsys, store_copy, name):
    store = store_copy(name)
    now = load_expected(name)["timercheck"][0]["raw"]["lastReadTimeMs"] + 1000
    files = snapshot(store)
    for args in (["--json"], ["--execute", "--json"]):
        result = run_cli(capsys, "timer", "repair", store, "--now", str(now), *args)
        plan = json.loads(result.out)
        assert result.code == 0 and not plan["changed"] and plan["changes"] == [] and plan["dropped"] == []
        assert snapshot(store) == files
    text = run_cli(capsys, "timer", "repair", store, "--now", str(now), "--execute")
    assert text.code == 0 and "nothing to repair" in text.out and snapshot(store) == files
    # timer-partial's counts drift as 5.3.3's do: said, not rewritten.
    assert ("drifts" in text.out) == (name == "timer-partial")


def test_metrics_drift_alone_is_rewritten_only_when_asked(capsys, store_copy):
    store = store_copy("timer-partial")
    metrics = store / "config" / "timermetrics"
    old = metrics.read_bytes()
    code, plan = repair(capsys, store, "--execute", "--metrics")
    assert code == 0 and plan["filesWritten"] == ["config/timermetrics"]
    text = json.loads(metrics.read_text())
    assert text["timingCount"]["TimerTopic"]["count"] == 480 and text["timingCount"]["TopicTest"]["count"] == 227
    assert list(text["timingCount"]) == ["TopicTest", "OrderTopic", "TimerTopic"]  # the file's order kept
    assert text["dataVersion"]["counter"] == json.loads(old)["dataVersion"]["counter"] + 1
    assert (store / "config" / "timermetrics.bak").read_bytes() == old
    assert [p for p in run_cli(capsys, "inspect", "timer", store, "--verify", "--json", "--now", str(NOW))
            .problems() if p["kind"] == "metricsDrift"] == []


# -- units against the commit log ------------------------------------------------------------------
def test_units_below_the_commit_log_after_retention_are_dropped_and_named(capsys, store_copy):
    store = store_copy("timer-partial")
    (store / "commitlog" / "00000000000000000000").unlink()  # retention deleted the oldest file
    _, dry, done = repaired(capsys, store, "unitBelowLog")
    want = {u["offset"] for u in UNITS if u["offsetPy"] < 262144}
    assert {d["offset"] for d in done["dropped"]} == want and {d["kind"] for d in done["dropped"]} == \
        {"unitBelowLog"}
    d = done["dropped"][0]
    unit = next(u for u in UNITS if u["offset"] == d["offset"])
    assert (d["offsetPy"], d["sizePy"]) == (unit["offsetPy"], unit["sizePy"]) and "below its first offset" in \
        d["pointedAt"] and str(unit["offsetPy"]) in d["pointedAt"]
    assert done["kept"] == len(UNITS) - len(want) and done["moved"] > 0
    assert all(d["pending"] == (d["slotTimeMs"] >= READ) for d in done["dropped"])
    assert any(d["pending"] for d in done["dropped"]) and not all(d["pending"] for d in done["dropped"])
    # The old timer log is kept outside timerlog/ (the broker would load a .bak there).
    assert sorted(p.name for p in (store / "timerlog.bak").iterdir()) == sorted({u["file"] for u in UNITS})
    assert all(p.name.isdigit() for p in (store / "timerlog").iterdir())


def test_units_past_the_end_of_a_truncated_commit_log_are_dropped(capsys, store_copy):
    store = store_copy("timer-partial")
    last = max(UNITS, key=lambda u: u["offsetPy"])
    cut = last["offsetPy"]
    path = store / "commitlog" / f"{cut - cut % 262144:020d}"
    patch(path, cut % 262144, bytes(path.stat().st_size - cut % 262144))  # truncated here
    _, _, done = repaired(capsys, store, "unitPastLog")
    assert {d["offset"] for d in done["dropped"]} == {u["offset"] for u in UNITS if u["offsetPy"] >= cut}
    assert all("past its end" in d["pointedAt"] for d in done["dropped"])


def test_a_unit_pointing_at_another_topic_is_dropped_and_says_which(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = next(u for u in UNITS if u["delayedTimeMs"] >= READ and not u["magicRoll"] and not u["magicDelete"])
    plain = next(m for m in PARTIAL["msg"] if m["origin"] == "plain")
    patch(unit_file(store, unit), unit["filePos"] + 28, struct.pack(">qi", plain["commitLogOffset"], plain["storeSize"]))
    _, _, done = repaired(capsys, store, "unitNotTimer")
    (d,) = done["dropped"]
    assert d["offset"] == unit["offset"] and d["kind"] == "unitNotTimer"
    assert f"topic {plain['topic']}" in d["pointedAt"] and str(plain["commitLogOffset"]) in d["pointedAt"]


def test_a_unit_pointing_between_records_is_dropped(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = next(u for u in UNITS if u["delayedTimeMs"] >= READ and not u["magicDelete"])
    patch(unit_file(store, unit), unit["filePos"] + 28, struct.pack(">q", unit["offsetPy"] + 4))
    _, _, done = repaired(capsys, store, "unitNoMessage")
    assert [(d["offset"], d["kind"]) for d in done["dropped"]] == [(unit["offset"], "unitNoMessage")]


@pytest.mark.parametrize("kind, field, pos, value", [
    ("unitSize", "sizePy", 36, lambda u: struct.pack(">i", u["sizePy"] + 1)),
    ("unitTopicHash", "hashCodeOfRealTopic", 40, lambda u: struct.pack(">i", u["hashCodeOfRealTopic"] ^ 1)),
    ("unitDeleteFlag", "magic", 12, lambda u: struct.pack(">i", u["magic"] | 4)),
    ("unitTime", "delayedTime", 24, lambda u: struct.pack(">i", u["delayedTime"] + 7000)),
])
def test_unit_fields_that_disagree_with_their_message_are_set_from_it(capsys, store_copy, kind, field, pos, value):
    store = store_copy("timer-partial")
    unit = next(u for u in UNITS if u["delayedTimeMs"] >= READ and not u["magicRoll"] and not u["magicDelete"]
                and u["prevPos"] != -1)
    original = timer_bytes(store)
    patch(unit_file(store, unit), unit["filePos"] + pos, value(unit))
    _, _, done = repaired(capsys, store, kind)
    assert done["dropped"] == [] and done["kept"] == len(UNITS)
    assert [(f["offset"], f["field"], f["after"]) for f in done["fixed"]] == [(unit["offset"], field, unit[field])]
    # The unit, its chain and its slot are as the broker wrote them.
    now = timer_bytes(store)
    assert {k: v for k, v in now.items() if k.startswith("timerlog/")} == \
        {k: v for k, v in original.items() if k.startswith("timerlog/")}
    assert now["timerwheel"] == original["timerwheel"]


# -- chains and slots ------------------------------------------------------------------------------
def test_a_broken_chain_is_relinked_not_dropped(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    unit = next(u for u in UNITS if u["prevPos"] != -1 and u["delayedTimeMs"] >= READ)
    patch(unit_file(store, unit), unit["filePos"] + 4, struct.pack(">q", -1))
    _, dry, done = repaired(capsys, store, "chainBroken")
    assert done["dropped"] == [] and done["relinked"] == 1 and done["kept"] == len(UNITS)
    assert timer_bytes(store)[f"timerlog/{unit['file']}"] == original[f"timerlog/{unit['file']}"]


@pytest.mark.parametrize("kind, field, value", [
    ("slotCount", 24, lambda s: struct.pack(">i", s["num"] + 3)),
    ("slotEnds", 8, lambda s: struct.pack(">q", next(u["offset"] for u in UNITS if u["delayedTimeMs"] == s["timeMs"]
                                                      and u["offset"] != s["firstPos"]))),
    ("slotOutsideLog", 16, lambda s: struct.pack(">q", END["offset"] + 520)),
    ("unitNotInChain", 0, lambda s: bytes(32)),  # a pending slot wiped
])
def test_the_wheel_is_rebuilt_from_the_timer_log(capsys, store_copy, kind, field, value):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    slot = max((s for s in SLOTS if s["timeMs"] >= READ and s["chainLength"] > 2), key=lambda s: s["num"])
    patch(store / "timerwheel", wheel_pos(slot, field), value(slot))
    _, dry, done = repaired(capsys, store, kind)
    assert done["slotsChanged"] == 1 and done["dropped"] == [] and "timerwheel" in done["filesWritten"]
    assert (store / "timerwheel").read_bytes() == original["timerwheel"]
    assert (store / "timerwheel.bak").stat().st_size == 38_707_200
    # Written sparse: the new wheel takes a few pages, not 38.7 MB.
    assert (store / "timerwheel").stat().st_blocks * 512 < 4 * 1024 * 1024


def test_slot_counts_the_broker_never_restores_are_restored(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    for slot in SLOTS:  # every count lost, as a broker that revised the wheel from the log leaves it
        patch(store / "timerwheel", wheel_pos(slot, 24), struct.pack(">i", 0))
    _, _, done = repaired(capsys, store, "slotCount")
    assert done["slotsChanged"] == sum(1 for s in SLOTS if s["num"] != 0)
    assert (store / "timerwheel").read_bytes() == original["timerwheel"]


# -- the timer log's framing -----------------------------------------------------------------------
def test_a_torn_tail_is_cut(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    path = store / "timerlog" / END["file"]
    patch(path, END["filePos"], struct.pack(">iqi", 52, 64492, 1) + b"\x00\x00\x01\xa2\x09")  # half a unit
    _, _, done = repaired(capsys, store, "unitSize")
    assert done["dropped"] == [] and done["kept"] == len(UNITS) and len(done["stray"]) == 1
    assert done["stray"][0]["offset"] == END["filePos"]
    assert timer_bytes(store)[f"timerlog/{END['file']}"] == original[f"timerlog/{END['file']}"]


def test_garbage_at_the_tail_is_cut(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    path = store / "timerlog" / END["file"]
    patch(path, END["filePos"] + 100, b"\x07\x07\x07")
    _, _, done = repaired(capsys, store, "timerLogFraming")
    assert done["kept"] == len(UNITS) and [s["offset"] for s in done["stray"]] == [END["filePos"] + 52]
    assert timer_bytes(store)[f"timerlog/{END['file']}"] == original[f"timerlog/{END['file']}"]


def test_a_unit_with_a_damaged_magic_in_the_middle_is_restored_not_cut(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    unit = UNITS[400]
    patch(unit_file(store, unit), unit["filePos"] + 12, struct.pack(">i", 0x40))
    _, _, done = repaired(capsys, store, "timerLogFraming")
    assert done["dropped"] == [] and done["stray"] == [] and done["kept"] == len(UNITS)
    assert [(f["offset"], f["field"], f["after"]) for f in done["fixed"]] == [(unit["offset"], "magic", unit["magic"])]
    now = timer_bytes(store)
    assert {k: v for k, v in now.items() if k.startswith("timerlog/") or k == "timerwheel"} == \
        {k: v for k, v in original.items() if k.startswith("timerlog/") or k == "timerwheel"}


def test_garbage_in_the_middle_goes_and_the_units_after_it_move_up(capsys, store_copy):
    store = store_copy("timer-partial")
    unit = UNITS[400]
    patch(unit_file(store, unit), unit["filePos"], b"\xde\xad" * 26)
    _, _, done = repaired(capsys, store, "timerLogFraming")
    assert [s["offset"] for s in done["stray"]] == [unit["filePos"]] and done["dropped"] == []
    # The units after it move up, but the last: the unit made for the cut one's message goes
    # before it (see the next test), so it stays where it was.
    assert done["kept"] == len(UNITS) - 1 and done["moved"] == len(UNITS) - 402
    assert (store / "timerlog.bak" / unit["file"]).read_bytes()[unit["filePos"]:unit["filePos"] + 2] == b"\xde\xad"


def test_the_message_of_a_destroyed_unit_gets_a_unit_again_and_is_delivered_once(capsys, store_copy):
    """The unit cut as garbage was the only way to the message it pointed at: its record is
    still in the commit log and the timer queue, enqueued. The repair makes the unit doEnqueue
    writes for it, and `run` then delivers every pending message, that one included, once."""
    store = store_copy("timer-partial")
    unit = UNITS[400]
    assert unit["currWriteTime"] + unit["delayedTime"] >= READ  # pending
    patch(unit_file(store, unit), unit["filePos"], b"\xde\xad" * 26)
    _, dry, done = repaired(capsys, store, "timerLogFraming")
    assert [r["offsetPy"] for r in done["remade"]] == [unit["offsetPy"]]
    # The log's last unit is still the last: the broker resumes the enqueue after its message
    # (reviseQueueOffset); a made unit there would enqueue every later entry again.
    units = run_cli(capsys, "inspect", "timer", store, "--units", "--json").json_lines()
    assert units[-1]["offsetPy"] == UNITS[-1]["offsetPy"]
    assert [u["offsetPy"] for u in units].index(unit["offsetPy"]) == len(units) - 2
    # Its own slot: under the roll window (the default 2 days: the store files do not say 60 slots)
    assert done["remade"][0]["slotTimeMs"] == done["remade"][0]["timerOutMs"] >= READ
    shown = run_cli(capsys, "timer", "repair", store, "--now", str(NOW))  # nothing left to do
    assert shown.code == 0 and "unit made" not in shown.out
    result = run_cli(capsys, "run", store, "--until-empty", "--now", "4102444800000", "--json")
    assert result.code == 0, result.err[-2000:]
    assert [e for e in result.json_lines() if e["event"] == "stopped"][0]["timerDelivered"] == 795
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == [] and check.problems == []


def test_a_full_file_without_its_blank_gets_it_back(capsys, store_copy):
    store = store_copy("timer-partial")
    original = timer_bytes(store)
    blank = PARTIAL["timerlogBlank"][0]
    patch(store / "timerlog" / blank["file"], blank["filePos"], bytes(16))
    _, _, done = repaired(capsys, store, "timerLogNoBlank")
    assert f"timerlog/{blank['file']}" in done["filesWritten"] and done["moved"] == 0
    assert timer_bytes(store)[f"timerlog/{blank['file']}"] == original[f"timerlog/{blank['file']}"]


# -- the checkpoint --------------------------------------------------------------------------------
@pytest.mark.parametrize("field, value, byte, want", [
    ("masterTimerQueueOffset", 5000, 24, CHECK["masterTimerQueueOffset"]),  # past the queue
    ("lastTimerLogFlushPos", 10_000_000, 8, END["offset"]),  # past the timer log
    ("lastReadTimeMs", NOW + 3_600_000, 0, READ),  # ahead of any clock that wrote the file
])
def test_a_checkpoint_beyond_the_data_is_set_back_to_it(capsys, store_copy, field, value, byte, want):
    store = store_copy("timer-partial")
    path = store / "config" / "timercheck"
    patch(path, byte, struct.pack(">q", value))
    _, _, done = repaired(capsys, store, "checkpointBeyond")
    data = path.read_bytes()
    assert len(data) == 4096 and struct.unpack_from(">q", data, byte)[0] == want
    assert struct.unpack_from(">q", data, 48)[0] == CHECK["dataVersion"]["counter"] + 1
    rows = {c["item"]: (c["before"], c["after"]) for c in done["changes"] if c["file"] == "config/timercheck"}
    assert rows[field] == (str(value), str(want))
    assert (store / "config" / "timercheck.bak").read_bytes()[byte:byte + 8] == struct.pack(">q", value)


def test_a_read_time_ahead_only_skips_empty_slots(capsys, store_copy):
    """A broker whose clock ran ahead read the slots up to its read time: the repair lowers the
    read time only over slots with no unit (lower would deliver those again) and says so."""
    store = store_copy("timer-partial")
    pending = sorted({u["delayedTimeMs"] for u in UNITS if u["delayedTimeMs"] >= READ})
    early = READ - 600_000  # the broker that resumes has a clock 10 minutes behind
    code, plan = repair(capsys, store, now=early)
    assert code == 1 and not plan["changed"] and "lastReadTimeMs" in plan["leftAlone"][0]["what"]
    # A read time the writer's clock could not have reached (beyond its dataVersion stamp):
    patch(store / "config" / "timercheck", 0, struct.pack(">q", pending[3]))
    code, plan = repair(capsys, store, "--execute", now=early)
    got = struct.unpack_from(">q", (store / "config" / "timercheck").read_bytes(), 0)[0]
    assert got == READ and code == 1  # back to what was read; no unit skipped, none read twice


# -- the metrics file ------------------------------------------------------------------------------
def test_an_unreadable_metrics_file_is_regenerated(capsys, store_copy):
    store = store_copy("timer-fresh")
    now = load_expected("timer-fresh")["timercheck"][0]["raw"]["lastReadTimeMs"] + 1000
    for name in ("timermetrics", "timermetrics.bak"):
        (store / "config" / name).write_text('{"dataVersion":{"coun')  # a flush cut short
    code, plan = repair(capsys, store, "--execute", now=now)
    assert code == 0 and plan["filesWritten"] == ["config/timermetrics"]
    counts = json.loads((store / "config" / "timermetrics").read_text())["timingCount"]
    assert {t: m["count"] for t, m in counts.items()} == {"OrderTopic": 110, "TimerTopic": 651, "TopicTest": 319}


def test_units_pointing_at_a_damaged_commit_log_are_left_alone_not_dropped(capsys, store_copy):
    """A record whose header is damaged stops the commit log scan there: the units pointing at
    it and after it are unreadable to rmqdelay, but the broker reads sizePy bytes at offsetPy
    without framing and may still deliver them. Repair keeps them, says why, exits 1."""
    store = store_copy("timer-partial")
    unit = next(u for u in UNITS if u["delayedTimeMs"] >= READ and not u["magicRoll"] and not u["magicDelete"])
    py = unit["offsetPy"]
    patch(store / "commitlog" / f"{py - py % 262144:020d}", py % 262144 + 4, bytes(4))  # its magic code
    kinds = {p["kind"] for p in faults(capsys, store)}
    assert {"unitUnreadable", "unitNoMessage"} <= kinds
    files = snapshot(store)
    code, plan = repair(capsys, store, "--execute")
    assert code == 1 and not plan["changed"] and plan["dropped"] == [] and plan["kept"] == len(UNITS)
    assert f"timer log offset {unit['offset']}" in plan["leftAlone"][0]["what"]
    assert "mend the commit log first" in plan["leftAlone"][0]["why"]
    assert snapshot(store) == files


@pytest.mark.parametrize("fault", ["retention", "another-topic"])
def test_a_dropped_unit_is_called_lost_only_when_its_record_is_gone(capsys, store_copy, fault):
    """Retention took the records of pending units: no broker can deliver them, and the dry run
    says so. A unit pointed at another topic's record is dropped, but its own message is still
    there and gets a unit again: not lost, and not called lost."""
    store = store_copy("timer-partial")
    if fault == "retention":
        (store / "commitlog" / "00000000000000000000").unlink()
    else:
        unit = next(u for u in UNITS if u["delayedTimeMs"] >= READ and not u["magicRoll"] and not u["magicDelete"])
        plain = next(m for m in PARTIAL["msg"] if m["origin"] == "plain")
        patch(unit_file(store, unit), unit["filePos"] + 28,
              struct.pack(">qi", plain["commitLogOffset"], plain["storeSize"]))
    result = run_cli(capsys, "timer", "repair", store, "--now", str(NOW))
    assert result.code == 1, result.err
    said_lost = "so no broker can deliver them" in result.out
    assert said_lost == (fault == "retention"), result.out[-3000:]
    assert ("unit(s) made for enqueued messages without one" in result.out) == (fault == "another-topic")
    # The summary counts the units by kind; --verbose lists them.
    verbose = run_cli(capsys, "timer", "repair", store, "--now", str(NOW), "--verbose")
    assert ("unit made: rmq_sys_wheel_timer queue offset" in verbose.out) == (fault == "another-topic")
    assert "unit made:" not in result.out and "--verbose lists them" in result.out
