"""The index (index/): its bytes as the real broker writes them, look-ups as queryOffset
makes them, rebuilding from a commit log, crash states, and --verify."""

import gzip
import json
import os
import random
import shutil
import struct

import numpy as np
import pytest
from conftest import REAL_BROKER_SAMPLES, SAMPLES, TIMER_SAMPLES
from rmqdelay.formats.index import (
    INDEX_FILE,
    IndexHeader,
    build_index_header,
    entries_view,
    index_file_size,
    key_hashes,
    message_index_keys,
    parse_index_header,
    parse_index_header_construct,
    slots_position,
    slots_view,
)
from rmqdelay.formats.javahash import index_key_hash, java_string_hash

from rmqdelay.errors import StoreError, UsageError
from rmqdelay.store import Store
from rmqdelay.store.brokerprops import read_broker_properties
from rmqdelay.store.index import (
    IndexSettings,
    StoreIndex,
    infer_geometry,
    list_index_files,
)
from rmqdelay.store.index_verify import (
    INDEX_CHAIN,
    INDEX_DUPLICATE,
    INDEX_ENTRY,
    INDEX_HEADER,
    INDEX_MISSING,
    INDEX_SLOT,
    INDEX_TIME,
    iter_index_problems,
)
from rmqdelay.store.indexer import (
    MessageIndexer,
    index_columns,
    index_file_name,
    pwrite_all,
    rebuild_index,
)

SMALL = IndexSettings(1024, 8192)  # what the real-broker samples were written with
ROLLED = SAMPLES / "delay-partial" / "index-64x512"  # the real IndexService, 64 slots / 512 entries


def index_bytes(directory) -> list[bytes]:
    """The contents of an index directory's files in order (their names are creation times)."""
    return [p.read_bytes() for p in list_index_files(directory)]


def rebuilt(store_path, tmp_path, settings=SMALL):
    out = tmp_path / "rebuilt" / "index"
    with Store(store_path) as store:
        rebuild_index(store.commitlog, out, settings)
    return out


def problems(path, settings=None):
    with Store(path) as store:
        return list(iter_index_problems(store, settings))


# -- formats ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", REAL_BROKER_SAMPLES)
def test_construct_and_numpy_views_read_the_same_index_file(name):
    path = list_index_files(SAMPLES / name / "store" / "index")[0]
    data = path.read_bytes()
    parsed = INDEX_FILE.parse(data, hashSlotNum=1024, indexNum=8192)
    header = parse_index_header(data)
    assert header == parse_index_header_construct(data)
    assert build_index_header(header) == data[:40]
    assert list(parsed.hashSlots) == slots_view(data, 1024).tolist()
    entries = entries_view(data, 1024, 0, 8192)
    for field in ("keyHash", "phyOffset", "timeDiff", "prevIndex"):
        assert [e[field] for e in parsed.entries] == entries[field].tolist()
    assert INDEX_FILE.build(parsed, hashSlotNum=1024, indexNum=8192) == data
    assert header.indexCount > 1000 and parsed.entries[0].keyHash == 0  # position 0 is never used


def test_key_hash_is_abs_of_java_string_hash_with_min_value_as_zero():
    rng = random.Random(5)
    alphabet = "aZ09#_- .:支付é😀\x00"
    keys = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 90))) for _ in range(5000)]
    keys += ["polygenelubricants", "", "TopicTest#" + "x" * 500]
    got = key_hashes(keys).tolist()
    assert got == [index_key_hash(k) for k in keys]
    assert java_string_hash("polygenelubricants") == -2**31 and got[-3] == 0
    assert all(0 <= h < 2**31 for h in got)


def test_undecodable_bytes_hash_as_the_brokers_replacement_characters():
    # A stored KEYS value with a byte that is not UTF-8 reads as U+FFFD on the broker.
    raw = b"T#k\xff1".decode("utf-8", "surrogateescape")
    assert key_hashes([raw]).tolist() == [index_key_hash("T#k\ufffd1")]


def test_keys_are_uniq_key_first_then_each_nonempty_token_of_keys():
    assert message_index_keys("T", "a  b c ", "U") == ["T#U", "T#a", "T#b", "T#c"]
    assert message_index_keys("T", None, None) == []
    assert message_index_keys("T", "", "") == ["T#"]


def test_file_names_are_local_time_and_keep_their_order(local_time_zone):
    local_time_zone("Asia/Shanghai")
    assert index_file_name(1795349796084) == "20261122201636084"
    assert index_file_name(1795349796084, after="20261122201636084") == "20261122201636085"
    assert index_file_name(1795349796084, after="20261122201700000") == "20261122201700001"
    local_time_zone("UTC")
    assert index_file_name(1795349796084) == "20261122121636084"  # the name delay-fresh's broker gave, less 9 ms


def test_broker_config_values_are_read_as_java_properties(tmp_path):
    conf = tmp_path / "broker.conf"
    conf.write_text("# comment\nmaxHashSlotNum = 1024\nmaxIndexNum:8192\nmessageIndexEnable false\n"
                    "messageDelayLevel=1s 5s \\\n  10s\n")
    props = read_broker_properties(conf)
    assert props["maxHashSlotNum"] == "1024" and props["maxIndexNum"] == "8192"
    assert props["messageDelayLevel"] == "1s 5s 10s"
    settings = IndexSettings.from_broker_config(conf)
    assert settings == IndexSettings(1024, 8192, False)
    conf.write_text("maxIndexNum=lots\n")
    with pytest.raises(UsageError, match="maxIndexNum: an integer"):
        IndexSettings.from_broker_config(conf)


# -- the real broker's files, rebuilt ----------------------------------------------------------------

@pytest.mark.parametrize("name", REAL_BROKER_SAMPLES)
def test_rebuilding_from_the_commit_log_gives_the_brokers_index_byte_for_byte(name, tmp_path):
    store = SAMPLES / name / "store"
    assert index_bytes(rebuilt(store, tmp_path)) == index_bytes(store / "index")


@pytest.mark.parametrize("name", TIMER_SAMPLES)
def test_rebuilding_a_5x_store_gives_the_5x_brokers_index_byte_for_byte(name, tmp_path, sample_store):
    # 5.3.3's IndexService indexes alike: timer copies in rmq_sys_wheel_timer, V2 records.
    store = sample_store(name)
    assert index_bytes(rebuilt(store, tmp_path)) == index_bytes(store / "index")
    assert problems(store) == []


def test_rebuilding_with_a_small_index_rolls_files_as_the_real_index_service_does(tmp_path):
    out = rebuilt(SAMPLES / "delay-partial" / "store", tmp_path, IndexSettings(64, 512))
    got, want = index_bytes(out), index_bytes(ROLLED)
    assert len(want) == 9
    assert got == want
    names = [p.name for p in list_index_files(out)]
    assert names == sorted(names) and len(set(names)) == 9


@pytest.mark.parametrize("directory, geometry", [(SAMPLES / n / "store" / "index", (1024, 8192))
                                                 for n in REAL_BROKER_SAMPLES] + [(ROLLED, (64, 512))])
def test_the_geometry_is_told_by_the_files_own_bytes(directory, geometry):
    for path in list_index_files(directory):
        data = path.read_bytes()
        assert infer_geometry(data, parse_index_header(data)) == geometry


def test_a_broker_config_that_does_not_fit_the_file_is_refused():
    with pytest.raises(StoreError, match="maxHashSlotNum=2048, maxIndexNum=8192"):
        StoreIndex(SAMPLES / "delay-fresh" / "store", IndexSettings(2048, 8192))


# -- look-ups -------------------------------------------------------------------------------------------

def _queries():
    with gzip.open(SAMPLES / "delay-partial" / "index-queries.jsonl.gz", "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


@pytest.mark.parametrize("layout", ["store", "index-64x512"])
def test_look_ups_answer_what_the_real_query_offset_answers(layout, tmp_path):
    root = SAMPLES / "delay-partial" / "store"
    if layout != "store":
        root = tmp_path / "store"
        shutil.copytree(ROLLED, root / "index")
    queries = _queries()
    assert len(queries) > 4000 and sum(bool(q[layout]["phyOffsets"]) for q in queries) > 3000
    with StoreIndex(root) as index:
        for q in queries:
            got = index.query_offsets(q["topic"], q["key"], min(q["maxNum"], 64), q["begin"], q["end"])
            want = q[layout]
            assert (got.phyOffsets, got.indexLastUpdateTimestamp, got.indexLastUpdatePhyoffset) == \
                (want["phyOffsets"], want["indexLastUpdateTimestamp"], want["indexLastUpdatePhyoffset"]), q


# -- the indexer, killed part way --------------------------------------------------------------------------

def _copy_without_index(name, tmp_path):
    dest = tmp_path / name
    shutil.copytree(SAMPLES / name / "store", dest)
    shutil.rmtree(dest / "index")
    return dest


def _complete(store, settings) -> MessageIndexer:
    """Open the index as the writer does and index the rest of the log."""
    with Store(store) as s:
        indexer = MessageIndexer(store / "index", settings)
        indexer.catch_up(s.commitlog, s.commitlog.files[-1].end)
        indexer.close()
    return indexer


def _abandon(indexer: MessageIndexer) -> None:
    """What a kill -9 leaves: files as written so far, nothing more."""
    if indexer._file is not None:
        os.close(indexer._file.fd)
        indexer._file = None


def test_entries_and_slots_written_without_their_header_are_repaired_and_completed(tmp_path):
    store = _copy_without_index("delay-partial", tmp_path)
    with Store(store) as s:
        first = MessageIndexer(store / "index", SMALL, sync=True)
        first.catch_up(s.commitlog, 1_500_000)
        first.close()
        second = MessageIndexer(store / "index", SMALL, sync=False)  # counts entries only at sync
        for rows in index_columns(s.commitlog, second.resume_offset, 2_000_000):
            for phy, ts, _, keys in rows:
                second.add_keys(phy, ts, keys)
        second.flush()
        assert second._file.uncommitted
        second._file.write_slots()  # killed after the slots, before the header
        _abandon(second)
        path = list_index_files(store / "index")[-1]
        header = parse_index_header(path.read_bytes())
        slots = slots_view(path.read_bytes(), 1024)
        assert (slots >= header.count).any()  # a broker would follow these into uncounted entries
        third = MessageIndexer(store / "index", SMALL)
        third.catch_up(s.commitlog, s.commitlog.files[-1].end)
        third.close()
        assert third.recovery.repairedSlots > 0
    assert index_bytes(store / "index") == index_bytes(SAMPLES / "delay-partial" / "store" / "index")
    assert problems(store) == []


def _rolled(tmp_path):
    """A copy of delay-partial indexed with 64 slots and 512 entries per file (nine files)."""
    store = _copy_without_index("delay-partial", tmp_path)
    with Store(store) as s:
        rebuild_index(s.commitlog, store / "index", IndexSettings(64, 512))
    return store, IndexSettings(64, 512), list_index_files(store / "index")


def test_a_record_whose_keys_straddle_a_roll_is_completed_without_duplicates(tmp_path):
    store, settings, files = _rolled(tmp_path)
    # Find a file whose last record's keys go on in the next file, and cut the index there.
    for n, path in enumerate(files[:-1]):
        nxt = parse_index_header(files[n + 1].read_bytes())
        end = parse_index_header(path.read_bytes()).endPhyOffset
        if entries_view(files[n + 1].read_bytes(), 64, 1, 2)["phyOffset"][0] == end:
            break
    else:
        pytest.fail("no record straddles two files")
    assert nxt.entries > 0
    for later in files[n + 1:]:
        later.unlink()
    with Store(store):
        indexer = MessageIndexer(store / "index", settings)
        assert indexer.resume_offset == end and 0 < indexer._resume_done
        indexer.close()
    _complete(store, settings)
    assert index_bytes(store / "index") == index_bytes(ROLLED)
    assert problems(store) == []


def test_a_roll_cut_short_before_the_new_files_header_is_finished(tmp_path):
    store, settings, files = _rolled(tmp_path)
    for later in files[4:]:
        later.unlink()
    # The next file exists, all zeros (created, nothing written yet).
    (store / "index" / str(int(files[3].name) + 1)).write_bytes(bytes(index_file_size(64, 512)))
    _complete(store, settings)
    assert index_bytes(store / "index") == index_bytes(ROLLED)


def test_an_index_ahead_of_nothing_indexes_the_whole_log_once(tmp_path):
    store = _copy_without_index("retry", tmp_path)
    with Store(store) as s:
        for _ in range(2):  # the second open finds nothing to do
            indexer = MessageIndexer(store / "index", SMALL)
            indexer.catch_up(s.commitlog, s.commitlog.files[-1].end)
            indexer.close()
        assert indexer.recovery.indexed == 0
    assert index_bytes(store / "index") == index_bytes(SAMPLES / "retry" / "store" / "index")


def test_a_new_index_file_is_sparse_and_written_with_pwrite(tmp_path):
    store = _copy_without_index("retry", tmp_path)
    with Store(store) as s:
        rebuild_index(s.commitlog, store / "index", IndexSettings())
    path = list_index_files(store / "index")[0]
    assert path.stat().st_size == index_file_size(5_000_000, 20_000_000)
    assert path.stat().st_blocks * 512 < 30 * 1024 * 1024  # the 420 MB are not allocated
    assert problems(store) == []


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_disk_is_an_error_naming_the_file_and_the_byte(tmp_path):
    fd = os.open("/dev/full", os.O_WRONLY)  # every write fails with ENOSPC
    try:
        with pytest.raises(StoreError, match=r"index/x at byte 40: room to write 4 bytes \(No space left"):
            pwrite_all(fd, b"abcd", 40, tmp_path / "index" / "x")
    finally:
        os.close(fd)


# -- verify -----------------------------------------------------------------------------------------------

def test_real_broker_indexes_have_no_problems(real_sample):
    name, path, _ = real_sample
    assert problems(path) == []


def _corrupt(path, offset, fmt, value):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        fh.write(struct.pack(fmt, value))


def test_verify_names_each_problem_with_its_file_and_byte(store_copy):
    store = store_copy("delay-fresh")
    path = list_index_files(store / "index")[0]
    data = path.read_bytes()
    header = parse_index_header(data)
    entries = entries_view(data, 1024, 0, header.count)
    base = 40 + 4 * 1024
    # entry 7: a wrong hash; entry 9: a broken chain; entry 11: a bad time; slot of entry 20 emptied.
    _corrupt(path, base + 7 * 20, ">i", int(entries["keyHash"][7]) ^ 0x4000)
    _corrupt(path, base + 9 * 20 + 16, ">i", 3)
    _corrupt(path, base + 11 * 20 + 12, ">i", int(entries["timeDiff"][11]) + 5)
    slot = int(entries["keyHash"][header.count - 1]) % 1024
    _corrupt(path, slots_position(slot), ">i", 0)
    found = problems(store)
    kinds = {p.kind for p in found}
    assert {INDEX_ENTRY, INDEX_CHAIN, INDEX_TIME, INDEX_SLOT, INDEX_MISSING} <= kinds
    by_kind = {p.kind: p for p in found}
    assert by_kind[INDEX_ENTRY].offset == base + 7 * 20 and "entry 7" in by_kind[INDEX_ENTRY].expected
    assert by_kind[INDEX_TIME].offset == base + 11 * 20 + 12
    assert by_kind[INDEX_SLOT].offset == slots_position(slot)
    assert by_kind[INDEX_MISSING].file.endswith("00000000000000000000")
    assert all(p.file for p in found) and all(p.offset is not None for p in found)


@pytest.mark.parametrize("shuffled", [False, True], ids=["in-order", "an-entry-out-of-order"])
def test_verify_a_stretch_at_a_time_finds_what_the_whole_store_at_once_finds(store_copy, monkeypatch, shuffled):
    """The check holds a chunk of entries and a stretch of the log's keys at a time (its memory
    flat in the store's size): with chunks and stretches of a few entries and keys, the same
    problems as in one piece."""
    import rmqdelay.store.index_verify as index_verify
    import rmqdelay.store.indexer as indexer

    store = store_copy("delay-fresh")
    path = list_index_files(store / "index")[0]
    data = path.read_bytes()
    header = parse_index_header(data)
    entries = entries_view(data, 1024, 0, header.count)
    base = 40 + 4 * 1024
    _corrupt(path, base + 7 * 20, ">i", int(entries["keyHash"][7]) ^ 0x4000)
    _corrupt(path, base + 9 * 20 + 16, ">i", 3)
    _corrupt(path, base + 11 * 20 + 12, ">i", int(entries["timeDiff"][11]) + 5)
    _corrupt(path, base + (header.count - 1) * 20 + 12, ">i", int(entries["timeDiff"][header.count - 1]) + 1)
    if shuffled:  # an entry pointing back at an earlier message's offset
        _corrupt(path, base + 30 * 20 + 4, ">q", int(entries["phyOffset"][2]))
    whole = sorted(map(str, problems(store)))
    monkeypatch.setattr(index_verify, "_CHUNK", 7)
    monkeypatch.setattr(index_verify, "_WINDOW_KEYS", 5)
    monkeypatch.setattr(indexer, "_INDEX_BATCH_ROWS", 3)
    assert sorted(map(str, problems(store))) == whole
    assert len(whole) >= 5 and any("entry 30:" in p for p in whole) == shuffled


def test_verify_reports_a_message_indexed_twice_and_a_header_that_lies(tmp_path):
    store = _copy_without_index("retry", tmp_path)
    with Store(store) as s:
        indexer = MessageIndexer(store / "index", SMALL)
        indexer.catch_up(s.commitlog, s.commitlog.files[-1].end)
        indexer.close()
    path = list_index_files(store / "index")[0]
    header = parse_index_header(path.read_bytes())
    # The broker's own quirk after an abnormal restart: the last record dispatched again.
    with Store(store) as s:
        msg = s.commitlog.read_message(header.endPhyOffset)
        keys = message_index_keys(msg.topic, msg.properties.get("KEYS"), msg.properties.get("UNIQ_KEY"))
        again = MessageIndexer(store / "index", SMALL)
        again.resume_offset, again._resume_done = -1, 0
        again.add_keys(msg.commitLogOffset, msg.storeTimestamp, keys)
        again.close()
    found = problems(store)
    assert [p.kind for p in found] == [INDEX_DUPLICATE]
    assert found[0].physicalOffset == header.endPhyOffset and "2 times" in found[0].expected
    _corrupt(path, 32, ">i", 1)
    assert INDEX_HEADER in {p.kind for p in problems(store)}


def test_a_store_without_an_index_has_every_key_missing(tmp_path):
    store = _copy_without_index("retry", tmp_path)
    found = problems(store)
    assert {p.kind for p in found} == {INDEX_MISSING}
    with Store(store) as s:
        assert len(found) == sum(1 for m in s.commitlog.records() if "UNIQ_KEY" in m.properties or
                                 m.properties.get("KEYS"))


def test_header_round_trip():
    h = IndexHeader(1, 2, 3, 4, 5, 6)
    assert parse_index_header(build_index_header(h)) == h
    assert IndexHeader().count == 1 and IndexHeader(indexCount=-3).count == 1
    assert np.dtype(">i4").itemsize == 4
