"""Faults while `run` writes a 5.x timer store: every timer file write (timer log units, a new
timer log file, the wheel, the neutralising of slots read ahead, timercheck and its state
file, timermetrics) made to fail or fill the disk in turn. Each is one line and a non-zero
exit, the commit log still verifies, and once the fault is gone a rerun delivers every timer
message exactly once and leaves the store the broker resumes from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_faults import FAR, assert_one_line, cli

from rmqdelay.timer.audit import check_timer_store

# The 5.x samples' times (tests/wallclock.py); child processes under faults and kills.
pytestmark = [pytest.mark.clock, pytest.mark.slow]


def run(store: Path, **kw):
    return cli("run", store, "--until-empty", "--now", FAR, "--json", **kw)


@pytest.fixture
def timer_store(tmp_path, sample_store):
    dest = tmp_path / "timer-fresh"
    shutil.copytree(sample_store("timer-fresh"), dest)
    return dest


@pytest.mark.parametrize("fault", [
    {"op": "pwrite", "path": "/timerlog/", "nth": 40, "errno": "EIO"},
    {"op": "pwrite", "path": "/timerlog/", "nth": 20, "short": 30, "errno": "ENOSPC"},
    {"op": "open", "path": "/timerlog/", "mode": "create", "errno": "EIO"},
    {"op": "fsync", "path": "/timerlog/", "nth": 2, "errno": "EIO"},
    {"op": "pwrite", "path": "/timerwheel", "nth": 100, "errno": "EIO"},
    # The wheel's second fsync: after the slots read ahead of the wall clock were neutralised.
    # On the pinned wall clock (a day after the sample) timer-fresh always has such slots.
    {"op": "fsync", "path": "/timerwheel", "nth": 2, "errno": "EIO"},
    {"op": "pwrite", "path": "/timercheck.tmp", "nth": 2, "errno": "ENOSPC"},
    {"op": "replace", "path": "/timercheck$", "nth": 2, "errno": "EIO"},
    {"op": "pwrite", "path": "rmqdelay.timer.json.tmp", "nth": 2, "errno": "ENOSPC"},
    {"op": "pwrite", "path": "/timermetrics.tmp", "errno": "EIO"},
], ids=["write-unit", "short-unit", "create-log-file", "fsync-log", "write-wheel", "fsync-wheel",
        "write-timercheck", "rename-timercheck", "write-state", "write-metrics"])
def test_a_failing_timer_write_is_one_line_and_a_clean_rerun_delivers_once(timer_store, fault):
    failed = run(timer_store, faults=[fault])
    assert_one_line(failed)
    verify = cli("inspect", "commitlog", timer_store, "--verify")
    assert verify.code == 0, verify.out + verify.err
    again = run(timer_store)
    assert again.code == 0, again.err
    check = check_timer_store(timer_store)
    assert check.problems == [] and check.lost == [] and check.duplicated == [] and check.misrouted == []
    assert (check.parked, check.cancelled, check.delivered) == (1160, 48, 1112)


def test_a_full_disk_under_the_timer_store_is_one_line_and_a_clean_rerun(tmp_path, sample_store):
    """RLIMIT_FSIZE: a timer log file may not grow past the limit (a real short write)."""
    import resource

    store = tmp_path / "timer-fresh"
    shutil.copytree(sample_store("timer-fresh"), store)
    limit = 70_000  # the next timer log file (16 KiB) fits, the wheel file (38.7 MB) does not
    failed = run(store, rlimits={resource.RLIMIT_FSIZE: limit})
    assert failed.code != 0 and "Traceback" not in failed.err, failed.err
    again = run(store)
    assert again.code == 0, again.err
    check = check_timer_store(store)
    assert check.problems == [] and check.lost == [] and check.duplicated == []
