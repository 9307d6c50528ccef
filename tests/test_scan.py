"""The columnar scan reads exactly what decode_message and the real broker read, and fails
at exactly the same byte."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from conftest import SAMPLES, load_expected
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rmqdelay.formats.commitlog import decode_message
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.scan import MESSAGE_SCHEMA, decode_records

from rmqdelay.errors import StoreError
from rmqdelay.store import Store
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.scan import (
    Skipped,
    commitlog_files,
    consumer_offsets,
    scan_commitlog_file,
    schedule_units,
)
from rmqdelay.store.writer import NewMessage, StoreWriter


def sample_names() -> list[str]:
    return sorted(p.name for p in SAMPLES.iterdir() if (p / "store" / "commitlog").is_dir())


def scan_store(path: Path, name: str, **kw) -> pa.Table:
    batches = [b for f in commitlog_files(path) for b in scan_commitlog_file(f, name, **kw)]
    columns = kw.get("columns")
    return pa.Table.from_batches(batches, schema=MESSAGE_SCHEMA if columns is None else
                                 pa.schema([MESSAGE_SCHEMA.field(c) for c in columns]))


def int_property(props: dict, name: str):
    return java_parse_int(props[name]) if name in props else None


def expected_row(msg, store: str, file: str) -> dict:
    p = msg.properties
    return {
        "store": store, "file": file, "commitlog_offset": msg.commitLogOffset, "store_size": msg.storeSize,
        "topic": msg.topic, "queue_id": msg.queueId, "queue_offset": msg.queueOffset, "flag": msg.flag,
        "sys_flag": msg.sysFlag, "born_timestamp": msg.bornTimestamp, "store_timestamp": msg.storeTimestamp,
        "reconsume_times": msg.reconsumeTimes, "body_length": len(msg.body), "msg_id": msg.msgId,
        "tags": p.get("TAGS"), "keys": p.get("KEYS"), "uniq_key": p.get("UNIQ_KEY"),
        "delay_level": int_property(p, "DELAY"), "real_topic": p.get("REAL_TOPIC"),
        "real_qid": int_property(p, "REAL_QID"), "retry_topic": p.get("RETRY_TOPIC"),
        "origin_message_id": p.get("ORIGIN_MESSAGE_ID"), "properties_raw": msg.propertiesRaw,
    }


@pytest.mark.parametrize("name", sample_names())
def test_every_column_equals_decode_message(name):
    path = SAMPLES / name / "store"
    table = scan_store(path, name)
    log = CommitLog(path / "commitlog")
    expected = []
    for msg in log.records():
        index = log.file_index(msg.commitLogOffset)
        expected.append(expected_row(msg, name, log.files[index].path.name))
    log.close()
    assert table.schema == MESSAGE_SCHEMA
    assert table.to_pylist() == expected


@pytest.mark.parametrize("name", ["delay-fresh", "delay-partial", "retry"])
def test_columns_equal_the_real_broker_ground_truth(name):
    table = scan_store(SAMPLES / name / "store", name).to_pylist()
    truth = load_expected(name)["msg"]
    assert len(table) == len(truth)
    for row, msg in zip(table, truth):
        props = msg["properties"]
        assert (row["file"], row["commitlog_offset"], row["msg_id"], row["topic"]) == \
               (msg["file"], msg["commitLogOffset"], msg["msgId"], msg["topic"])
        assert (row["queue_id"], row["queue_offset"], row["store_size"], row["sys_flag"], row["flag"]) == \
               (msg["queueId"], msg["queueOffset"], msg["storeSize"], msg["sysFlag"], msg["flag"])
        assert (row["born_timestamp"], row["store_timestamp"], row["reconsume_times"], row["body_length"]) == \
               (msg["bornTimestamp"], msg["storeTimestamp"], msg["reconsumeTimes"], msg["bodyLength"])
        assert row["properties_raw"] == msg["propertiesRaw"]
        assert (row["tags"], row["keys"], row["uniq_key"], row["real_topic"], row["retry_topic"],
                row["origin_message_id"]) == (props.get("TAGS"), props.get("KEYS"), props.get("UNIQ_KEY"),
                                              props.get("REAL_TOPIC"), props.get("RETRY_TOPIC"),
                                              props.get("ORIGIN_MESSAGE_ID"))
        assert row["delay_level"] == int_property(props, "DELAY")
        assert row["real_qid"] == int_property(props, "REAL_QID")


@pytest.mark.parametrize("name", sample_names())
def test_a_projection_reads_the_same_values_as_every_column(name):
    path = SAMPLES / name / "store"
    table = scan_store(path, name)
    for columns in PROJECTIONS:
        assert scan_store(path, name, columns=columns).equals(table.select(columns)), columns


def test_batches_are_bounded_and_keep_order():
    path = SAMPLES / "delay-fresh" / "store"
    whole = scan_store(path, "s")
    small = scan_store(path, "s", batch_rows=7)
    assert small.equals(whole)
    for f in commitlog_files(path):
        assert all(b.num_rows <= 7 for b in scan_commitlog_file(f, "s", batch_rows=7))


def test_schedule_units_are_every_unit_of_the_schedule_queues():
    with Store(SAMPLES / "delay-partial" / "store") as store:
        units = schedule_units(store, "dp").to_pylist()
    truth = [u for u in load_expected("delay-partial")["cq"] if u["topic"] == "SCHEDULE_TOPIC_XXXX"]
    key = lambda u: (u["level"], u["queue_offset"])  # noqa: E731
    assert sorted(units, key=key) == sorted(
        ({"store": "dp", "level": u["queueId"] + 1, "queue_offset": u["cqOffset"], "commitlog_offset": u["phyOffset"],
          "size": u["size"], "deliver_ms": u["tagsCode"]} for u in truth), key=key)


def test_consumer_offsets_read_in_the_broker_dialect_with_bak_fallback(store_copy):
    path = store_copy("retry")
    config = path / "config"
    text = ('{\n\t"offsetTable":{\n\t\t"%RETRY%GID_ORDER@GID_ORDER":{0:12\n\t\t},\n'
            '\t\t"TopicPay@GID_ORDER":{0:50,1:49,2:51,3:50\n\t\t}\n\t}\n}')
    (config / "consumerOffset.json").write_text(text)
    with Store(path) as store:
        assert consumer_offsets(store) == {("%RETRY%GID_ORDER", "GID_ORDER"): {0: 12},
                                           ("TopicPay", "GID_ORDER"): {0: 50, 1: 49, 2: 51, 3: 50}}
    (config / "consumerOffset.json.bak").write_text(text)
    (config / "consumerOffset.json").write_text("")
    with Store(path) as store:
        assert consumer_offsets(store)[("%RETRY%GID_ORDER", "GID_ORDER")] == {0: 12}
    (config / "consumerOffset.json.bak").unlink()
    (config / "consumerOffset.json").write_text('{"offsetTable":{"x@g":{0:1,}}}')
    with Store(path) as store, pytest.raises(StoreError) as info:
        consumer_offsets(store)
    assert info.value.path.name == "consumerOffset.json" and info.value.offset is not None


# -- bad bytes: the same error, at the same byte, as decode_message ---------------------

def first_file(name: str = "retry") -> bytes:
    return commitlog_files(SAMPLES / name / "store")[0].path.read_bytes()


def record_offsets(data: bytes) -> list[int]:
    log_positions, pos = [], 0
    while True:
        total = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        magic = int.from_bytes(data[pos + 4:pos + 8], "big", signed=True)
        if magic != -626843481:
            return log_positions
        log_positions.append(pos)
        pos += total


def reference_error(data: bytes) -> tuple[int, int] | None:
    """(rows before the bad record, FormatError offset) by walking with decode_message."""
    pos, rows = 0, 0
    while pos + 8 <= len(data):
        total = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        magic = int.from_bytes(data[pos + 4:pos + 8], "big", signed=True)
        if total == 0 and magic == 0:
            return None
        if magic == -875286124:
            return None if total == len(data) - pos else (rows, pos)
        try:
            msg = decode_message(data, pos, len(data))
        except FormatError as exc:
            return rows, exc.offset
        rows += 1
        pos += msg.storeSize
    if pos < len(data) and any(data[pos:]):
        return rows, pos
    return None


def scan_bytes(data: bytes) -> tuple[int, FormatError | None]:
    rows = 0
    try:
        for batch in decode_records(data, store="s", file="f", batch_rows=50):
            rows += batch.num_rows
    except FormatError as exc:
        return rows, exc
    return rows, None


def check_same_as_reference(data: bytes) -> None:
    expected = reference_error(data)
    rows, error = scan_bytes(data)
    if expected is None:
        assert error is None
    else:
        assert error is not None, expected
        assert (rows, error.offset) == expected


def test_truncated_file_fails_where_decode_message_does():
    data = first_file()
    third = record_offsets(data)[2]
    cut = data[:third + 60]
    rows, error = scan_bytes(cut)
    assert rows == 2 and error.offset == third
    check_same_as_reference(cut)


def test_bad_magic_fails_at_the_magic_field():
    data = bytearray(first_file())
    fifth = record_offsets(bytes(data))[4]
    data[fifth + 4:fifth + 8] = b"\x12\x34\x56\x78"
    rows, error = scan_bytes(bytes(data))
    assert rows == 4 and error.offset == fifth + 4
    with pytest.raises(FormatError) as info:
        decode_message(bytes(data), fifth, len(data))
    assert info.value.offset == error.offset and info.value.expected == error.expected


def test_size_running_past_the_file_fails_at_the_record():
    data = bytearray(first_file())
    last = record_offsets(bytes(data))[-1]
    data[last:last + 4] = (len(data) - last + 1).to_bytes(4, "big")
    check_same_as_reference(bytes(data))
    assert scan_bytes(bytes(data))[1].offset == last


def test_inner_lengths_checked_like_decode_message():
    data = bytearray(first_file())
    offsets = record_offsets(bytes(data))
    # body length of the 3rd record made huge: caught after the head walk, in the batch checks
    msg = decode_message(bytes(data), offsets[2], len(data))
    body_len_pos = offsets[2] + msg.storeSize - 2 - len(msg.propertiesRaw.encode()) - 1 - len(msg.topic.encode()) - len(msg.body) - 4
    data[body_len_pos:body_len_pos + 4] = (10_000).to_bytes(4, "big")
    check_same_as_reference(bytes(data))
    assert scan_bytes(bytes(data))[0] == 2


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_bytes_fail_exactly_where_decode_message_fails(data):
    raw = first_file()
    offsets = record_offsets(raw)
    # Mutate bytes of a few records near the front (the rest stays as the broker wrote it).
    end = offsets[min(12, len(offsets) - 1)]
    buf = bytearray(raw[:end + 2000])
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, end - 1))
        buf[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        buf = buf[:data.draw(st.integers(0, len(buf)))]
    check_same_as_reference(bytes(buf))


def test_scan_file_names_the_file_and_offset_and_keep_going_reports_the_rest(store_copy):
    path = store_copy("retry")
    files = commitlog_files(path)
    target = files[1].path
    data = bytearray(target.read_bytes())
    bad = record_offsets(bytes(data))[3]
    data[bad + 4] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(StoreError) as info:
        list(scan_commitlog_file(target, "r"))
    assert info.value.path == target and info.value.offset == bad + 4
    skipped: list[Skipped] = []
    rows = sum(b.num_rows for b in scan_commitlog_file(target, "r", keep_going=True, skipped=skipped))
    assert rows == 3
    assert skipped == [Skipped("r", str(target), bad + 4, len(data) - bad - 4, info.value.expected)]


def test_a_store_written_by_the_writer_scans_back(tmp_path):
    """IPv6 hosts, a V2-free mix of properties, several files and the BLANK rollover."""
    store = tmp_path / "s"
    v6 = (bytes(range(16)), 10911)
    with StoreWriter(store, create=True, commitlog_file_size=64 << 10, clock=lambda: 1_700_000_000_000, sync=False) as w:
        for i in range(400):
            props = {"UNIQ_KEY": f"U{i}", "KEYS": f"k{i} other", "DELAY": str(i % 4)} if i % 3 else {"TAGS": "ü" * (i % 5)}
            w.put(NewMessage(topic=f"T{i % 3}", queueId=i % 2, body=bytes(i % 300), properties=props,
                             sysFlag=0x30 if i % 7 == 0 else 0,
                             bornHost=v6 if i % 7 == 0 else (b"\x7f\0\0\1", 1),
                             storeHost=v6 if i % 7 == 0 else (b"\x7f\0\0\1", 2)))
    assert len(commitlog_files(store)) > 1
    table = scan_store(store, "w")
    log = CommitLog(store / "commitlog")
    expected = [expected_row(m, "w", log.files[log.file_index(m.commitLogOffset)].path.name) for m in log.records()]
    log.close()
    assert table.to_pylist() == expected
    assert table.num_rows == 400


def test_properties_read_the_broker_way(tmp_path):
    """Later duplicates win, empty names and values are skipped, 0x01 may sit in a value,
    integers read as Integer.parseInt (a sign, then Unicode decimal digits, leading zeros
    and all, within the int range) or null."""
    raws = [
        ("TAGS\x01a\x02TAGS\x01b", None), ("TAGS\x01a\x02TAGS\x01", None), ("\x01x\x02KEYS\x01k", None),
        ("KEYS\x01a\x01b\x02UNIQ_KEY\x01u", None), ("XTAGS\x01no\x02AGS\x01no", None), ("TAGS", None),
        ("", None), ("TAGS\x02\x01v", None), ("ü\x01x\x02TAGS\x01ä\x02", None),
        ("REAL_QID\x01+7", 7), ("REAL_QID\x01-0", 0), ("REAL_QID\x012147483648", None),
        ("REAL_QID\x01-2147483648", -2147483648), ("REAL_QID\x012147483647", 2147483647),
        ("REAL_QID\x01 5", None), ("REAL_QID\x0112a", None), ("REAL_QID\x01+", None),
        ("REAL_QID\x0100000000001", 1), ("REAL_QID\x010000000001", 1), ("REAL_QID\x013\x02REAL_QID\x01x", None),
        ("REAL_QID\x013\x02REAL_QID\x014", 4), ("REAL_QID\x01٣", 3), ("REAL_QID\x01²", None),
        ("REAL_QID\x011_0", None), ("REAL_QID\x013 ", None),
    ]
    store = tmp_path / "s"
    with StoreWriter(store, create=True, clock=lambda: 1_700_000_000_000, sync=False) as w:
        for raw, _ in raws:
            w.put(NewMessage(topic="T", queueId=0, body=b"x", propertiesRaw=raw))
    rows = scan_store(store, "p").to_pylist()
    log = CommitLog(store / "commitlog")
    messages = list(log.records())
    log.close()
    assert len(rows) == len(raws)
    for row, msg, (raw, real_qid) in zip(rows, messages, raws):
        assert row["properties_raw"] == raw
        p = msg.properties
        assert (row["tags"], row["keys"], row["uniq_key"]) == (p.get("TAGS"), p.get("KEYS"), p.get("UNIQ_KEY")), raw
        assert row["real_qid"] == real_qid, raw


# -- the record walk: where records start, and where the data stops ----------------------

def writer_file(tmp_path, count: int = 150, file_size: int = 16 << 10, **message) -> bytes:
    """The first commit log file of a store the writer fills past one file (so it ends with
    the BLANK record)."""
    store = tmp_path / "w"
    with StoreWriter(store, create=True, commitlog_file_size=file_size, clock=lambda: 1_700_000_000_000,
                     sync=False) as w:
        for i in range(count):
            w.put(NewMessage(topic=f"T{i % 3}", queueId=i % 2, body=message.get("body", bytes(i % 200)),
                             properties={"UNIQ_KEY": f"U{i}", "KEYS": f"k{i}"}))
    return commitlog_files(store)[0].path.read_bytes()


def scanned_rows(data: bytes, batch_rows: int = 50, columns: list[str] | None = None) -> list[dict]:
    return [row for b in decode_records(data, store="s", file="f", batch_rows=batch_rows, columns=columns)
            for row in b.to_pylist()]


# Projections a scan may be asked for: what the analyses read, only numbers, only integer
# properties (read by the exact rule when the compiled parse refuses them), no properties at
# all, the copied text alone.
PROJECTIONS = [
    ["store", "commitlog_offset", "topic", "store_timestamp", "reconsume_times", "uniq_key", "delay_level",
     "real_topic", "store_size"],
    ["store", "topic", "store_timestamp", "reconsume_times", "delay_level", "real_topic", "uniq_key",
     "origin_message_id"],
    ["commitlog_offset"],
    ["real_qid", "delay_level"],
    ["msg_id", "sys_flag"],
    ["properties_raw", "keys", "file"],
]


def reference_rows(data: bytes) -> list[dict]:
    rows, pos = [], 0
    for offset in record_offsets(data):
        assert offset == pos
        msg = decode_message(data, offset, len(data))
        rows.append(expected_row(msg, "s", "f"))
        pos += msg.storeSize
    return rows


def test_walk_stops_at_the_blank_record_and_checks_its_size(tmp_path):
    data = writer_file(tmp_path)
    offsets = record_offsets(data)
    blank = offsets[-1] + decode_message(data, offsets[-1], len(data)).storeSize
    assert int.from_bytes(data[blank + 4:blank + 8], "big", signed=True) == -875286124  # BLANK_MAGIC_CODE
    assert scanned_rows(data) == reference_rows(data)
    # Every batch size, including one that ends exactly at the last record before the BLANK.
    for batch_rows in (1, len(offsets), len(offsets) - 1, len(offsets) + 1):
        assert scanned_rows(data, batch_rows) == reference_rows(data)
    bad = bytearray(data)
    bad[blank:blank + 4] = (len(data) - blank - 1).to_bytes(4, "big")
    rows, error = scan_bytes(bytes(bad))
    assert (rows, error.offset) == (len(offsets), blank) and "BLANK" in error.expected
    check_same_as_reference(bytes(bad))


def test_walk_stops_at_the_zero_tail_and_at_a_torn_head_in_it(tmp_path):
    data = writer_file(tmp_path)
    offsets = record_offsets(data)
    end = offsets[20]
    tail = data[:end] + bytes(5000)
    assert scanned_rows(tail) == reference_rows(data[:end])
    assert scanned_rows(tail, batch_rows=20) == reference_rows(data[:end])
    # A few non-zero bytes where the next head would be: a torn record, at that offset.
    torn = bytearray(tail)
    torn[end + 2] = 7
    rows, error = scan_bytes(bytes(torn))
    assert (rows, error.offset) == (20, end + 4)
    check_same_as_reference(bytes(torn))
    # Fewer than 8 bytes left, not all zero: a head cut short.
    short = data[:end] + b"\x00\x01\x02"
    rows, error = scan_bytes(short)
    assert (rows, error.offset) == (20, end) and "8 bytes" in error.expected


def test_a_record_head_inside_a_body_is_not_a_record(tmp_path):
    """A body that holds a whole record (a size and the magic code at +4, and more) is read
    as the body it is."""
    inner = writer_file(tmp_path / "inner", count=3)
    fake = inner[:record_offsets(inner)[1]]
    data = writer_file(tmp_path / "outer", body=fake * 3)
    assert fake[4:8] == (-626843481).to_bytes(4, "big", signed=True)
    rows = scanned_rows(data)
    assert rows == reference_rows(data)
    assert len(rows) == len(record_offsets(data))


def test_a_size_pointing_past_the_file_or_into_the_next_record_fails_there(tmp_path):
    data = writer_file(tmp_path)
    offsets = record_offsets(data)
    # A middle record's size runs past the end of the file.
    bad = bytearray(data)
    bad[offsets[7]:offsets[7] + 4] = (len(data) - offsets[7] + 100).to_bytes(4, "big")
    rows, error = scan_bytes(bytes(bad))
    assert (rows, error.offset) == (7, offsets[7])
    check_same_as_reference(bytes(bad))
    # A size 8 bytes short: the head the walk lands on is 8 bytes inside the next record.
    bad = bytearray(data)
    size = offsets[8] - offsets[7]
    bad[offsets[7]:offsets[7] + 4] = (size - 8).to_bytes(4, "big")
    rows, error = scan_bytes(bytes(bad))
    assert error is not None and rows == 7  # the shortened record is caught by its own checks
    check_same_as_reference(bytes(bad))


def test_v2_records_and_ipv6_hosts_walk_and_decode_like_decode_message(tmp_path):
    """Records with the V2 magic code (two-byte topic length), IPv6 born and store hosts,
    and both, in one file, built from the writer's records with the project's encoder."""
    from dataclasses import replace

    from rmqdelay.formats.commitlog import encode_message, message_size
    from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE_V2

    source = writer_file(tmp_path, count=40, file_size=64 << 10)
    out, pos = bytearray(), 0
    for i, offset in enumerate(record_offsets(source)):
        msg = decode_message(source, offset, len(source))
        magic = MESSAGE_MAGIC_CODE_V2 if i % 2 else msg.magicCode
        sys_flag = msg.sysFlag | (0x10 if i % 3 == 1 else 0) | (0x20 if i % 3 == 2 else 0) | (0x30 if i % 5 == 4 else 0)
        born = bytes(range(16)) if sys_flag & 0x10 else msg.bornHostAddress
        stored = bytes(range(16, 32)) if sys_flag & 0x20 else msg.storeHostAddress
        size = message_size(sys_flag, len(msg.body), len(msg.topic.encode()), len(msg.propertiesRaw.encode()), magic)
        out += encode_message(replace(msg, magicCode=magic, sysFlag=sys_flag, bornHostAddress=born,
                                      storeHostAddress=stored, storeSize=size, commitLogOffset=pos))
        pos += size
    data = bytes(out) + bytes(300)
    expected, pos = [], 0
    while pos < len(out):
        msg = decode_message(data, pos, len(data))
        expected.append(expected_row(msg, "s", "f"))
        pos += msg.storeSize
    assert {r["sys_flag"] & 0x30 for r in expected} == {0, 0x10, 0x20, 0x30}
    for batch_rows in (1, 7, 50):
        assert scanned_rows(data, batch_rows) == expected
    for columns in PROJECTIONS:
        assert scanned_rows(data, 7, columns) == [{c: row[c] for c in columns} for row in expected]


def test_batches_end_where_the_text_buffers_are_full(tmp_path, monkeypatch):
    """A batch also ends before the record whose topic, properties or property value would
    not fit in what one batch holds; the next batch starts with that record."""
    import rmqdelay.formats.scan as scan

    store = tmp_path / "s"
    with StoreWriter(store, create=True, commitlog_file_size=64 << 10, clock=lambda: 1_700_000_000_000,
                     sync=False) as w:
        for i in range(120):
            # Values around the 8-byte steps and the 64-byte short-copy limit of the copies.
            w.put(NewMessage(topic="T" * (1 + i % 40), queueId=0, body=bytes(i % 50),
                             properties={"KEYS": "k" * (1 + i % 90), "UNIQ_KEY": f"U{i}", "TAGS": "t" * (i % 9),
                                         "DELAY": str(i % 19)}))
    data = commitlog_files(store)[0].path.read_bytes()
    whole = scanned_rows(data, batch_rows=1000)
    assert whole == reference_rows(data)
    largest = max(len(r["properties_raw"]) for r in whole)
    for text_room, value_room in ((largest, 90), (largest + 7, 97), (3 * largest, 200), (1 << 20, 95)):
        monkeypatch.setattr(scan, "_TEXT_ROOM", text_room)
        monkeypatch.setattr(scan, "_VALUE_ROOM", value_room)
        batches = list(decode_records(data, store="s", file="f", batch_rows=1000))
        assert [row for b in batches for row in b.to_pylist()] == whole
        assert len(batches) > 1
        for batch, following in zip(batches, batches[1:]):
            rows, first = batch.to_pylist(), following.to_pylist()[0]

            def overflows(column: str, room: int) -> bool:
                used = sum(len((row[column] or "").encode()) for row in rows)
                return used + len((first[column] or "").encode()) > room

            # Full: the next record's text would not have fitted in this batch.
            assert overflows("topic", text_room) or overflows("properties_raw", text_room) or \
                any(overflows(column, value_room) for column in scan.STRING_PROPERTIES)


def test_records_ending_at_the_end_of_the_buffer_read_their_last_bytes(tmp_path):
    """Without a zero tail or BLANK after them, the last record's properties end where the
    buffer ends: read in full (no word read past the buffer)."""
    data = writer_file(tmp_path)
    offsets = record_offsets(data)
    for k in (1, 2, 17, len(offsets) - 1):
        cut = data[:offsets[k]]
        assert scanned_rows(cut) == reference_rows(cut)
        assert scanned_rows(cut, batch_rows=k) == reference_rows(cut)


def test_text_that_is_not_utf8_reads_with_replacement_characters(tmp_path):
    """Bytes that are not UTF-8 in a topic, a wanted property value or another property
    read as U+FFFD (Arrow strings cannot hold decode_message's surrogate escapes), in
    batches of only ASCII text and in batches with such bytes alike."""
    from dataclasses import replace

    from rmqdelay.formats.commitlog import encode_message, message_size

    source = writer_file(tmp_path, count=30, file_size=64 << 10)
    broken = {3: ("T\udcff", "KEYS\x01k\udce4\udcb8\x02UNIQ_KEY\x01u"), 4: ("T", "X\x01\udcff\x02TAGS\x01\udcc3"),
              11: ("ü", "TAGS\x01ä\udcc3\x02DELAY\x011\udcff"), 25: ("T\udce4\udcb8x", "TAGS\x01ok")}
    out, pos = bytearray(), 0
    for i, offset in enumerate(record_offsets(source)):
        msg = decode_message(source, offset, len(source))
        topic, props = broken.get(i, (msg.topic, msg.propertiesRaw))
        size = message_size(msg.sysFlag, len(msg.body), len(topic.encode("utf-8", "surrogateescape")),
                            len(props.encode("utf-8", "surrogateescape")), msg.magicCode)
        out += encode_message(replace(msg, topic=topic, propertiesRaw=props, storeSize=size, commitLogOffset=pos))
        pos += size
    data = bytes(out) + bytes(100)

    def readable(text):
        return None if text is None else text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")

    expected = []
    for row in reference_rows_until_zero(data):
        row = {k: readable(v) if isinstance(v, str) else v for k, v in row.items()}
        expected.append(row)
    assert expected[3]["topic"] == "T\ufffd" and expected[3]["keys"] == "k\ufffd"
    assert expected[11]["tags"] == "ä\ufffd" and expected[11]["delay_level"] is None
    for batch_rows in (1, 3, 5, 50):
        assert scanned_rows(data, batch_rows) == expected


def reference_rows_until_zero(data: bytes) -> list[dict]:
    rows, pos = [], 0
    while int.from_bytes(data[pos + 4:pos + 8], "big", signed=True) == -626843481:
        msg = decode_message(data, pos, len(data))
        rows.append(expected_row(msg, "s", "f"))
        pos += msg.storeSize
    return rows


_PROPERTY_NAMES = ["TAGS", "KEYS", "UNIQ_KEY", "DELAY", "REAL_TOPIC", "REAL_QID", "RETRY_TOPIC",
                   "ORIGIN_MESSAGE_ID", "TAG", "REAL_QIDX", "", "CLUSTER", "ü"]
_PROPERTY_TOKENS = ["X", "\x01", "\x02", "1", "7", "-", "+", "0", "ü", "٣", "\udcff", " ",
                    "verylongvaluewithmorethansixtyfourcharacters" * 2]
_SEGMENTS = st.one_of(
    # name 0x01 value: duplicates of a name are likely, values may be empty or hold 0x01/0x02
    st.tuples(st.sampled_from(_PROPERTY_NAMES), st.lists(st.sampled_from(_PROPERTY_TOKENS), max_size=5))
    .map(lambda p: p[0] + "\x01" + "".join(p[1])),
    st.lists(st.sampled_from(_PROPERTY_TOKENS + _PROPERTY_NAMES), max_size=6).map("".join),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(_SEGMENTS, max_size=10).map("\x02".join), min_size=1, max_size=12))
def test_any_properties_string_reads_as_string2messageProperties_reads_it(properties):
    """Properties strings built from wanted names, separators, digits, signs, non-ASCII and
    non-UTF-8 bytes, long values: every column as decode_message gives it."""
    from dataclasses import replace

    from rmqdelay.formats.commitlog import encode_message, message_size

    template = decode_message(first_file(), 0, len(first_file()))
    out, pos = bytearray(), 0
    for raw in properties:
        size = message_size(template.sysFlag, len(template.body), len(template.topic.encode()),
                            len(raw.encode("utf-8", "surrogateescape")), template.magicCode)
        out += encode_message(replace(template, propertiesRaw=raw, storeSize=size, commitLogOffset=pos))
        pos += size
    data = bytes(out) + bytes(16)

    def readable(value):
        return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if isinstance(value, str) else value

    expected = [{k: readable(v) for k, v in row.items()} for row in reference_rows_until_zero(data)]
    assert scanned_rows(data, batch_rows=5) == expected
    for columns in PROJECTIONS:
        assert scanned_rows(data, batch_rows=5, columns=columns) == [{c: row[c] for c in columns} for row in expected]


def test_batches_and_columns_kept_by_the_caller_keep_their_values(tmp_path):
    """The arrays of a batch the caller let go of are filled again for a later batch; any
    batch, column, slice or buffer the caller keeps still reads as it did."""
    data = writer_file(tmp_path, count=300, file_size=64 << 10)
    expected = reference_rows(data)
    assert len(expected) > 60
    kept: list = []
    rows = []
    for i, batch in enumerate(decode_records(data, store="s", file="f", batch_rows=7)):
        rows.extend(batch.to_pylist())
        # Keep some batches whole, some only a column, a slice or a buffer; let go of the rest.
        if i % 5 == 0:
            kept.append((i, "batch", batch))
        elif i % 5 == 1:
            kept.append((i, "column", batch.column("properties_raw")))
        elif i % 5 == 2:
            kept.append((i, "slice", batch.slice(2, 3)))
        elif i % 5 == 3:
            kept.append((i, "buffer", batch.column("keys").buffers()[2]))
    assert rows == expected
    for i, kind, value in kept:
        part = expected[7 * i:7 * i + 7]
        if kind == "batch":
            assert value.to_pylist() == part
        elif kind == "column":
            assert value.to_pylist() == [r["properties_raw"] for r in part]
        elif kind == "slice":
            assert value.to_pylist() == part[2:5]
        else:
            assert value.to_pybytes().startswith("".join(r["keys"] for r in part).encode())
