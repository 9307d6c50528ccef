"""`rmqdelay run`: what the broker's ScheduleMessageService does, exactly once."""

import collections
import shutil
import signal
import subprocess
import sys
import time

import pytest
from clirun import broker_holding_lock, run_cli
from conftest import SAMPLES
from rmqdelay.formats.commitlog import Message

from rmqdelay.errors import StoreLockedError
from rmqdelay.schedule.events import Delivered, Notice, QueueCreated, Replayed, Skipped, Sleeping
from rmqdelay.schedule.offsets import read_scheduler_state, scheduler_state_path
from rmqdelay.schedule.redelivery import message_timeup
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.store import Store
from rmqdelay.store.verify import verify_store
from rmqdelay.store.writer import NewMessage, StoreWriter

FAR_AHEAD = 4_102_444_800_000  # 2100-01-01
SAMPLE_STORES = sorted(p.name for p in SAMPLES.iterdir() if (p / "store" / "commitlog").is_dir())
DELIVERED_FIELDS = ["topic", "queueId", "flag", "sysFlag", "bornTimestamp", "bornHost", "storeHost",
                    "reconsumeTimes", "body", "bodyCRC", "propertiesRaw"]


def drain(path, **kw):
    kw.setdefault("now_ms", FAR_AHEAD)
    kw.setdefault("mode", "until-empty")
    return list(Scheduler(path, **kw).events())


def records(path) -> list[Message]:
    with Store(path) as store:
        return list(store.commitlog.records())


def pending_schedule_units(path):
    """(level, unit offset, schedule message) of every unit past the persisted offset."""
    out = []
    with Store(path) as store:
        offsets = store.delay_offsets()
        table = offsets.offsetTable if offsets else {}
        for level in range(1, 19):
            cq = store.schedule_queue(level)
            start = table.get(level, cq.min_offset)
            for i, u in enumerate(cq.units(start, cq.max_offset), start=start):
                out.append((level, i, store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))))
    return out


def assert_units_valid(path):
    with Store(path) as store:
        assert verify_store(store) == []
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                for i, u in enumerate(cq.units(cq.min_offset, cq.max_offset), start=cq.min_offset):
                    msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                    assert (msg.topic, msg.queueId, msg.queueOffset) == (topic, qid, i)


@pytest.mark.parametrize("name", SAMPLE_STORES)
def test_until_empty_delivers_every_pending_message_once_as_the_broker_would(name, store_copy):
    path = store_copy(name)
    before = records(path)
    pending = pending_schedule_units(path)
    assert pending
    events = drain(path)
    delivered = [e for e in events if isinstance(e, Delivered)]
    assert [e for e in events if isinstance(e, Skipped)] == []
    assert len(delivered) == len(pending)
    after = records(path)
    assert after[:len(before)] == before  # appends only
    new = {m.commitLogOffset: m for m in after[len(before):]}
    assert len(new) == len(pending)
    by_unit = {(e.level, e.offset): e for e in delivered}
    for level, offset, sched in pending:
        event = by_unit[(level, offset)]
        got = new[event.commitLogOffset]
        want = message_timeup(sched)
        assert {f: getattr(got, f) for f in DELIVERED_FIELDS} == {
            "topic": want.topic, "queueId": want.queueId, "flag": want.flag, "sysFlag": sched.sysFlag,
            "bornTimestamp": want.bornTimestamp, "bornHost": sched.bornHost, "storeHost": sched.storeHost,
            "reconsumeTimes": want.reconsumeTimes, "body": want.body, "bodyCRC": sched.bodyCRC,
            "propertiesRaw": want.propertiesRaw}
        # every property the broker keeps, REAL_TOPIC / REAL_QID / DELAY included
        assert got.properties == sched.properties
        assert (got.topic, str(got.queueId)) == (sched.properties["REAL_TOPIC"], sched.properties["REAL_QID"])
        assert got.storeTimestamp == FAR_AHEAD
    assert_units_valid(path)
    # Exactly once: copies per UNIQ_KEY + level, counting what the real broker delivered before.
    copies = collections.Counter((m.properties.get("UNIQ_KEY"), m.properties.get("DELAY")) for m in after
                                 if m.topic != "SCHEDULE_TOPIC_XXXX" and "REAL_TOPIC" in m.properties
                                 and m.properties.get("DELAY", "0") != "0")
    scheduled = {(m.properties.get("UNIQ_KEY"), m.properties.get("DELAY")) for m in after
                 if m.topic == "SCHEDULE_TOPIC_XXXX"}
    assert set(copies) == scheduled and set(copies.values()) == {1}
    with Store(path) as store:
        table = store.delay_offsets().offsetTable
        for level in range(1, 19):
            assert table.get(level, 0) == store.schedule_queue(level).max_offset
    # A second run finds nothing to do.
    again = drain(path)
    assert not [e for e in again if isinstance(e, Delivered)]
    assert len(records(path)) == len(after)


def test_delay_partial_levels_the_broker_delivered_are_not_delivered_again(store_copy):
    path = store_copy("delay-partial")
    events = drain(path)
    levels = collections.Counter(e.level for e in events if isinstance(e, Delivered))
    assert set(levels) == set(range(4, 19)) and levels[4] == 83


def test_cli_run_until_empty_json_events_and_summary(store_copy, capsys):
    path = store_copy("delay-fresh")
    result = run_cli(capsys, "run", path, "--until-empty", "--now", "2100-01-01T00:00:00Z", "--json")
    assert result.code == 0, result.err
    lines = result.json_lines()
    kinds = collections.Counter(line["event"] for line in lines)
    assert kinds["delivered"] == 1500 and kinds["stopped"] == 1
    first = next(line for line in lines if line["event"] == "delivered")
    assert {"level", "offset", "topic", "queueId", "queueOffset", "commitLogOffset", "msgId",
            "deliverTimestamp", "storeTimestamp", "latenessMs", "uniqKey"} <= set(first)
    result = run_cli(capsys, "run", path, "--until-empty", "--now", "2100-01-01T00:00:00Z")
    assert result.code == 0 and "delivered 0" in result.out


def test_dry_run_lists_due_messages_and_changes_no_byte(store_copy, capsys):
    path = store_copy("delay-partial")
    snapshot = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    events = drain(path, dry_run=True, levels=[4, 5])
    assert sum(isinstance(e, Delivered) and e.dryRun for e in events) == 166
    result = run_cli(capsys, "run", path, "--dry-run", "--now", str(FAR_AHEAD), "--levels", "4", "--json")
    assert sum(line["event"] == "delivered" for line in result.json_lines()) == 83
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == snapshot


def test_levels_option_delivers_only_those_levels(store_copy):
    path = store_copy("delay-fresh")
    events = drain(path, levels=[2, 18])
    assert {e.level for e in events if isinstance(e, Delivered)} == {2, 18}
    with Store(path) as store:
        assert store.delay_offsets().offsetTable == {2: 83, 18: 89}


def test_once_with_a_fixed_clock_delivers_only_what_is_due_at_that_instant(store_copy):
    path = store_copy("delay-fresh")
    with Store(path) as store:
        cq = store.schedule_queue(3)
        times = sorted(int(t) for t in cq.units()["tagsCode"])
    cut = times[40]
    events = drain(path, now_ms=cut, mode="once", levels=[3])
    delivered = [e for e in events if isinstance(e, Delivered)]
    assert len(delivered) == sum(t <= cut for t in times)
    assert all(e.deliverTimestamp <= cut for e in delivered)
    assert [e.latenessMs for e in delivered] == [cut - e.deliverTimestamp for e in delivered]


# -- stores built with the writer -----------------------------------------------------------
def put_schedule_units(path, specs, *, create=True):
    """Units put straight into SCHEDULE_TOPIC_XXXX queue ``level - 1`` with the given
    properties (no DELAY property, so the writer does not rewrite them): for REAL_TOPIC
    values a producer could never send. tagsCode (deliver time) is then 0: due at once."""
    with StoreWriter(path, create=create, commitlog_file_size=1 << 20, clock=lambda: 1_700_000_000_000) as w:
        for level, props in specs:
            w.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", queueId=level - 1, body=b"b", properties=props))


def test_bad_real_topics_are_reported_and_skipped_without_stalling_the_level(tmp_path):
    path = tmp_path / "s"
    with StoreWriter(path, create=True, commitlog_file_size=1 << 20) as w:
        w.put(NewMessage(topic="TopicA", queueId=0, body=b"x"))  # TopicA has one queue
    put_schedule_units(path, [
        (1, {"REAL_TOPIC": "../../etc", "REAL_QID": "0", "UNIQ_KEY": "bad-path"}),
        (1, {"REAL_TOPIC": "RMQ_SYS_TRANS_HALF_TOPIC", "REAL_QID": "0", "UNIQ_KEY": "half"}),
        (1, {"REAL_QID": "0", "UNIQ_KEY": "no-topic"}),
        (1, {"REAL_TOPIC": "TopicA", "REAL_QID": "zero", "UNIQ_KEY": "bad-qid"}),
        (1, {"REAL_TOPIC": "T" * 128, "REAL_QID": "0", "UNIQ_KEY": "long"}),
        (1, {"REAL_TOPIC": "TopicA", "REAL_QID": "7", "UNIQ_KEY": "beyond"}),
        (1, {"REAL_TOPIC": "TopicA", "REAL_QID": "0", "UNIQ_KEY": "good"}),
    ], create=False)
    events = drain(path)
    skipped = {e.offset: e.reason for e in events if isinstance(e, Skipped)}
    assert sorted(skipped) == [0, 1, 2, 3, 4]
    assert "transaction half topic" in skipped[1] and "no REAL_TOPIC" in skipped[2]
    delivered = [e for e in events if isinstance(e, Delivered)]
    assert [(e.topic, e.queueId, e.uniqKey) for e in delivered] == [("TopicA", 7, "beyond"), ("TopicA", 0, "good")]
    assert [(e.topic, e.queueId) for e in events if isinstance(e, QueueCreated)] == [("TopicA", 7)]
    assert not (tmp_path / "etc").exists() and not (path / "etc").exists()
    assert sorted(p.name for p in (path / "consumequeue").iterdir()) == ["SCHEDULE_TOPIC_XXXX", "TopicA"]
    with Store(path) as store:
        assert store.delay_offsets().offsetTable[1] == 7
    assert_units_valid(path)


def test_a_broker_holding_the_lock_is_refused_in_one_line(store_copy, capsys):
    path = store_copy("delay-fresh")
    with broker_holding_lock(path):
        with pytest.raises(StoreLockedError):
            drain(path)
        result = run_cli(capsys, "run", path, "--once")
        assert result.code == 3
        assert len(result.err.strip().splitlines()) == 1 and "lock" in result.err
        assert not (path / "config").exists()


# -- exactly once across crashes -----------------------------------------------------------
def snapshot_config(path):
    return {p.name: p.read_bytes() for p in (path / "config").iterdir()}


def restore_config(path, snap):
    shutil.rmtree(path / "config")
    (path / "config").mkdir()
    for name, data in snap.items():
        (path / "config" / name).write_bytes(data)


def run_and_snapshot_after_start(path, **kw):
    """Drain, keeping the config files as they were right after the run's first publish:
    what a kill -9 before any later publish would leave."""
    snap = None
    for event in Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", **kw).events():
        if snap is None and event.__class__.__name__ == "Persisted":
            snap = snapshot_config(path)
    return snap


def test_deliveries_after_the_last_persisted_offsets_are_found_and_not_redelivered(store_copy):
    path = store_copy("delay-fresh")
    snap = run_and_snapshot_after_start(path)
    n = len(records(path))
    restore_config(path, snap)  # a crash lost every offset persisted after the start
    events = drain(path)
    assert not [e for e in events if isinstance(e, Delivered)]
    replayed = [e for e in events if isinstance(e, Replayed)]
    assert sum(replayed[0].perLevel.values()) == 1500
    assert len(records(path)) == n
    with Store(path) as store:
        assert all(store.delay_offsets().offsetTable[l] == store.schedule_queue(l).max_offset for l in range(1, 19))


def test_a_crash_between_the_two_renames_loses_nothing(store_copy):
    path = store_copy("delay-partial")
    old_delay_offsets = (path / "config" / "delayOffset.json").read_bytes()
    run_and_snapshot_after_start(path, levels=[4])
    # The scheduler file was renamed, delayOffset.json not yet (it still holds the start table).
    (path / "config" / "delayOffset.json").write_bytes(old_delay_offsets)
    state = read_scheduler_state(path)
    state_text = scheduler_state_path(path).read_text()
    assert state.offsetTable[4] == 83
    assert '"previousOffsetTable"' in state_text
    # previousOffsetTable is the table published at start ({1:83,2:83,3:83}) = old file.
    events = drain(path, levels=[4])
    assert not [e for e in events if isinstance(e, Delivered)]
    with Store(path) as store:
        assert store.delay_offsets().offsetTable[4] == 83


def test_offsets_changed_by_someone_else_are_trusted_without_replay(store_copy):
    path = store_copy("delay-fresh")
    drain(path, levels=[1])
    # A broker moved level 1 back to 80 and persisted it.
    (path / "config" / "delayOffset.json").write_text("{\n\t\"offsetTable\":{1:80\n\t}\n}")
    events = drain(path, levels=[1])
    assert any(isinstance(e, Notice) and e.kind == "foreignOffsets" for e in events)
    assert [e.offset for e in events if isinstance(e, Delivered)] == [80, 81, 82]


def test_a_torn_tail_is_recovered_and_the_whole_records_before_it_count(store_copy):
    path = store_copy("delay-fresh")
    snap = run_and_snapshot_after_start(path, levels=[5])
    with Store(path) as store:
        last = list(store.commitlog.records())[-1]
        mf = store.commitlog.files[store.commitlog.file_index(last.commitLogOffset)]
    # Tear the last delivered record in half, and lose the persisted offsets.
    with open(mf.path, "r+b") as fh:
        fh.seek(last.commitLogOffset - mf.start + last.storeSize // 2)
        fh.write(bytes(last.storeSize - last.storeSize // 2))
    restore_config(path, snap)
    events = drain(path, levels=[5])
    assert any(isinstance(e, Notice) and e.kind == "recovery" for e in events)
    assert sum(sum(e.perLevel.values()) for e in events if isinstance(e, Replayed)) == 82
    assert [e.offset for e in events if isinstance(e, Delivered)] == [82]
    assert_units_valid(path)


# -- sleeping and stopping -------------------------------------------------------------------
def test_sleeps_until_the_next_deliver_time_and_never_delivers_early(tmp_path):
    path = tmp_path / "s"
    now = int(time.time() * 1000)
    with StoreWriter(path, create=True, commitlog_file_size=1 << 20) as w:
        for i in range(5):
            # level 2 (5 s): stored so that they fall due 1.0, 1.3, ... 2.2 s from now (a
            # loaded machine may take a second to get the run going)
            w.put(NewMessage(topic="T", queueId=0, body=b"%d" % i, storeTimestamp=now - 4000 + 300 * i,
                             properties={"DELAY": "2", "UNIQ_KEY": f"k{i}"}))
    events = list(Scheduler(path, mode="until-empty", levels=[2]).events())
    delivered = [e for e in events if isinstance(e, Delivered)]
    sleeps = [e for e in events if isinstance(e, Sleeping)]
    assert len(delivered) == 5
    assert all(e.storeTimestamp >= e.deliverTimestamp for e in delivered)
    # At most one sleep per deliver time, each until exactly that time: no polling. (On a
    # loaded machine a deliver time may pass while the one before it is delivered: no sleep.)
    untils = [s.untilTimestamp for s in sleeps]
    assert sleeps and untils == sorted(set(untils))
    assert set(untils) <= {e.deliverTimestamp for e in delivered}


def test_sigterm_stops_cleanly_persists_and_releases_the_lock(store_copy):
    path = store_copy("delay-partial")
    proc = subprocess.Popen([sys.executable, "-m", "rmqdelay", "run", str(path), "--json", "--levels", "18"],
                            stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if '"sleeping"' in line or '"persisted"' in line:
                break
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert '"stopped"' in out and "signal" in out
    assert not (path / "abort").exists()
    assert (path / "config" / "delayOffset.json").exists()
    with Store(path) as store:
        assert store.lock_holder() is None
