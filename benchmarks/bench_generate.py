"""Sample generator throughput against the writer it stands on and the disk under both.

In one run, on the same machine and disk:
1. `samples generate` of N records: records/s and MB/s of commit log written; as the command
   runs it (the writer in a process of its own) and with the writer in the generator's process;
2. StoreWriter.put of N plain prebuilt messages (same count, ~ the generator's mean size):
   records/s and MB/s;
3. StoreWriter.put_encoded of the same messages serialised beforehand (the path the generator
   appends through): the writer's raw rate, with nothing to parse or serialise;
4. StoreWriter.put_batch of the same messages, 1024 a batch (the batch path: the same bytes
   as put(), encoded by compiled loops, warmed by one untimed batch);
5. a raw sequential write of as many bytes as the generator's commit log (4 MiB writes,
   one fsync at the end): MB/s;
and the ratios between them, and the generator's time for 10 M records at the rate measured
(an extrapolation unless N is 10 M). Everything written is deleted afterwards.

    python3 benchmarks/bench_generate.py [--messages N] [--dir DIR] [--profile]
    python3 benchmarks/bench_generate.py --messages N --batch-rounds R   (put_batch and raw only)
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rmqdelay.formats.commitlog import Message, body_crc, encode_message, message_size
from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.properties import format_properties, java_order

from rmqdelay.samples.generate import GenerateOptions, generate
from rmqdelay.store.batchencode import StoredCopies
from rmqdelay.store.writer import NewMessage, StoreWriter

PROPS = {"TAGS": "TagA", "KEYS": "ORDER_1", "UNIQ_KEY": "C0A8011401F4A1B2C3D40001000A0000",
         "CLUSTER": "DefaultCluster", "region": "cn-hangzhou"}


def commitlog_bytes(store: Path) -> int:
    """Bytes of records (up to the end of the last record), from the writer's own view."""
    with StoreWriter(store) as writer:
        return writer.end_offset


def bench_generator(directory: Path, messages: int, profile: bool, writer_process: bool = True) -> tuple[float, int]:
    """(--profile sees the generator's process only.)"""
    store = directory / "gen"
    options = GenerateOptions(messages=messages, seed=7, writer_process=writer_process)
    start = time.perf_counter()
    if profile:
        prof = cProfile.Profile()
        prof.runcall(generate, store, options)
        elapsed = time.perf_counter() - start
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(20)
    else:
        generate(store, options)
        elapsed = time.perf_counter() - start
    size = commitlog_bytes(store)
    shutil.rmtree(store)
    return elapsed, size


def prebuilt_messages(messages: int, mean_size: int) -> list[NewMessage]:
    base = 61 + 9 + 1 + 2 + sum(len(k) + len(v) + 2 for k, v in PROPS.items())  # header, topic, props
    body = b"x" * max(1, mean_size - base)
    return [NewMessage(topic="TopicTest", queueId=i % 8, body=body, properties=PROPS,
                       bornTimestamp=1_767_225_600_000 + i, storeTimestamp=1_767_225_600_000 + i)
            for i in range(min(messages, 100_000))]


def bench_put(directory: Path, messages: int, mean_size: int) -> tuple[float, int]:
    store = directory / "put"
    prebuilt = prebuilt_messages(messages, mean_size)
    start = time.perf_counter()
    with StoreWriter(store, create=True, sync=False) as writer:
        put = writer.put
        for i in range(messages):
            put(prebuilt[i % len(prebuilt)])
        writer.sync_to_disk()
        size = writer.end_offset
    elapsed = time.perf_counter() - start
    shutil.rmtree(store)
    return elapsed, size


def bench_put_batch(directory: Path, messages: int, mean_size: int, batch: int = 1024) -> tuple[float, int]:
    """The same messages as bench_put, through StoreWriter.put_batch in batches of ``batch``."""
    store = directory / "batch"
    prebuilt = prebuilt_messages(messages, mean_size)
    # One batch first, untimed: numba compiles the batch loops in a new checkout (seconds),
    # and loads them from its cache in every process.
    with StoreWriter(directory / "warm", create=True, sync=False) as writer:
        writer.put_batch(prebuilt[:batch])
    shutil.rmtree(directory / "warm")
    start = time.perf_counter()
    with StoreWriter(store, create=True, sync=False) as writer:
        put_batch = writer.put_batch
        done = 0
        while done < messages:
            at = done % len(prebuilt)
            chunk = prebuilt[at:at + min(batch, messages - done)]
            put_batch(chunk)
            done += len(chunk)
        writer.sync_to_disk()
        size = writer.end_offset
    elapsed = time.perf_counter() - start
    shutil.rmtree(store)
    return elapsed, size


def stored_copies(news: list[NewMessage]) -> StoredCopies:
    """The messages as put_stored takes them: columns, each with its stored properties string."""
    import numpy as np

    def spans(parts: list[bytes]) -> tuple:
        at = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=at[1:])
        return np.frombuffer(b"".join(parts), dtype=np.uint8), at

    def column(name: str):
        return np.array([getattr(m, name) for m in news], dtype=np.int64)

    raw = format_properties(java_order(PROPS)).encode()
    return StoredCopies([m.topic for m in news], [m.queueId for m in news], column("flag"), column("sysFlag"),
                        column("bornTimestamp"), *spans([m.bornHost[0] for m in news]),
                        np.array([m.bornHost[1] for m in news], dtype=np.int64), *spans([m.storeHost[0] for m in news]),
                        np.array([m.storeHost[1] for m in news], dtype=np.int64), column("reconsumeTimes"),
                        *spans([m.body for m in news]), *spans([raw] * len(news)))


def bench_put_stored(directory: Path, messages: int, mean_size: int, batch: int = 1024) -> tuple[float, int]:
    """The same messages as bench_put_batch, as columns through StoreWriter.put_stored (their
    columns made beforehand, as `run` reads them from the log; the clock gives store times)."""
    store = directory / "stored"
    prebuilt = prebuilt_messages(messages, mean_size)
    columns = [stored_copies(prebuilt[at:at + batch]) for at in range(0, len(prebuilt), batch)]
    with StoreWriter(directory / "warm", create=True, sync=False) as writer:
        writer.put_stored(columns[0])
    shutil.rmtree(directory / "warm")
    start = time.perf_counter()
    with StoreWriter(store, create=True, sync=False, clock=lambda: 1_767_225_600_000) as writer:
        done = 0
        k = 0
        while done < messages:
            chunk = columns[k % len(columns)]
            writer.put_stored(chunk)
            done += len(chunk)
            k += 1
        writer.sync_to_disk()
        size = writer.end_offset
    elapsed = time.perf_counter() - start
    shutil.rmtree(store)
    return elapsed, size


def bench_put_encoded(directory: Path, messages: int, mean_size: int) -> tuple[float, int]:
    """The same messages as bench_put, serialised beforehand: what put_encoded alone costs
    (each put gets its own copy, as the writer fills the offsets in place)."""
    store = directory / "encoded"
    raw = format_properties(java_order(PROPS))
    code = tags_code(PROPS["TAGS"])
    prebuilt = []
    for new in prebuilt_messages(messages, mean_size):
        size = message_size(0, len(new.body), len(new.topic), len(raw.encode()))
        prebuilt.append((new.queueId, encode_message(Message(
            size, MESSAGE_MAGIC_CODE, body_crc(new.body), new.queueId, 0, 0, 0, 0, new.bornTimestamp,
            new.bornHost[0], new.bornHost[1], new.storeTimestamp, new.storeHost[0], new.storeHost[1], 0, 0,
            new.body, new.topic, raw))))
    keys, uniq = PROPS["KEYS"], PROPS["UNIQ_KEY"]
    start = time.perf_counter()
    with StoreWriter(store, create=True, sync=False) as writer:
        put = writer.put_encoded
        for i in range(messages):
            queue_id, record = prebuilt[i % len(prebuilt)]
            put("TopicTest", queue_id, bytearray(record), code, keys, uniq)
        writer.sync_to_disk()
        size = writer.end_offset
    elapsed = time.perf_counter() - start
    shutil.rmtree(store)
    return elapsed, size


def bench_raw(directory: Path, size: int) -> float:
    path = directory / "raw"
    chunk = bytes(range(256)) * (4 * 1024 * 1024 // 256)
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        written = 0
        while written < size:
            written += os.write(fd, chunk[:min(len(chunk), size - written)])
        os.fsync(fd)
    finally:
        os.close(fd)
    elapsed = time.perf_counter() - start
    path.unlink()
    return elapsed


def batch_rounds(directory: Path, messages: int, rounds: int, mean_size: int = 1000) -> None:
    """put_batch of ``messages`` messages of ``mean_size`` bytes (the generator's mean), then the
    raw write of the same bytes, ``rounds`` times."""
    mb = 1024 * 1024
    ratios = []
    for k in range(rounds):
        batch_s, size = bench_put_batch(directory, messages, mean_size)
        raw_s = bench_raw(directory, size)
        ratios.append(raw_s / batch_s)
        print(f"round {k + 1}: put_batch {size / mb / batch_s:7.1f} MiB/s  raw {size / mb / raw_s:7.1f} MiB/s  "
              f"put_batch / raw {ratios[-1]:.3f}", flush=True)
    print(f"put_batch / raw, median of {rounds}: {statistics.median(ratios):.3f}  (the aim is >= 0.35)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    parser.add_argument("--profile", action="store_true", help="cProfile the generator (to stderr)")
    parser.add_argument("--batch-rounds", type=int, default=0,
                        help="only put_batch and the raw write of as many bytes, one after the other, this many "
                             "times: each ratio and their median (the ratio under a load that moves)")
    args = parser.parse_args()
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="bench-generate-", dir=args.dir))
    if args.batch_rounds:
        try:
            batch_rounds(directory, args.messages, args.batch_rounds)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        return
    try:
        n = args.messages
        gen_s, gen_bytes = bench_generator(directory, n, args.profile)
        one_s, _ = bench_generator(directory, n, False, writer_process=False)
        put_s, put_bytes = bench_put(directory, n, gen_bytes // n)
        batch_s, batch_bytes = bench_put_batch(directory, n, gen_bytes // n)
        stored_s, stored_bytes = bench_put_stored(directory, n, gen_bytes // n)
        enc_s, enc_bytes = bench_put_encoded(directory, n, gen_bytes // n)
        raw_s = bench_raw(directory, gen_bytes)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    mb = 1024 * 1024
    gen_rate, put_rate, enc_rate = n / gen_s, n / put_s, n / enc_s
    gen_mbs, put_mbs, raw_mbs = gen_bytes / mb / gen_s, put_bytes / mb / put_s, gen_bytes / mb / raw_s
    enc_mbs = enc_bytes / mb / enc_s
    print(f"records: {n:,}  commit log: {gen_bytes / mb:,.1f} MiB (mean {gen_bytes // n} B/record)")
    print(f"samples generate : {gen_s:8.2f} s  {gen_rate:10,.0f} records/s  {gen_mbs:7.1f} MiB/s")
    print(f"  one process    : {one_s:8.2f} s  {n / one_s:10,.0f} records/s  "
          f"(the writer in the generator's process: {one_s / gen_s:.2f}x the time)")
    print(f"StoreWriter.put  : {put_s:8.2f} s  {put_rate:10,.0f} records/s  {put_mbs:7.1f} MiB/s  (plain prebuilt)")
    batch_mbs = batch_bytes / mb / batch_s
    print(f"put_batch        : {batch_s:8.2f} s  {n / batch_s:10,.0f} records/s  {batch_mbs:7.1f} MiB/s  "
          f"(the same, 1024 a batch: {put_s / batch_s:.2f}x put's rate)")
    stored_mbs = stored_bytes / mb / stored_s
    print(f"put_stored       : {stored_s:8.2f} s  {n / stored_s:10,.0f} records/s  {stored_mbs:7.1f} MiB/s  "
          f"(the same as columns with their stored strings: what `run` hands the writer)")
    print(f"put_encoded      : {enc_s:8.2f} s  {enc_rate:10,.0f} records/s  {enc_mbs:7.1f} MiB/s  "
          f"(the same, serialised beforehand: the writer's raw rate)")
    print(f"raw write        : {raw_s:8.2f} s  {'':>10}            {raw_mbs:7.1f} MiB/s  (sequential, fsync)")
    print(f"generator / put  : {gen_rate / put_rate:.2f}  (records/s)")
    print(f"generator / put_encoded: {gen_rate / enc_rate:.2f}  (records/s)")
    print(f"generator / raw  : {gen_mbs / raw_mbs:.3f}  (MiB/s)")
    print(f"put / raw        : {put_mbs / raw_mbs:.3f}  (MiB/s)")
    print(f"put_batch / raw  : {batch_mbs / raw_mbs:.3f}  (MiB/s; the aim is >= 0.35)")
    print(f"put_stored / raw : {stored_mbs / raw_mbs:.3f}  (MiB/s)")
    print(f"put_encoded / raw: {enc_mbs / raw_mbs:.3f}  (MiB/s)")
    what = "measured" if n == 10_000_000 else f"extrapolated from {n:,}"
    print(f"10 M records     : {10_000_000 / gen_rate:8.1f} s  ({what}; the aim is 180 s)")


if __name__ == "__main__":
    main()
