"""SIGKILL `rmqdelay run` right after each kind of write it makes while it drains a store, or
make one of its system calls fail (a short write, ENOSPC, EIO creating a file or from fsync):
afterwards every delay message is delivered exactly once, no record is torn, every consume
queue unit is valid, every faulted run said what failed in one line, and the abort the stopped
runs left is removed by the clean run that follows. Each stop is a point chosen on purpose
(support/kill9_soak.py: KILL_POINTS, fault_kinds), so every run hits it; the soak at random
points, >= 200 stops, is `python tests/support/kill9_soak.py --kills 200`."""

import random

import pytest
from support.kill9_soak import KILL_POINTS, add_messages, fault_kinds, finish, stop_at_every_point

from rmqdelay.schedule.audit import check_store

pytestmark = pytest.mark.slow  # child processes killed


def test_a_kill_right_after_each_kind_of_write_delivers_every_message_exactly_once(tmp_path):
    rng = random.Random(20261122)
    path = tmp_path / "store"
    add_messages(path, 1000, rng, 0, create=True)
    with_rollovers = len(list((path / "commitlog").iterdir()))
    assert with_rollovers > 10
    soak = stop_at_every_point(path, rng, tmp_path)
    assert soak.killed_mid_delivery == soak.kills == len(KILL_POINTS)
    finish(path)
    check = check_store(path)
    assert check.problems == []
    assert check.delivered == check.scheduled == 1000 + soak.added
    assert len(list((path / "commitlog").iterdir())) > with_rollovers
    assert not (path / "abort").exists()  # what the killed runs left, removed by the clean one


def test_each_kind_of_fault_stops_a_run_in_one_line_and_every_message_is_delivered_once(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "store"
    add_messages(path, 600, rng, 0, create=True)
    soak = stop_at_every_point(path, rng, tmp_path, faults=True)
    assert soak.faults == {kind: 1 for kind in fault_kinds(rng)}, (soak.faults, soak.faults_missed)
    finish(path)
    check = check_store(path)
    assert check.problems == [] and check.lost == check.duplicated == 0
    assert check.delivered == check.scheduled == 600 + soak.added
    assert not (path / "abort").exists()
