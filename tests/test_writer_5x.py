"""The one writer speaks 5.x: records as the 5.3.3 broker writes them for the store at hand
(V2 for long retry topics, the __CRC32# property when the broker appends it), and the delay
levels delivered as the 5.3.3 ScheduleMessageService delivers them - checked against the
records the real broker delivered in timer-partial, field by field."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

from conftest import SAMPLES
from rmqdelay.formats.constants import (
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CRC32,
)
from rmqdelay.formats.msgid import decode_message_id, parse_host
from rmqdelay.formats.propcrc import check_record

from rmqdelay.producer import broker_message
from rmqdelay.schedule.events import Notice
from rmqdelay.schedule.redelivery import consumer_send_back
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.store import Store
from rmqdelay.store.verify import verify_store
from rmqdelay.store.writer import NewMessage, StoreWriter

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR_AHEAD = 4_102_444_800_000  # 2100-01-01
COMPARED = ["topic", "queueId", "flag", "sysFlag", "bornTimestamp", "bornHost", "storeHost", "reconsumeTimes",
            "bodyCRC", "propertiesRaw", "magic"]


def real_records(name: str) -> list[dict]:
    with gzip.open(SAMPLES / name / "expected.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [obj for obj in map(json.loads, fh) if obj["kind"] == "msg"]


def as_fields(msg) -> dict:
    return {"topic": msg.topic, "queueId": msg.queueId, "flag": msg.flag, "sysFlag": msg.sysFlag,
            "bornTimestamp": msg.bornTimestamp, "bornHost": msg.bornHost, "storeHost": msg.storeHost,
            "reconsumeTimes": msg.reconsumeTimes, "bodyCRC": msg.bodyCRC, "propertiesRaw": msg.propertiesRaw,
            "magic": f"0x{msg.magicCode & 0xFFFFFFFF:08X}"}


def new_records(path, start: int):
    with Store(path) as store:
        return list(store.commitlog.records(start))


def test_delay_levels_delivered_as_the_real_5x_broker_delivers_them(store_copy):
    """timer-fresh's delay messages, delivered by rmqdelay, are byte for byte (store time,
    offsets aside) the records the real 5.3.3 ScheduleMessageService wrote for the same
    messages in timer-partial: properties and their order, V2 for the long retry topic."""
    path = store_copy("timer-fresh")
    with Store(path) as store:
        start = store.end_offset()
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty").events())
    notes = [e.message for e in events if isinstance(e, Notice) and e.kind == "writeFormat"]
    assert notes and "5.x store" in notes[0] and "do not carry __CRC32#" in notes[0]
    ours = {}
    for msg in new_records(path, start):
        if "DELAY" in msg.properties:
            ours[msg.properties["UNIQ_KEY"]] = msg
    assert len(ours) == 305
    real = [r for r in real_records("timer-partial") if r.get("origin", "").startswith("delay-delivered")]
    assert len(real) == 70
    versions = set()
    for r in real:
        mine = as_fields(ours[r["properties"]["UNIQ_KEY"]])
        assert mine == {k: r[k] for k in COMPARED}, r["msgId"]
        versions.add(r["version"])
    assert versions == {"V1", "V2"}
    with Store(path) as store:
        offsets = store.delay_offsets()
        assert sorted(offsets.offsetTable) == list(range(1, 19))  # every level, as 5.x stores them
        assert offsets.dataVersion.counter == 1  # 305 updateOffset calls: one nextVersion per 200
        assert not list(verify_store(store))


def test_crc_property_written_when_the_broker_appends_it(store_copy, tmp_path):
    path = store_copy("timer-fresh")
    conf = tmp_path / "broker.conf"
    conf.write_text("enabledAppendPropCRC=true\n")
    with Store(path) as store:
        start = store.end_offset()
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", broker_config=conf).events())
    note = next(e.message for e in events if isinstance(e, Notice) and e.kind == "writeFormat")
    assert f"enabledAppendPropCRC=true from {conf}" in note
    written = new_records(path, start)
    assert len(written) >= 305
    with Store(path) as store:
        log = store.commitlog
        for msg in written:
            index, mf, view, pos = log._locate(msg.commitLogOffset)
            stored, computed = check_record(bytes(view[pos:pos + msg.storeSize]), msg.properties)
            assert stored == computed
            assert msg.propertiesRaw.count(PROPERTY_CRC32) == 1 and msg.propertiesRaw.endswith("\x02")
        assert not list(verify_store(store))  # verify checks every __CRC32# it finds
    # Without broker.conf, the store's newest record now tells.
    with StoreWriter(path) as writer:
        assert writer.write_format.propCrc
        assert any("carry __CRC32#" in n for n in writer.write_format.notes)
        result = writer.put(NewMessage("TopicTest", 0, b"x", {"__CRC32#": "0000000000", "KEYS": "k"}))
    with Store(path) as store:
        msg = store.commitlog.read_message(result.commitLogOffset, result.storeSize)
        assert msg.propertiesRaw.count(PROPERTY_CRC32) == 1  # the message's own one dropped, as the broker does
        assert not list(verify_store(store))


def test_v2_only_for_topics_longer_than_127(store_copy):
    path = store_copy("timer-fresh")
    long_retry = "%RETRY%" + "G" * 130
    with StoreWriter(path) as writer:
        assert writer.write_format.is5x and writer.write_format.autoMessageVersionOnTopicLen
        a = writer.put(NewMessage(long_retry, 0, b"v2", {"WAIT": "true"}))
        b = writer.put(NewMessage("TopicTest", 1, b"v1", {"WAIT": "true"}))
    with Store(path) as store:
        assert store.commitlog.read_message(a.commitLogOffset, a.storeSize).magicCode == MESSAGE_MAGIC_CODE_V2
        assert store.commitlog.read_message(b.commitLogOffset, b.storeSize).magicCode == MESSAGE_MAGIC_CODE
        assert not list(verify_store(store))


def test_delay_level_put_into_a_5x_store_is_parked_as_the_real_broker_parks_it(store_copy):
    """A delay-level message put into a 5.x store gets the schedule record the real 5.3.3
    broker wrote for the same message in timer-fresh: properties in the order of the
    request's 128-bucket map (REAL_TOPIC and REAL_QID where their buckets put them, not first),
    a separator after every pair, WAIT kept."""
    path = store_copy("timer-fresh")
    real = [r for r in real_records("timer-fresh")
            if r.get("origin") == "delay-parked (HookUtils)" and r["reconsumeTimes"] == 0]  # producers' sends
    assert len(real) == 301
    results = []
    with StoreWriter(path) as writer:
        assert writer.write_format.is5x
        for r in real:
            client = {k: v for k, v in r["properties"].items() if k not in ("CLUSTER", "REAL_TOPIC", "REAL_QID")}
            message = broker_message(r["properties"]["REAL_TOPIC"], int(r["properties"]["REAL_QID"]),
                                     base64.b64decode(r["body"]), client, born_timestamp=r["bornTimestamp"],
                                     born_host=parse_host(r["bornHost"]), store_host=parse_host(r["storeHost"]),
                                     flag=r["flag"], store_timestamp=r["storeTimestamp"], broker5x=True)
            message.sysFlag = r["sysFlag"]  # some bodies came compressed
            results.append(writer.put(message))
    with Store(path) as store:
        for r, result in zip(real, results):
            mine = store.commitlog.read_message(result.commitLogOffset, result.storeSize)
            assert as_fields(mine) == {k: r[k] for k in COMPARED}, r["msgId"]
        assert not list(verify_store(store))


def test_consumer_send_back_into_a_5x_store_is_parked_as_the_real_broker_parks_it(store_copy):
    """The send-backs in timer-fresh (a consumer group's retries of its messages), made again
    from the messages they came from, are the records the real 5.3.3 broker wrote: the
    128-bucket map's properties string, V2 for the long retry topic."""
    path = store_copy("timer-fresh")
    real = [r for r in real_records("timer-fresh")
            if r.get("origin") == "delay-parked (HookUtils)" and r["reconsumeTimes"] == 1]  # sent back from the message itself
    assert len(real) == 4
    results = []
    with Store(path) as store, StoreWriter(path) as writer:
        for r in real:
            origin = decode_message_id(r["properties"]["ORIGIN_MESSAGE_ID"])[2]
            consumed = store.commitlog.read_message(origin)
            group = r["properties"]["REAL_TOPIC"].removeprefix("%RETRY%")
            new = consumer_send_back(consumed, group)
            new.storeTimestamp = r["storeTimestamp"]
            results.append(writer.put(new))
    with Store(path) as store:
        for r, result in zip(real, results):
            mine = store.commitlog.read_message(result.commitLogOffset, result.storeSize)
            assert as_fields(mine) == {k: r[k] for k in COMPARED}, r["msgId"]
