"""`rmqdelay run` a batch at a time writes what it writes one message at a time: the due units
of a level read and restored together, the timer's already-due entries put together, and the
stores left byte for byte the same - commit log, consume queues, index, timer log and wheel,
offsets and checkpoint files - with the same events in the same order."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from conftest import SAMPLES

from rmqdelay.runfilter import RunFilter
from rmqdelay.schedule.redelivery import restore_unit
from rmqdelay.schedule.restore import restore_columns, restore_units
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage, StoreWriter

FAR = 4_102_444_800_000  # 2100-01-01: everything is due
FROZEN_NS = 1_795_521_600_000 * 1_000_000  # the wall clock the timer's metrics and versions are stamped with
DELAY_SAMPLES = sorted(p.name for p in SAMPLES.iterdir() if (p / "store" / "commitlog").is_dir())


def store_bytes(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def drained(path: Path, batched: bool, run_filter: RunFilter | None = None, nows: tuple[int, ...] = (FAR,)) -> list:
    """The events of a run to ``--until-empty`` on each clock of ``nows`` in turn. Offsets are
    published when a level is drained only: a publish on the flush interval would fall where
    the run's time (a first compile, a loaded machine) puts it."""
    return [e for now in nows for e in Scheduler(path, now_ms=now, mode="until-empty", batched=batched,
                                                  flush_interval_ms=3_600_000, run_filter=run_filter).events()]


def assert_same_run(source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                    nows: tuple[int, ...] = (FAR,), **run_filter) -> list:
    """Drain two copies of ``source`` (a run on each clock of ``nows``), one message at a time
    and in batches: the same events, the same bytes in every file. The wall clock stands still
    (the timer stamps its metrics and data versions with it)."""
    monkeypatch.setattr(time, "time_ns", lambda: FROZEN_NS)
    monkeypatch.setattr(time, "time", lambda: FROZEN_NS / 1e9)
    one, many = tmp_path / "one-at-a-time", tmp_path / "batched"
    shutil.copytree(source, one)
    shutil.copytree(source, many)
    events_one = drained(one, False, RunFilter(**run_filter) if run_filter else None, nows)
    events_many = drained(many, True, RunFilter(**run_filter) if run_filter else None, nows)
    # The same events, but for the store's path in a reason.
    assert [repr(e).replace(str(many), "STORE") for e in events_many] == \
        [repr(e).replace(str(one), "STORE") for e in events_one]
    before, after_one, after_many = store_bytes(source), store_bytes(one), store_bytes(many)
    assert after_one != before  # the run wrote
    assert sorted(after_many) == sorted(after_one)
    differ = [name for name in after_one if after_one[name] != after_many[name]]
    assert differ == []
    return events_many


def bad_and_good_store(path: Path) -> None:
    """A 4.x store whose levels mix deliverable messages with ones the broker skips (no
    REAL_TOPIC, a bad topic, a bad queue id, the schedule topic itself: put straight into the
    schedule queues, due at once) and a unit whose size is not its message's."""
    born = 1_700_000_000_000
    odd = [{"REAL_QID": "0"}, {"REAL_TOPIC": "bad topic!", "REAL_QID": "0"}, {"REAL_TOPIC": "TopicA", "REAL_QID": "x1"},
           {"REAL_TOPIC": "SCHEDULE_TOPIC_XXXX", "REAL_QID": "0"}]
    with StoreWriter(path, create=True, commitlog_file_size=1 << 20, clock=lambda: born, sync=False) as w:
        for i in range(300):
            if i % 60 == 59:
                w.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", queueId=i % 4, body=b"odd",
                                 properties=dict(odd[i // 60 % 4], UNIQ_KEY=f"ODD{i}")))
            w.put(NewMessage(topic=("TopicA", "TopicB")[i % 2], queueId=i % 3, body=b"b%d" % i, bornTimestamp=born + i,
                             properties={"UNIQ_KEY": f"U{i:06d}", "KEYS": f"k{i}", "DELAY": str(1 + i % 4)}))
    # One more unit of level 4, naming the first record with another size: no readable message.
    with Store(path) as store:
        cq = store.schedule_queue(4)
        at, first = cq.locate(cq.max_offset)
        first_record = int(cq.units(cq.min_offset, cq.min_offset + 1)["commitLogOffset"][0])
    with open(at, "r+b") as fh:
        fh.seek(first)
        fh.write(first_record.to_bytes(8, "big") + (999).to_bytes(4, "big") + (0).to_bytes(8, "big"))


@pytest.mark.parametrize("name", DELAY_SAMPLES)
def test_batched_run_leaves_the_same_bytes_as_one_message_at_a_time(name, sample_store, tmp_path, monkeypatch):
    assert_same_run(sample_store(name), tmp_path, monkeypatch)


def test_batched_run_skips_what_it_skipped_one_at_a_time_with_the_same_bytes(tmp_path, monkeypatch):
    source = tmp_path / "source"
    bad_and_good_store(source)
    events = assert_same_run(source, tmp_path, monkeypatch)
    skipped = [e for e in events if type(e).__name__ == "Skipped"]
    delivered = [e for e in events if type(e).__name__ == "Delivered"]
    assert len(delivered) == 300
    reasons = sorted(e.reason.split(" (")[0].split(":")[0] for e in skipped)
    assert reasons == ["REAL_QID is not a queue id", "REAL_TOPIC is SCHEDULE_TOPIC_XXXX itself",
                       "REAL_TOPIC is a topic name outside ^[%|a-zA-Z0-9_-]+$", "no REAL_TOPIC property",
                       "no REAL_TOPIC property", "no readable message"]


@pytest.mark.parametrize("name", ["timer-fresh", "timer-partial"])
def test_batched_timer_run_leaves_the_same_bytes_as_one_message_at_a_time(name, sample_store, tmp_path,
                                                                          monkeypatch):
    events = assert_same_run(sample_store(name), tmp_path, monkeypatch)
    assert sum(type(e).__name__ == "TimerDelivered" for e in events) > 100


TIMER_BASE = 1_795_450_290_000  # timer-fresh's lastReadTimeMs
LONG_RETRY = ("%RETRY%GID_timer_oracle_consumer_group_with_a_deliberately_long_name_so_that_the_retry_topic_"
              "exceeds_127_bytes_0123456789_abcdefghijklmnopqr")  # a 5.x V2 record's topic, in timer-fresh


def park_timer_shapes(path: Path, count: int) -> int:
    """Timer messages parked in ``path`` as the put hook parks them, due over the next ten
    minutes (ten a slot): every shape the batched timer run tells apart - key sets of their
    own (TAGS and KEYS or not, user properties, TIMER_ROLL_TIMES, TIMER_ENQUEUE_MS already
    set, a value not ASCII), DELAY and IPv6 hosts (what put() rewrites or lays out otherwise),
    born and store hosts of their own, a REAL_TOPIC too long for a V1 record, a REAL_QID that
    is not a number, an empty value, cancellations of messages in their slot, and one queue
    entry whose size is not its record's (read one by one, skipped). Returns how many are
    cancelled."""
    cancelled = 0
    with StoreWriter(path, clock=lambda: TIMER_BASE) as w:
        for i in range(count):
            deliver = TIMER_BASE + 5_000 + (i % 600) * 1_000 + i % 7
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            uniq = f"0A0A0009{i:024X}"
            topic = LONG_RETRY if i % 97 == 5 else ("TimerTopic", "TopicTest", "OrderTopic")[i % 3]
            props = {"TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": uniq, "TIMER_OUT_MS": str(out),
                     "REAL_TOPIC": topic, "REAL_QID": "x" if i % 401 == 9 else str(i % 2)}
            if i % 3 == 0:
                props.update(TAGS=f"tag{i % 5}", KEYS=f"key{i}")
            if i % 5 == 1:
                props[f"user{i % 4}"] = "v" * (i % 9 + 1)
            if i % 11 == 2:
                props["TIMER_ROLL_TIMES"] = "1"
            if i % 13 == 3:
                props["EMPTY"] = ""
            if i % 17 == 4:
                props["TIMER_ENQUEUE_MS"] = str(TIMER_BASE - 1_000)  # set before: replaced in its place
            if i % 19 == 6:
                props["DELAY"] = "0"  # put() rewrites what asks for a delay
            if i % 23 == 8:
                props["note"] = "ü" * (i % 3 + 1)
            host = (bytes(15) + b"\x01", 10911) if i % 29 == 10 else (b"\x0a\x00\x00\x05", 10911 + i % 2)
            w.put(NewMessage("rmq_sys_wheel_timer", 0, b"m%d" % i, props, bornTimestamp=TIMER_BASE - i,
                             reconsumeTimes=i % 3, bornHost=host, storeHost=host if i % 31 == 12 else
                             (b"\x0a\x00\x00\x06", 10911)))
            if i % 50 == 7:
                cancelled += 1
                w.put(NewMessage("rmq_sys_wheel_timer", 0, b"0", {
                    "TIMER_DEL_UNIQKEY": f"{topic}+{uniq}", "TIMER_DELIVER_MS": str(out + 1),
                    "UNIQ_KEY": f"0A0A000A{i:024X}", "TIMER_OUT_MS": str(out), "REAL_TOPIC": topic,
                    "REAL_QID": "0", "TAGS": "_RECALL_TAG_"}, bornTimestamp=TIMER_BASE))
    with Store(path) as store:
        cq = store.consume_queue("rmq_sys_wheel_timer", 0)
        at, pos = cq.locate(cq.max_offset - 3)
    with open(at, "r+b") as fh:  # one entry a byte short of its record
        fh.seek(pos + 8)
        size = int.from_bytes(fh.read(4), "big")
        fh.seek(pos + 8)
        fh.write((size - 1).to_bytes(4, "big"))
    return cancelled


@pytest.mark.parametrize("through", ["due-at-once", "the-wheel"])
def test_batched_timer_run_of_every_shape_leaves_the_same_bytes(through, sample_store, tmp_path, monkeypatch):
    """6,000 timer messages of every shape parked in timer-fresh. Either all of them are past
    due when the run enqueues them (put at once, read a queue batch at a time), or a run on
    the clock they were parked at enqueues them first - more units than the timer log's
    buffer holds, across the sample's 16 KiB timer log files - and the next reads them slot
    by slot. Batched or one at a time: the same events, the same bytes."""
    source = tmp_path / "source"
    shutil.copytree(sample_store("timer-fresh"), source)
    cancelled = park_timer_shapes(source, 6_000)
    nows = (FAR,) if through == "due-at-once" else (TIMER_BASE, FAR)
    events = assert_same_run(source, tmp_path, monkeypatch, nows)
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("TimerDelivered") > 6_000 - 30
    reasons = [e.reason for e in events if type(e).__name__ == "TimerSkipped"]
    assert any("REAL_QID is not a queue id" in r for r in reasons)
    assert any("no readable message" in r for r in reasons)
    if through == "the-wheel":
        assert kinds.count("TimerCancelled") >= cancelled


def put_stored_counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each put_stored call of the test puts (the columns path taken)."""
    counts: list[int] = []
    put_stored = StoreWriter.put_stored

    def counted(self, copies):
        counts.append(len(copies))
        return put_stored(self, copies)

    monkeypatch.setattr(StoreWriter, "put_stored", counted)
    return counts


def park_ready_shapes(path: Path, count: int) -> None:
    """Timer messages parked in ``path``, due over the next ten minutes (ten a slot), that the
    batched run puts as columns (timer/deliver/columns.py), of every shape it tells apart
    there: key sets of their own and in their own orders, a stored string with a separator
    after every pair or between pairs only, TIMER_DEQUEUE_MS already set (replaced in its
    place), values not ASCII, IPv6 born and store hosts, a REAL_TOPIC too long for a V1
    record, the same UNIQ_KEY twice."""
    with StoreWriter(path, clock=lambda: TIMER_BASE) as w:
        for i in range(count):
            deliver = TIMER_BASE + 5_000 + (i % 600) * 1_000 + i % 7
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            topic = LONG_RETRY if i % 97 == 5 else ("TimerTopic", "TopicTest", "OrderTopic")[i % 3]
            pairs = [("TIMER_DELIVER_MS", str(deliver)), ("UNIQ_KEY", f"0A0A0009{i // 2 if i % 89 == 1 else i:024X}"),
                     ("TIMER_OUT_MS", str(out)), ("REAL_TOPIC", topic), ("REAL_QID", str(i % 4))]
            if i % 3 == 0:
                pairs += [("TAGS", f"tag{i % 5}"), ("KEYS", f"key{i} k{i % 7}")]
            if i % 5 == 1:
                pairs.append((f"user{i % 4}", "v" * (i % 9 + 1)))
            if i % 7 == 2:
                pairs.append(("TIMER_DEQUEUE_MS", str(TIMER_BASE - 7)))
            if i % 11 == 3:
                pairs.append(("note", "ü€" * (i % 3 + 1)))
            if i % 4 == 1:
                pairs.reverse()
            raw = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
            if i % 6 == 4:
                raw = raw[:-1]  # a separator between pairs only, as a 4.x broker stores it
            host = (bytes(15) + b"\x01", 10911) if i % 13 == 10 else (b"\x0a\x00\x00\x05", 10911 + i % 2)
            w.put(NewMessage("rmq_sys_wheel_timer", 0, b"m%d" % i * (1 + i % 40), dict(pairs), propertiesRaw=raw,
                             bornTimestamp=TIMER_BASE - i, reconsumeTimes=i % 3, bornHost=host,
                             storeHost=host if i % 17 == 12 else (b"\x0a\x00\x00\x06", 10911), flag=i % 5,
                             sysFlag=(0x8 if i % 23 == 3 else 0)))


@pytest.mark.parametrize("through", ["due-at-once", "the-wheel"])
def test_batched_timer_run_puts_ready_messages_as_columns_with_the_same_bytes(through, sample_store, tmp_path,
                                                                               monkeypatch):
    """3,000 timer messages the batched run puts as columns, of every shape it tells apart
    there, parked in timer-fresh: put at once or read slot by slot, the same events and bytes
    as one at a time - and nearly all of them did go as columns."""
    source = tmp_path / "source"
    shutil.copytree(sample_store("timer-fresh"), source)
    park_ready_shapes(source, 3_000)
    as_columns = put_stored_counted(monkeypatch)
    nows = (FAR,) if through == "due-at-once" else (TIMER_BASE, FAR)
    events = assert_same_run(source, tmp_path, monkeypatch, nows)
    assert sum(type(e).__name__ == "TimerDelivered" for e in events) > 3_000
    assert sum(as_columns) > 2_700


@pytest.mark.parametrize("name", ["delay-partial", "broker5-e2e"])
def test_restored_a_batch_at_a_time_as_one_unit_at_a_time(name, sample_store):
    """Every unit of every level, delivered or not: what restore_units says of it is what
    restore_unit says (its UNIQ_KEY, the message put, the reason it is skipped)."""
    with Store(sample_store(name)) as store:
        broker5x = name.startswith("broker5")
        seen = 0
        for level in range(1, 19):
            cq = store.schedule_queue(level)
            units = cq.units(cq.min_offset, cq.max_offset)
            offsets, sizes = units["commitLogOffset"].tolist(), units["size"].tolist()
            batched = restore_units(store, offsets, sizes, broker5x=broker5x)
            for (uniq, new, reason), offset, size in zip(batched, offsets, sizes):
                msg, one_new, one_reason = restore_unit(store, offset, size, broker5x=broker5x)
                assert (uniq, new, reason) == (msg.properties.get("UNIQ_KEY") if msg else None, one_new, one_reason)
                seen += 1
        assert seen > 0


SHAPED = {  # level -> the stored strings of its messages ({i}: the message, {q}: a queue)
    # Strings messageTimeup keeps: in HashMap order, one entry per segment; verdicts per shape.
    1: ["REAL_TOPIC\x01TopicA\x02KEYS\x01k{i}\x02UNIQ_KEY\x01U{i}\x02REAL_QID\x01{q}",
        "REAL_TOPIC\x01TopicB\x02UNIQ_KEY\x01\u00fc{i}\x02TAGS\x01T\u00e9\x02REAL_QID\x01+{q}",
        "REAL_TOPIC\x01TopicA\x02UNIQ_KEY\x01V{i}\x02REAL_QID\x01\u0663",  # an Arabic-Indic 3: parseInt's
        "REAL_TOPIC\x01TopicA\x02UNIQ_KEY\x01W{i}\x02REAL_QID\x01-1",  # skipped
        "UNIQ_KEY\x01X{i}\x02REAL_QID\x010",  # skipped: no REAL_TOPIC
        "REAL_TOPIC\x01bad topic\x02UNIQ_KEY\x01\udcff{i}\x02REAL_QID\x011",  # skipped; an undecodable byte
        "REAL_TOPIC\x01TopicA\x02x\x01a\x01b\x02UNIQ_KEY\x01Y{i}\x02REAL_QID\x012"],  # a value with a separator
    # Strings messageTimeup rewrites - keys out of HashMap order, a key twice, an empty value, a
    # trailing or an empty segment: such a level's batch goes the reference way.
    2: ["UNIQ_KEY\x01Y{i}\x02REAL_QID\x011\x02REAL_TOPIC\x01TopicA", "REAL_QID\x011\x02REAL_TOPIC\x01TopicA"],
    3: ["REAL_TOPIC\x01TopicA\x02UNIQ_KEY\x01Z{i}\x02REAL_QID\x011\x02REAL_QID\x012"],
    4: ["REAL_TOPIC\x01TopicA\x02KEYS\x01\x02UNIQ_KEY\x01Z{i}\x02REAL_QID\x011"],
    5: ["REAL_TOPIC\x01TopicB\x02UNIQ_KEY\x01Z{i}\x02REAL_QID\x010\x02"],
    6: ["REAL_TOPIC\x01TopicB\x02\x02UNIQ_KEY\x01Z{i}\x02REAL_QID\x010"],
}


def shaped_store(path: Path) -> None:
    """Schedule messages of every shape above (put straight into the levels' queues, due at
    once), with IPv4 hosts but on level 7, whose every other born host is IPv6 (read by the
    compiled pass too: its host 16 bytes long), across commit log files."""
    born = 1_700_000_000_000
    with StoreWriter(path, create=True, commitlog_file_size=1 << 16, clock=lambda: born, sync=False) as w:
        for i in range(700):
            level = 1 + i % 7
            texts = SHAPED.get(level, SHAPED[1])
            raw = texts[i // 7 % len(texts)].format(i=i, q=i % 3)
            host = (bytes(15) + b"\x01", 7) if level == 7 and i % 2 else (bytes([10, 1, 2, i % 200]), 3000 + i)
            w.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", queueId=level - 1, body=b"m%d" % i * (1 + i % 50),
                             propertiesRaw=raw, flag=i % 3, bornTimestamp=born - i, bornHost=host,
                             reconsumeTimes=i % 4))


def test_batched_run_of_every_shape_of_stored_properties_leaves_the_same_bytes(tmp_path, monkeypatch):
    source = tmp_path / "source"
    shaped_store(source)
    with Store(source) as store:
        for level in range(1, 8):
            cq = store.schedule_queue(level)
            units = cq.units(cq.min_offset, cq.max_offset)
            offsets, sizes = units["commitLogOffset"].tolist(), units["size"].tolist()
            assert len(set(o >> 16 for o in offsets)) > 1  # the level's records lie in several files
            columns = restore_columns(store, offsets, sizes)
            assert (columns is not None) == (level in (1, 7))  # the others: restore_units reads them
    events = assert_same_run(source, tmp_path, monkeypatch)
    delivered = [e for e in events if type(e).__name__ == "Delivered"]
    assert len(delivered) == 700 - 2 * 42  # levels 1 and 7: three shapes of seven skipped
    assert {(e.topic, e.queueId) for e in delivered if e.level == 1} == \
        {("TopicA", 0), ("TopicA", 1), ("TopicA", 2), ("TopicB", 0), ("TopicB", 1), ("TopicB", 2), ("TopicA", 3)}


def test_batched_run_of_a_5x_brokers_levels_rebuilds_the_strings_as_columns_with_the_same_bytes(
        sample_store, tmp_path, monkeypatch):
    """Schedule messages of many shapes in a 5.x store (timer-fresh): a 5.x broker stores the
    string its 128-bucket map makes of them (trailing separator, HashMap order, TIMER_*
    cleared from the map only). The batched run rebuilds the strings as columns for all of
    them but a key twice (the reference way); one at a time the same events and bytes."""
    source = tmp_path / "source"
    shutil.copytree(sample_store("timer-fresh"), source)
    with StoreWriter(source, clock=lambda: TIMER_BASE) as w:
        for i in range(1_200):
            topic = LONG_RETRY if i % 97 == 5 else ("TopicA", "TopicB", "TimerTopic")[i % 3]
            pairs = [("UNIQ_KEY", f"U{i}"), ("REAL_TOPIC", topic), ("REAL_QID", str(i % 2)), ("KEYS", f"k{i}")]
            if i % 4 == 1:
                pairs += [("TIMER_DELIVER_MS", str(TIMER_BASE + i)), ("TIMER_DELAY_SEC", "3"), ("TAGS", "t\u00e9")]
            if i % 5 == 2:
                pairs.reverse()
            if i % 7 == 3:
                pairs.append((f"user{i % 3}", "\u00fc" * (1 + i % 4)))
            if i % 150 == 77:
                pairs.append(("KEYS", "twice"))  # a name twice: the map keeps one
            raw = "".join(f"{k}\x01{v}\x02" for k, v in pairs)
            host = (bytes(15) + b"\x01", 7) if i % 11 == 4 else (bytes([10, 1, 2, i % 200]), 3000 + i)
            w.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", queueId=i % 3, body=b"m%d" % i * (1 + i % 30),
                             propertiesRaw=raw[:-1] if i % 9 == 8 else raw, flag=i % 3, bornTimestamp=TIMER_BASE - i,
                             bornHost=host, reconsumeTimes=i % 4))
    as_columns = put_stored_counted(monkeypatch)
    events = assert_same_run(source, tmp_path, monkeypatch)
    assert sum(type(e).__name__ == "Delivered" for e in events) >= 1_200
    assert sum(as_columns) > 1_000


@pytest.mark.parametrize("run_filter", [{"limit": 40}, {"limit": 300}, {"topics": frozenset({"TopicA"})},
                                        {"topics": frozenset({"TopicA", "TopicB"}), "limit": 200}],
                         ids=["limit-in-first-batch", "limit-later", "topics", "topics-and-limit"])
def test_batched_run_with_filters_holds_where_one_at_a_time_holds(tmp_path, monkeypatch, run_filter):
    source = tmp_path / "source"
    shaped_store(source)
    events = assert_same_run(source, tmp_path, monkeypatch, **run_filter)
    held = [e for e in events if type(e).__name__ == "Held"]
    assert held and len([e for e in events if type(e).__name__ == "Delivered"]) < 700 - 84


def test_restored_as_columns_as_one_unit_at_a_time(tmp_path):
    """restore_columns of a level's units says of each what restore_unit says: its UNIQ_KEY,
    why it is skipped, and (for the deliveries, in order) the message messageTimeup puts."""
    shaped_store(tmp_path / "store")
    with Store(tmp_path / "store") as store:
        cq = store.schedule_queue(1)
        units = cq.units(cq.min_offset, cq.max_offset)
        offsets, sizes = units["commitLogOffset"].tolist(), units["size"].tolist()
        columns = restore_columns(store, offsets, sizes)
        expected = [restore_unit(store, offset, size) for offset, size in zip(offsets, sizes)]
    assert columns.uniq_keys == [msg.properties.get("UNIQ_KEY") for msg, _, _ in expected]
    assert columns.reasons == [reason for _, _, reason in expected]
    news = [new for _, new, _ in expected if new is not None]
    c = columns.copies
    assert len(c) == len(news) > 50
    assert sorted(set(columns.reasons) - {None}) == [
        "REAL_QID is not a queue id: '-1'", "REAL_TOPIC is a topic name outside ^[%|a-zA-Z0-9_-]+$: 'bad topic'",
        "no REAL_TOPIC property"]
    props = [c.props[a:b].tobytes().decode("utf-8", "surrogateescape") for a, b in zip(c.props_at, c.props_at[1:])]
    bodies = [c.bodies[a:b].tobytes() for a, b in zip(c.body_at, c.body_at[1:])]
    got = [(c.topics[k], c.queue_ids[k], bodies[k], props[k], int(c.flag[k]), int(c.sys_flag[k]), int(c.born_ts[k]),
            (c.born[4 * k:4 * k + 4].tobytes(), int(c.born_ports[k])),
            (c.stored[4 * k:4 * k + 4].tobytes(), int(c.store_ports[k])), int(c.reconsume[k])) for k in range(len(c))]
    assert got == [(n.topic, n.queueId, n.body, n.propertiesRaw, n.flag, n.sysFlag, n.bornTimestamp, n.bornHost,
                    n.storeHost, n.reconsumeTimes) for n in news]
