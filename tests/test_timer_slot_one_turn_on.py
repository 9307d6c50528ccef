"""A wheel index holding a time not read yet while the timer log holds a chain for the same
index one wheel turn (14 days) later: the later units were linked from -1 (doEnqueue's
getSlot reads another time as empty), and the wheel takes their time once the earlier one is
read, as the broker's putSlot would have. `run` delivers both in their turn, each once; it
is not a refusal naming `timer repair` (which finds nothing to rebuild there)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import load_expected

from rmqdelay.formats.timerwheel import WHEEL_SLOTS
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

PARTIAL = load_expected("timer-partial")
READ = PARTIAL["timercheck"][0]["raw"]["lastReadTimeMs"]
FAR = "4102444800000"  # 2100-01-01: everything is due
TURN_MS = WHEEL_SLOTS * 1000


def two_pending_slots() -> tuple[dict, dict, list[dict]]:
    """Two slots not read yet, A before B, B's chain all normal units: A, B and B's units."""
    by_time: dict[int, list[dict]] = {}
    for u in PARTIAL["timerlog"]:
        by_time.setdefault(u["currWriteTime"] + u["delayedTime"], []).append(u)
    pending = [s for s in PARTIAL["timerwheel"] if s["timeMs"] >= READ and s["num"] > 0]
    a = pending[0]
    for b in pending[1:]:
        units = sorted(by_time[b["timeMs"]], key=lambda u: u["offset"])
        if len(units) >= 2 and all(u["magic"] & 6 == 0 for u in units):
            return a, b, units
    raise AssertionError("timer-partial has no two pending slots")


def one_turn_on(store: Path) -> tuple[dict, int, list[dict]]:
    """B's units moved to A's time + one turn (their delayedTime rewritten), B's wheel slot
    zeroed: A's index holds A, pending, and the log a linked chain for A + 14 days."""
    a, b, units = two_pending_slots()
    later = a["timeMs"] + TURN_MS
    logs = sorted((store / "commitlog").iterdir())
    for u in units:
        with open(store / "timerlog" / u["file"], "r+b") as fh:
            fh.seek(u["filePos"] + 24)  # size, prevPos, magic, currWriteTime, then delayedTime
            fh.write(struct.pack(">i", later - u["currWriteTime"]))
        # The message's TIMER_OUT_MS says the same time (13 digits either way; no CRC over properties).
        path = [f for f in logs if int(f.name) <= u["offsetPy"]][-1]
        with open(path, "r+b") as fh:
            fh.seek(u["offsetPy"] - int(path.name))
            record = fh.read(u["sizePy"])
            old = f"TIMER_OUT_MS\x01{b['timeMs']}".encode()
            assert record.count(old) == 1
            fh.seek(u["offsetPy"] - int(path.name) + record.index(old))
            fh.write(f"TIMER_OUT_MS\x01{later}".encode())
    with open(store / "timerwheel", "r+b") as fh:
        fh.seek(b["index"] * 32)
        fh.write(bytes(32))
    return a, later, units


def test_a_chain_one_turn_on_is_delivered_after_the_slot_before_it(capsys, store_copy):
    store = store_copy("timer-partial")
    a, later, units = one_turn_on(store)
    assert (later // 1000) % WHEEL_SLOTS == a["index"] and units[0]["prevPos"] == -1
    # What repair makes of it: nothing to rebuild (A's index keeps A, the one read first).
    repair = run_cli(capsys, "timer", "repair", store, "--now", str(READ + 1000))
    assert repair.code == 0 and "nothing to repair" in repair.out, repair.out + repair.err[-2000:]
    dry = run_cli(capsys, "run", store, "--now", FAR, "--until-empty", "--dry-run")
    assert dry.code == 0, dry.err[-2000:]
    done = run_cli(capsys, "run", store, "--now", FAR, "--until-empty", "--json")
    assert done.code == 0, done.err[-2000:]
    stopped = [e for e in done.json_lines() if e["event"] == "stopped"][0]
    assert stopped["timerDelivered"] == 795  # as from the store never changed
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == []
    assert check.delivered + check.cancelled == check.parked
