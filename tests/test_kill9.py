"""SIGKILL `rmqdelay run` at random points while it drains a store, or make one of its
system calls fail (a short write, ENOSPC, EIO creating a file or from fsync): afterwards
every delay message is delivered exactly once, no record is torn, every consume queue unit
is valid, every faulted run said what failed in one line, and the abort the stopped runs
left is removed by the clean run that follows. The soak (>= 200 stops) is
tests/support/kill9_soak.py; the suite keeps a few stops of each kind, with fixed seeds."""

import random

import pytest
from support.kill9_soak import add_messages, finish, kill_cycles

from rmqdelay.schedule.audit import check_store

KILLS = 8

pytestmark = pytest.mark.slow  # child processes killed


def test_kill_9_at_random_points_delivers_every_message_exactly_once(tmp_path):
    rng = random.Random(20261122)
    path = tmp_path / "store"
    add_messages(path, 2500, rng, 0, create=True)
    with_rollovers = len(list((path / "commitlog").iterdir()))
    assert with_rollovers > 10
    soak = kill_cycles(path, KILLS, rng, work=tmp_path)
    assert soak.killed_mid_delivery >= KILLS // 2
    finish(path)
    check = check_store(path)
    assert check.problems == []
    assert check.delivered == check.scheduled == 2500 + soak.added
    assert len(list((path / "commitlog").iterdir())) > with_rollovers
    assert not (path / "abort").exists()  # what the killed runs left, removed by the clean one


def test_faults_and_kills_mixed_deliver_every_message_exactly_once(tmp_path):
    rng = random.Random(7)
    path = tmp_path / "store"
    add_messages(path, 1500, rng, 0, create=True)
    soak = kill_cycles(path, 14, rng, work=tmp_path, faults=0.7)
    assert sum(soak.faults.values()) >= 6 and len(soak.faults) >= 4, soak.faults
    finish(path)
    check = check_store(path)
    assert check.problems == [] and check.lost == check.duplicated == 0
    assert check.delivered == check.scheduled == 1500 + soak.added
    assert not (path / "abort").exists()
