"""A 5.3.3 store with storeType=defaultRocksDB (samples/rocksdb-clean: written by the real
broker, dumped by the real RocksDBConsumeQueueTable / RocksDBConsumerOffsetManager code in
dump.jsonl.gz): its queues and configs read from the RocksDB databases, equal to the dump
field by field, and never a byte of the store changed, also while a live instance holds them."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from clirun import console
from conftest import SAMPLES

from rmqdelay.store import rocksdatabase
from rmqdelay.store.consumers import read_consumer_offsets
from rmqdelay.store.directory import Store
from rmqdelay.store.rocksqueues import RocksQueues

NAME = "rocksdb-clean"


@pytest.fixture(scope="module")
def dump() -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    with gzip.open(SAMPLES / NAME / "dump.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


@pytest.fixture(scope="module")
def store_path(sample_store) -> Path:
    return sample_store(NAME)


def tree_state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and mtime (ns)."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in filenames:
            path = Path(dirpath) / name
            if path.stat().st_size > 4_000_000:  # the sparse index and timer files: their ends and mtime
                with open(path, "rb") as fh:
                    data = fh.read(65536)
                    fh.seek(-65536, os.SEEK_END)
                    data += fh.read()
            else:
                data = path.read_bytes()
            state[str(path.relative_to(root))] = (data, path.stat().st_mtime_ns)
    state["."] = (b"\n".join(sorted(os.fsencode(k) for k in state)), 0)
    return state


def test_every_unit_and_queue_bound_is_the_real_codes(store_path, dump):
    with Store(store_path) as store:
        assert isinstance(store.queues, RocksQueues)
        queues = {(q["topic"], q["queueId"]): q for q in dump["queue"]}
        assert {(t, q) for t, ids in store.topics().items() for q in ids} == set(queues)
        for (topic, qid), exp in queues.items():
            cq = store.consume_queue(topic, qid)
            assert (cq.min_offset, cq.max_offset) == (exp["minOffset"], exp["maxOffset"])
            # The real RocksDBConsumeQueue's maxPhysicOffset is the last unit's offset; ours, as
            # the file queue's, the end of its message.
            last = cq.unit(cq.max_offset - 1)
            assert last.commitLogOffset == exp["maxPhysicOffset"]
            assert cq.max_physic_offset == last.commitLogOffset + last.size
            assert cq.runs() == [(exp["rawFirstCqOffset"], exp["rawLastCqOffset"] + 1)]
        seen = 0
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                units, values = cq.units(), cq.values()
                exp = sorted((u for u in dump["cq"] if (u["topic"], u["queueId"]) == (topic, qid)),
                             key=lambda u: u["cqOffset"])
                assert len(units) == len(exp) == cq.max_offset
                for i, u in enumerate(exp):
                    assert u["cqOffset"] == i
                    assert (int(units["commitLogOffset"][i]), int(units["size"][i]), int(units["tagsCode"][i])) == \
                        (u["phyOffset"], u["size"], u["tagsCode"])
                    assert int(values["storeTimestamp"][i]) == u["storeTimestamp"]
                    assert values[i:i + 1].tobytes().hex() == u["valueHex"]
                seen += len(exp)
        assert seen == len(dump["cq"]) == 480
        # A window of units, and one unit, as a file queue gives them.
        cq = store.consume_queue("SCHEDULE_TOPIC_XXXX", 2)
        assert len(cq.units(10, 20)) == 10 and cq.unit(55) is None
        assert cq.units(10, 20)["commitLogOffset"][0] == cq.unit(10).commitLogOffset
        # A queue the broker only looked up ("min" zeros, no unit) is no queue; reading it gives nothing.
        assert not store.has_queue("%RETRY%GID_DELAY", 0)
        empty = store.consume_queue("%RETRY%GID_DELAY", 0)
        assert (empty.min_offset, empty.max_offset, len(empty.units())) == (0, 0, 0)
        assert store.queues.max_physic_offset() == dump["meta"][0]["maxPhyOffsetInConsumeQueue"]


def test_consumer_offsets_are_the_rocksdb_ones(store_path, dump):
    with Store(store_path) as store:
        offsets = read_consumer_offsets(store)
    assert offsets.present and "RocksDB" in offsets.source
    got = {(t, g, q): o for (t, g), qs in offsets.table.items() for q, o in qs.items()}
    assert got == {(c["topic"], c["group"], c["queueId"]): c["offset"] for c in dump["consumerOffset"]}
    assert offsets.dataVersion is None  # the consumer offsets' kvDataVersion CF is empty


def test_topics_and_groups_read_as_their_json_documents(store_path, dump):
    from rmqdelay.store.configs import SUBSCRIPTION_GROUPS, TOPICS

    with Store(store_path) as store:
        topics = store.configs.load(TOPICS, lambda d: d)
        groups = store.configs.load(SUBSCRIPTION_GROUPS, lambda d: d)
    table = topics["topicConfigTable"]
    # TopicConfigManager.init adds the timer topic in memory only (timerWheelEnable): never on disk.
    in_memory = {"rmq_sys_wheel_timer"}
    assert set(table) == {t["topic"] for t in dump["topicConfig"]} - in_memory
    for exp in (t for t in dump["topicConfig"] if t["topic"] not in in_memory):
        assert {k: table[exp["topic"]][k] for k in exp if k not in ("kind", "topic")} == \
            {k: v for k, v in exp.items() if k not in ("kind", "topic")}
    table = groups["subscriptionGroupTable"]
    assert set(table) == {g["group"] for g in dump["subscriptionGroup"]}
    for exp in dump["subscriptionGroup"]:
        assert {k: table[exp["group"]][k] for k in exp if k not in ("kind", "group")} == \
            {k: v for k, v in exp.items() if k not in ("kind", "group")}
    versions = {v["dir"]: v for v in dump["configDataVersion"]}
    for doc, where in ((topics, "config/topics"), (groups, "config/subscriptionGroups")):
        assert doc["dataVersion"] == {k: versions[where][k] for k in ("counter", "stateVersion", "timestamp")}


def test_reading_changes_no_byte_even_while_a_live_instance_holds_the_database(tmp_path, store_path, monkeypatch):
    import tempfile

    import rocksdict

    snapshots = tmp_path / "tmp"
    snapshots.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(snapshots))
    store = tmp_path / "store"
    shutil.copytree(store_path, store)
    # A live writer: opened read-write, holding the database's LOCK, with a write in its WAL.
    live = rocksdict.Rdict(str(store / "config" / "consumerOffsets"), rocksdict.Options(raw_mode=True),
                           column_families={n: rocksdict.Options(raw_mode=True)
                                            for n in ("kvDataVersion", "forbidden")})
    try:
        live[b"TopicLive@GID_LIVE"] = b'{"offsetTable":{"0":7}}'
        live.flush_wal()
        before = tree_state(store)
        for args in (["inspect", "store", store, "--json"], ["inspect", "consumers", store, "--json"],
                     ["inspect", "cq", store, "--topic", "TopicDelay", "--queue", "0", "--json"],
                     ["inspect", "delay", store, "--json"]):
            proc = console(*args)
            assert proc.returncode == 0, proc.stderr
        rows = [json.loads(line) for line in console("inspect", "consumers", store, "--json").stdout.splitlines()]
        # What the live instance wrote to its WAL is read from the snapshot's copy of it.
        assert {(r["group"], r["consumerOffset"]) for r in rows if r["topic"] == "TopicLive"} == {("GID_LIVE", 7)}
        assert tree_state(store) == before
    finally:
        live.close()
    assert list(snapshots.iterdir()) == []  # every snapshot removed


def test_without_the_library_or_with_a_database_it_cannot_read_one_line(tmp_path, store_path, monkeypatch):
    store = tmp_path / "store"
    shutil.copytree(store_path, store)
    with monkeypatch.context() as m:
        m.setattr(rocksdatabase, "_rocksdict", lambda: None)
        proc = console("inspect", "cq", store, "--topic", "TopicDelay", "--queue", "0")
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
        assert "rmqdelay[rocksdb]" in proc.stderr
    manifest = next((store / "consumequeue").glob("MANIFEST-*"))
    manifest.write_bytes(b"\x00" * manifest.stat().st_size)
    proc = console("inspect", "cq", store, "--topic", "TopicDelay", "--queue", "0")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "consumequeue" in proc.stderr and "RocksDB" in proc.stderr and "Traceback" not in proc.stderr
