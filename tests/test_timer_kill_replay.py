"""`run` on a 5.x timer store stopped by SIGKILL at chosen points of its timer writes (the
fault injector kills the process right after the chosen system call), then run again: the
rerun replays what the stopped run left (units past the published timer log end, outputs
past the published commit log offset) and the store ends as the broker would have left it -
every timer message delivered once, every unit in its slot's chain, slot counts right."""

from __future__ import annotations

import json
import shutil
import signal
import struct
import time
from pathlib import Path

import pytest
from clirun import run_cli
from test_faults import FAR, cli

from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE, TIMER_MAGIC_DELETE
from rmqdelay.formats.timerlog import UNIT_SIZE
from rmqdelay.formats.timerwheel import (
    SLOT_SIZE,
    Slot,
    build_slot,
    parse_slot,
    slot_index,
)

from rmqdelay.errors import StoreError
from rmqdelay.schedule import scheduler
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer.files import TimerLogFiles
from rmqdelay.timer.audit import check_timer_store
from rmqdelay.timer.store import TimerStore

# The 5.x samples' times (tests/wallclock.py); child processes under faults and kills.
pytestmark = [pytest.mark.clock, pytest.mark.slow]

BASE = 1795450290000  # timer-fresh's lastReadTimeMs
DAY = 86_400_000


@pytest.fixture
def timer_store(tmp_path, sample_store):
    dest = tmp_path / "timer-fresh"
    shutil.copytree(sample_store("timer-fresh"), dest)
    return dest


def park(path: Path, count: int, deliver_from: int, serial: int, *, born: int = BASE, pad: int = 0) -> None:
    """Timer messages as the broker's put hook parks them in rmq_sys_wheel_timer."""
    with StoreWriter(path) as w:
        for i in range(count):
            deliver = deliver_from + 37 * i
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            w.put(NewMessage("rmq_sys_wheel_timer", 0, f"parked {serial + i}".encode() + b"-" * pad, {
                "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": f"0A0A0007{serial + i:024X}",
                "TIMER_OUT_MS": str(out), "REAL_TOPIC": "TimerTopic", "REAL_QID": str(i % 4)},
                bornTimestamp=born))


def run(store: Path, now: int | str, faults: list[dict] | None = None):
    return cli("run", store, "--until-empty", "--now", now, "--json", "--flush-interval", "1000s", faults=faults)


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


def kill_rolling_run_and_lose_its_records(store: Path) -> None:
    """Park messages that roll (ROLL units a day ahead), run to BASE, then kill the run that
    re-puts them after its first timer log write (the units of the re-puts, written together),
    and lose what it had not fsynced."""
    park(store, 20, BASE + 2 * DAY + 7_000, 1)
    first = run(store, BASE)
    assert first.code == 0, first.err
    killed = run(store, BASE + DAY + 2_000, faults=[{"op": "pwrite", "path": "/timerlog/", "nth": 1, "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    lose_unsynced_records(store)


def lose_unsynced_records(store: Path) -> None:
    """A power loss after the kill: the commit log records past the published timer state
    (and their queue units) never reached the disk - the writer had written them, not
    fsynced them - while the timer log units the run appended for them did."""
    start = json.loads((store / "config" / "rmqdelay.timer.json").read_text())["commitLogOffset"]
    for path in sorted((store / "commitlog").iterdir()):
        base, size = int(path.name), path.stat().st_size
        if base + size <= start:
            continue
        if base > start:
            path.unlink()  # a file begun after it: none of it on disk
            continue
        with open(path, "r+b") as fh:
            pos = max(start - base, 0)
            while pos < size:
                fh.seek(pos)
                chunk = fh.read(1 << 20)
                if not any(chunk):
                    break
                fh.seek(pos)
                fh.write(bytes(len(chunk)))
                pos += len(chunk)
    for path in (store / "consumequeue").glob("*/*/*"):  # their queue units with them
        data = bytearray(path.read_bytes())
        for at in range(0, len(data) - 19, 20):
            if int.from_bytes(data[at:at + 8], "big") >= start and any(data[at:at + 20]):
                data[at:at + 20] = bytes(20)
        path.write_bytes(bytes(data))


def units_past_the_published_end(store: Path):
    end = json.loads((store / "config" / "rmqdelay.timer.json").read_text())["timerLogEnd"]
    with Store(store) as s:
        ts = TimerStore(s)
        precision, file_size = ts.config.precisionMs, ts.log.file_size
        ts.close()
    log = TimerLogFiles(store / "timerlog", file_size, end)
    units = []
    try:
        while True:
            try:
                unit = log.read(end + len(units) * UNIT_SIZE)
            except StoreError:
                break
            units.append(unit)
    finally:
        log.close()
    return units, precision


def cut_timer_log(store: Path, offset: int) -> None:
    """The timer log from global ``offset`` to the end of its file zeroed: a write cut there."""
    files = sorted((store / "timerlog").iterdir())
    for path in files:
        base, size = int(path.name), path.stat().st_size
        if base <= offset < base + size:
            with open(path, "r+b") as fh:
                fh.seek(offset - base)
                fh.write(bytes(base + size - offset))


def wheel_points_at(store: Path, units, precision: int) -> None:
    """The wheel as a run of an older rmqdelay could leave it: its slots written with the
    units, before the records they point at were on disk."""
    with open(store / "timerwheel", "r+b") as fh:
        for unit in units:
            t = unit.slotTimeMs
            index = slot_index(t, precision)
            fh.seek(index * SLOT_SIZE)
            slot = parse_slot(fh.read(SLOT_SIZE), index, precision)
            if slot.timeSlot != t // precision:
                slot = Slot(index, t // precision, -1, -1, 0, 0, precision)
            num = slot.num + (-1 if unit.magic & TIMER_MAGIC_DELETE else 1)
            first = slot.firstPos if slot.firstPos != -1 else unit.offset
            fh.seek(index * SLOT_SIZE)
            fh.write(build_slot(Slot(index, t // precision, first, unit.offset, num, slot.magic, precision)))


@pytest.mark.parametrize("wheel_written", [False, True], ids=["units-only", "wheel-too"])
def test_units_whose_records_were_lost_and_overwritten_by_another_writer(timer_store, wheel_written):
    """A run is killed after it appended timer log units for roll re-puts, and the re-puts'
    records are lost (a power loss: the units reached the disk, the records did not; or a
    store an older rmqdelay left). Another writer then parks messages where those records
    were. The rerun adopts none of those units (their records are gone): it turns them into
    delete units pointing at a marker due in their slot, keeps them in their slots' chains
    with the slots' ends and counts right, and puts every message once."""
    kill_rolling_run_and_lose_its_records(timer_store)
    units, precision = units_past_the_published_end(timer_store)
    assert len(units) >= 20  # the re-puts' units, with what else the run enqueued before that write
    if wheel_written:
        wheel_points_at(timer_store, units, precision)
    park(timer_store, 200, BASE + DAY + 60_000, 100, born=BASE + DAY, pad=4000)  # over the lost records
    with Store(timer_store) as s:
        framed = {r.commitLogOffset: r.storeSize for r in s.commitlog.records()}
    assert any(framed.get(u.offsetPy) != u.sizePy and u.offsetPy < max(framed) for u in units)

    again = run(timer_store, BASE + DAY + 2_000)
    assert again.code == 0, again.err
    check = check_timer_store(timer_store, drained=False, strict_cancel=False)
    assert check.problems == [], check.problems[:5]
    assert check.duplicated == [] and check.misrouted == []
    verify = cli("inspect", "timer", timer_store, "--verify")
    assert verify.code == 0, verify.out[-2000:] + verify.err
    assert_clean(timer_store, 1160 + 220)


def test_a_record_of_the_same_size_where_a_lost_one_was_does_not_take_its_unit(timer_store):
    """As above, but the other writer's records end exactly where a lost re-put began, and
    the next one it parks there has that re-put's size: the unit the killed run appended for
    the re-put (another topic, another slot) is not adopted for it. The new message gets its
    own unit in its own slot; the old unit becomes a delete unit; verify is clean."""
    kill_rolling_run_and_lose_its_records(timer_store)
    units, _ = units_past_the_published_end(timer_store)
    target = units[0]
    parked = 0

    def put(w, size_or_pad: int, *, exact: bool = False):
        nonlocal parked
        deliver = BASE + DAY + 90_000 + 1_000 * parked
        props = {"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": f"0A0A0008{parked:024X}",
                 "TIMER_OUT_MS": str(deliver - 1000), "REAL_TOPIC": "TimerTopic", "REAL_QID": "1"}
        pad = size_or_pad - overhead if exact else size_or_pad
        parked += 1
        return w.put(NewMessage("rmq_sys_wheel_timer", 0, b"-" * pad, props, bornTimestamp=BASE + DAY))

    with StoreWriter(timer_store) as w:
        first_put = put(w, 3000)
        overhead = first_put.storeSize - 3000  # every record here: the same properties' lengths
        while w.end_offset + 8000 < target.offsetPy:
            put(w, 3000)
        put(w, target.offsetPy - w.end_offset, exact=True)
        same = put(w, target.sizePy, exact=True)
    assert (same.commitLogOffset, same.storeSize) == (target.offsetPy, target.sizePy)

    again = run(timer_store, BASE + DAY + 2_000)
    assert again.code == 0, again.err
    verify = cli("inspect", "timer", timer_store, "--verify")
    assert verify.code == 0, verify.out[-2000:] + verify.err
    assert_clean(timer_store, 1160 + 20 + parked)


@pytest.mark.parametrize("fault", [
    {"op": "pwrite", "path": "/commitlog/", "contains": "unit-without-record", "kill": True},
    {"op": "pwrite", "path": "/timerlog/", "nth": 3, "kill": True},
], ids=["after-the-marker-record", "between-two-unit-rewrites"])
def test_a_kill_while_the_units_without_records_are_settled(timer_store, fault):
    """The rerun that settles units whose records were lost is itself killed: after it put
    the marker record they will point at, or half way through rewriting them. The run
    after it finishes the work (units already pointing at a marker are kept as they are)."""
    kill_rolling_run_and_lose_its_records(timer_store)
    park(timer_store, 200, BASE + DAY + 60_000, 100, born=BASE + DAY, pad=4000)
    settling = run(timer_store, BASE + DAY + 2_000, faults=[fault])
    assert settling.code == -signal.SIGKILL, settling.err
    again = run(timer_store, BASE + DAY + 2_000)
    assert again.code == 0, again.err
    verify = cli("inspect", "timer", timer_store, "--verify")
    assert verify.code == 0, verify.out[-2000:] + verify.err
    assert_clean(timer_store, 1160 + 220)


def test_a_read_clock_twelve_days_behind_reads_first_the_slots_an_enqueue_would_overwrite(timer_store):
    """Runs stopped again and again before they publish (or a store left alone for 12 days)
    leave the read clock far behind the clock new messages are enqueued at. A unit enqueued
    a day ahead of that clock takes the wheel index of the slot 14 days before it: that slot,
    still unread, must be read first, or its messages are never delivered."""
    from rmqdelay.store import Store
    from rmqdelay.timer.store import TimerStore

    with Store(timer_store) as s, TimerStore(s) as ts:
        t = min(int(r["timeSlot"]) * 1000 for r in ts.wheel.non_empty()
                if int(r["timeSlot"]) * 1000 >= BASE and int(r["lastPos"]) >= 0 and int(r["num"]) > 0)
    park(timer_store, 1, t + 14 * DAY + 500, 300, born=t + 13 * DAY)  # the same wheel index as t
    first = run(timer_store, t + 13 * DAY)
    assert first.code == 0, first.err
    assert_clean(timer_store, 1160 + 1)


def test_a_message_parked_where_a_killed_runs_lost_re_put_was_is_delivered(timer_store):
    """The rare loss of the kill test under load: a run reads only a roll slot, so its
    re-puts are the first records it writes, and is killed right after the first re-put's
    unit is appended. The next message parked lands at the commit log offset that re-put
    had; the rerun must not take that unit for it (it was adopted with the re-put's slot
    and size, read as no message and skipped: never delivered, and the run exited 1)."""
    park(timer_store, 20, BASE + 2 * DAY + 7_000, 1)  # rolled: ROLL units a day ahead
    assert run(timer_store, BASE).code == 0
    assert run(timer_store, BASE + DAY - 1_000).code == 0  # everything before the roll slot
    killed = run(timer_store, BASE + DAY + 2_000, faults=[{"op": "pwrite", "path": "/timerlog/", "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    park(timer_store, 5, BASE + DAY + 60_000, 100, born=BASE + DAY)
    assert_clean(timer_store, 1160 + 25)


def test_the_resume_marker_never_takes_the_wheel_index_of_a_slot_not_read(timer_store):
    """A run with `--now` ahead of the wall clock holds units up to two weeks past the
    wall clock; its checkpoint stays at the wall clock and a resume marker goes into the
    slot just before it. That slot's wheel index is the one of the slot 14 days later: the
    marker must not take it, or the messages there are never delivered."""
    wall = int(time.time() * 1000) // 1000 * 1000
    for i in range(-20, 40):  # around 14 days after the wall clock, whenever the run publishes
        park(timer_store, 1, wall + 14 * DAY + 1000 * i + 500, 400 + i + 20, born=wall)
    park(timer_store, 1, wall - 60_000, 500, born=wall)  # already due: the last entry takes no unit
    first = run(timer_store, wall + 13 * DAY)
    assert first.code == 0, first.err
    assert_clean(timer_store, 1160 + 61)


def test_two_runs_publishing_in_one_wall_second_chain_their_resume_markers(timer_store, capsys, monkeypatch):
    """As above, then the drain runs within the same wall-clock second: both runs put their
    resume marker in the slot before that second. The first marker was left out of the wheel
    (the index was the slot 14 days later's); the second, with that slot read, goes in, and
    chains to the first: one chain per slot time, its count -2 - never a second chain head."""
    wall = int(time.time() * 1000) // 1000 * 1000
    monkeypatch.setattr(scheduler, "wall_clock_ms", lambda: wall + 300)
    for i in range(-20, 40):
        park(timer_store, 1, wall + 14 * DAY + 1000 * i + 500, 400 + i + 20, born=wall)
    park(timer_store, 1, wall - 60_000, 500, born=wall)
    for now in (wall + 13 * DAY, FAR):
        result = run_cli(capsys, "run", timer_store, "--until-empty", "--now", now, "--json",
                         "--flush-interval", "1000s")
        assert result.code == 0, result.err
    check = check_timer_store(timer_store)
    assert check.problems == [], check.problems[:5]
    assert check.lost == [] and check.duplicated == [] and check.misrouted == []
    assert check.parked == 1160 + 61 == check.delivered + check.cancelled


def timing_count(store: Path, topic: str) -> int:
    doc = json.loads((store / "config" / "timermetrics").read_text())
    return doc["timingCount"][topic]["count"]


def test_units_a_killed_run_appended_are_counted_in_timermetrics_once(timer_store):
    """The run is killed while it writes the 20 units it enqueues (none published, nor their
    counts), only 5 of them on disk (the kill cut the write); the rerun adopts those 5 and
    enqueues the other 15: timermetrics counts all 20, as the broker's doEnqueue and an
    unkilled run do."""
    first = run(timer_store, BASE + 1_000)  # what is due by then delivered: the rest is only enqueued
    assert first.code == 0, first.err
    before = timing_count(timer_store, "TimerTopic")
    park(timer_store, 20, BASE + 3_600_000, 300)  # due in an hour: enqueued, not delivered
    killed = run(timer_store, BASE + 1_000, faults=[{"op": "pwrite", "path": "/timerlog/", "nth": 1, "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    units, _ = units_past_the_published_end(timer_store)
    assert len(units) == 20  # written together
    cut_timer_log(timer_store, units[5].offset)
    assert len(units_past_the_published_end(timer_store)[0]) == 5
    rerun = run(timer_store, BASE + 1_000)
    assert rerun.code == 0, rerun.err
    assert timing_count(timer_store, "TimerTopic") == before + 20
    assert_clean(timer_store, 1160 + 20)


@pytest.mark.parametrize("damage", ["last-log-file-cut", "timercheck-zeroed", "first-log-file-cut-torn-tail"])
def test_a_repair_after_a_kill_keeps_the_killed_runs_outputs_from_being_put_again(timer_store, damage):
    """A run killed after it put outputs and before it published them: the next run finds its
    own state (config/rmqdelay.timer.json) and puts none of them again. A repair in between
    rewrites config/timercheck - it must carry that state with it (or, with the checkpoint
    destroyed, resume from it), else the next run takes the repaired checkpoint as a broker's
    and delivers every one of those outputs a second time."""
    park(timer_store, 40, BASE + 2_000, 1)
    killed = run(timer_store, BASE + 3_600_000,
                 faults=[{"op": "pwrite", "path": "/commitlog/", "contains": "TIMER_DEQUEUE_MS", "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err
    with Store(timer_store) as store:
        outputs = sum(1 for r in store.commitlog.records() if "TIMER_DEQUEUE_MS" in r.properties)
    assert outputs > 0  # put, never published
    if damage == "timercheck-zeroed":
        path = timer_store / "config" / "timercheck"
        path.write_bytes(bytes(path.stat().st_size))
    elif damage == "first-log-file-cut-torn-tail":
        # Units of enqueued messages destroyed (the repair asks the commit log which went on),
        # and the commit log ends in what an interrupted append leaves: a record head, zeros.
        first = sorted((timer_store / "timerlog").iterdir())[0]
        with open(first, "r+b") as fh:
            fh.truncate(first.stat().st_size // 2 + 7)
        with Store(timer_store) as store:
            end = store.end_offset()
            last = store.commitlog.files[-1]
        torn = struct.pack(">ii", 604, MESSAGE_MAGIC_CODE) + b"\x01" * 12
        if end + len(torn) > last.end:  # the last file is full: the append had begun a new one
            path, at = last.path.with_name(f"{last.end:020d}"), 0
            path.write_bytes(bytes(last.size))
        else:
            path, at = last.path, end - last.start
        with open(path, "r+b") as fh:
            fh.seek(at)
            fh.write(torn)
    else:
        last = sorted((timer_store / "timerlog").iterdir())[-1]
        with open(last, "r+b") as fh:
            fh.truncate(10)
    repair = cli("timer", "repair", timer_store, "--execute", "--now", BASE + 3_600_000)
    assert repair.code == 0, repair.err
    assert "config/rmqdelay.timer.json" in repair.out
    assert_clean(timer_store, 1160 + 40)
