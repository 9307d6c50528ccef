"""StoreWriter.put_encoded: a record the caller serialised lands exactly as put() would have
written the same message (commit log, consume queues, index, checkpoint), and a record whose
head does not match its bytes is refused before anything is written."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from rmqdelay.formats.commitlog import Message, body_crc, encode_message, message_size
from rmqdelay.formats.constants import BORNHOST_V6_FLAG, MESSAGE_MAGIC_CODE
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.properties import format_properties, java_order

from rmqdelay.errors import UsageError
from rmqdelay.store import Store
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.writer import NewMessage, StoreWriter

T0 = 1_767_225_600_000
V4 = (bytes([192, 168, 1, 20]), 40001)
V6 = (bytes(15) + b"\x01", 40002)
STORE = (bytes([10, 10, 0, 5]), 10911)
DELAYS = {1: 1000, 2: 5000, 3: 10000}


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and p.name != "lock"}


def messages() -> list[NewMessage]:
    out = []
    for i in range(300):
        props = {"TAGS": f"Tag{i % 3}", "KEYS": f"K{i} ORDER_{i}", "UNIQ_KEY": f"C0A8011400{i:022X}",
                 "region": "cn-hangzhou"}
        if i % 4 == 0:
            props["DELAY"] = str(1 + i % 3)
        out.append(NewMessage(topic=f"Topic{i % 2}", queueId=i % 3, body=b"body-%d" % i * (1 + i % 7),
                              properties=props, bornTimestamp=T0 + i, bornHost=V6 if i % 5 == 0 else V4,
                              storeHost=STORE, reconsumeTimes=i % 2, storeTimestamp=T0 + 10 * i))
    return out


def encoded(new: NewMessage, delays: dict[int, int]) -> tuple[str, int, bytearray, int]:
    """What a caller of put_encoded does itself: putMessage's delay rewrite and the tagsCode."""
    props, topic, queue_id = dict(new.properties), new.topic, new.queueId
    level = int(props.get("DELAY", "0"))
    if level:
        props.update(REAL_TOPIC=topic, REAL_QID=str(queue_id))
        topic, queue_id, code = "SCHEDULE_TOPIC_XXXX", level - 1, new.storeTimestamp + delays[level]
    else:
        code = tags_code(props["TAGS"])
    raw = format_properties(java_order(props))
    sys_flag = BORNHOST_V6_FLAG if len(new.bornHost[0]) == 16 else 0
    size = message_size(sys_flag, len(new.body), len(topic.encode()), len(raw.encode()))
    msg = Message(size, MESSAGE_MAGIC_CODE, body_crc(new.body), queue_id, 0, 0, 0, sys_flag, new.bornTimestamp,
                  new.bornHost[0], new.bornHost[1], new.storeTimestamp, new.storeHost[0], new.storeHost[1],
                  new.reconsumeTimes, 0, new.body, topic, raw)
    return topic, queue_id, bytearray(encode_message(msg)), code


def open_writer(path: Path) -> StoreWriter:
    return StoreWriter(path, delay_levels=DELAYS, commitlog_file_size=16384, cq_file_size=200, sync=False,
                       create=True, index=IndexSettings(64, 512))


def test_encoded_records_land_as_put_writes_them(tmp_path):
    with open_writer(tmp_path / "put") as writer:
        put = [writer.put(new) for new in messages()]
    with open_writer(tmp_path / "encoded") as writer:
        got = []
        for new in messages():
            topic, queue_id, record, code = encoded(new, DELAYS)
            got.append(writer.put_encoded(topic, queue_id, record, code, new.properties["KEYS"],
                                          new.properties["UNIQ_KEY"]))
    assert got == [(r.queueOffset, r.commitLogOffset) for r in put]
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "encoded")
    assert len(list((tmp_path / "put" / "commitlog").iterdir())) > 3  # rolled over with BLANK records
    with Store(tmp_path / "encoded") as store:
        assert [m.commitLogOffset for m in store.commitlog.records(0)] == [r.commitLogOffset for r in put]


def test_a_record_whose_head_disagrees_with_its_bytes_is_refused(tmp_path):
    new = messages()[1]
    topic, queue_id, record, code = encoded(new, DELAYS)
    with open_writer(tmp_path / "store") as writer:
        with pytest.raises(UsageError, match="head says"):
            writer.put_encoded(topic, queue_id, record + b"\0", code, None, None)
        with pytest.raises(UsageError, match="magic code"):
            writer.put_encoded(topic, queue_id, record[:4] + bytes(4) + record[8:], code, None, None)
        assert writer.end_offset == 0
        assert writer.put_encoded(topic, queue_id, record, code, None, None) == (0, 0)
