"""A wiped wheel slot (zeroed, holding another time, or an older copy whose lastPos is before
some of its units) while the timer log holds units for its time not yet delivered: neither the broker nor a plain dequeue ever reads them. `run` and
`run --dry-run` refuse before anything is delivered, in one line naming timerwheel, the slot's
byte and the units, and write no byte; `timer repair --execute` rebuilds the slot and the next
run delivers those messages, each once."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import load_expected
from test_bad_input import snapshot

from rmqdelay.store import Store
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

PARTIAL = load_expected("timer-partial")
READ = PARTIAL["timercheck"][0]["raw"]["lastReadTimeMs"]
FAR = "4102444800000"  # 2100-01-01: everything is due


def pending_slot(units_at_least: int = 2) -> tuple[dict, list[int]]:
    """A slot of timer-partial not read yet whose chain holds normal (non-delete) units, and
    the offsets of those units."""
    by_time: dict[int, list[int]] = {}
    for u in PARTIAL["timerlog"]:
        slot_ms = u["currWriteTime"] + u["delayedTime"]
        if slot_ms >= READ and not u["magic"] & 4:
            by_time.setdefault(slot_ms, []).append(u["offset"])
    for slot in PARTIAL["timerwheel"]:
        t = slot["storedTime"] * 1000
        if t >= READ and len(by_time.get(t, [])) >= units_at_least:
            return slot, sorted(by_time[t])
    raise AssertionError("timer-partial has no pending slot with units")


def wipe(store: Path, slot: dict, data: bytes = bytes(32)) -> None:
    with open(store / "timerwheel", "r+b") as fh:
        fh.seek(slot["index"] * 32)
        fh.write(data)


def run(capsys, store: Path, *extra: str):
    return run_cli(capsys, "run", store, "--now", FAR, "--until-empty", *extra)


def assert_refused(result, store: Path, slot: dict, units: list[int], held: str) -> None:
    assert result.code == 2, (result.code, result.err[-2000:])
    assert "Traceback" not in result.err + result.out
    line = [x for x in result.err.splitlines() if x.startswith("rmqdelay: ")]
    assert len(line) == 1, result.err
    line = line[0]
    assert f"{store / 'timerwheel'} at byte {slot['index'] * 32}:" in line
    assert f"(timeMs {slot['storedTime'] * 1000})" in line and held in line
    assert f"holds {len(units)} pending unit(s) for it at position(s) {units[0]}, " in line
    assert f"rmqdelay timer repair {store} --execute" in line


def older_chain(store: Path, slot: dict, units: list[int]) -> list[int]:
    """The slot as an older wheel file had it: lastPos at the first of its units, so the chain
    walked back from there never reaches the later ones. Returns those later units."""
    wipe(store, slot, struct.pack(">qqqii", slot["storedTime"], slot["firstPos"], units[0], 1, 0))
    return units[1:]


@pytest.mark.parametrize("how", ["zeroed", "another-time", "older-chain"])
def test_run_refuses_a_wiped_slot_and_writes_nothing(capsys, store_copy, how):
    store = store_copy("timer-partial")
    slot, units = pending_slot(3)
    if how == "zeroed":
        wipe(store, slot)
        held = "holds timeMs 0 (wiped)"
    elif how == "another-time":
        # The same index 14 days earlier (the wheel's span): getSlot reads it as empty.
        other = slot["storedTime"] - 2 * 7 * 86400
        wipe(store, slot, struct.pack(">qqqii", other, slot["firstPos"], slot["lastPos"], slot["num"], 0))
        held = f"holds timeMs {other * 1000} ("
    else:
        held = f"with lastPos {units[0]} (its chain starts before them)"
        units = older_chain(store, slot, units)
    files = snapshot(store)
    assert_refused(run(capsys, store), store, slot, units, held)
    assert snapshot(store) == files
    assert_refused(run(capsys, store, "--dry-run"), store, slot, units, held)
    assert snapshot(store) == files


@pytest.mark.parametrize("how", ["zeroed", "older-chain"])
def test_after_repair_the_stranded_messages_are_delivered_once(capsys, store_copy, how):
    store = store_copy("timer-partial")
    slot, units = pending_slot(3)
    if how == "zeroed":
        wipe(store, slot)
    else:
        older_chain(store, slot, units)
    assert run(capsys, store).code == 2
    repaired = run_cli(capsys, "timer", "repair", store, "--execute", "--now", str(READ + 1000))
    assert repaired.code == 0, repaired.err[-2000:]
    done = run(capsys, store, "--json")
    assert done.code == 0, done.err[-2000:]
    stopped = [e for e in done.json_lines() if e["event"] == "stopped"][0]
    assert stopped["timerDelivered"] == 795  # as from the store never wiped
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == [] and check.problems == []
    assert check.delivered + check.cancelled == check.parked


def test_a_slot_read_already_is_not_a_refusal(capsys, store_copy):
    """Slots before the checkpoint's read time are done: wiping one strands nothing."""
    store = store_copy("timer-partial")
    done = [s for s in PARTIAL["timerwheel"] if s["storedTime"] * 1000 < READ and s["num"] > 0]
    assert done
    wipe(store, done[0])
    result = run(capsys, store, "--json")
    assert result.code == 0, result.err[-2000:]
    stopped = [e for e in result.json_lines() if e["event"] == "stopped"][0]
    assert stopped["timerDelivered"] == 795


def set_prev_pos(store: Path, offset: int, prev: int) -> None:
    with open(store / "timerlog" / "00000000000000000000", "r+b") as fh:  # the first file holds it
        fh.seek(offset + 4)
        fh.write(struct.pack(">q", prev))


@pytest.mark.parametrize("how", ["minus-one", "another-slot"])
def test_a_broken_chain_is_refused_before_anything_is_delivered_and_repair_links_it_again(capsys, store_copy, how):
    """A unit's prevPos overwritten: the walk back from lastPos leaves the chain there, and the
    units before it are never read (or another slot's are read twice). Refused in one line
    naming the unit's prevPos; the command it names accepts the store and the run after it
    delivers what the undamaged store does, each once."""
    store = store_copy("timer-partial")
    slot, units = pending_slot(8)
    victim = units[6]
    other = next(u["offset"] for u in PARTIAL["timerlog"] if u["offset"] < victim
                 and u["currWriteTime"] + u["delayedTime"] != slot["storedTime"] * 1000)
    set_prev_pos(store, victim, -1 if how == "minus-one" else other)
    # ... after a kill: a torn record at the end of the log, which the writer's recovery would
    # zero, is left as it is by the refusal too.
    last = sorted((store / "commitlog").iterdir())[-1]
    with Store(store) as s:
        end = s.end_offset()
    with open(last, "r+b") as fh:
        fh.seek(end - int(last.name))
        fh.write(struct.pack(">ii", 300, -626843481) + b"torn")
    files = snapshot(store)
    for extra in ((), ("--dry-run",)):
        result = run(capsys, store, *extra)
        assert result.code == 2 and "Traceback" not in result.err, result.err[-2000:]
        [line] = [x for x in result.err.splitlines() if x.startswith("rmqdelay: ")]
        assert line.startswith(f"rmqdelay: {store / 'timerlog' / '00000000000000000000'} at byte {victim + 4}: ")
        assert f"to be {units[5]} (the unit before it of its slot time), found {-1 if how == 'minus-one' else other}" \
            in line and f"rmqdelay timer repair {store} --execute" in line
        assert snapshot(store) == files
    repaired = run_cli(capsys, "timer", "repair", store, "--execute", "--now", FAR)
    assert repaired.code == 0, repaired.err[-2000:]
    done = run(capsys, store, "--json")
    assert done.code == 0, done.err[-2000:]
    assert [e for e in done.json_lines() if e["event"] == "stopped"][0]["timerDelivered"] == 795
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == [] and check.problems == []
