"""`run` on a 5.x timer store stopped by SIGKILL at chosen points of its timer writes (the
fault injector kills the process right after the chosen system call), then run again: the
rerun replays what the stopped run left (units past the published timer log end, outputs
past the published commit log offset) and the store ends as the broker would have left it -
every timer message delivered once, every unit in its slot's chain, slot counts right."""

from __future__ import annotations

import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
from test_faults import FAR, cli

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from timer_check import check_timer_store  # noqa: E402

from rmqdelay.store.writer import NewMessage, StoreWriter

BASE = 1795450290000  # timer-fresh's lastReadTimeMs
DAY = 86_400_000


@pytest.fixture
def timer_store(tmp_path, sample_store):
    dest = tmp_path / "timer-fresh"
    shutil.copytree(sample_store("timer-fresh"), dest)
    return dest


def park(path: Path, count: int, deliver_from: int, serial: int, *, born: int = BASE) -> None:
    """Timer messages as the broker's put hook parks them in rmq_sys_wheel_timer."""
    with StoreWriter(path) as w:
        for i in range(count):
            deliver = deliver_from + 37 * i
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            w.put(NewMessage("rmq_sys_wheel_timer", 0, f"parked {serial + i}".encode(), {
                "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": f"0A0A0007{serial + i:024X}",
                "TIMER_OUT_MS": str(out), "REAL_TOPIC": "TimerTopic", "REAL_QID": str(i % 4)},
                bornTimestamp=born))


def run(store: Path, now: int | str, faults: list[dict] | None = None):
    return cli("run", store, "--until-empty", "--now", now, "--json", "--flush-interval", "1000", faults=faults)


def assert_clean(store: Path, parked: int):
    again = run(store, FAR)
    assert again.code == 0, again.err
    check = check_timer_store(store)
    assert check.problems == [], check.problems[:5]
    assert check.lost == [] and check.duplicated == [] and check.misrouted == []
    assert check.parked == parked and check.delivered + check.cancelled == parked


def test_a_kill_right_after_the_unit_of_a_rolled_message_is_appended(timer_store):
    """A roll slot read: its messages are re-put to rmq_sys_wheel_timer and enqueued again at
    once; the run is killed right after the first of those units is in the timer log. The
    unit must point at a record that is in the commit log (the re-put written before its
    unit, as the broker only enqueues what its consume queue shows), so that the rerun,
    after more messages were parked, adopts it for its own record and for nothing else."""
    park(timer_store, 20, BASE + 2 * DAY + 7_000, 1)  # rolled: ROLL units a day ahead
    first = run(timer_store, BASE)
    assert first.code == 0, first.err
    killed = run(timer_store, BASE + DAY + 2_000, faults=[{"op": "pwrite", "path": "/timerlog/", "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    park(timer_store, 5, BASE + DAY + 60_000, 100, born=BASE + DAY)  # where the lost re-puts would have gone
    assert_clean(timer_store, 1160 + 25)


def test_a_kill_after_the_slots_read_ahead_were_neutralised_but_before_the_wheel_was_written(timer_store):
    """Slots read ahead of the wall clock (`--now` an hour on) have their units turned into
    delete units on the way out; the run is killed after the timer log took that and
    before the wheel took the slots' new counts. The rerun finds the units neutralised
    already and must still write the counts (num = -units, as the broker counts them)."""
    wall = int(time.time() * 1000)
    first = run(timer_store, wall)  # the backlog up to now
    assert first.code == 0, first.err
    park(timer_store, 30, wall + 3_600_000, 200, born=wall)
    killed = run(timer_store, wall + 7_200_000,
                 faults=[{"op": "pwrite", "path": "/commitlog/", "contains": "resume-point", "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    assert_clean(timer_store, 1160 + 30)
