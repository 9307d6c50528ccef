"""Commit log scan benchmark, measured in one run on the same store:

- raw read MB/s: the files' bytes read from the page cache (a warm-up pass first), 1 MiB reads;
- scan fast path: ``rmqdelay.store.scan.scan_commitlog_file`` -> Arrow batches of every column the
  analyses need; msgs/s and MB/s of file bytes;
- ``decode_message`` per record (``CommitLog.records``): msgs/s;
- construct path (``parse_message_construct``) on a sample of records: msgs/s;
- the same scan of the same records laid into DLedger entries (``--dledger``, on by default:
  ``rmqdelay.samples.dledger.convert_to_dledger`` of the store): msgs/s and its ratio to the
  plain log's (aim: within 10%);
- the ratios against the aims (fast path >= 1 GB/s per core, i.e. >= 5% of the raw read and
  >= 10x decode_message; >= 20x the construct path), and a profile of where the fast path
  spends its time;
- RocksDB consume queues (5.x storeType=defaultRocksDB): ``--rocksdb-units`` units in a
  database written with rocksdict in the broker's key and value encoding (LZ4 blocks, as the
  broker's), read through the store's queue source (``cq.units()``): units/s (aim >= 1 M/s),
  and the time the private snapshot and open take.

The machine may be shared: raw read, fast path and decode_message run in alternating rounds
(``--rounds``) and each figure is the best of its rounds, so every ratio compares figures
taken side by side in one run.

    python3 benchmarks/bench_scan.py [--messages 400000] [--store DIR] [--rounds 3] [--profile]
                                     [--rocksdb-units 2000000] [--no-dledger]

Without ``--store`` it writes a store of ~500-byte messages with StoreWriter (a mix of
normal, delayed, retry and DLQ-shaped messages) into a temporary directory.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rmqdelay.formats.commitlog import parse_message_construct

from rmqdelay.samples.dledger import convert_to_dledger
from rmqdelay.store import Store
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.scan import scan_commitlog_file
from rmqdelay.store.writer import NewMessage, StoreWriter

BORN_MS = 1_700_000_000_000
TARGET_RECORD_BYTES = 500


def build_store(path: Path, count: int, seed: int = 7) -> None:
    """~500-byte records: bodies sized so that head + topic + properties + body ≈ 500 bytes."""
    rng = random.Random(seed)
    topics = ["TopicOrder", "TopicPay", "TopicShip"]
    clock = [BORN_MS]
    with StoreWriter(path, create=True, commitlog_file_size=128 << 20, clock=lambda: clock[0], sync=False) as w:
        for i in range(count):
            clock[0] = BORN_MS + i * 3
            kind = rng.random()
            topic = rng.choice(topics)
            props = {"UNIQ_KEY": f"7F00000100002A9F{i:016X}", "KEYS": f"order-{i}", "TAGS": "TagA",
                     "CLUSTER": "DefaultCluster", "WAIT": "true"}
            reconsume = 0
            if kind < 0.3:
                props["DELAY"] = str(rng.randint(1, 18))
            elif kind < 0.4:
                topic = "%RETRY%GID_BENCH"
                reconsume = rng.randint(1, 16)
                props.update(RETRY_TOPIC="TopicPay", ORIGIN_MESSAGE_ID=f"0A0A000500002A9F{i:016X}",
                             DELAY=str(2 + reconsume))
            elif kind < 0.41:
                topic = "%DLQ%GID_BENCH"
                reconsume = 16
                props.update(RETRY_TOPIC="TopicPay", ORIGIN_MESSAGE_ID=f"0A0A000500002A9F{i:016X}")
            # 500 bytes minus head (~91), topic, properties (~150 with REAL_* after the delay rewrite).
            body_len = max(0, TARGET_RECORD_BYTES - 91 - len(topic) - 180 - 40 * ("ORIGIN_MESSAGE_ID" in props))
            w.put(NewMessage(topic=topic, queueId=i % 4, body=rng.randbytes(body_len), properties=props,
                             bornTimestamp=BORN_MS + i * 3 - 5, reconsumeTimes=reconsume))


def commitlog_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "commitlog").iterdir() if p.name.isdigit())


def raw_read(files: list[Path]) -> tuple[float, int]:
    started = time.perf_counter()
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    return time.perf_counter() - started, total


def data_bytes(store: Path) -> int:
    """Bytes of records (the scan stops at the zero tail, so compare on what holds data)."""
    with Store(store) as s:
        return s.end_offset() - s.commitlog.min_offset


def dledger_files(store: Path) -> list:
    """The LogFiles of a DLedger store's log (its framing and the bytes it serves)."""
    with Store(store) as s:
        return list(s.commitlog.files)


def fast_scan(files: list) -> tuple[float, int]:
    started = time.perf_counter()
    rows = 0
    for path in files:
        for batch in scan_commitlog_file(path, "bench"):
            rows += batch.num_rows
    return time.perf_counter() - started, rows


def per_record(store: Path) -> tuple[float, int]:
    log = CommitLog(store / "commitlog")
    started = time.perf_counter()
    rows = sum(1 for _ in log.records())
    elapsed = time.perf_counter() - started
    log.close()
    return elapsed, rows


def construct_sample(store: Path, sample: int) -> tuple[float, int]:
    log = CommitLog(store / "commitlog")
    spots = []
    for record in log.records():
        spots.append((record.commitLogOffset, record.storeSize))
        if len(spots) >= sample:
            break
    view = log._reader.view(0)
    start = log.files[0].start
    limit = log.files[0].size
    started = time.perf_counter()
    for offset, _ in spots:
        parse_message_construct(view, offset - start, limit)
    elapsed = time.perf_counter() - started
    del view
    log.close()
    return elapsed, len(spots)


def build_rocksdb_queues(store: Path, units: int, queues: int = 4, unit_size: int = 500) -> None:
    """A RocksDB store's consume queue database at ``store/consumequeue``: ``units`` units over
    ``queues`` queues of TopicBench, their "max" and "min" entries and the dispatch checkpoint,
    in RocksDBConsumeQueueTable's encoding; an empty commit log beside it."""
    import rocksdict

    from rmqdelay.formats.rocksqueue import (
        CHECKPOINT_TOPIC,
        MAX,
        MIN,
        OFFSET_CF,
        bound_key,
        encode_bound,
        encode_unit_value,
        unit_key,
    )

    (store / "commitlog").mkdir(parents=True)
    opts = rocksdict.Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_compression_type(rocksdict.DBCompressionType.lz4())
    db = rocksdict.Rdict(str(store / "consumequeue"), opts,
                         column_families={OFFSET_CF: rocksdict.Options(raw_mode=True)})
    offset_cf = db.get_column_family_handle(OFFSET_CF)
    topic = b"TopicBench"
    batch = rocksdict.WriteBatch(raw_mode=True)
    last = {}
    for i in range(units):
        qid, cq_offset = i % queues, i // queues
        phy = i * unit_size
        batch.put(unit_key(topic, qid, cq_offset), encode_unit_value(phy, unit_size, 2598919, BORN_MS + i))
        last[qid] = (phy, cq_offset)
        if len(batch) >= 100_000:
            db.write(batch)
            batch = rocksdict.WriteBatch(raw_mode=True)
    for qid, (phy, cq_offset) in last.items():
        batch.put(bound_key(topic, qid, MAX), encode_bound(phy, cq_offset), offset_cf)
        batch.put(bound_key(topic, qid, MIN), encode_bound(qid * unit_size, 0), offset_cf)
    batch.put(bound_key(CHECKPOINT_TOPIC.encode(), 0, MAX), (units * unit_size).to_bytes(8, "big"), offset_cf)
    db.write(batch)
    db.flush()
    db.close()
    (store / "consumequeue" / "rocksdict-config.json").unlink(missing_ok=True)


def rocksdb_case(units: int, rounds: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-scan-rocksdb-"))
    try:
        store = tmp / "store"
        started = time.perf_counter()
        build_rocksdb_queues(store, units)
        size = sum(p.stat().st_size for p in (store / "consumequeue").iterdir())
        print(f"wrote {units:,} RocksDB consume queue units in {time.perf_counter() - started:.1f} s "
              f"({size / (1 << 20):,.1f} MiB database)")
        best = open_best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            with Store(store) as s:
                queues = [s.consume_queue(t, q) for t, ids in s.topics().items() for q in ids]
                opened = time.perf_counter()
                read = sum(len(cq.units()) for cq in queues)
                done = time.perf_counter()
            assert read == units, read
            best = min(best, done - opened)
            open_best = min(open_best, opened - started)
        print(f"RocksDB units       {units / best:10,.0f} units/s (aim >= 1,000,000)  "
              f"snapshot + open + topics {open_best * 1000:,.0f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=400_000)
    parser.add_argument("--store", type=Path, help="an existing store to scan instead")
    parser.add_argument("--construct-sample", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the best of each is kept")
    parser.add_argument("--profile", action="store_true", help="print where the fast path spends its time")
    parser.add_argument("--rocksdb-units", type=int, default=2_000_000,
                        help="units of the RocksDB consume queue case (0: skip it)")
    parser.add_argument("--no-dledger", dest="dledger", action="store_false",
                        help="skip the scan of the same records in a DLedger log")
    args = parser.parse_args(argv)

    tmp = None
    store = args.store
    if store is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-scan-"))
        store = tmp / "store"
        started = time.perf_counter()
        build_store(store, args.messages)
        print(f"wrote {args.messages:,} messages in {time.perf_counter() - started:.1f} s -> {store}")
    dl_tmp = None
    try:
        files = commitlog_files(store)
        dl_files = []
        if args.dledger:
            dl_tmp = Path(tempfile.mkdtemp(prefix="bench-scan-dledger-"))
            started = time.perf_counter()
            made = convert_to_dledger(store, dl_tmp / "store")
            print(f"laid {made['entries']:,} records into DLedger entries in {time.perf_counter() - started:.1f} s")
            dl_files = dledger_files(dl_tmp / "store")
            raw_read([f.path for f in dl_files])
            fast_scan(dl_files)
        raw_read(files)  # warm the page cache
        fast_scan(files)  # the compiled loops: loaded (or compiled) once per process
        data = data_bytes(store)
        raw_s = scan_s = rec_s = dl_s = float("inf")
        dl_rows = 0
        for _ in range(args.rounds):
            elapsed, raw_total = raw_read(files)
            raw_s = min(raw_s, elapsed)
            elapsed, rows = fast_scan(files)
            scan_s = min(scan_s, elapsed)
            if dl_files:
                elapsed, dl_rows = fast_scan(dl_files)
                dl_s = min(dl_s, elapsed)
            elapsed, rec_rows = per_record(store)
            rec_s = min(rec_s, elapsed)
        con_s, con_rows = construct_sample(store, args.construct_sample)
        mb = 1 << 20
        raw_mbs = raw_total / mb / raw_s
        scan_mbs = data / mb / scan_s
        scan_rate = rows / scan_s
        rec_rate = rec_rows / rec_s
        con_rate = con_rows / con_s
        print(f"store: {len(files)} commit log files, {raw_total / mb:,.0f} MiB on disk, "
              f"{data / mb:,.0f} MiB of records, {rows:,} messages, {data / rows:,.0f} B/message")
        print(f"raw read            {raw_mbs:10,.0f} MB/s")
        print(f"scan fast path      {scan_rate:10,.0f} msgs/s  {scan_mbs:8,.0f} MB/s")
        print(f"decode_message      {rec_rate:10,.0f} msgs/s  {data / mb / rec_s:8,.0f} MB/s")
        print(f"construct (sample)  {con_rate:10,.0f} msgs/s  ({con_rows:,} records)")
        if dl_files:
            dl_rate = dl_rows / dl_s
            print(f"scan DLedger log    {dl_rate:10,.0f} msgs/s  ({dl_rows:,} records in {len(dl_files)} data files)")
            print(f"DLedger / plain scan msgs/s:    {dl_rate / scan_rate:6.1%}   (aim >= 90%)")
        print(f"fast path MB/s per core:        {scan_mbs:6,.0f}   (aim >= 1,000)")
        print(f"fast path / raw read MB/s:      {scan_mbs / raw_mbs:6.1%}   (aim >= 5%)")
        print(f"fast path / decode_message:     {scan_rate / rec_rate:6.1f}x  (aim >= 10x)")
        print(f"fast path / construct msgs/s:   {scan_rate / con_rate:6.1f}x  (aim >= 20x)")
        if args.rocksdb_units:
            rocksdb_case(args.rocksdb_units, args.rounds)
        print("load average (1, 5, 15 min) at the end: " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
        if args.profile:
            profiler = cProfile.Profile()
            profiler.enable()
            fast_scan(files)
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(14)
            print(out.getvalue())
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        if dl_tmp is not None:
            shutil.rmtree(dl_tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
