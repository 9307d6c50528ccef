"""Zeroed or garbage units in the middle of a consume queue, with written units after them: the
broker's ConsumeQueue.recover would end the queue there (the parked messages of a
SCHEDULE_TOPIC_XXXX level never delivered, a topic's queue offsets given out again). The
records are all in the commit log, with their queue offsets: the writer rebuilds the units
from them before anything is appended, and the run delivers the reference set."""

from __future__ import annotations

import os

import pytest
from clirun import console

from rmqdelay.schedule.audit import check_store
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR = "4102444800000"


def _damage(store, topic: str, queue: int, first: int, count: int, kind: str) -> None:
    path = store / "consumequeue" / topic / str(queue) / "00000000000000000000"
    data = bytearray(path.read_bytes())
    data[20 * first:20 * (first + count)] = bytes(20 * count) if kind == "zeroed" else os.urandom(20 * count)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("sample, topic, queue, kind", [
    ("delay-partial", "SCHEDULE_TOPIC_XXXX", 3, "zeroed"),  # level 4: all 83 units pending
    ("delay-partial", "SCHEDULE_TOPIC_XXXX", 3, "garbage"),
    ("delay-partial", "TopicTest", 1, "zeroed"),  # a real topic: its queue offsets not given out again
    ("timer-partial", "SCHEDULE_TOPIC_XXXX", 5, "zeroed"),  # level 6 of a 5.x store: 17 pending
])
def test_a_hole_in_a_queue_is_rebuilt_from_the_log_and_the_run_delivers_the_reference(
        store_copy, sample, topic, queue, kind):
    store = store_copy(sample)
    _damage(store, topic, queue, 5, 4, kind)
    result = console("run", store, "--until-empty", "--now", FAR, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"units 5..8 of {topic}/{queue} were " in result.stdout
    if sample == "timer-partial":
        check = check_timer_store(store)
        assert check.lost == [] and check.duplicated == [] and check.delivered == 1112
        assert check.delay_delivered == check.delay_parked
    else:
        check = check_store(store)  # every unit of every queue points at its own record
        assert check.lost == 0 and check.duplicated == 0 and check.pending == 0 and check.problems == []
        assert check.delivered == 1500



@pytest.mark.parametrize("scan", ["record-by-record", "compiled"])
def test_a_deleted_queue_directory_goes_on_after_its_records_in_the_log(store_copy, monkeypatch, scan):
    """consumequeue/TopicTest/1 deleted: the run's deliveries to it take the queue offsets after
    its last record in the commit log, never 0 again (lostqueues.py), read either way."""
    import shutil

    from rmqdelay.store import Store
    from rmqdelay.store import lostqueues

    if scan == "compiled":
        monkeypatch.setattr(lostqueues, "FAST_FROM_BYTES", 0)

    store = store_copy("delay-partial")
    with Store(store) as s:
        before = s.consume_queue("TopicTest", 1).max_offset
    assert before > 0
    shutil.rmtree(store / "consumequeue" / "TopicTest" / "1")
    result = console("run", store, "--until-empty", "--now", FAR, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    with Store(store) as s:
        cq = s.consume_queue("TopicTest", 1)
        first = cq.min_offset
        while cq.unit(first) is None or not cq.unit(first).size:
            first += 1
        assert s.commitlog.read_message(cq.unit(first).commitLogOffset, cq.unit(first).size).queueOffset == before
    check = check_store(store)  # every unit points at its own topic/queue/queueOffset
    assert check.lost == 0 and check.duplicated == 0 and check.pending == 0 and check.problems == []
    assert check.delivered == 1500


def test_a_hole_among_a_levels_units_to_deliver_before_the_files_recover_checks_is_rebuilt(tmp_path):
    """A level's units still to deliver over more files than ConsumeQueue.recover checks (the
    last three): a zeroed unit in the first one is found and rebuilt all the same, for the
    scheduler reads every unit from delayOffset.json's offset on."""
    import random

    from support.kill9_soak import add_messages

    from rmqdelay.schedule.scheduler import Scheduler

    store = tmp_path / "store"
    add_messages(store, 1400, random.Random(3), 0, create=True)  # 64-unit queue files
    level1 = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "0"
    assert len(list(level1.iterdir())) > 3
    with open(level1 / "00000000000000000000", "r+b") as fh:
        fh.seek(20 * 10)
        fh.write(bytes(20))
    list(Scheduler(store, now_ms=int(FAR), mode="until-empty").events())
    check = check_store(store)
    assert check.lost == 0 and check.duplicated == 0 and check.pending == 0 and check.problems == []
    assert check.delivered == 1400
