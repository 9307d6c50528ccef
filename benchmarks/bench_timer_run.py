"""Timer wheel delivery (`rmqdelay run` on a 5.x store) against the raw writer, in one run, and
the live lateness of timer deliveries.

    python benchmarks/bench_timer_run.py [--messages 20000] [--live 400 (0: none)] [--rounds 1] [--work DIR]

1. Throughput: N timer messages are parked (as the put hook parks them) in a copy of
   samples/timer-fresh, due over the next hour; `run --until-empty --now FAR` (in process, as
   the command runs it) finds every one of them already due when it enqueues it (TIMER_OUT_MS
   behind its write clock): each is put at once, as doEnqueue puts an expired message (a
   broker down longer than its messages' delays). The same N messages, as they are
   delivered, are put by the bare StoreWriter into another copy, with put() and with
   put_batch(). The rates and the ratios are printed. The compiled loops of both sides (the
   batch encoder's, the run's reading ones) are loaded first, so that no side pays for
   loading them.
   The wheel path, in a third copy: a run on the clock the messages were parked at enqueues
   them (a timer log unit each, linked into its slot), then `run --until-empty --now FAR`
   reads slot after slot and delivers them; the two runs together are timed, and each alone.
   CPU time per message is printed beside the rates: the ratios without the waits on fsync
   (which other work on a shared disk makes noisy).
   ``--rounds R``: R more rounds of the all-due run and put_batch alone, back to back (which
   goes first alternates), each ratio printed and their median: one pair of figures moves with
   this machine's load more than with a change.
2. Live lateness: the store is drained up to now, then M messages due 2-12 s ahead are parked;
   `run` on the wall clock sleeps to each slot and delivers it. Lateness = store time of the
   delivered record - the moment its slot became due (slot + precision: the broker reads slot
   T once its clock is past T). p50 / p99 / max printed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from rmqdelay.samples.pack import unpack
from rmqdelay.schedule.scheduler import Scheduler, wall_clock_ms
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer.deliver.events import TimerDelivered

FAR = 4_102_444_800_000
SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "timer-fresh" / "store.tar.xz"
FRESH_READ_CLOCK = 1795450290000


def parked(n: int, base_ms: int, spread_ms: int, rng: random.Random, serial: int = 0) -> list[NewMessage]:
    out = []
    for i in range(n):
        deliver = base_ms + 1500 + rng.randrange(spread_ms)
        timer_out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
        topic = ("TimerTopic", "TopicTest", "OrderTopic")[i % 3]
        out.append(NewMessage("rmq_sys_wheel_timer", 0, rng.randbytes(rng.randrange(64, 1024)), {
            "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": f"0A0A0005{serial + i:024X}", "CLUSTER": "DefaultCluster",
            "WAIT": "true", "TIMER_OUT_MS": str(timer_out), "REAL_TOPIC": topic, "REAL_QID": str(i % 2)},
            bornTimestamp=base_ms))
    return out


def park(path: Path, messages: list[NewMessage]) -> None:
    with StoreWriter(path) as w:
        for m in messages:
            w.put(m)


class Clock:
    """Wall and CPU seconds of each timed part (the CPU time leaves out waiting on fsync,
    which other work on a shared disk makes noisy)."""

    def __init__(self) -> None:
        self.parts: dict[str, tuple[float, float]] = {}

    @contextmanager
    def part(self, name: str):
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.parts[name] = (time.perf_counter() - wall, time.process_time() - cpu)

    def wall(self, *names: str) -> float:
        return sum(self.parts[n][0] for n in names)

    def cpu(self, *names: str) -> float:
        return sum(self.parts[n][1] for n in names)


def throughput(work: Path, n: int, rng: random.Random) -> tuple[Clock, int, int]:
    """The timed parts, the messages the timer delivered at once and through the wheel."""
    timer_store = work / "timer"
    raw_store = work / "raw"
    batch_store = work / "batch"
    wheel_store = work / "wheel"
    for p in (timer_store, raw_store, batch_store, wheel_store):
        shutil.rmtree(p, ignore_errors=True)
        unpack(SAMPLE, p)
    messages = parked(n, FRESH_READ_CLOCK, 3600_000, rng)
    park(timer_store, messages)
    park(wheel_store, messages)
    # The compiled loops of both sides loaded before anything is timed: the batch encoder's
    # and the run's reading ones (a run over a few parked messages), in this process.
    warm = work / "warm"
    shutil.rmtree(warm, ignore_errors=True)
    unpack(SAMPLE, warm)
    park(warm, messages[:64])
    delivered_by(Scheduler(warm, now_ms=FAR, mode="until-empty", sync=False))
    with StoreWriter(warm, sync=False) as w:
        w.put_batch(as_delivered(messages[:32]))
    shutil.rmtree(warm)
    clock = Clock()
    with clock.part("timer"):
        delivered = delivered_by(Scheduler(timer_store, now_ms=FAR, mode="until-empty", sync=True))
    with clock.part("enqueue"):
        wheel_delivered = delivered_by(Scheduler(wheel_store, now_ms=FRESH_READ_CLOCK, mode="until-empty", sync=True))
    with clock.part("dequeue"):
        wheel_delivered += delivered_by(Scheduler(wheel_store, now_ms=FAR, mode="until-empty", sync=True))
    raw = as_delivered(messages)
    with clock.part("put"), StoreWriter(raw_store, sync=False) as w:
        for m in raw:
            w.put(m)
        w.sync_to_disk()
    with clock.part("put_batch"):
        put_batches(batch_store, raw)
    return clock, delivered, wheel_delivered


def as_delivered(messages: list[NewMessage]) -> list[NewMessage]:
    """What the raw writer puts: what the timer put, the same bodies and properties to real
    topics."""
    return [NewMessage(m.properties["REAL_TOPIC"], int(m.properties["REAL_QID"]), m.body,
                       dict(m.properties, TIMER_ENQUEUE_MS=str(FRESH_READ_CLOCK), TIMER_DEQUEUE_MS=str(FAR)),
                       bornTimestamp=m.bornTimestamp, storeTimestamp=FAR) for m in messages]


def put_batches(store: Path, raw: list[NewMessage]) -> None:
    with StoreWriter(store, sync=False) as w:
        for i in range(0, len(raw), 1024):
            w.put_batch(raw[i:i + 1024])
        w.sync_to_disk()


def rounds(work: Path, n: int, count: int, rng: random.Random) -> list[float]:
    """``count`` rounds, each the timer's all-due run and put_batch of the same messages back
    to back (which goes first alternates): the ratio of their rates in each round."""
    ratios = []
    for r in range(count):
        messages = parked(n, FRESH_READ_CLOCK, 3600_000, rng)
        timer_store, batch_store = work / "round-timer", work / "round-batch"
        for p in (timer_store, batch_store):
            shutil.rmtree(p, ignore_errors=True)
            unpack(SAMPLE, p)
        park(timer_store, messages)
        raw = as_delivered(messages)
        clock = Clock()
        for part in (("timer", "put_batch") if r % 2 == 0 else ("put_batch", "timer")):
            with clock.part(part):
                if part == "timer":
                    delivered = delivered_by(Scheduler(timer_store, now_ms=FAR, mode="until-empty", sync=True))
                else:
                    put_batches(batch_store, raw)
        ratios.append((delivered / clock.wall("timer")) / (n / clock.wall("put_batch")))
    return ratios


def delivered_by(scheduler: Scheduler) -> int:
    return sum(1 for e in scheduler.events() if isinstance(e, TimerDelivered) and not e.rolled)


def live_lateness(work: Path, m: int, rng: random.Random) -> list[int]:
    store = work / "live"
    shutil.rmtree(store, ignore_errors=True)
    unpack(SAMPLE, store)
    for _ in Scheduler(store, now_ms=wall_clock_ms(), mode="until-empty").events():
        pass  # the sample's own backlog, up to now
    now = wall_clock_ms()
    park(store, parked(m, now, 10_000, rng, serial=1 << 40))
    sched = Scheduler(store, mode="forever", flush_interval_ms=1000)
    lateness: list[int] = []
    keys = 0
    timer = threading.Timer(60, sched.stop)
    timer.start()
    try:
        for e in sched.events():
            if isinstance(e, TimerDelivered) and not e.rolled and e.slotTimeMs is not None and e.slotTimeMs >= now:
                lateness.append(e.latenessMs)
                keys += 1
                if keys >= m:
                    sched.stop()
    finally:
        timer.cancel()
    return lateness


def pct(values: list[int], q: float) -> float:
    values = sorted(values)
    return float(values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=20_000)
    ap.add_argument("--live", type=int, default=400)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--rounds", type=int, default=1,
                    help="more rounds of the all-due run against put_batch, back to back: each ratio and the median")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-timer-"))
    rng = random.Random(args.seed)
    clock, delivered, wheel_delivered = throughput(work, args.messages, rng)
    n = args.messages
    timer_rate, raw_rate, batch_rate = delivered / clock.wall("timer"), n / clock.wall("put"), n / clock.wall("put_batch")
    wheel_rate = wheel_delivered / clock.wall("enqueue", "dequeue")
    faster = "put_batch" if batch_rate >= raw_rate else "put"
    print(f"timer delivery: {timer_rate:,.0f} msg/s; raw writer: {raw_rate:,.0f} msg/s (put), "
          f"{batch_rate:,.0f} msg/s (put_batch, 1024 a batch); ratio {timer_rate / raw_rate:.2f} to put, "
          f"{timer_rate / max(raw_rate, batch_rate):.2f} to the faster (aim >= 0.5) "
          f"({n} messages, {os.cpu_count()} cores)")
    print(f"timer delivery through the wheel (enqueued, then read slot by slot): {wheel_rate:,.0f} msg/s "
          f"(enqueue {clock.wall('enqueue'):.2f} s, dequeue {clock.wall('dequeue'):.2f} s); "
          f"ratio {wheel_rate / max(raw_rate, batch_rate):.2f} to the faster writer")
    # Per message delivered, CPU seconds: what the ratios are without the waits on fsync.
    per = {"timer": clock.cpu("timer") / delivered, "wheel": clock.cpu("enqueue", "dequeue") / wheel_delivered,
           "put": clock.cpu("put") / n, "put_batch": clock.cpu("put_batch") / n}
    print(f"CPU per message: timer {per['timer'] * 1e6:.0f} us, through the wheel {per['wheel'] * 1e6:.0f} us "
          f"(enqueue {clock.cpu('enqueue'):.2f} s, dequeue {clock.cpu('dequeue'):.2f} s), put "
          f"{per['put'] * 1e6:.0f} us, put_batch {per['put_batch'] * 1e6:.0f} us; CPU ratio to {faster}: "
          f"{per[faster] / per['timer']:.2f} (timer), {per[faster] / per['wheel']:.2f} (wheel)")
    if args.rounds > 1:
        ratios = rounds(work, n, args.rounds, rng)
        print(f"timer delivery / put_batch, {args.rounds} rounds back to back: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}; median {statistics.median(ratios):.2f} (aim >= 0.5)")
    if args.live <= 0:
        return 0
    late = live_lateness(work, args.live, rng)
    if late:
        print(f"live lateness past the slot's due time ({len(late)} deliveries): p50 {pct(late, 0.5):.0f} ms, "
              f"p99 {pct(late, 0.99):.0f} ms, max {max(late)} ms, mean {statistics.mean(late):.1f} ms")
    else:
        print("live lateness: no deliveries measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
