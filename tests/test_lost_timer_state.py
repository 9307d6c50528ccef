"""A 5.x run killed after its timer deliveries were durable and before it published its timer
state, then config/rmqdelay.timer.json lost (deleted, or a symlink to nothing): the next run
takes config/timercheck as it finds it, and the copies in the commit log (real topic records
carrying the timer's properties, each after the record of its unit) say what the killed run
delivered; nothing goes out twice (rmqdelay/timer/deliver/replay.py ``_lost_state_bound``)."""

from __future__ import annotations

import os

import pytest
from support.kill9_soak import kill_after
from support.kill9_timer_soak import run_cli

from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.timer.audit import check_timer_store
from rmqdelay.timer.deliver.events import TimerDelivered, TimerNotice

pytestmark = pytest.mark.clock  # the 5.x sample's times (tests/wallclock.py)

FAR_AHEAD = 4_102_444_800_000
STATE = "rmqdelay.timer.json"


def _lose(config, how):
    (config / STATE).unlink(missing_ok=True)
    if how == "dangling":
        os.symlink(config / "nowhere", config / STATE)


@pytest.mark.parametrize("how", ["deleted", "dangling"])
def test_lost_timer_state_after_the_deliveries_puts_nothing_twice(store_copy, how):
    """What a kill -9 after the drain's outputs are durable and before its timer state is
    published leaves (every output in the log, the timer log and wheel as written, timercheck
    as before the run), then the state file lost."""
    path = store_copy("timer-partial")
    config = path / "config"
    before = (config / "timercheck").read_bytes()
    first = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty").events())
    assert sum(isinstance(e, TimerDelivered) and not e.rolled for e in first) == 795
    (config / "timercheck").write_bytes(before)
    _lose(config, how)
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty").events())
    assert not [e for e in events if isinstance(e, TimerDelivered)]
    assert any(isinstance(e, TimerNotice) and e.kind == "replay" and STATE in e.message for e in events)
    check = check_timer_store(path)
    assert check.lost == [] and check.duplicated == []
    assert check.delivered == 1112


@pytest.mark.slow
def test_killed_before_its_timer_state_then_the_state_lost_puts_nothing_twice(store_copy, tmp_path):
    """A real kill -9 right after the run's first commit log fsync (its outputs durable, no timer
    state published yet), the state file then a symlink to nothing; the next run finishes."""
    path = store_copy("timer-partial")
    kill_after(run_cli(path, now=FAR_AHEAD)[3:], {"op": "fsync", "path": "/commitlog/"}, tmp_path / "run.out",
               "timer run (first commit log fsync)")
    _lose(path / "config", "dangling")
    list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty").events())
    check = check_timer_store(path)
    assert check.lost == [] and check.duplicated == []
    assert check.delivered == 1112
