"""`run --topics/--until/--rate/--limit` and `--dry-run --limit`: a filter only stops early. A
level stops at its first message held back (its offset stays there, where the broker resumes),
the timer wheel at the first slot that holds one (its read clock stays there); nothing past
them is delivered, so a later unfiltered run (or the broker) delivers the rest exactly once -
also when the filtered runs are killed with SIGKILL at random points."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import time

import pytest
from clirun import console
from conftest import SAMPLES
from support.kill9_soak import FAR_AHEAD_MS, add_messages, run_command

from rmqdelay.schedule.audit import check_store
from rmqdelay.store import Store

DELAY = SAMPLES / "delay-partial" / "store"


def _events(proc) -> list[dict]:
    assert proc.returncode in (0, 1), proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


def _level_heads(path) -> dict[int, tuple[int, str]]:
    """Per level: where the broker resumes it (delayOffset.json; a level absent there starts at
    its queue's min offset) and the REAL_TOPIC of the unit there."""
    out = {}
    with Store(path) as store:
        table = store.delay_offsets().offsetTable
        for qid in store.topics().get("SCHEDULE_TOPIC_XXXX", []):
            level = qid + 1
            cq = store.schedule_queue(level)
            offset = table.get(level, cq.min_offset)
            unit = cq.unit(offset) if offset < cq.max_offset else None
            topic = None if unit is None else \
                store.commitlog.read_message(unit.commitLogOffset, unit.size).properties["REAL_TOPIC"]
            out[level] = (offset, topic)
    return out


def test_topics_stop_each_level_at_its_first_other_message(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(DELAY, store)
    events = _events(console("run", store, "--until-empty", "--now", FAR_AHEAD_MS, "--topics", "OrderTopic",
                             "--json"))
    delivered = [e for e in events if e["event"] == "delivered"]
    held = {e["level"]: e for e in events if e["event"] == "held"}
    assert delivered and {e["topic"] for e in delivered} == {"OrderTopic"}
    stopped = events[-1]
    assert stopped["event"] == "stopped" and stopped["reason"].startswith("held back by the run's filters")
    heads = _level_heads(store)
    for level, e in held.items():
        # Stopped at the first message for another topic: the offset names it, nothing after it went.
        assert heads[level] == (e["offset"], e["topic"]) and e["topic"] != "OrderTopic"
        assert all(d["offset"] < e["offset"] for d in delivered if d["level"] == level)
    check = check_store(store, drained=False)
    assert check.problems == [] and check.pending > 0
    # What a broker (or an unfiltered run) does next: the rest, each once.
    assert console("run", store, "--until-empty", "--now", FAR_AHEAD_MS, "--json").returncode == 0
    check = check_store(store)
    assert check.problems == [] and check.delivered == check.scheduled


def test_until_and_limit_and_dry_run(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(DELAY, store)
    until = 1795349900000  # level 4 (30 s) is all due by then; level 5 (1m) partly
    dry = _events(console("run", store, "--dry-run", "--now", FAR_AHEAD_MS, "--until", until, "--json"))
    would = [e for e in dry if e["event"] == "delivered"]
    assert would and all(e["deliverTimestamp"] <= until for e in would)
    held = [e for e in dry if e["event"] == "held"]
    assert held and all(e["deliverTimestamp"] > until for e in held)
    assert (store / "config" / "delayOffset.json").read_bytes() == (DELAY / "config" / "delayOffset.json").read_bytes()
    limited = _events(console("run", store, "--dry-run", "--now", FAR_AHEAD_MS, "--limit", 7, "--json"))
    assert [e["offset"] for e in limited if e["event"] == "delivered"] == list(range(7))
    table = console("run", store, "--dry-run", "--now", FAR_AHEAD_MS, "--limit", 3)
    assert table.returncode == 0 and "would deliver 3" in table.stdout and "--limit 3 reached" in table.stderr
    real = _events(console("run", store, "--until-empty", "--now", FAR_AHEAD_MS, "--until", until, "--json"))
    assert [e["offset"] for e in real if e["event"] == "delivered"] == [e["offset"] for e in would]
    assert _level_heads(store)[4][0] == 83  # level 4 drained, held nowhere
    assert console("run", store, "--until", "soon").returncode == 2
    assert console("run", store, "--rate", "0").returncode == 2
    assert console("run", store, "--topics", "a b").returncode == 2


def test_rate_paces_the_deliveries(tmp_path):
    store = tmp_path / "store"
    shutil.copytree(DELAY, store)
    started = time.monotonic()
    events = _events(console("run", store, "--until-empty", "--now", FAR_AHEAD_MS, "--levels", "4", "--limit", 21,
                             "--rate", 40, "--json"))
    took = time.monotonic() - started
    assert len([e for e in events if e["event"] == "delivered"]) == 21
    assert took >= 0.45  # 21 deliveries at 40 a second: 20 gaps of 25 ms at least


def test_timer_wheel_stops_at_the_first_slot_holding_another_topic(tmp_path, sample_store):
    store = tmp_path / "store"
    shutil.copytree(sample_store("timer-partial"), store)
    now = "2026-11-23T16:30:00Z"
    before = json.loads(console("inspect", "timer", store, "--json", "--now", now).stdout)
    events = _events(console("run", store, "--until-empty", "--now", now, "--topics", "TimerTopic", "--json"))
    [held] = [e for e in events if e["event"] == "timerHeld"]
    timer = [e for e in events if e["event"] == "timerDelivered" and not e["rolled"]]
    assert all(e["topic"] == "TimerTopic" for e in timer)
    assert all(e["slotTimeMs"] is None or e["slotTimeMs"] < held["slotTimeMs"] for e in timer)
    after = json.loads(console("inspect", "timer", store, "--json", "--now", now).stdout)
    # The read clock stays before the held slot: a broker reads it (and all after it) next.
    assert after["checkpoint"]["lastReadTimeMs"] <= held["slotTimeMs"]
    assert after["checkpoint"]["lastReadTimeMs"] >= before["checkpoint"]["lastReadTimeMs"]
    assert console("inspect", "timer", store, "--verify", "--now", now).returncode in (0, 1)
    # An unfiltered run then delivers the rest as the real 5.3.3 services did.
    rest = _events(console("run", store, "--until-empty", "--now", "2026-12-31T00:00:00Z", "--json"))
    assert rest[-1]["event"] == "stopped"


def _delivered_copies(path, topic: str) -> int:
    with Store(path) as store:
        return sum(1 for m in store.commitlog.records()
                   if m.topic == topic and ("TIMER_DEQUEUE_MS" in m.properties or "REAL_TOPIC" in m.properties))


def _kill_runs(command, marker: bytes, runs: int, max_delay_s: float, rng: random.Random, work) -> int:
    """Start ``command()`` ``runs`` times, SIGKILL each a random moment after ``marker`` (its
    first delivery) shows in its output; how many were killed mid-run."""
    killed = 0
    for _ in range(runs):
        out = work / "run.out"
        with open(out, "wb") as fh:
            proc = subprocess.Popen(command(), stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and marker not in out.read_bytes():
            time.sleep(0.002)
        time.sleep(rng.uniform(0, max_delay_s))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            killed += 1
        proc.wait()
        assert proc.returncode in (0, -signal.SIGKILL), out.read_text()[-2000:]
    return killed


@pytest.mark.slow
def test_filtered_runs_killed_with_sigkill_deliver_exactly_once(tmp_path):
    rng = random.Random(27)
    path = tmp_path / "store"
    add_messages(path, 1500, rng, 0, create=True)
    filters = ["--topics", "TopicA,%RETRY%GID_X", "--rate", "4000"]
    killed = _kill_runs(lambda: run_command(path, "--batch-size", str(rng.choice([1, 16, 256])),
                                            "--flush-interval", f"{rng.choice([0, 0.01, 10])}s", *filters),
                        b'"delivered"', 6, 0.05, rng, tmp_path)
    assert killed >= 3
    # The filtered run after the kills replays what they wrote past their last published
    # offsets, then stops where the filters hold: every message below each level's offset is
    # delivered once, none at or after it.
    done = subprocess.run(run_command(path, *filters), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    check = check_store(path, drained=False)
    assert check.problems == [] and check.duplicated == check.lost == 0 and check.pending > 0
    # Every level stopped at a TopicB message, nothing for TopicB delivered.
    for level, (offset, topic) in _level_heads(path).items():
        assert topic in (None, "TopicB"), (level, offset, topic)
    assert _delivered_copies(path, "TopicB") == 0 and _delivered_copies(path, "TopicA") > 0
    subprocess.run(run_command(path), capture_output=True, check=True)
    check = check_store(path)
    assert check.problems == [] and check.delivered == check.scheduled == 1500


@pytest.mark.slow
def test_filtered_timer_runs_killed_with_sigkill_deliver_exactly_once(tmp_path):
    from support.kill9_timer_soak import SAMPLE, run_cli

    from rmqdelay.samples.pack import unpack
    from rmqdelay.timer.audit import check_timer_store

    rng = random.Random(2027)
    path = tmp_path / "store"
    unpack(SAMPLE, path)
    assert _delivered_copies(path, "TopicTest") == 0
    filters = ["--topics", "TimerTopic,OrderTopic", "--rate", "3000"]
    killed = _kill_runs(lambda: run_cli(path, "--flush-interval", str(rng.choice([0, 0.01, 0.2])), *filters),
                        b'"timerDelivered"', 4, 0.1, rng, tmp_path)
    assert killed >= 2
    done = subprocess.run(run_cli(path, *filters), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert any(e["event"] == "timerHeld" for e in events)
    # Nothing for the held topic went out, from the wheel or the levels.
    assert _delivered_copies(path, "TopicTest") == 0
    assert _delivered_copies(path, "TimerTopic") > 0
    # The rest, unfiltered: every timer message once (a cancelled one not), every delay message once.
    subprocess.run(run_cli(path), capture_output=True, check=True)
    check = check_timer_store(path, strict_cancel=False)
    assert not check.lost and not check.duplicated and not check.misrouted, check
    assert check.delivered > 0 and _delivered_copies(path, "TopicTest") > 0
