"""The parts the timer run's batches are made of, held to what they stand for: a delivered
copy's properties string with its key order worked out once per key set (the HashMap order
of the 5.x map, built and listed), a batch of queue entries' records read straight from the mapped
log (CommitLog.read_message's answer for each), and timer log units appended in one buffer and
written a file region at a time (the bytes, BLANKs and reads of one pwrite per unit)."""

from __future__ import annotations

import heapq
import random
import re
import struct

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from rmqdelay.formats import reputloops as r

from rmqdelay.errors import StoreError
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.properties import (
    DECODED_MAP_CAPACITY_5X,
    broker_properties_string,
    java_order,
    properties_to_string,
)
from rmqdelay.formats.timerlog import UNIT_SIZE, build_blank
from rmqdelay.store import Store
from rmqdelay.store.plainrecords import read_plain
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer import files
from rmqdelay.timer.deliver.engine import _ascending
from rmqdelay.timer.deliver.reads import read_ahead


def listed(props: dict) -> str:
    """The 5.x map built (128 buckets) and listed, pair by pair."""
    return properties_to_string(java_order(props, DECODED_MAP_CAPACITY_5X))


def test_the_stored_string_is_the_hashmap_order_for_every_key_shape():
    rng = random.Random(5)
    # "Aa" and "BB" share a Java hash (one bucket, insertion order); 100+ keys resize the map.
    names = ["UNIQ_KEY", "TAGS", "KEYS", "WAIT", "REAL_TOPIC", "REAL_QID", "TIMER_OUT_MS", "TIMER_ENQUEUE_MS",
             "TIMER_DEQUEUE_MS", "Aa", "BB", "AaAa", "BBBB", "AaBB", "ü"] + [f"k{i}" for i in range(150)]
    for _ in range(2_000):
        keys = rng.sample(names, rng.randrange(0, 130))
        props = {k: str(rng.randrange(10**6)) for k in keys}
        assert broker_properties_string(props) == listed(props)
        assert broker_properties_string(props) == listed(props)  # the key set's order remembered
    assert broker_properties_string({"A": "1", "B": None, "C": "3"}) == listed({"A": "1", "B": None, "C": "3"})
    assert broker_properties_string({}) == listed({}) == ""


def test_records_read_ahead_are_what_read_message_reads(tmp_path):
    store = tmp_path / "s"
    with StoreWriter(store, create=True, commitlog_file_size=4096, sync=False) as w:
        puts = [w.put(NewMessage("T" * (1 + i % 200), i % 3, b"x" * (i * 7 % 300),
                                 {"UNIQ_KEY": f"U{i}", "REAL_TOPIC": "R"}, bornTimestamp=i)) for i in range(60)]
    offsets = [p.commitLogOffset for p in puts]
    sizes = [p.storeSize for p in puts]
    # Entries that do not name a whole message of their size: another size, the middle of a
    # record, past the end of the log, before its start.
    bad = [(offsets[3], sizes[3] + 1), (offsets[4] + 8, sizes[4]), (offsets[-1] + 10_000_000, 100), (-1, 50)]
    with Store(store) as s:
        got = {}
        read_ahead(s.commitlog, offsets + [o for o, _ in bad], sizes + [z for _, z in bad], got)
        assert sorted(got) == sorted(offsets)
        for offset, size in zip(offsets, sizes):
            assert got[offset] == s.commitlog.read_message(offset, size)
        for offset, size in bad:
            with pytest.raises(StoreError):
                s.commitlog.read_message(offset, size)


def one_by_one(directory, file_size, units) -> None:
    """The timer log as TimerLog.append writes it, a unit at a time."""
    directory.mkdir()
    end = 0
    data = {}
    for fields in units:
        room = file_size - end % file_size
        if room < UNIT_SIZE + 16:
            data[end] = build_blank(room)
            end += room
        data[end] = struct.pack(">iqiqiqiiq", UNIT_SIZE, *fields, 0)
        end += UNIT_SIZE
    for start in range(0, end, file_size):
        buf = bytearray(file_size)
        for at, b in data.items():
            if start <= at < start + file_size:
                buf[at - start:at - start + len(b)] = b
        (directory / f"{start:020d}").write_bytes(bytes(buf))


def test_units_appended_in_one_buffer_are_the_bytes_of_one_write_each(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "PENDING_LIMIT", 52 * 40)  # the buffer written part way, too
    file_size = 52 * 30 + 40  # a BLANK of 40 bytes closes each file
    units = [(-1 if i < 3 else (i - 3) * 52, 1 + (i % 2) * 4, 1000 + i, 30_000, 4096 * i, 100 + i, -i) for i in range(200)]
    log = files.TimerLogFiles(tmp_path / "buffered", file_size, 0)
    writes = []
    real = files.fileio.write_all
    monkeypatch.setattr(files.fileio, "write_all", lambda fd, data, at, path, **kw: (writes.append(len(data)),
                                                                                      real(fd, data, at, path, **kw)))
    offsets = []
    for i, fields in enumerate(units):
        offsets.append(log.append(fields))
        if i % 17 == 0:  # read back at once, from the buffer or the file
            assert log.read(offsets[-1]).offsetPy == fields[4]
    assert max(writes) > 52 * 20  # many units a write
    log.set_magic(offsets[-1], 5)  # a unit still in the buffer rewritten in place
    log.sync()
    log.close()
    one_by_one(tmp_path / "reference", file_size, units[:-1] + [units[-1][:1] + (5,) + units[-1][2:]])
    for ref in sorted((tmp_path / "reference").iterdir()):
        assert (tmp_path / "buffered" / ref.name).read_bytes() == ref.read_bytes(), ref.name
    again = files.TimerLogFiles(tmp_path / "buffered", file_size, log.end)
    assert [again.read(o).currWriteTime for o in offsets] == [u[2] for u in units]
    with pytest.raises(StoreError):
        again.read(offsets[29] + 52)  # the BLANK
    again.close()


def test_changed_wheel_slots_written_as_an_array_are_what_put_slot_writes(tmp_path):
    from rmqdelay.formats.timerwheel import SLOT_SIZE, SLOTS_DTYPE, WHEEL_SLOTS, Slot, build_slot

    rows = np.array([(7, 7 + WHEEL_SLOTS, 52, 104, 2, 0)], dtype=SLOTS_DTYPE)  # a slot the file had
    wheel = files.WheelFile(tmp_path / "timerwheel", 1000, rows)
    assert wheel.get((7 + WHEEL_SLOTS) * 1000).lastPos == 104
    changed = {}
    for t in [5, 6, 7, 9, 100, 101, WHEEL_SLOTS - 1]:  # runs of neighbours, one alone, the last index
        time_ms = (t + 3 * WHEEL_SLOTS) * 1000
        wheel.put(time_ms, t * 52, t * 52 + 52, -t if t % 2 else t, t % 3)
        changed[t % WHEEL_SLOTS] = Slot(t, t + 3 * WHEEL_SLOTS, t * 52, t * 52 + 52, -t if t % 2 else t, t % 3, 1000)
    wheel.sync()
    wheel.close()
    data = (tmp_path / "timerwheel").read_bytes()
    assert len(data) == WHEEL_SLOTS * SLOT_SIZE
    for index in range(0, 110):
        expected = build_slot(changed[index]) if index in changed else bytes(SLOT_SIZE)
        assert data[index * SLOT_SIZE:(index + 1) * SLOT_SIZE] == expected, index
    assert data[-SLOT_SIZE:] == build_slot(changed[WHEEL_SLOTS - 1])


def test_records_read_as_columns_are_what_read_message_reads(tmp_path):
    """read_plain (store/plainrecords.py) of a batch of entries: every row it reads holds what
    read_message reads there (numbers, hosts IPv4 or IPv6, body, properties string); it leaves
    unread exactly the rows that are not a plain whole record of their entry's size (a
    properties segment the parser skips, another size, the middle of a record, outside the
    log), and reads on after each."""
    store = tmp_path / "s"
    v6, v4 = (bytes(range(16)), 10911), (b"\x0a\x00\x00\x05", 10912)
    with StoreWriter(store, create=True, commitlog_file_size=4096, sync=False) as w:
        puts = []
        for i in range(80):
            pairs = {"UNIQ_KEY": f"U{i}", "REAL_TOPIC": "R", "note": "ü" * (i % 3)} if i % 9 else {"A": "1"}
            raw = "".join(f"{k}\x01{v}\x02" for k, v in pairs.items() if v)
            raw = raw[:-1] if i % 2 else raw
            if i % 10 == 7:
                raw += "\x02EMPTY\x01"  # a segment the parser skips
            puts.append(w.put(NewMessage("T" * (1 + i % 3), i % 3, b"x" * (i * 7 % 300),
                                         pairs, propertiesRaw=raw, bornTimestamp=i, reconsumeTimes=i % 4,
                                         bornHost=v6 if i % 4 == 1 else v4, storeHost=v6 if i % 6 == 2 else v4,
                                         flag=i, sysFlag=i % 2)))
    offsets = [p.commitLogOffset for p in puts]
    sizes = [p.storeSize for p in puts]
    bad = [(offsets[3], sizes[3] + 1), (offsets[4] + 8, sizes[4]), (offsets[-1] + 10_000_000, 100), (-1, 50)]
    offsets += [o for o, _ in bad]
    sizes += [z for _, z in bad]
    with Store(store) as s:
        plain = read_plain(s.commitlog, offsets, sizes, whole=False)
        assert read_plain(s.commitlog, offsets, sizes, whole=True) is None
        for row, (offset, size) in enumerate(zip(offsets, sizes)):
            plain_kind = row < 80 and row % 10 != 7
            assert bool(plain.read[row]) == bool(plain_kind), row
            if not plain_kind:
                continue
            msg = s.commitlog.read_message(offset, size)
            n = plain.numbers[row]
            assert (n[r.FLAG], n[r.SYS_FLAG], n[r.BORN_TS], n[r.BORN_PORT], n[r.STORE_PORT], n[r.RECONSUME]) == \
                (msg.flag, msg.sysFlag, msg.bornTimestamp, msg.bornPort, msg.storePort, msg.reconsumeTimes)
            assert plain.born[plain.born_at[row]:plain.born_at[row + 1]].tobytes() == msg.bornHostAddress
            assert plain.stored[plain.stored_at[row]:plain.stored_at[row + 1]].tobytes() == msg.storeHostAddress
            assert plain.bodies[plain.body_at[row]:plain.body_at[row + 1]].tobytes() == msg.body
            assert plain.text(row) == msg.propertiesRaw
            assert plain.uniq_keys()[row] == msg.properties.get("UNIQ_KEY")


@given(st.lists(st.text(alphabet="0123456789+-x٣ ", max_size=21), min_size=1, max_size=40))
@example(["9" * 18, "-" + "9" * 18, "9" * 19, "+5", "-", "+", "", "٣", "00012", "-0"])
@settings(deadline=None)  # the first call loads the compiled loops
def test_small_longs_read_as_long_parse_long(values):
    """The compiled parse of TIMER_OUT_MS takes every sign and 1 to 18 ASCII digits, as
    Long.parseLong reads them; the caller parses the rest with java_parse_long."""
    data = "".join(values).encode()
    ends = np.cumsum([len(v.encode()) for v in values])
    starts = ends - [len(v.encode()) for v in values]
    out = np.empty(len(values), dtype=np.int64)
    ok = np.empty(len(values), dtype=np.bool_)
    r.small_longs(np.frombuffer(data or b"\0", dtype=np.uint8), starts, ends, out, ok)
    for value, parsed, taken in zip(values, out.tolist(), ok.tolist()):
        if taken:
            assert parsed == java_parse_long(value)
        assert taken == bool(re.fullmatch(r"[+-]?[0-9]{1,18}", value))


@given(st.lists(st.integers(-50, 50), max_size=200))
def test_a_heap_read_in_ascending_order(values):
    heap = list(values)
    heapq.heapify(heap)
    assert list(_ascending(heap)) == sorted(values)
