"""Stores written by the real RocketMQ 4.9.4 store code decode exactly as it read them."""

import numpy as np
import pytest
from conftest import ALL_SAMPLES, b64
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import CQ_STORE_UNIT_SIZE
from rmqdelay.formats.consumequeue import CqUnit, decode_units, parse_unit
from rmqdelay.formats.rocksqueue import UNIT_VALUE, UNIT_VALUE_DTYPE

from rmqdelay.store import Store
from rmqdelay.store.commitlog import Blank
from rmqdelay.store.layout import is_rocksdb

MESSAGE_FIELDS = ["msgId", "topic", "queueId", "flag", "queueOffset", "commitLogOffset", "storeSize",
                  "sysFlag", "bornTimestamp", "bornHost", "storeTimestamp", "storeHost", "reconsumeTimes",
                  "preparedTransactionOffset", "bodyCRC", "bodyCrcOk", "properties", "propertiesRaw"]


CQ_FIELDS = ["topic", "queueId", "cqOffset", "phyOffset", "size", "tagsCode"]


def as_expected(msg: Message) -> dict:
    out = {f: getattr(msg, f) for f in MESSAGE_FIELDS}
    out["bodyLength"] = len(msg.body)
    out["body"] = b64(msg.body)
    return out


def test_every_message_decodes_field_by_field_on_both_paths(real_sample):
    name, path, expected = real_sample
    with Store(path) as store:
        fast = [r for r in store.commitlog.records()]
        reference = [r for r in store.commitlog.records(reference=True)]
    assert fast == reference
    assert len(fast) == len(expected["msg"])
    for msg, exp in zip(fast, expected["msg"]):
        want = {k: exp[k] for k in MESSAGE_FIELDS + ["bodyLength", "body"]}
        assert as_expected(msg) == want, exp["msgId"]


def test_blank_records_close_every_file_but_the_last(real_sample):
    name, path, expected = real_sample
    with Store(path) as store:
        blanks = [r for r in store.commitlog.records(include_blanks=True) if isinstance(r, Blank)]
        assert [(b.physicalOffset, b.totalSize) for b in blanks] == \
            [(e["phyOffset"], e["totalSize"]) for e in expected["blank"]]
        assert store.end_offset() == expected["end"][0]["phyOffset"]
        assert store.end_offset() == expected["meta"][0]["maxPhyOffset"]


def test_consume_queue_units_and_bounds_match(real_sample):
    name, path, expected = real_sample
    assert_queues_match(path, expected)


def assert_queues_match(path, expected: dict) -> None:
    """Every consume queue unit and every queue's bounds as the dump has them."""
    with Store(path) as store:
        got = []
        for topic, ids in store.topics().items():
            for qid in ids:
                units = store.consume_queue(topic, qid).units()
                got += [dict(topic=topic, queueId=qid, cqOffset=i, phyOffset=int(u["commitLogOffset"]),
                             size=int(u["size"]), tagsCode=int(u["tagsCode"])) for i, u in enumerate(units)]
        key = lambda d: (d["topic"], d["queueId"], d["cqOffset"])  # noqa: E731
        assert sorted(got, key=key) == sorted(({k: e[k] for k in CQ_FIELDS} for e in expected["cq"]), key=key)
        for q in expected["queue"]:
            # The broker lists queues it only holds in memory; on disk they are absent.
            cq = store.consume_queue(q["topic"], q["queueId"])
            assert (cq.min_offset, cq.max_offset, cq.max_physic_offset) == \
                (q["minOffset"], q["maxOffset"], q["maxPhysicOffset"])


def test_every_unit_points_at_a_message_of_its_queue(real_sample):
    name, path, expected = real_sample
    with Store(path) as store:
        for topic, ids in store.topics().items():
            for qid in ids:
                for i, u in enumerate(store.consume_queue(topic, qid).units()):
                    msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                    assert (msg.topic, msg.queueId, msg.queueOffset) == (topic, qid, i)


def test_delay_offsets_and_checkpoint_match(real_sample):
    name, path, expected = real_sample
    exp = expected["delayOffsets"][0]
    with Store(path) as store:
        offsets = store.delay_offsets()
        if exp["fileText"] is None:
            assert offsets is None
        else:
            assert {str(k): v for k, v in offsets.offsetTable.items()} == exp["loadedTable"]
        cp = store.checkpoint()
        meta = expected["meta"][0]["checkpoint"]
        assert (cp.physicMsgTimestamp, cp.logicsMsgTimestamp, cp.indexMsgTimestamp) == \
            (meta["physicMsgTimestamp"], meta["logicsMsgTimestamp"], meta["indexMsgTimestamp"])
        assert [(f.path.name, f.size) for f in store.commitlog.files] == \
            [(f["name"], f["size"]) for f in expected["meta"][0]["commitlogFiles"]]


def test_message_look_ups_by_offset_msgid_and_keys(real_sample):
    name, path, expected = real_sample
    msgs = expected["msg"]
    with Store(path) as store:
        for exp in msgs[:: max(1, len(msgs) // 25)]:
            assert store.message_at(exp["commitLogOffset"]).msgId == exp["msgId"]
            assert store.message_by_id(exp["msgId"]).commitLogOffset == exp["commitLogOffset"]
            uniq = exp["properties"].get("UNIQ_KEY")
            if uniq:
                found = {m.commitLogOffset for m in store.messages_by_key(uniq)}
                assert exp["commitLogOffset"] in found


@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_fast_and_construct_paths_agree_on_every_sample(name, sample_store):
    """Every record and every consume queue unit of every sample (the real broker's, 4.9.4 and
    5.3.3, and the generated one) decodes to the same values on the fast path and through
    construct."""
    path = sample_store(name)
    with Store(path) as store:
        fast = list(store.commitlog.records())
        assert fast == list(store.commitlog.records(reference=True))
        assert sum(isinstance(r, Message) for r in fast) > 0
    units = 0
    if is_rocksdb(path / "consumequeue"):  # the units as values of a RocksDB table: the fast path against construct
        with Store(path) as store:
            for topic, ids in store.topics().items():
                for qid in ids:
                    values = store.consume_queue(topic, qid).values()
                    by_construct = [UNIT_VALUE.parse(values[i:i + 1].tobytes()) for i in range(len(values))]
                    assert [tuple(int(v[f]) for f in UNIT_VALUE_DTYPE.names) for v in values] == \
                        [tuple(c[f] for f in UNIT_VALUE_DTYPE.names) for c in by_construct]
                    units += len(values)
    for cq_file in sorted((path / "consumequeue").glob("*/*/*")):
        data = cq_file.read_bytes()
        array = decode_units(data)
        # The written units and the first zero one after them (a 5.3.3 broker preallocates 300,000).
        written = np.flatnonzero(array["commitLogOffset"] | array["size"] | array["tagsCode"])
        array = array[:min(int(written[-1]) + 2 if written.size else 1, len(array))]
        by_construct = [parse_unit(data[i:i + CQ_STORE_UNIT_SIZE]) for i in range(0, len(array) * CQ_STORE_UNIT_SIZE,
                                                                               CQ_STORE_UNIT_SIZE)]
        assert [CqUnit(int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"])) for u in array] == by_construct
        units += len(array)
    assert units > 0
