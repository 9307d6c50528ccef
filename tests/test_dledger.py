"""DLedger stores (enableDLegerCommitLog=true) written by a real 4.9.4 broker on dledger 0.2.6
read as the real DefaultMessageStore + DLedgerCommitLog read them (samples/dledger-clean: a
single-node group; samples/dledger-leader: the leader of a 3-node group), field by field
against their dumps; the entry framing, the committed index and what lies past it."""

from __future__ import annotations

import gzip
import json
import os
import struct
from pathlib import Path

import pytest
from conftest import SAMPLES, b64, load_expected
from test_real_broker_samples import MESSAGE_FIELDS, as_expected, assert_queues_match

from rmqdelay.formats.commitlog import Blank, Message
from rmqdelay.formats.dledger import ENTRY_HEADER, ENTRY_HEADER_FAST, INDEX_UNIT, INDEX_UNIT_FAST
from rmqdelay.store import Store
from rmqdelay.store.commitlog import End
from rmqdelay.store.layout import DLEDGER, find_layout
from rmqdelay.store.logfile import DLEDGER as DLEDGER_FRAMING
from rmqdelay.store.scan import scan_commitlog_file
from rmqdelay.store.verify import verify_store

DLEDGER_SAMPLES = ["dledger-clean", "dledger-leader"]


@pytest.fixture(params=DLEDGER_SAMPLES)
def dledger_sample(request, sample_store):
    name = request.param
    return name, sample_store(name), load_expected(name)


def sparse_copy(src: Path, dst: Path) -> None:
    """A copy of a store whose sparse files (the 160 MiB DLedger index, the 420 MB index
    file) stay sparse: only the data extents are read and written."""
    for root, dirs, files in os.walk(src):
        rel = Path(root).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            with open(Path(root) / name, "rb") as fin, open(dst / rel / name, "wb") as fout:
                size = os.fstat(fin.fileno()).st_size
                pos = 0
                while pos < size:
                    try:
                        pos = os.lseek(fin.fileno(), pos, os.SEEK_DATA)
                        hole = os.lseek(fin.fileno(), pos, os.SEEK_HOLE)
                    except OSError:
                        break  # only holes are left
                    fin.seek(pos)
                    fout.seek(pos)
                    fout.write(fin.read(hole - pos))
                    pos = hole
                fout.truncate(size)


def test_the_layout_is_dledger_and_the_log_is_its_data_files(dledger_sample):
    name, path, expected = dledger_sample
    meta = expected["meta"][0]
    assert find_layout(path).log == DLEDGER
    with Store(path) as store:
        log = store.commitlog
        assert [(f.path.name, f.size, f.framing) for f in log.files] == \
            [(f["name"], f["size"], DLEDGER_FRAMING) for f in meta["dledgerDataFiles"]]
        assert (log.min_offset, store.end_offset()) == (meta["minPhyOffset"], meta["maxPhyOffset"])
        facts = log.facts()
        dl = meta["dledger"]
        assert (facts["committedIndex"], facts["endIndex"], facts["endTerm"], facts["firstIndex"]) == \
            (dl["committedIndex"], dl["ledgerEndIndex"], dl["ledgerEndTerm"], dl["ledgerBeginIndex"])
        assert (facts["committedPosition"], facts["writePosition"]) == (dl["committedPos"], dl["writePos"])
        assert (facts["currTerm"], facts["voteLeader"]) == (dl["memberStateCurrTerm"], dl["memberStateCurrVoteFor"])
        assert facts["dividedCommitlogOffset"] == meta["dividedCommitlogOffset"]
        assert facts["uncommitted"] is None


def test_every_message_decodes_field_by_field_on_both_paths(dledger_sample):
    name, path, expected = dledger_sample
    with Store(path) as store:
        fast = list(store.commitlog.records())
        assert fast == list(store.commitlog.records(reference=True))
    assert len(fast) == len(expected["msg"])
    for msg, exp in zip(fast, expected["msg"]):
        want = {k: exp[k] for k in MESSAGE_FIELDS + ["bodyLength", "body"]}
        assert as_expected(msg) == want, exp["msgId"]
        assert msg.commitLogOffset == exp["entryPos"] + 48


def test_the_scan_reads_what_the_records_are(dledger_sample):
    name, path, expected = dledger_sample
    with Store(path) as store:
        rows = []
        for f in store.commitlog.files:
            for batch in scan_commitlog_file(f, name):
                rows += batch.to_pylist()
    assert [(r["commitlog_offset"], r["store_size"], r["msg_id"], r["topic"], r["queue_offset"],
             r["store_timestamp"], r["uniq_key"]) for r in rows] == \
        [(m["commitLogOffset"], m["storeSize"], m["msgId"], m["topic"], m["queueOffset"], m["storeTimestamp"],
          m["properties"].get("UNIQ_KEY")) for m in expected["msg"]]


def test_entry_headers_and_index_units_are_the_dumps(dledger_sample):
    name, path, expected = dledger_sample
    with Store(path) as store:
        log = store.commitlog
        for e in expected["entry"]:
            index = log.file_index(e["pos"])
            head = ENTRY_HEADER.parse(bytes(log.view(index)[e["filePos"]:e["filePos"] + 48]))
            assert (head.magic, head.size, head.index, head.term, head.pos, head.bodyLen) == \
                (e["magic"], e["size"], e["index"], e["term"], e["pos"], e["bodyLen"])
            unit = log.index_unit(e["index"])
            assert (unit.pos, unit.size, unit.index, unit.term) == (e["indexPos"], e["indexSize"], e["index"], e["term"])
        # The fast layouts are the construct ones.
        raw = bytes(log.view(0)[:48])
        assert tuple(ENTRY_HEADER.parse(raw).values())[1:] == ENTRY_HEADER_FAST.unpack(raw)
        unit_raw = INDEX_UNIT_FAST.pack(1, 0, 1314, 0, 0)
        assert tuple(INDEX_UNIT.parse(unit_raw).values())[1:] == INDEX_UNIT_FAST.unpack(unit_raw)


def test_end_marks_close_every_full_data_file(dledger_sample):
    name, path, expected = dledger_sample
    tails = [f for f in expected.get("dledgerFile", []) if f["tailKind"] == "blank"]
    with Store(path) as store:
        blanks = [r for r in store.commitlog.records(include_blanks=True) if isinstance(r, Blank)]
        assert [(b.physicalOffset, b.totalSize) for b in blanks] == \
            [(f["fileFromOffset"] + f["dataEnd"], f["tailSize"]) for f in tails]
        assert isinstance(store.commitlog.read_record(store.end_offset()), End)


def test_consume_queue_units_and_bounds_match(dledger_sample):
    name, path, expected = dledger_sample
    assert_queues_match(path, expected)
    with Store(path) as store:
        for unit in expected["cq"][::7]:
            msg = store.commitlog.read_message(unit["phyOffset"], unit["size"])
            assert (msg.topic, msg.queueId, msg.queueOffset) == (unit["topic"], unit["queueId"], unit["cqOffset"])


def test_look_ups_by_offset_msgid_key_and_entry_pos(dledger_sample):
    name, path, expected = dledger_sample
    with Store(path) as store:
        for exp in expected["msg"][::23]:
            assert store.message_at(exp["commitLogOffset"]).msgId == exp["msgId"]
            assert store.message_by_id(exp["msgId"]).commitLogOffset == exp["commitLogOffset"]
            # The entry's pos names the record inside it.
            assert store.message_at(exp["entryPos"]).commitLogOffset == exp["commitLogOffset"]
            assert exp["commitLogOffset"] in {m.commitLogOffset for m in store.messages_by_key(exp["uniqKey"])}


def test_verify_finds_no_problem(dledger_sample):
    name, path, expected = dledger_sample
    from rmqdelay.store.verify import VerifyCounts

    counts = VerifyCounts()
    with Store(path, lenient=True) as store:
        assert verify_store(store, counts=counts) == []
    assert counts.messages == len(expected["msg"])
    assert counts.units == len(expected["cq"])
    assert counts.dledger["entries"] == len(expected["entry"])
    assert counts.dledger["uncommittedEntries"] == 0


@pytest.fixture(scope="module")
def behind(tmp_path_factory, sample_store):
    """The leader's store with its checkpoint moved back to committedIndex=150: entries
    151..199 lie written but not committed (as on a node whose checkpoint the group's
    commit had not reached yet)."""
    path = tmp_path_factory.mktemp("dledger-behind") / "store"
    sparse_copy(sample_store("dledger-leader"), path)
    (path / "dledger-n0" / "checkpoint").write_text("committedIndex=150\nendIndex=199\n")
    return path


def test_entries_past_the_committed_index_are_not_served(behind):
    expected = load_expected("dledger-leader")
    entries = {e["index"]: e for e in expected["entry"]}
    committed_end = entries[150]["pos"] + entries[150]["size"]
    with Store(behind) as store:
        log = store.commitlog
        assert (log.committed_index, log.end_index, store.end_offset()) == (150, 199, committed_end)
        assert log.uncommitted.as_json() == {"entries": 49, "firstIndex": 151, "lastIndex": 199,
                                             "startOffset": committed_end,
                                             "endOffset": entries[199]["pos"] + entries[199]["size"]}
        assert [m.commitLogOffset for m in log.records()] == [entries[i]["pos"] + 48 for i in range(151)]
        assert log.files[0].served == committed_end
        rows = sum(b.num_rows for b in scan_commitlog_file(log.files[0], "x"))
        assert rows == 151
        from rmqdelay.errors import StoreError

        with pytest.raises(StoreError, match="past the committed index 150"):
            log.read_message(entries[160]["pos"] + 48)


def test_verify_says_what_lies_past_the_committed_index(behind):
    from rmqdelay.store.verify import VerifyCounts

    counts = VerifyCounts()
    with Store(behind, lenient=True) as store:
        problems = verify_store(store, counts=counts)
    assert counts.messages == 151
    assert counts.dledger["uncommittedEntries"] == 49
    # The queues' units for the uncommitted entries point past the served log.
    assert problems and {p.kind for p in problems} == {"cqPastLog"}


def test_a_damaged_entry_header_is_one_problem_naming_file_and_byte(tmp_path, sample_store):
    path = tmp_path / "store"
    sparse_copy(sample_store("dledger-leader"), path)
    expected = load_expected("dledger-leader")
    e = expected["entry"][10]
    data = path / "dledger-n0" / "data" / e["file"]
    with open(data, "r+b") as fh:
        fh.seek(e["filePos"] + 24)  # the entry's pos
        fh.write(struct.pack(">q", 12345))
    with Store(path, lenient=True) as store:
        problems = verify_store(store)
    first = problems[0]
    assert (first.kind, first.file, first.offset) == ("dledgerEntry", str(data), e["filePos"])
    assert "pos" in first.expected


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """A store migrated to DLedger, made from the real plain delay-partial store
    (rmqdelay.samples.dledger.convert_to_dledger): its first three commit log files stay in
    commitlog/, below dividedCommitlogOffset; the records of the rest sit in DLedger entries
    from there on, their consume queue units moved with them."""
    from rmqdelay.samples.dledger import convert_to_dledger

    path = tmp_path_factory.mktemp("migrated") / "store"
    made = convert_to_dledger(SAMPLES / "delay-partial" / "store", path, divide_files=3)
    return path, made


def test_a_migrated_store_reads_as_one_log(migrated):
    path, made = migrated
    plain = SAMPLES / "delay-partial" / "store"
    with Store(plain) as before, Store(path) as after:
        old = list(before.commitlog.records())
        new = list(after.commitlog.records())
        assert new == list(after.commitlog.records(reference=True))
        log = after.commitlog
        assert log.divided == made["dividedCommitlogOffset"] == 3 * 262144
        assert [f.framing for f in log.files[:3]] == ["plain"] * 3 and \
            {f.framing for f in log.files[3:]} == {DLEDGER_FRAMING}
        assert (log.min_offset, after.end_offset()) == (0, made["committedPosition"])
        assert len(new) == len(old)
        below = [m for m in old if m.commitLogOffset < log.divided]
        assert new[:len(below)] == below  # the old log byte for byte
        for a, b in zip(old[len(below):], new[len(below):]):
            assert (a.topic, a.queueId, a.queueOffset, a.body, a.properties, a.storeTimestamp) == \
                (b.topic, b.queueId, b.queueOffset, b.body, b.properties, b.storeTimestamp)
        assert new[len(below)].commitLogOffset == log.divided + 48
        # Every unit finds its message across the divide.
        for topic, ids in after.topics().items():
            for qid in ids:
                for i, u in enumerate(after.consume_queue(topic, qid).units()):
                    msg = after.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                    assert (msg.topic, msg.queueId, msg.queueOffset) == (topic, qid, i)
        rows = sum(b.num_rows for f in log.files for b in scan_commitlog_file(f, "m"))
        assert rows == len(old)
    with Store(path, lenient=True) as store:
        assert verify_store(store) == []
