"""A 5.3.3 store with storeType=defaultRocksDB (samples/rocksdb-clean: written by the real
broker, dumped by the real RocksDBConsumeQueueTable / RocksDBConsumerOffsetManager code in
dump.jsonl.gz): its queues and configs read from the RocksDB databases, equal to the dump
field by field, and never a byte of the store changed, also while a live instance holds them."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
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


def copy_store(source: Path, dest: Path) -> Path:
    """A writable copy, its zero runs (index, timer files) kept as holes: cp, not copytree."""
    subprocess.run(["cp", "-a", "--sparse=always", str(source), str(dest)], check=True)
    return dest


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
    store = copy_store(store_path, tmp_path / "store")
    # A live writer: opened read-write, holding the database's LOCK, with a write in its WAL.
    # Its own info LOG (stats dumped by its background thread at any time) goes outside the store:
    # what must not change is what the reads could have touched.
    options = rocksdict.Options(raw_mode=True)
    options.set_db_log_dir(str(tmp_path / "live-log"))
    options.set_stats_dump_period_sec(0)
    live = rocksdict.Rdict(str(store / "config" / "consumerOffsets"), options,
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
    store = copy_store(store_path, tmp_path / "store")
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


NOW = "--now=1796661500000"  # a minute after the broker stopped: 20 level-16 and 30 timer messages pending


def _json_lines(proc) -> list[dict]:
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def test_inspect_store_names_the_layout_and_its_databases(store_path, dump):
    info = json.loads(console("inspect", "store", store_path, "--json").stdout)
    layout = info["layout"]
    assert (layout["name"], layout["queues"], layout["configs"]) == ("RocksDB", "rocksdb", "rocksdb")
    dirs = {d["dir"]: d for d in dump["rocksdbDir"]}
    assert {db["directory"] for db in layout["rocksdb"]} == set(dirs)
    for db in layout["rocksdb"]:
        assert db["columnFamilies"] == dirs[db["directory"]]["columnFamilies"]
        assert db["rocksdbVersion"] == dump["meta"][0]["rocksdbVersion"] == "8.10.0"
        assert db["sstFiles"] == sum(1 for n in dirs[db["directory"]]["files"] if n.endswith(".sst"))
    queues = {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in info["queues"]}
    assert queues == {(q["topic"], q["queueId"]): (q["minOffset"], q["maxOffset"]) for q in dump["queue"]}
    assert info["maxPhysicalOffset"] == dump["meta"][0]["maxPhyOffset"]
    text = console("inspect", "store", store_path).stdout
    assert "layout: RocksDB" in text and "RocksDB consumequeue/: column families default, offset; written by RocksDB " \
        "8.10.0" in text


def test_every_read_command_works_on_the_rocksdb_store(store_path, dump):
    msgs = {m["commitLogOffset"]: m for m in dump["msg"]}
    units = {(u["topic"], u["queueId"], u["cqOffset"]): u for u in dump["cq"]}
    # inspect cq: the level-16 queue's units, tagsCode the deliver time.
    rows = _json_lines(console("inspect", "cq", store_path, "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", "15", "--json"))
    assert len(rows) == 20
    for r in rows:
        u = units[("SCHEDULE_TOPIC_XXXX", 15, r["cqOffset"])]
        assert (r["commitLogOffset"], r["size"], r["tagsCode"]) == (u["phyOffset"], u["size"], u["tagsCode"])
    # inspect message by offset and by offset msgId.
    first = units[("TopicDelay", 0, 0)]
    for ident in (str(first["phyOffset"]), msgs[first["phyOffset"]]["offsetMsgId"]):
        m = _json_lines(console("inspect", "message", store_path, ident, "--json"))[0]
        exp = msgs[first["phyOffset"]]
        assert (m["topic"], m["queueId"], m["queueOffset"], m["storeTimestamp"], m["properties"]["UNIQ_KEY"]) == \
            (exp["topic"], exp["queueId"], exp["queueOffset"], exp["storeTimestamp"], exp["uniqKey"])
    # inspect delay: each level's max offset is its queue's; 20 pending on level 16.
    levels = {r["level"]: r for r in _json_lines(console("inspect", "delay", store_path, NOW, "--json"))}
    queue_max = {q["queueId"]: q["maxOffset"] for q in dump["queue"] if q["topic"] == "SCHEDULE_TOPIC_XXXX"}
    assert {lv: r["maxOffset"] for lv, r in levels.items() if r["maxOffset"]} == {q + 1: m for q, m in queue_max.items()}
    assert levels[16]["pending"] == 20 and sum(r["pending"] for r in levels.values()) == 20
    # inspect timer: 30 waiting in the wheel, all 130 units of rmq_sys_wheel_timer enqueued.
    timer = json.loads(console("inspect", "timer", store_path, NOW, "--json").stdout)
    assert (timer["pending"]["units"], timer["pending"]["notEnqueued"]) == (30, 0)
    assert timer["enqueue"]["queueMaxOffset"] == 130 == \
        next(q["maxOffset"] for q in dump["queue"] if q["topic"] == "rmq_sys_wheel_timer")
    # inspect consumers: committed offsets from the RocksDB database, lag against the RocksDB queues.
    rows = _json_lines(console("inspect", "consumers", store_path, NOW, "--json"))
    committed = {(r["topic"], r["group"], r["queueId"]): r["consumerOffset"] for r in rows
                 if r["consumerOffset"] is not None}
    assert committed == {(c["topic"], c["group"], c["queueId"]): c["offset"] for c in dump["consumerOffset"]}
    dlq = [r for r in rows if r["kind"] == "dlq"]
    assert [(r["topic"], r["lag"], r["maxOffset"]) for r in dlq] == [("%DLQ%GID_FAIL", 5, 5)]
    assert sum(r["lag"] for r in rows) == 5
    # inspect dlq: the five dead-lettered messages, each the dump's.
    dead = _json_lines(console("inspect", "dlq", store_path, "--json"))
    assert sorted(d["commitLogOffset"] for d in dead) == \
        sorted(u["phyOffset"] for u in dump["cq"] if u["topic"] == "%DLQ%GID_FAIL")
    for d in dead:
        assert d["uniqKey"] == msgs[d["commitLogOffset"]]["uniqKey"] and d["originalTopic"] == "TopicFail"
    # trace: a dead-lettered message's whole path, consumed as the RocksDB offsets say.
    stages = _json_lines(console("trace", store_path, dead[0]["uniqKey"], "--json"))
    assert [s["stage"] for s in stages] == ["sent", "sendBack", "redelivered", "sendBack", "redelivered", "dlq"]
    assert stages[0]["consumers"] == [{"group": "GID_FAIL", "consumerOffset": committed[("TopicFail", "GID_FAIL",
                                                                                         stages[0]["queueId"])],
                                       "consumed": True}]
    # analyze (embedded): the backlog and the retry path into the DLQ.
    rows = _json_lines(console("analyze", "all", store_path, NOW, "--json"))
    pending = {r["level"]: r["pending"] for r in rows if r["analysis"] == "backlog" and r["table"] == "levels"}
    assert pending[16] == 20 and sum(pending.values()) == 20
    groups = [r for r in rows if r["analysis"] == "retries" and r["table"] == "groups"]
    assert [(g["group"], g["messages"], g["dlq"]) for g in groups] == [("GID_FAIL", 5, 5)]
    # --format prometheus: the DLQ's lag as a gauge.
    prom = console("inspect", "consumers", store_path, NOW, "--format", "prometheus")
    assert prom.returncode == 0, prom.stderr
    from prometheus_client.parser import text_string_to_metric_families

    lag = {(s.labels["group"], s.labels["topic"], s.labels["queue"]): s.value
           for f in text_string_to_metric_families(prom.stdout) if f.name == "rmqdelay_consumer_lag_messages"
           for s in f.samples}
    assert lag[("GID_FAIL", "%DLQ%GID_FAIL", "0")] == 5 and sum(lag.values()) == 5
    # --verify: every unit against its message.
    verify = console("inspect", "commitlog", store_path, "--verify")
    assert verify.returncode == 0 and "480 unit(s): no problems" in verify.stdout, verify.stdout + verify.stderr


def test_every_offset_entry_decodes_as_the_real_code_read_it(store_path, dump):
    from rmqdelay.formats.rocksqueue import CHECKPOINT_TOPIC, OFFSET_CF, bound_key, parse_bound, parse_bound_key, \
        parse_checkpoint

    with Store(store_path) as store:
        entries = list(store.queues.database.items(OFFSET_CF))
    assert [k.hex() for k, _ in entries] == [e["keyHex"] for e in dump["cqOffsetEntry"]]
    for (key, value), exp in zip(entries, dump["cqOffsetEntry"]):
        parsed = parse_bound_key(key)
        assert (parsed.topic, parsed.which, parsed.queueId) == (exp["topic"], exp["which"], exp["queueId"])
        assert bound_key(parsed.topic.encode(), parsed.queueId, parsed.which.encode()) == key
        if parsed.topic == CHECKPOINT_TOPIC:
            assert exp["cqOffset"] is None and parse_checkpoint(value) == exp["phyOffset"]
        else:
            assert (parse_bound(value).phyOffset, parse_bound(value).cqOffset) == (exp["phyOffset"], exp["cqOffset"])


def _queue_database(path: Path, units: list[tuple[int, int]], bounds: dict[bytes, tuple[int, int]]) -> None:
    """A consume queue database of TopicX/0 in the broker's encoding: units (cqOffset, phyOffset)."""
    import rocksdict

    from rmqdelay.formats.rocksqueue import OFFSET_CF, bound_key, encode_bound, encode_unit_value, unit_key

    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    db = rocksdict.Rdict(str(path), opts, column_families={OFFSET_CF: rocksdict.Options(raw_mode=True)})
    cf = db.get_column_family(OFFSET_CF)
    for cq_offset, phy in units:
        db[unit_key(b"TopicX", 0, cq_offset)] = encode_unit_value(phy, 100, 0, 1_700_000_000_000 + cq_offset)
    for which, (phy, cq_offset) in bounds.items():
        cf[bound_key(b"TopicX", 0, which)] = encode_bound(phy, cq_offset)
    db.close()


@pytest.mark.parametrize("log_min, min_entry, expected", [
    (0, None, 2),  # no "min" yet: the first unit at or after the log's start (here the first one)
    (0, (0, 0), 0),  # zeros, the log starting at 0: the broker answers 0
    (450, (0, 0), 5),  # zeros below the log's start: searched, the first unit at or after it
    (500, (200, 2), 5),  # a "min" whose unit the log no longer holds: searched
    (0, (300, 3), 3),  # a "min" still in the log: taken as it is
    (10_000, (200, 2), 10),  # every unit below the log's start: after the last one
])
def test_a_queue_s_min_offset_is_the_broker_s(tmp_path, log_min, min_entry, expected):
    from rmqdelay.formats.rocksqueue import MAX, MIN

    units = [(i, i * 100) for i in range(2, 10)]  # cqOffsets 2..9 at phy 200..900
    _queue_database(tmp_path / "cq", units, {MAX: (900, 9), **({MIN: min_entry} if min_entry else {})})
    queues = RocksQueues(tmp_path / "cq", lambda: log_min)
    try:
        cq = queues.queue("TopicX", 0)
        assert (cq.min_offset, cq.max_offset) == (expected, 10)
        assert queues.topics() == {"TopicX": [0]} and cq.runs() == [(2, 10)]
        assert [int(u) for u in cq.units(0, 4)["commitLogOffset"]] == [200, 300]
    finally:
        queues.close()


def test_a_json_file_with_a_higher_data_version_wins_as_the_broker_merges_it(tmp_path, store_path):
    store = copy_store(store_path, tmp_path / "store")
    newer = ('{"dataVersion":{"counter":5,"stateVersion":0,"timestamp":1},'
             '"offsetTable":{"TopicDelay@GID_DELAY":{0:3}}}')
    (store / "config" / "consumerOffset.json").write_text(newer)
    with Store(store) as s:
        offsets = read_consumer_offsets(s)
    assert offsets.table == {("TopicDelay", "GID_DELAY"): {0: 3}} and offsets.source == "config/consumerOffset.json"
    (store / "config" / "consumerOffset.json").write_text(newer.replace('"counter":5', '"counter":0'))
    with Store(store) as s:
        offsets = read_consumer_offsets(s)
    assert offsets.table[("TopicDelay", "GID_DELAY")] == {0: 24, 1: 25, 2: 26, 3: 25} and "RocksDB" in offsets.source
