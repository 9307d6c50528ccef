"""`rmqdelay run` on 5.x stores: the timer wheel delivered as the real 5.3.3 TimerMessageStore
delivers it - every pending timer message exactly once to its real topic and queue with the
properties the real broker gives it, cancellations honoured - and a store left so that the
real broker, started afterwards, puts nothing again."""

from __future__ import annotations

import gzip
import json
import random
import subprocess

import pytest
from conftest import SAMPLES
from support.kill9_timer_soak import run_cli, stop_timer_runs_at

from rmqdelay.schedule.events import Stopped
from rmqdelay.schedule.scheduler import Scheduler, wall_clock_ms
from rmqdelay.store import Store
from rmqdelay.timer.audit import check_timer_store
from rmqdelay.timer.deliver import TimerEngine
from rmqdelay.timer.deliver.events import TimerDelivered, TimerNotice
from rmqdelay.timer.runstate import read_timer_state

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR = 4_102_444_800_000  # 2100-01-01: everything is due
COMPARED = ["topic", "queueId", "flag", "sysFlag", "bornTimestamp", "bornHost", "storeHost", "reconsumeTimes",
            "bodyCRC", "magic"]


def drain(path, **kw) -> list:
    kw.setdefault("now_ms", FAR)
    kw.setdefault("mode", "until-empty")
    return list(Scheduler(path, **kw).events())


def real_records(name: str) -> list[dict]:
    with gzip.open(SAMPLES / name / "expected.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [o for o in map(json.loads, fh) if o["kind"] == "msg"]


def masked(raw: str) -> str:
    """The properties string with the TIMER_DEQUEUE_MS value (the dequeuing clock) left out."""
    return "\x02".join("TIMER_DEQUEUE_MS\x01" if p.startswith("TIMER_DEQUEUE_MS\x01") else p for p in raw.split("\x02"))


def fields(msg) -> dict:
    return {"topic": msg.topic, "queueId": msg.queueId, "flag": msg.flag, "sysFlag": msg.sysFlag,
            "bornTimestamp": msg.bornTimestamp, "bornHost": msg.bornHost, "storeHost": msg.storeHost,
            "reconsumeTimes": msg.reconsumeTimes, "bodyCRC": msg.bodyCRC, "magic": f"0x{msg.magicCode & 0xFFFFFFFF:08X}"}


def assert_delivered_once(path, parked=1160, cancelled=48):
    check = check_timer_store(path)
    assert check.problems == []
    assert check.lost == [] and check.duplicated == [] and check.misrouted == []
    assert (check.parked, check.cancelled, check.delivered) == (parked, cancelled, parked - cancelled)
    assert check.delay_delivered == check.delay_parked == 305
    return check


def test_fresh_every_timer_message_once_with_the_real_brokers_properties(store_copy):
    """timer-fresh drained to 2100: 1112 timer messages delivered once, the 48 recalled ones
    not; each delivery that the real broker also made (in timer-partial, from the same units)
    is the same record but for TIMER_DEQUEUE_MS and the store time: properties in the same
    order, TIMER_ENQUEUE_MS the unit's write clock, Long.MAX_VALUE for the overdue backlog."""
    path = store_copy("timer-fresh")
    with Store(path) as store:
        start = store.end_offset()
    events = drain(path)
    stopped = events[-1]
    assert isinstance(stopped, Stopped)
    assert (stopped.timerDelivered, stopped.timerCancelled, stopped.timerSkipped) == (1112, 48, 0)
    assert_delivered_once(path)
    ours = {}
    with Store(path) as store:
        for msg in store.commitlog.records(start):
            if "TIMER_DEQUEUE_MS" in msg.properties and msg.topic != "rmq_sys_wheel_timer":
                ours[msg.properties["UNIQ_KEY"]] = msg
    real = [r for r in real_records("timer-partial") if r.get("origin", "").startswith("timer-delivered")]
    assert len(real) == 317
    never_enqueued = 0
    for r in real:
        mine = ours[r["properties"]["UNIQ_KEY"]]
        assert fields(mine) == {k: r[k] for k in COMPARED}, r["msgId"]
        assert masked(mine.propertiesRaw) == masked(r["propertiesRaw"]), r["msgId"]
        never_enqueued += r["properties"]["TIMER_ENQUEUE_MS"] == "9223372036854775807"
    assert never_enqueued == 20


def test_partial_delivers_the_rest_and_nothing_the_broker_delivered(store_copy):
    """timer-partial (the real broker ran 15 s): the rest delivered, exactly the messages the
    real broker's own drain (deliver-all.json.gz) delivered, each once over both runs."""
    path = store_copy("timer-partial")
    with Store(path) as store:
        start = store.end_offset()
    drain(path)
    assert_delivered_once(path)
    with gzip.open(SAMPLES / "timer-partial" / "deliver-all.json.gz", "rt") as fh:
        ref = json.load(fh)
    real_keys = {d["uniqKey"] for d in ref["deliveries"] if d["origin"].startswith("timer-delivered")}
    with Store(path) as store:
        ours = {m.properties["UNIQ_KEY"] for m in store.commitlog.records(start)
                if "TIMER_DEQUEUE_MS" in m.properties and m.topic != "rmq_sys_wheel_timer"}
    assert ours == real_keys and len(ours) == 795


def test_a_second_run_puts_nothing(store_copy):
    path = store_copy("timer-partial")
    drain(path)
    with Store(path) as store:
        end = store.end_offset()
    stopped = drain(path)[-1]
    assert (stopped.delivered, stopped.timerDelivered, stopped.timerRolled) == (0, 0, 0)
    with Store(path) as store:
        assert store.end_offset() == end


def test_dry_run_lists_and_writes_nothing(store_copy):
    path = store_copy("timer-partial")
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file() and p.name != "timerwheel"}
    events = drain(path, dry_run=True)
    deliveries = [e for e in events if isinstance(e, TimerDelivered) and not e.rolled]
    assert deliveries and all(e.dryRun for e in deliveries)
    after = {p: p.read_bytes() for p in path.rglob("*") if p.is_file() and p.name != "timerwheel"}
    assert before == after


def test_store_down_longer_than_the_wheel_spans(store_copy):
    """Started 8 days after timer-partial's state, a real 5.3.3 broker never delivers 795 of
    its pending timer messages (spec: the recovery horizon); run delivers them and says how
    many the broker would have skipped."""
    path = store_copy("timer-partial")
    with Store(path) as store:
        t0 = 1795450287424
        engine = TimerEngine(store, None, clock=lambda: FAR, wall_clock=lambda: t0 + 8 * 86_400_000, dry_run=True)
        try:
            notes = [e for e in engine.setup() if isinstance(e, TimerNotice) and e.kind == "horizon"]
        finally:
            engine.close()
    assert notes and engine.horizon_units == 795
    assert "795 timer message(s)" in notes[0].message


def test_live_run_delivers_each_slot_once_it_is_due(store_copy):
    """On the wall clock: nothing before its slot is due (slot + precision), checkpoint never
    ahead of the wall clock; parked messages 1-2 s ahead are delivered by a run that sleeps
    until their slot, then the run is stopped."""
    from rmqdelay.store.writer import NewMessage, StoreWriter

    path = store_copy("timer-partial")
    drain(path, now_ms=wall_clock_ms())  # the backlog up to now
    now = wall_clock_ms()
    keys = []
    with StoreWriter(path) as w:
        for i in range(20):
            deliver = now + 1500 + 50 * i
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            uniq = f"C0A80001{i:024X}"
            keys.append(uniq)
            w.put(NewMessage("rmq_sys_wheel_timer", 0, b"live", {
                "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": uniq, "TIMER_OUT_MS": str(out),
                "REAL_TOPIC": "TimerTopic", "REAL_QID": str(i % 4)}))
    sched = Scheduler(path, mode="forever", flush_interval_ms=100)
    seen = []
    for e in sched.events():
        if isinstance(e, TimerDelivered) and e.uniqKey in keys:
            seen.append(e)
            if len(seen) == len(keys):
                sched.stop()
    assert sorted(e.uniqKey for e in seen) == sorted(keys)
    # A message the run enqueues after its TIMER_OUT_MS (a slow machine: the 1.5 s ahead are
    # gone before it reads them) is put at enqueue, in no slot; the rest wait for their slot.
    assert all(e.storeTimestamp >= e.slotTimeMs + 1000 if e.slotTimeMs is not None
               else e.storeTimestamp >= e.timerOutMs for e in seen)
    check = check_timer_store(path, drained=False)  # the rest is due over the next days
    assert check.duplicated == [] and check.misrouted == [] and check.problems == []
    assert not set(keys) & {k.split("+", 1)[1] for k in check.lost}
    state = read_timer_state(path)
    assert state.timercheck["lastReadTimeMs"] <= wall_clock_ms()


# -- kill -9 ---------------------------------------------------------------------------------------
def drained_exactly_once(path, stats: dict):
    """A clean run after the kills drains timer-fresh and its parked additions: each failure
    names the message and where its trail (records, units, chains) ends."""
    done = subprocess.run(run_cli(path), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    check = check_timer_store(path, strict_cancel=False)
    assert check.lost == [], check.lost_lines()
    assert check.duplicated == [] and check.misrouted == [], (check.duplicated, check.misrouted)
    assert check.problems == [], check.problems[:10]
    assert check.parked == 1160 + stats["parked"]
    assert check.delivered + check.cancelled == check.parked
    return check


@pytest.mark.slow
def test_kill_9_on_a_timer_store_delivers_every_timer_message_exactly_once(store_copy, tmp_path):
    """A run killed right after each of the timer's own writes, and the flush and checkpoint
    that follow its outputs (the other writes: the two tests below, between them covering
    TIMER_KILL_POINTS)."""
    rng = random.Random(20261123)
    path = store_copy("timer-fresh")
    points = ["timer-log-write", "timer-wheel-fsync", "timer-state-write", "timercheck-write",
              "timercheck-backup-write", "commit-log-fsync", "checkpoint-write"]
    stats = stop_timer_runs_at(path, points, rng, tmp_path)
    assert stats["killed"] == len(points)
    check = drained_exactly_once(path, stats)
    assert check.delay_delivered == check.delay_parked == 305


def test_a_message_due_before_the_read_clock_of_a_run_ahead_is_delivered_by_the_next_run(store_copy, capsys):
    """A run with ``--now`` five days ahead reads the wheel up to then; a timer message sent
    afterwards for an hour from now is due before that read clock. The next run (an earlier
    clock) delivers it at once, as the broker delivers a message already due on enqueue,
    instead of parking it in a slot its read clock has passed (where no run reads it again)."""
    from clirun import run_cli as cli

    store = store_copy("timer-partial")
    now = wall_clock_ms()
    assert cli(capsys, "run", store, "--once", "--now", str(now + 5 * 86_400_000)).code == 0
    sent = cli(capsys, "send", store, "--topic", "TimerTopic", "--body", "late", "--deliver-at", str(now + 3_600_000))
    assert sent.code == 0, sent.err
    delivered = 0
    for mode, clock in (("--once", now + 60_000), ("--until-empty", now + 7_200_000)):
        again = cli(capsys, "run", store, mode, "--now", str(clock), "--json")
        assert again.code == 0, again.err[-2000:]
        events = again.json_lines()
        delivered += [e for e in events if e["event"] == "stopped"][0]["timerDelivered"]
        assert any(e.get("kind") == "readAhead" for e in events), events[:5]
    assert delivered == 1
    with Store(store) as s:
        bodies = [r.body for r in s.commitlog.records() if r.topic == "TimerTopic" and r.body == b"late"]
    assert bodies == [b"late"]
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == [] and check.problems == []


def test_kill_9_while_full_slots_are_put_in_batches_delivers_each_message_once(store_copy, tmp_path):
    """Every parked message due within the same second as a few dozen others: each slot's
    outputs go to the writer as one batch (put_batch), killed right after a batch's records,
    its units, its index entries and the abort mark that covers them."""
    rng = random.Random(20261127)
    path = store_copy("timer-fresh")
    points = ["commit-log-write", "queue-unit-write", "index-write", "abort-mark-write"]
    stats = stop_timer_runs_at(path, points, rng, tmp_path, spread_ms=1)
    assert stats["killed"] == len(points)
    drained_exactly_once(path, stats)
