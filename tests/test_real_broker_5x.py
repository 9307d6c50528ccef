"""Stores written by the real RocketMQ 5.3.3 store code decode exactly as it read them: every
commit log record (V1 and V2), consume queue unit, timer log unit and BLANK, non-empty wheel
slot, the timer checkpoint, the timer metrics, delayOffset.json and the store checkpoint."""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from rmqdelay.formats import propcrc, timerprops
from rmqdelay.formats.commitlog import (
    Message,
    decode_message,
    encode_message,
    message_size,
)
from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rmqdelay.formats.delayoffset import format_delay_offsets, parse_delay_offsets
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.properties import parse_properties
from rmqdelay.formats.timercheck import (
    build_timer_checkpoint,
    encode_timer_checkpoint,
    parse_timer_checkpoint,
)
from rmqdelay.formats.timerlog import (
    UNIT_SIZE,
    build_blank,
    build_unit,
    decode_file,
    parse_file_construct,
    parse_unit,
    unit_columns,
    unit_from_row,
)
from rmqdelay.formats.timermetrics import format_timer_metrics, parse_timer_metrics
from rmqdelay.formats.timerwheel import (
    WHEEL_FILE_SIZE,
    build_slot,
    get_slot,
    non_empty_slots,
    non_empty_slots_construct,
    slot_from_row,
    slot_index,
)
from test_real_broker_samples import MESSAGE_FIELDS, as_expected, assert_queues_match

from rmqdelay.store import Store
from rmqdelay.store.commitlog import Blank

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

PRECISION = 1000

# expected.jsonl's "origin" of a record -> the stage timer_info gives it (None: not a timer message).
ORIGIN_STAGE = {
    "timer-parked (HookUtils)": timerprops.PARKED,
    "timer-parked-cancel (recall)": timerprops.CANCEL,
    "timer-roll (TimerMessageStore re-put into rmq_sys_wheel_timer)": timerprops.ROLLED,
    "timer-delivered": timerprops.DELIVERED,
    "timer-delivered-never-enqueued (TIMER_ENQUEUE_MS=Long.MAX_VALUE)": timerprops.DELIVERED_NEVER_ENQUEUED,
    "timer-property-but-not-parked (deliver time not in the future)": timerprops.NOT_PARKED,
    "plain": None,
    "delay-parked (HookUtils)": None,
    "delay-delivered (ScheduleMessageService)": None,
}


def timer_log_files(path):
    return sorted((path / "timerlog").iterdir())


def test_every_message_decodes_field_by_field_v1_and_v2(timer_sample):
    name, path, expected = timer_sample
    with Store(path) as store:
        fast = list(store.commitlog.records())
        assert fast == list(store.commitlog.records(reference=True))
    assert len(fast) == len(expected["msg"])
    versions = {"V1": 0, "V2": 0}
    for msg, exp in zip(fast, expected["msg"]):
        want = {k: exp[k] for k in MESSAGE_FIELDS + ["bodyLength", "body"]}
        assert as_expected(msg) == want, exp["msgId"]
        assert msg.magicCode & 0xFFFFFFFF == int(exp["magic"], 16)
        versions["V2" if msg.magicCode == MESSAGE_MAGIC_CODE_V2 else "V1"] += 1
        assert exp["version"] == ("V2" if msg.magicCode == MESSAGE_MAGIC_CODE_V2 else "V1")
    if name == "timer-partial":
        assert versions == {"V1": 2496, "V2": 4}  # the four send-backs to the 140-byte %RETRY% topic


def test_blanks_end_and_consume_queues_match(timer_sample):
    name, path, expected = timer_sample
    with Store(path) as store:
        blanks = [r for r in store.commitlog.records(include_blanks=True) if isinstance(r, Blank)]
        assert [(b.physicalOffset, b.totalSize) for b in blanks] == \
            [(e["phyOffset"], e["totalSize"]) for e in expected["blank"]]
        assert store.end_offset() == expected["end"][0]["phyOffset"] == expected["meta"][0]["maxPhyOffset"]
    assert_queues_match(path, expected)


def test_store_checkpoint_has_the_five_5x_longs(timer_sample):
    name, path, expected = timer_sample
    meta = expected["meta"][0]["checkpoint"]
    with Store(path) as store:
        cp = store.checkpoint()
    assert (cp.physicMsgTimestamp, cp.logicsMsgTimestamp, cp.indexMsgTimestamp, cp.masterFlushedOffset,
            cp.confirmPhyOffset) == (meta["physicMsgTimestamp"], meta["logicsMsgTimestamp"],
                                     meta["indexMsgTimestamp"], meta["masterFlushedOffset"], meta["confirmPhyOffset"])
    if name == "timer-partial":
        assert cp.confirmPhyOffset == 2010318


def test_delay_offsets_with_data_version_read_and_rewritten_exactly(timer_sample):
    name, path, expected = timer_sample
    exp = expected["delayOffsets"][0]
    with Store(path) as store:
        offsets = store.delay_offsets()
    assert {str(k): v for k, v in offsets.offsetTable.items()} == exp["loadedTable"]
    dv = exp["dataVersionLoaded"]
    assert (offsets.dataVersion.counter, offsets.dataVersion.stateVersion, offsets.dataVersion.timestamp) == \
        (dv["counter"], dv["stateVersion"], dv["timestamp"])
    assert format_delay_offsets(parse_delay_offsets(exp["fileText"])) == exp["fileText"] == exp["reEncodedPretty"]


def unit_expected(unit, file_name: str, file_pos: int) -> dict:
    return {"file": file_name, "filePos": file_pos, "offset": unit.offset, "size": unit.size,
            "prevPos": unit.prevPos, "magic": unit.magic, "magicRoll": unit.isRoll, "magicDelete": unit.isDelete,
            "currWriteTime": unit.currWriteTime, "delayedTime": unit.delayedTime, "delayedTimeMs": unit.slotTimeMs,
            "slotIndex": slot_index(unit.slotTimeMs, PRECISION), "offsetPy": unit.offsetPy, "sizePy": unit.sizePy,
            "hashCodeOfRealTopic": unit.hashCodeOfRealTopic, "reservedValue": unit.reservedValue}


def test_unit_columns_hold_the_values_of_the_reference_path(timer_sample):
    """The column reader (what `inspect timer` reads ten million units with) gives every field
    of every unit as the construct path does, and picks rows the same."""
    _, path, _ = timer_sample
    for file in timer_log_files(path):
        data = file.read_bytes()
        reference = parse_file_construct(data, int(file.name))
        columns = unit_columns(data, int(file.name))
        assert (columns.count, columns.blank, columns.end) == (len(reference.units), reference.blank, reference.end)
        for name in reference.units.dtype.names:
            got = columns.column(name)
            assert got.dtype == reference.units.dtype[name] and got.flags.c_contiguous
            assert got.tolist() == reference.units[name].tolist(), name
        every_third = np.arange(0, columns.count, 3)
        assert columns.rows(every_third).tobytes() == reference.units[every_third].tobytes()


def test_every_timer_log_unit_blank_and_end_on_both_paths(timer_sample):
    name, path, expected = timer_sample
    got_units, got_blanks, ends = [], [], []
    for file in timer_log_files(path):
        data = file.read_bytes()
        start = int(file.name)
        fast = decode_file(data, start)
        reference = parse_file_construct(data, start)
        assert fast.units.tobytes() == reference.units.tobytes()
        assert (fast.blank, fast.end) == (reference.blank, reference.end)
        for row in fast.units:
            unit = unit_from_row(row)
            pos = unit.offset - start
            assert parse_unit(data[pos:pos + UNIT_SIZE], unit.offset) == unit
            assert build_unit(unit) == data[pos:pos + UNIT_SIZE]
            got_units.append(unit_expected(unit, file.name, pos))
        if fast.blank is not None:
            pos = fast.blank.offset - start
            assert build_blank(fast.blank.size) == data[pos:pos + 16]
            got_blanks.append({"file": file.name, "filePos": pos, "offset": fast.blank.offset,
                               "size": fast.blank.size})
        else:
            ends.append({"file": file.name, "filePos": fast.end - start, "offset": fast.end})
    fields = list(got_units[0])
    assert got_units == [{k: e[k] for k in fields} for e in expected["timerlog"]]
    assert got_blanks == [{k: e[k] for k in got_blanks[0]} for e in expected["timerlogBlank"]]
    assert ends == [{k: e[k] for k in ends[0]} for e in expected["timerlogEnd"]]
    assert len(got_units) == expected["summary"][0]["timerlogUnits"]


def test_every_unit_points_at_its_timer_message_and_names_its_topic_hash(timer_sample):
    name, path, expected = timer_sample
    with Store(path) as store:
        for exp in expected["timerlog"]:
            msg = store.commitlog.read_message(exp["offsetPy"], exp["sizePy"])
            info = timerprops.timer_info(msg.topic, msg.properties)
            want = exp["message"]
            assert (msg.topic, msg.queueId, msg.queueOffset) == (want["topic"], want["queueId"], want["queueOffset"])
            assert (info.realTopic, info.uniqKey, info.rollTimes, info.delUniqKey) == \
                (want["realTopic"], want["uniqKey"], None if want["timerRollTimes"] is None
                 else int(want["timerRollTimes"]), want["timerDelUniqKey"])
            assert info.outMs == int(want["timerOutMs"])
            assert java_string_hash(info.realTopic) == exp["hashCodeOfRealTopic"]
            if not exp["magicRoll"]:
                assert exp["delayedTimeMs"] == info.outMs  # a unit sits in its message's slot


def test_every_non_empty_wheel_slot_on_both_paths(timer_sample):
    name, path, expected = timer_sample
    wheel = (path / "timerwheel").read_bytes()
    assert len(wheel) == WHEEL_FILE_SIZE
    fast = [slot_from_row(row, PRECISION) for row in non_empty_slots(wheel)]
    assert fast == non_empty_slots_construct(wheel, PRECISION)
    got = [{"index": s.index, "storedTime": s.timeSlot, "timeMs": s.timeMs, "firstPos": s.firstPos,
            "lastPos": s.lastPos, "num": s.num, "magic": s.magic} for s in fast]
    assert got == [{k: e[k] for k in got[0]} for e in expected["timerwheel"]]
    for slot in fast:
        assert build_slot(slot) == wheel[slot.index * 32:(slot.index + 1) * 32]
        assert get_slot(wheel, slot.timeMs + 999, PRECISION) == slot
        # The same index two weeks on holds another time: TimerWheel.getSlot reads it as empty.
        later = get_slot(wheel, slot.timeMs + 14 * 86400 * 1000, PRECISION)
        assert later.index == slot.index and later.is_empty


def test_timer_checkpoint_fields_encode_and_file(timer_sample):
    name, path, expected = timer_sample
    exp = expected["timercheck"][0]
    data = (path / "config" / "timercheck").read_bytes()
    cp = parse_timer_checkpoint(data)
    raw = exp["raw"]
    assert cp.as_json() == {k: raw[k] for k in cp.as_json()}
    assert encode_timer_checkpoint(cp).hex() == exp["realTimerCheckpoint"]["encodeHex"]
    assert build_timer_checkpoint(cp) == data


def test_timer_metrics_read_and_rewritten_exactly(timer_sample):
    name, path, expected = timer_sample
    exp = expected["timermetrics"][0]
    for text in (exp["fileText"], exp["bakFileText"]):
        assert format_timer_metrics(parse_timer_metrics(text)) == text
    metrics = parse_timer_metrics((path / "config" / "timermetrics").read_text())
    parsed = exp["parsed"]
    assert {t: {"count": m.count, "timeStamp": m.timeStamp} for t, m in metrics.timingCount.items()} == \
        parsed["timingCount"]
    dv = parsed["dataVersion"]
    assert (metrics.dataVersion.counter, metrics.dataVersion.timestamp) == (dv["counter"], dv["timestamp"])
    assert format_timer_metrics(metrics) == exp["reEncodedCompact"]


def test_every_record_has_the_stage_of_the_code_path_that_wrote_it_on_both_paths(timer_sample):
    name, path, expected = timer_sample
    with Store(path) as store:
        messages = list(store.commitlog.records())
    stages = [timerprops.timer_stage(m.topic, m.properties) for m in messages]
    assert stages == [ORIGIN_STAGE[e["origin"]] for e in expected["msg"]]
    columns = timerprops.timer_columns(pa.array([m.topic for m in messages]),
                                       pa.array([m.propertiesRaw for m in messages]))
    names = [f for f in timerprops.TimerInfo.__dataclass_fields__]
    for i, msg in enumerate(messages):
        info = timerprops.timer_info(msg.topic, msg.properties)
        row = {n: columns[n][i].as_py() for n in names}
        if info is None:
            assert row["stage"] is None
            continue
        assert row == {n: getattr(info, n) for n in names}, msg.commitLogOffset
        if info.stage in (timerprops.DELIVERED, timerprops.DELIVERED_NEVER_ENQUEUED):
            # The delivered copy keeps the parked string: REAL_TOPIC names its own topic.
            assert info.realTopic == msg.topic and info.outMs is not None and info.dequeueMs is not None


def test_timer_property_values_read_as_java_reads_them():
    names = ["TIMER_OUT_MS", "TIMER_ROLL_TIMES"]
    raw = ["TIMER_OUT_MS\x01+5\x02TIMER_ROLL_TIMES\x012", "TIMER_OUT_MS\x019223372036854775807",
           "TIMER_OUT_MS\x019223372036854775808\x02TIMER_ROLL_TIMES\x012147483648", "TIMER_OUT_MS\x01",
           "TIMER_OUT_MS\x011\x02TIMER_OUT_MS\x012\x02TIMER_OUT_MS\x01", "XTIMER_OUT_MS\x011", "TIMER_OUT_MS\x01 1"]
    topics = pa.array(["rmq_sys_wheel_timer"] * len(raw))
    columns = timerprops.timer_columns(topics, pa.array(raw))
    got = [(columns["outMs"][i].as_py(), columns["rollTimes"][i].as_py()) for i in range(len(raw))]
    assert got == [(5, 2), (2**63 - 1, None), (None, None), (None, None), (2, None), (None, None), (None, None)]
    for i, text in enumerate(raw):
        info = timerprops.timer_info("rmq_sys_wheel_timer", parse_properties(text))
        assert (info.outMs, info.rollTimes) == got[i], names


# -- the __CRC32# property of enabledAppendPropCRC -----------------------------------------------
def sealed_record(properties: str, magic: int = MESSAGE_MAGIC_CODE, topic: str = "TopicTest") -> bytes:
    """A record as a broker with enabledAppendPropCRC writes it: the reserved CRC property at
    the end of the properties, filled in over the final bytes of the record."""
    body = b"hello crc"
    props = propcrc.reserved_properties(properties)
    size = message_size(0, len(body), len(topic.encode()), len(props.encode()), magic)
    msg = Message(size, magic, zlib.crc32(body) & 0x7FFFFFFF, 1, 0, 42, 1000, 0, 1795450287000,
                  bytes([10, 0, 0, 1]), 5000, 1795450287001, bytes([10, 10, 0, 5]), 10911, 0, 0, body, topic,
                  props, parse_properties(props))
    return propcrc.seal_record(encode_message(msg))


@pytest.mark.parametrize("properties", ["UNIQ_KEY\x01ABC\x02WAIT\x01true", "KEYS\x01k\x02", ""])
@pytest.mark.parametrize("magic", [MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2])
def test_crc_property_is_the_record_crc_in_reversed_decimal(properties, magic):
    record = sealed_record(properties, magic)
    msg = decode_message(record, 0, len(record))
    assert msg.propertiesRaw.endswith("\x02__CRC32#\x01" + propcrc.crc_digits(propcrc.record_crc(record)) + "\x02") \
        or msg.propertiesRaw == "__CRC32#\x01" + propcrc.crc_digits(propcrc.record_crc(record)) + "\x02"
    stored, computed = propcrc.check_record(record, msg.properties)
    assert stored == computed == zlib.crc32(record[:-propcrc.CRC32_RESERVED_LEN]) & 0x7FFFFFFF
    # The digits run least significant first, padded with zeros.
    assert propcrc.crc_digits(1234) == "4321000000"
    assert propcrc.crc_from_digits("4321000000") == 1234
    # Any byte before the property changes the CRC: a changed store timestamp is caught.
    damaged = bytearray(record)
    damaged[60] ^= 1
    stored, computed = propcrc.check_record(bytes(damaged), msg.properties)
    assert stored != computed


def test_records_without_the_crc_property_have_nothing_to_check(timer_sample):
    name, path, expected = timer_sample
    with Store(path) as store:
        msg = next(iter(store.commitlog.records()))
    assert propcrc.check_record(b"", msg.properties) is None
