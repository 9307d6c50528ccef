"""`rmqdelay run` benchmarks, measured in one run on this machine:

1. throughput: delivered messages/s of the scheduler draining a store (everything due)
   vs messages/s of the raw StoreWriter putting the very same delivered messages into
   an empty store (both write once per batch and fsync before finishing) - the ratio is what the scheduler costs on
   top of the one writer; both with the index (index/, as the broker builds it) and without
   (messageIndexEnable=false), to show what indexing costs;
2. lateness on a live run (real clock): messages fall due every few ms; lateness = store
   time of the delivered copy - its deliver time; p50/p99/max.

    python3 benchmarks/bench_run.py [--messages 50000] [--live 2000] [--every-ms 2] [--rounds 5] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rmqdelay.schedule.events import Delivered
from rmqdelay.schedule.redelivery import message_timeup
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.store import Store
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.writer import NewMessage, StoreWriter

FAR_AHEAD_MS = 4_102_444_800_000
TOPICS = {"TopicA": 8, "TopicB": 4}


def build_store(path: Path, count: int, rng: random.Random) -> None:
    born = 1_700_000_000_000
    with StoreWriter(path, create=True, commitlog_file_size=64 << 20, clock=lambda: born, sync=False) as w:
        for i in range(count):
            topic = rng.choice(list(TOPICS))
            w.put(NewMessage(topic=topic, queueId=rng.randrange(TOPICS[topic]), body=rng.randbytes(rng.choice([64, 256, 1024])),
                             bornTimestamp=born + i,
                             properties={"UNIQ_KEY": f"K{i:09d}", "KEYS": f"order-{i}", "TAGS": "TagA",
                                         "DELAY": str(rng.choice([1, 2, 3, 5, 18])), "WAIT": "true"}))


def raw_writer_rate(src: Path, dest: Path, index: IndexSettings, batch: bool = False) -> tuple[float, int]:
    """messages/s of StoreWriter.put + flush for the messages the scheduler would deliver
    (``batch``: StoreWriter.put_batch, 1024 a batch, the faster writer)."""
    with Store(src) as store:
        news = [message_timeup(m) for m in store.commitlog.records() if m.topic == "SCHEDULE_TOPIC_XXXX"]
    started = time.perf_counter()
    # Written as the scheduler writes: to the files once per batch of 1024, fsynced at the end.
    with StoreWriter(dest, create=True, commitlog_file_size=64 << 20, clock=lambda: FAR_AHEAD_MS,
                     sync=False, index=index) as w:
        if batch:
            for i in range(0, len(news), 1024):
                w.put_batch(news[i:i + 1024])
                w.flush()
        else:
            for i, new in enumerate(news):
                w.put(new)
                if i % 1024 == 1023:
                    w.flush()
        w.sync_to_disk()
    return len(news) / (time.perf_counter() - started), len(news)


def scheduler_rate(path: Path, profile: bool, index: IndexSettings) -> tuple[float, int]:
    sched = Scheduler(path, now_ms=FAR_AHEAD_MS, mode="until-empty", index=index)
    prof = cProfile.Profile() if profile else None
    started = time.perf_counter()
    if prof:
        prof.enable()
    n = sum(isinstance(e, Delivered) for e in sched.events())
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    return n / (time.perf_counter() - started), n


def live_lateness(path: Path, count: int, every_ms: float) -> np.ndarray:
    """Messages of level 3 (10 s) falling due every ``every_ms`` ms, starting 2 s from now.
    Their store times lie in the past (due - 10 s): a deliver time further ahead than now +
    the level's delay would be taken as now, as the broker's correctDeliverTimestamp does."""
    first_due = int(time.time() * 1000) + 2000
    if count * every_ms > 7000:
        raise SystemExit("--live x --every-ms must stay within 7 s (level 3 delays by 10 s)")
    with StoreWriter(path, create=True, commitlog_file_size=64 << 20, sync=False) as w:
        for i in range(count):
            due = first_due + int(i * every_ms)
            w.put(NewMessage(topic="TopicA", queueId=i % 4, body=b"x" * 128, storeTimestamp=due - 10_000,
                             properties={"UNIQ_KEY": f"L{i}", "DELAY": "3"}))
    lateness = [e.latenessMs for e in Scheduler(path, mode="until-empty").events() if isinstance(e, Delivered)]
    return np.array(lateness)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--live", type=int, default=2000)
    parser.add_argument("--every-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="rmqdelay-bench-"))
    try:
        build_store(work / "built", args.messages, random.Random(1))
        # Rounds alternate the two on fresh copies, so the machine's noise falls on both alike;
        # the best round of each is the figure.
        rates: dict[tuple[str, bool], list[float]] = {(k, on): [] for k in ("raw", "batch", "run")
                                                      for on in (True, False)}
        for i in range(args.rounds):
            for on in (False, True):
                index = IndexSettings(messageIndexEnable=on)
                store = work / f"store-{i}-{on}"
                # A sparse copy: the built store's 420 MB index file is mostly holes.
                subprocess.run(["cp", "-r", "--sparse=always", str(work / "built"), str(store)], check=True)
                raw, n_raw = raw_writer_rate(store, work / f"raw-{i}-{on}", index)
                raw_batch, _ = raw_writer_rate(store, work / f"batch-{i}-{on}", index, batch=True)
                run, n_run = scheduler_rate(store, args.profile, index)
                rates[("raw", on)].append(raw)
                rates[("batch", on)].append(raw_batch)
                rates[("run", on)].append(run)
                shutil.rmtree(store)
                shutil.rmtree(work / f"raw-{i}-{on}")
                shutil.rmtree(work / f"batch-{i}-{on}")
        raws, runs, batches = rates[("raw", True)], rates[("run", True)], rates[("batch", True)]
        lateness = live_lateness(work / "live", args.live, args.every_ms)
        print(f"command: python3 benchmarks/bench_run.py --messages {args.messages} --live {args.live} "
              f"--every-ms {args.every_ms} --rounds {args.rounds}")
        print(f"raw StoreWriter.put:  {max(raws):10.0f} msg/s ({n_raw} messages; best of {args.rounds})")
        print(f"raw StoreWriter.put_batch: {max(batches):5.0f} msg/s (the same messages, 1024 a batch)")
        print(f"rmqdelay run:         {max(runs):10.0f} msg/s ({n_run} delivered; best of {args.rounds})")
        print(f"ratio run/raw:        {max(runs) / max(raws):10.2f} (per round: "
              f"{', '.join(f'{r / w:.2f}' for r, w in zip(runs, raws))})")
        fastest = [max(w, b) for w, b in zip(raws, batches)]
        print(f"ratio run/faster raw: {max(runs) / max(fastest):10.2f} (aim >= 0.5; per round: "
              f"{', '.join(f'{r / w:.2f}' for r, w in zip(runs, fastest))})")
        raw_off, run_off = rates[("raw", False)], rates[("run", False)]
        print(f"without the index:    raw {max(raw_off):.0f} msg/s, run {max(run_off):.0f} msg/s, ratio run/raw "
              f"{max(run_off) / max(raw_off):.2f}")
        print(f"indexing costs:       raw {100 * (1 - max(raws) / max(raw_off)):.0f}%, run "
              f"{100 * (1 - max(runs) / max(run_off)):.0f}% of the messages/s without it")
        p50, p99 = np.percentile(lateness, [50, 99])
        print(f"live lateness ({len(lateness)} messages due every {args.every_ms} ms): "
              f"p50 {p50:.1f} ms, p99 {p99:.1f} ms, max {lateness.max()} ms (aim p99 <= 5 ms; the broker polls "
              f"every 100 ms)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
