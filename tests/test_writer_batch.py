"""StoreWriter.put_batch: the same store as put() one message at a time - commit log, consume
queues, index, checkpoint, byte for byte - whatever the batches (one message, a few, the whole
lot), the store's write format (4.x; 5.x with the CRC property and V2 records), file roll-overs,
transactions that get no unit and a clock read per message; and what it says of each message
is what put() returned. A message put() refuses refuses the batch before any of it is written."""

from __future__ import annotations

import errno
import hashlib
import os
from pathlib import Path

import numpy as np
import pytest

from rmqdelay.errors import StoreWriteError, UsageError
from rmqdelay.formats.constants import TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE
from rmqdelay.store import Store
from rmqdelay.store.batchencode import StoredCopies
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.verify import verify_store
from rmqdelay.store.writeformat import FORMAT_4X, WriteFormat
from rmqdelay.store.writer import NewMessage, StoreWriter

T0 = 1_767_225_600_000
V4 = (bytes([192, 168, 1, 20]), 40001)
V6 = (bytes(15) + b"\x01", 40002)
STORE = (bytes([10, 10, 0, 5]), 10911)
DELAYS = {1: 1000, 2: 5000, 3: 10000}
FORMAT_5X_CRC = WriteFormat("5.x", True, True)
LONG_RETRY = "%RETRY%" + "G" * 130


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and p.name != "lock"}


def messages(count: int = 400, *, five: bool = False) -> list[NewMessage]:
    out = []
    for i in range(count):
        props = {"TAGS": f"Tag{i % 3}", "KEYS": f"K{i} ORDER_{i}", "UNIQ_KEY": f"C0A8011400{i:022X}",
                 "region": "cn-hangzhou"}
        if i % 4 == 0:
            props["DELAY"] = str(1 + i % 5)  # levels 4 and 5 beyond the store's 3: the last level
        if i % 9 == 0:
            props.pop("TAGS")
        raw = None
        if i % 11 == 0:
            raw = "TAGS\x01Tag9\x02UNIQ_KEY\x01U%d\x02" % i  # written as is
        sys_flag = 0
        if i % 13 == 0:
            sys_flag = TRANSACTION_PREPARED_TYPE if i % 2 else TRANSACTION_ROLLBACK_TYPE  # no unit
        topic = f"Topic{i % 2}"
        if five and i % 17 == 0:
            topic = LONG_RETRY  # a V2 record
        out.append(NewMessage(topic=topic, queueId=i % 3, body=b"body-%d" % i * (1 + i % 23),
                              properties=props, propertiesRaw=raw, sysFlag=sys_flag, flag=i % 4,
                              bornTimestamp=T0 + i, bornHost=V6 if i % 5 == 0 else V4,
                              storeHost=V6 if i % 7 == 0 else STORE, reconsumeTimes=i % 2,
                              preparedTransactionOffset=i if sys_flag else 0,
                              storeTimestamp=None if i % 3 == 0 else T0 + 10 * i))
    return out


def ticking_clock():
    now = [T0 + 5]

    def clock() -> int:
        now[0] += 3
        return now[0]
    return clock


def open_writer(path: Path, write_format: WriteFormat, index: bool = True,
                commitlog_file_size: int = 16384, index_num: int = 512) -> StoreWriter:
    return StoreWriter(path, delay_levels=DELAYS, commitlog_file_size=commitlog_file_size, cq_file_size=200,
                       sync=False,
                       create=True, index=IndexSettings(64, index_num, messageIndexEnable=index),
                       clock=ticking_clock(), write_format=write_format)


def assert_put_batch_writes_what_put_writes(tmp_path: Path, write_format: WriteFormat, chunks: list[list]) -> None:
    """The messages of ``chunks`` put one by one into one store and a put_batch a chunk into
    another: the same results, the same files."""
    with open_writer(tmp_path / "put", write_format) as writer:
        expected = [writer.put(new) for chunk in chunks for new in chunk]
    with open_writer(tmp_path / "batch", write_format) as writer:
        got = [r for chunk in chunks for r in writer.put_batch(chunk).results()]
    assert got == expected
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")


def batches(items: list, sizes: list[int]):
    at, k = 0, 0
    while at < len(items):
        n = sizes[k % len(sizes)]
        yield items[at:at + n]
        at += n
        k += 1


@pytest.mark.parametrize("write_format", [FORMAT_4X, FORMAT_5X_CRC], ids=["4.x", "5.x-crc"])
@pytest.mark.parametrize("sizes", [[1], [7, 64, 3], [10_000]], ids=["one", "mixed", "all"])
def test_put_batch_writes_the_store_put_writes(tmp_path, write_format, sizes):
    news = messages(five=write_format.is5x)
    with open_writer(tmp_path / "put", write_format) as writer:
        expected = [writer.put(new) for new in news]
    with open_writer(tmp_path / "batch", write_format) as writer:
        got, ids = [], []
        for chunk in batches(news, sizes):
            batch = writer.put_batch(chunk)
            got += batch.results()
            ids += batch.msg_ids()  # made as one array where every store host is IPv4
    assert got == expected
    assert ids == [r.msgId for r in expected]
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")
    assert len(list((tmp_path / "batch" / "commitlog").iterdir())) > 3  # rolled over with BLANK records
    with Store(tmp_path / "batch") as store:
        assert verify_store(store) == []


def test_put_and_put_batch_mixed_in_one_flush(tmp_path):
    news = messages(120)
    with open_writer(tmp_path / "put", FORMAT_4X, index=False) as writer:
        for new in news:
            writer.put(new)
    with open_writer(tmp_path / "mixed", FORMAT_4X, index=False) as writer:
        for chunk in batches(news, [5, 1]):
            if len(chunk) == 1:
                writer.put(chunk[0])
            else:
                writer.put_batch(chunk)
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "mixed")


@pytest.mark.parametrize("fails", [False, True], ids=["short-writes", "then-a-full-disk"])
def test_a_flush_of_batches_written_short_is_finished_or_undone(tmp_path, monkeypatch, fails):
    """The batches of a flush go to the commit log in one pwritev, not joined first: a short
    one is continued to the last byte (the store put() writes), and when the rest cannot be
    written the flush is undone (an error; no record of it left in the log)."""
    news = messages(120)
    with open_writer(tmp_path / "put", FORMAT_4X, index=False, commitlog_file_size=1 << 20) as writer:
        for new in news:
            writer.put(new)
    real_pwritev, real_pwrite = os.pwritev, os.pwrite
    calls = []

    def short_pwritev(fd, buffers, offset):
        calls.append(len(buffers))
        return real_pwrite(fd, b"".join(buffers)[:1000], offset)

    def full_pwrite(fd, data, offset):
        # The commit log's disk is full; zeros over what the flush wrote still go.
        if "commitlog" in os.readlink(f"/proc/self/fd/{fd}") and any(memoryview(data).cast("B")):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_pwrite(fd, data, offset)

    monkeypatch.setattr(os, "pwritev", short_pwritev)
    if fails:
        monkeypatch.setattr(os, "pwrite", full_pwrite)
    writer = open_writer(tmp_path / "batch", FORMAT_4X, index=False, commitlog_file_size=1 << 20).open()
    for chunk in batches(news, [40]):
        writer.put_batch(chunk)
    if fails:
        with pytest.raises(StoreWriteError, match="wrote 1000 of"):
            writer.flush()
        writer.abandon()
        log = tmp_path / "batch" / "commitlog" / f"{0:020d}"
        assert not log.exists() or not any(log.read_bytes())  # the file the flush made goes, or its bytes
        with Store(tmp_path / "batch") as store:
            assert verify_store(store) == []
        return
    writer.close()
    assert calls and min(calls) > 1
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")


@pytest.mark.parametrize("queue_ids", [[0, 1, 2], [0, 5000, 7, 123_456]], ids=["close", "far-apart"])
def test_put_batch_gives_each_queue_its_own_offsets_however_far_apart_the_queue_ids(tmp_path, queue_ids):
    news = [NewMessage(f"Topic{i % 2}", queue_ids[i % len(queue_ids)], b"q%d" % i, {"KEYS": f"k{i}"},
                       storeTimestamp=T0 + i) for i in range(40)]
    assert_put_batch_writes_what_put_writes(tmp_path, FORMAT_4X, [news[:25], news[25:]])


def test_a_message_put_refuses_refuses_the_batch(tmp_path):
    news = messages(20)
    bad = NewMessage("Topic0", 0, b"x", {"DELAY": "soon"})
    with open_writer(tmp_path / "s", FORMAT_4X) as writer:
        writer.put_batch(news[:10])
        end, queues = writer.end_offset, writer.next_queue_offsets()
        with pytest.raises(UsageError, match="DELAY"):
            writer.put_batch([*news[10:], bad])
        assert writer.end_offset == end
        assert writer.next_queue_offsets() == queues
        writer.put_batch(news[10:])
    with Store(tmp_path / "s") as store:
        assert sum(1 for _ in store.commitlog.records()) == 20


class Killed(BaseException):
    """Stands for a kill -9: nothing after it runs, nothing is undone."""


def test_a_kill_between_the_queues_unit_writes_leaves_no_record_without_its_unit(tmp_path, monkeypatch):
    """A flush writes the units a queue at a time: killed after the first queue's write, that
    queue has units past the records the other queues lack units for. The next writer's
    recovery redispatches from the dispatch floor in the abort mark, so every record has its
    unit and the store verifies clean."""
    from rmqdelay.store import writefiles

    path = tmp_path / "s"
    news = [NewMessage(f"Topic{i % 2}", i % 4, b"m%d" % i, {"UNIQ_KEY": f"U{i}"}, storeTimestamp=T0 + i)
            for i in range(200)]
    with open_writer(path, FORMAT_4X, index=False, commitlog_file_size=1 << 20) as writer:
        writer.put_batch(news[:40])
        writer.flush()
    real_write = writefiles.QueueFiles.write
    calls = []

    def write_then_die(self, *args, **kwargs):
        if calls:
            raise Killed()
        calls.append(args)
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(writefiles.QueueFiles, "write", write_then_die)
    writer = open_writer(path, FORMAT_4X, index=False, commitlog_file_size=1 << 20)
    writer.open()
    writer.put_batch(news[40:])
    with pytest.raises(Killed):
        writer.flush()
    writer.abandon()
    monkeypatch.setattr(writefiles.QueueFiles, "write", real_write)
    assert len(calls) == 1 and len(calls[0][1]) == 40 * 20  # one queue's 40 units of 160 written
    with StoreWriter(path, sync=False, index=IndexSettings(messageIndexEnable=False)) as writer:
        assert writer.recovery.redispatched == 120
        assert writer.next_queue_offsets() == {(f"Topic{q % 2}", q): 50 for q in range(4)}
    with Store(path) as store:
        assert verify_store(store) == []
        for q in range(4):
            units = store.consume_queue(f"Topic{q % 2}", q).units(0, 50)
            assert [int(o) for o in units["commitLogOffset"]] == [
                m.commitLogOffset for m in store.commitlog.records() if m.queueId == q]


def shaped_messages(crc: bool) -> list[NewMessage]:
    """Messages whose properties the batch encoder tells apart: runs of one key set (made in
    one template), key sets in another insertion order, keys that share a HashMap bucket,
    values it must leave to put() (None, holding a separator, the text "None"), DELAY,
    UNIQ_KEY and KEYS with empty tokens, unicode, no properties at all, a __CRC32# of its own
    (5.x), SCHEDULE_TOPIC_XXXX put directly, transactions and
    IPv6 hosts; bodies long enough that records cross the small commit log files' ends."""
    out = []
    plain = {"TAGS": "TagA", "KEYS": "ORDER_1", "UNIQ_KEY": "C0A80114", "CLUSTER": "DefaultCluster"}
    for i in range(60):  # one key set: the template's fast path
        out.append(NewMessage("TopicA", i % 4, b"a%d" % i * (3 + i % 50),
                              {**plain, "KEYS": f"ORDER_{i}", "UNIQ_KEY": f"U{i:08X}"}, storeTimestamp=T0 + i))
    reordered = {"CLUSTER": "C", "UNIQ_KEY": "U", "KEYS": "K", "TAGS": "T"}
    colliding = {"Aa": "1", "BB": "2", "KEYS": "k1 k2"}  # "Aa" and "BB": one String.hashCode
    variants = [
        {"KEYS": "  lead  double  trail "}, {"KEYS": " "}, {"UNIQ_KEY": ""}, {"KEYS": ""},
        {"TAGS": "x"}, {}, reordered, colliding, dict(reversed(colliding.items())),
        {"TAGS": "TagA", "KEYS": None, "UNIQ_KEY": "U1"},  # None: left out, as put() does
        {"TAGS": "bad\x02value", "KEYS": "k"},  # a separator inside a value
        {"TAGS": "None", "KEYS": "None"},  # the text None
        {"TAGS": "100%", "pct%s": "%d", "KEYS": "p"},
        {"TAGS": "Tag\u00e9", "KEYS": "clé ключ", "UNIQ_KEY": "\u00fcniq"},  # unicode keys: hashed one by one
        {"DELAY": "2", "KEYS": "late", "UNIQ_KEY": "D1"},
    ]
    if crc:
        variants.append({"__CRC32#": "0123456789", "KEYS": "crc"})  # dropped: the broker reserves its own
    for i in range(180):
        props = dict(variants[i % len(variants)])
        sys_flag = [0, 0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE][i % 5]
        out.append(NewMessage(f"Topic{i % 3}", i % 2, b"v%d" % i * (40 + 13 * (i % 31)), props, sysFlag=sys_flag,
                              bornHost=V6 if i % 6 == 0 else V4, storeHost=V6 if i % 8 == 0 else STORE,
                              bornTimestamp=T0 + i, storeTimestamp=None if i % 4 == 0 else T0 + 7 * i))
    out.append(NewMessage("SCHEDULE_TOPIC_XXXX", 1, b"direct", {"DELAY": "2", "REAL_TOPIC": "TopicA",
                                                                "REAL_QID": "0"}, storeTimestamp=T0))
    return out


@pytest.mark.parametrize("write_format", [FORMAT_4X, FORMAT_5X_CRC], ids=["4.x", "5.x-crc"])
@pytest.mark.parametrize("sizes", [[60, 200], [5, 17]], ids=["long", "short"])
def test_put_batch_writes_every_shape_of_properties_as_put_does(tmp_path, write_format, sizes):
    news = shaped_messages(write_format.propCrc)
    with open_writer(tmp_path / "put", write_format, commitlog_file_size=8192, index_num=100) as writer:
        expected = [writer.put(new) for new in news]
    with open_writer(tmp_path / "batch", write_format, commitlog_file_size=8192, index_num=100) as writer:
        got = []
        for chunk in batches(news, sizes):
            got += writer.put_batch(chunk).results()
    assert got == expected
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")
    assert len(list((tmp_path / "batch" / "commitlog").iterdir())) > 10
    assert len(list((tmp_path / "batch" / "index").iterdir())) > 1  # index files filled up and rolled
    with Store(tmp_path / "batch") as store:
        assert verify_store(store) == []


def test_put_batch_under_a_brokers_abort_writes_units_in_log_order(tmp_path):
    """With the abort a crashed broker left (never this writer's), units go in commit log
    order, consecutive units of one queue a write: the same store as put()."""
    news = messages(200)
    for name in ("put", "batch"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "abort").touch()
    with open_writer(tmp_path / "put", FORMAT_4X) as writer:
        for new in news:
            writer.put(new)
    with open_writer(tmp_path / "batch", FORMAT_4X) as writer:
        for chunk in batches(news, [64]):
            writer.put_batch(chunk)
    assert (tmp_path / "batch" / "abort").exists()
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")


@pytest.mark.parametrize("shared", [False, True], ids=["a-map-each", "two-maps-shared"])
def test_put_batch_orders_keys_sharing_a_hashmap_bucket_as_they_came(tmp_path, shared):
    """"Aa" and "BB" share a bucket: the broker's HashMap keeps them in insertion order, so one
    key set stored two ways, within one batch (a map per message, or two maps sent many times)."""
    maps = [dict(pairs) for pairs in ([("Aa", "1"), ("BB", "2"), ("KEYS", "k")],
                                      [("BB", "2"), ("Aa", "1"), ("KEYS", "k")])]
    news = [NewMessage("TopicA", 0, b"m%d" % i, maps[i % 2] if shared else dict(maps[i % 2], KEYS=f"k{i}"),
                       storeTimestamp=T0 + i) for i in range(20)]
    with open_writer(tmp_path / "put", FORMAT_4X) as writer:
        expected = [writer.put(new) for new in news]
    with open_writer(tmp_path / "batch", FORMAT_4X) as writer:
        got = writer.put_batch(news).results()
    assert got == expected
    assert len({r.propertiesRaw for r in got[:2]}) == 2
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "batch")


@pytest.mark.parametrize("write_format", [FORMAT_4X, FORMAT_5X_CRC], ids=["4.x", "5.x-crc"])
def test_put_batch_of_one_key_set_made_as_one_text(tmp_path, write_format):
    """A batch whose messages all have one key set is stored from one text made for all:
    whatever the values (unicode, None, a separator inside, empty, no key at all, one key)
    and the order the keys came in."""
    key_sets = [
        lambda i: {"TAGS": f"T{i % 2}", "KEYS": f"k{i} o{i}", "UNIQ_KEY": f"U{i}"},
        lambda i: {"KEYS": f"clé{i}", "UNIQ_KEY": f"ü{i}", "TAGS": "Tag\u00e9"},
        lambda i: {"TAGS": "a", "KEYS": None if i == 3 else f"k{i}"},
        lambda i: {"TAGS": "a\x01b" if i == 2 else "a", "UNIQ_KEY": f"u{i}"},
        lambda i: {"UNIQ_KEY": "" if i % 2 else f"u{i}", "KEYS": " " if i % 3 else ""},
        lambda i: {},
        lambda i: {"KEYS": f"only{i}"},
        # one key set, the keys in another order every other message (no two share a bucket)
        lambda i: dict(sorted({"TAGS": f"T{i}", "KEYS": f"k{i}", "UNIQ_KEY": f"U{i}"}.items(), reverse=i % 2 == 1)),
    ]
    news = [[NewMessage("TopicU", i % 3, b"u%d" % i * 9, make(i), storeTimestamp=T0 + i) for i in range(6)]
            for make in key_sets]
    assert_put_batch_writes_what_put_writes(tmp_path, write_format, news)


@pytest.mark.parametrize("write_format", [FORMAT_4X, FORMAT_5X_CRC], ids=["4.x", "5.x-crc"])
def test_put_batch_of_stored_strings_reads_tags_and_keys_as_the_broker_parses_them(tmp_path, write_format):
    """Messages put with the properties string they were stored with (messageTimeup's copies,
    what `run` delivers): written as they are; their tagsCode and index keys read from that
    string as the broker parses it - the last well-formed entry, empty values skipped, a
    unicode tag or key, a DELAY in the map (rewritten) beside one only in the string (kept)."""
    raws = [
        "TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02DELAY\x013\x02",
        "KEYS\x01first\x02KEYS\x01second\x02TAGS\x01\x02TAGS\x01TagB",
        "UNIQ_KEY\x01\x02KEYS\x01 a  b \x02xTAGS\x01no\x02TAGS\x01T\x01x",
        "TAGS\x01Tag\u00e9\x02KEYS\x01cl\u00e9\x02UNIQ_KEY\x01u\u00fc",
        "",
        "__CRC32#\x010123456789\x02TAGS\x01C\x02KEYS\x01crc",
        "garbage\x02\x02\x01\x02KEYS",
    ]
    news = []
    for i in range(70):
        raw = raws[i % len(raws)] if i >= 33 or i % 7 != 3 else raws[0]  # unicode in the second batch only
        props = {"DELAY": "2", "REAL_TOPIC": "TopicR"} if i % 10 == 9 else {}
        news.append(NewMessage(f"TopicR{i % 2}", i % 3, b"r%d" % i * 20, props, propertiesRaw=raw,
                               sysFlag=TRANSACTION_ROLLBACK_TYPE if i % 8 == 7 else 0, storeTimestamp=T0 + i))
    assert_put_batch_writes_what_put_writes(tmp_path, write_format, [news[:33], news[33:]])


def stored_copies(news: list[NewMessage]) -> StoredCopies:
    """The messages (each with its stored string) as the columns put_stored takes."""
    def spans(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
        at = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=at[1:])
        return np.frombuffer(b"".join(parts), dtype=np.uint8), at

    def column(name: str) -> np.ndarray:
        return np.array([getattr(m, name) for m in news], dtype=np.int64)

    return StoredCopies([m.topic for m in news], [m.queueId for m in news], column("flag"), column("sysFlag"),
                        column("bornTimestamp"), *spans([m.bornHost[0] for m in news]),
                        np.array([m.bornHost[1] for m in news], dtype=np.int64), *spans([m.storeHost[0] for m in news]),
                        np.array([m.storeHost[1] for m in news], dtype=np.int64), column("reconsumeTimes"),
                        *spans([m.body for m in news]),
                        *spans([m.propertiesRaw.encode("utf-8", "surrogateescape") for m in news]))


def test_put_stored_columns_write_the_store_put_writes(tmp_path):
    """Copies put with their stored strings as columns (what `run` hands the writer): the bytes
    put() writes for the same NewMessages - files rolled over, transactions without a unit,
    unicode and undecodable bytes in a string, a clock read per message - the same PutResults,
    message ids made for the whole batch; refused on a store whose records carry __CRC32#."""
    raws = ["TAGS\x01TagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02DELAY\x013",
            "KEYS\x01cl\u00e9\x02TAGS\x01Tag\u00e9\x02UNIQ_KEY\x01u\u00fc",
            "REAL_TOPIC\x01T\x02UNIQ_KEY\x01\udcff\udcfe", "x\x01y"]
    news = [NewMessage(f"TopicS{i % 3}", i % 4, b"s%d" % i * (1 + i % 40), {}, propertiesRaw=raws[i % len(raws)],
                       flag=i % 5, sysFlag=(0, 0, TRANSACTION_PREPARED_TYPE, TRANSACTION_ROLLBACK_TYPE, 0)[i % 5],
                       bornTimestamp=T0 + i, bornHost=V4 if i % 2 else (bytes([10, 0, 0, i % 256]), 1000 + i),
                       storeHost=STORE if i % 3 else (bytes([172, 16, 0, 9]), 9876), reconsumeTimes=i % 3)
            for i in range(300)]
    with open_writer(tmp_path / "put", FORMAT_4X) as writer:
        expected = [writer.put(new) for new in news]
    with open_writer(tmp_path / "stored", FORMAT_4X) as writer:
        got, ids = [], []
        for chunk in batches(news, [1, 150, 29]):
            batch = writer.put_stored(stored_copies(chunk))
            got += batch.results()
            ids += batch.msg_ids()
    assert got == expected
    assert ids == [r.msgId for r in expected]
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / "stored")
    assert len(list((tmp_path / "stored" / "commitlog").iterdir())) > 3
    with open_writer(tmp_path / "crc", FORMAT_5X_CRC) as writer, pytest.raises(UsageError, match="__CRC32#"):
        writer.put_stored(stored_copies(news[:3]))


@pytest.mark.parametrize("way", ["put_batch", "put_stored"])
def test_a_batch_written_where_a_torn_record_was_indexed_leaves_the_index_put_leaves(tmp_path, way):
    """A crash tore the last record after its keys reached the index: the next writer writes at
    its offset again, and a batch leaves the index entries put() leaves (the keys the index
    holds for that offset are not added twice)."""
    first = [NewMessage("TopicT", i % 2, b"t%d" % i * 30, {}, propertiesRaw=f"KEYS\x01a{i} b{i}\x02UNIQ_KEY\x01T{i}",
                        bornHost=V4, storeHost=STORE) for i in range(30)]
    news = [NewMessage("TopicT", i % 2, b"n%d" % i * 20, {}, propertiesRaw=f"KEYS\x01c{i}\x02UNIQ_KEY\x01N{i}",
                       bornHost=V4, storeHost=STORE) for i in range(40)]
    for name in ("put", way):
        path = tmp_path / name
        with open_writer(path, FORMAT_4X, commitlog_file_size=1 << 20) as writer:
            results = [writer.put(new) for new in first]
        last = results[-1]
        log = next((path / "commitlog").iterdir())
        with open(log, "r+b") as fh:
            fh.seek(last.commitLogOffset + last.storeSize // 2)
            fh.write(bytes(last.storeSize - last.storeSize // 2))
        with StoreWriter(path, delay_levels=DELAYS, sync=False, index=IndexSettings(64, 512),
                         clock=ticking_clock(), write_format=FORMAT_4X) as writer:
            assert writer.end_offset == last.commitLogOffset
            if name == "put":
                for new in news:
                    writer.put(new)
            elif way == "put_batch":
                writer.put_batch(news)
            else:
                writer.put_stored(stored_copies(news))
    assert tree_digest(tmp_path / "put") == tree_digest(tmp_path / way)
