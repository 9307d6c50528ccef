"""A run killed after its deliveries were durable and before it published where its offsets are
exact, then config/rmqdelay.scheduler.json lost (deleted, or a symlink to nothing) or
delayOffset.json lost with its .bak: the next run finds what was delivered from the delivered
copies in the commit log (each after the record of its unit, the same message put again) and
delivers nothing twice - on a 4.x store and on a 5.x store's delay levels alike."""

from __future__ import annotations

import os

import pytest

from rmqdelay.schedule.audit import check_store
from rmqdelay.schedule.events import Delivered, Notice
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x sample's times (tests/wallclock.py)

FAR_AHEAD = 4_102_444_800_000
DELAY_FILES = ("delayOffset.json", "delayOffset.json.bak", "rmqdelay.scheduler.json")


def _killed_after_first_publish(path, levels):
    """What a kill -9 after the first publish leaves: every delivery of the run in the log (the
    whole drain), the delay offsets files of its first publish (the timer's as the drain left them)."""
    snap = None
    delivered = 0
    for event in Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", levels=levels).events():
        delivered += isinstance(event, Delivered)
        if snap is None and event.__class__.__name__ == "Persisted":
            snap = {p.name: p.read_bytes() for p in (path / "config").iterdir() if p.name in DELAY_FILES}
    for name in DELAY_FILES:
        (path / "config" / name).unlink(missing_ok=True)
    for name, data in snap.items():
        (path / "config" / name).write_bytes(data)
    return delivered


@pytest.mark.parametrize("sample,levels,damage", [
    ("delay-fresh", None, "scheduler-deleted"),
    ("delay-fresh", None, "scheduler-dangling"),
    ("delay-fresh", None, "delay-offsets-deleted"),
    ("timer-partial", [3, 6], "scheduler-deleted"),
    ("timer-partial", [3, 6], "delay-offsets-deleted"),
])
def test_lost_offsets_state_after_a_kill_delivers_nothing_twice(store_copy, sample, levels, damage):
    path = store_copy(sample)
    assert _killed_after_first_publish(path, levels) > 0
    config = path / "config"
    if damage.startswith("scheduler"):
        (config / "rmqdelay.scheduler.json").unlink()
        if damage == "scheduler-dangling":
            os.symlink(path / "nowhere", config / "rmqdelay.scheduler.json")
    else:
        (config / "delayOffset.json").unlink()
        (config / "delayOffset.json.bak").unlink(missing_ok=True)
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", levels=levels).events())
    assert not [e for e in events if isinstance(e, Delivered)]
    if damage.startswith("scheduler"):
        assert any(isinstance(e, Notice) and e.kind == "delivered" for e in events)
    if sample == "timer-partial":
        check = check_timer_store(path)
        assert check.duplicated == [] and check.lost == []
    else:
        check = check_store(path)
        assert check.problems == [] and check.lost == check.duplicated == check.pending == 0
        assert check.delivered == 1500
