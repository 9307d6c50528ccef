"""SIGKILL `rmqdelay run` on a 5.x timer store at random points, again and again, parking new
timer messages (with cancellations, shared slots, rolls) between the stops; then a last run to
the end and the check: every parked timer message delivered exactly once to its real topic and
queue (a cancelled one not, or once when its cancellation reached the timer after its time, as
the broker drops it then), every delay message once, `inspect timer --verify` and the commit
log's verify clean, and a store the real broker resumes from without putting anything again.

    python tests/support/kill9_timer_soak.py [--kills 200] [--seed N] [--work DIR] [--generated N] [--damage]

--generated N: the soak on a store of N records made by `samples generate --timer` (timer
messages delivered, pending, rolled and recalled, beside delay-level traffic and retry chains)
instead of the timer-fresh sample; the runs start from its read clock.

--damage: after a third of the stops, the store is damaged: half the time one timer file
(timerdamage.py: a timer log file, the wheel, the checkpoint or the metrics deleted, truncated,
zeroed, overwritten or resized) and `timer repair --execute` mends it before the next run; half
the time one of the incident kinds of rowdamage.py (a queue unit zeroed, the scheduler state or
delayOffset.json lost: rebuilt by the next run; the last commit log file moved away, a record's
size zeroed, a pending unit's prevPos overwritten: refused in one line with nothing changed, then
put back or repaired); the check then also counts recalled messages delivered (a cancellation
that reached the timer in time).

Each run reads the wheel four hours further (--now), so runs read ahead of the wall clock too
(the neutralising of slots read early is killed as well). tests/test_timer_run.py and
tests/test_samples_timerstore.py kill runs at chosen points instead (TIMER_KILL_POINTS, in turn).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rmqdelay.samples.pack import unpack
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer.audit import check_timer_store

try:
    from support.kill9_soak import KILL_POINTS, kill_after, run_and_kill
    from support.timerdamage import DAMAGES, FILES, damage_store
except ImportError:  # run as a script: tests/support is the script's own directory
    from kill9_soak import KILL_POINTS, kill_after, run_and_kill
    from timerdamage import DAMAGES, FILES, damage_store

FAR = 4_102_444_800_000  # 2100-01-01: everything is due
FRESH_READ_CLOCK = 1795450290000  # timer-fresh's lastReadTimeMs
SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "timer-fresh" / "store.tar.xz"


def park(path: Path, rng: random.Random, count: int, base_ms: int, serial: int, spread_ms: int = 5000) -> int:
    """Timer messages as the put hook parks them in rmq_sys_wheel_timer (and a cancellation
    for every 7th, right after it), due over the next seconds to days, within ``spread_ms``
    of five instants (1: a few full slots, whose outputs are put as batches)."""
    with StoreWriter(path) as w:
        for i in range(count):
            deliver = base_ms + rng.choice([2_000, 30_000, 600_000, 3 * 3600_000, 2 * 86_400_000 + 7_000]) \
                + rng.randrange(0, spread_ms)
            out = deliver // 1000 * 1000 - (1000 if deliver % 1000 == 0 else 0)
            uniq = f"0A0A0005{serial + i:024X}"
            topic, qid = rng.choice([("TimerTopic", i % 4), ("TopicTest", i % 4), ("OrderTopic", i % 2)])
            w.put(NewMessage("rmq_sys_wheel_timer", 0, os.urandom(rng.randrange(1, 400)), {
                "TIMER_DELIVER_MS": str(deliver), "UNIQ_KEY": uniq, "CLUSTER": "DefaultCluster", "WAIT": "true",
                "TIMER_OUT_MS": str(out), "REAL_TOPIC": topic, "REAL_QID": str(qid)}, bornTimestamp=base_ms))
            if i % 7 == 3:
                w.put(NewMessage("rmq_sys_wheel_timer", 0, b"0", {
                    "TIMER_DEL_UNIQKEY": f"{topic}+{uniq}", "REAL_TOPIC": topic, "TIMER_DELIVER_MS": str(out + 1),
                    "UNIQ_KEY": uniq, "TAGS": "_RECALL_TAG_", "TIMER_OUT_MS": str(out), "REAL_QID": "0"},
                    bornTimestamp=base_ms))
    return count


def run_cli(path: Path, *extra: str, now: int = FAR) -> list[str]:
    return [sys.executable, "-m", "rmqdelay", "run", str(path), "--until-empty", "--now", str(now), "--json", *extra]


def kill_timer_runs(path: Path, kills: int, rng: random.Random, work: Path, *, max_delay_s: float = 0.3,
                    clock: int = FRESH_READ_CLOCK, spread_ms: int = 5000, damage: bool = False) -> dict:
    """Park messages, start `run` reading four hours further, SIGKILL it a random moment after
    its first timer delivery; repeat until ``kills`` runs were stopped or finished. ``clock``:
    the store's read clock (where the first run's four hours start)."""
    stats = {"killed": 0, "finished": 0, "parked": 0, "seconds": 0.0, "damaged": 0, "repairs": Counter()}
    started = time.monotonic()
    serial = 1
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    while stats["killed"] + stats["finished"] < kills:
        stats["parked"] += park(path, rng, rng.choice([150, 300]), clock, serial, spread_ms)
        serial += 1000
        clock += 4 * 3600_000
        out = work / "run.out"
        command = run_cli(path, "--flush-interval", f"{rng.choice([0, 0.01, 0.2])}s", now=clock)
        if run_and_kill(command, out, env, b'"timerDelivered"', rng.uniform(0, max_delay_s), 60):
            stats["killed"] += 1
        else:
            stats["finished"] += 1
        draw = rng.random() if damage else 1.0
        if draw < 1 / 6:
            try:
                from support.rowdamage import REBUILT, REFUSED, TIMER_REFUSED, inject
            except ImportError:
                from rowdamage import REBUILT, REFUSED, TIMER_REFUSED, inject
            kind = rng.choice(REBUILT + REFUSED + TIMER_REFUSED)
            repair = [sys.executable, "-m", "rmqdelay", "timer", "repair", str(path), "--execute", "--now", str(clock)]
            what = inject(path, kind, rng, run=run_cli(path, now=clock), env=env, repair=repair)
            if what is not None:
                stats["damaged"] += 1
                stats["repairs"][kind] += 1
                with open(work / "damage.log", "a") as log:
                    log.write(f"after stop {stats['killed'] + stats['finished']}: {kind}: {what}\n")
        elif draw < 1 / 3:
            name, how = rng.choice(FILES), rng.choice(DAMAGES)
            if damage_store(path, name, how, rng) is not None:
                stats["damaged"] += 1
                with open(work / "damage.log", "a") as log:
                    log.write(f"after stop {stats['killed'] + stats['finished']}: {name} {how}\n")
                repair = subprocess.run([sys.executable, "-m", "rmqdelay", "timer", "repair", str(path), "--execute",
                                         "--now", str(clock)], capture_output=True, env=env)
                if repair.returncode != 0:
                    raise RuntimeError(f"timer repair after {name} {how} failed ({repair.returncode}): "
                                       f"{repair.stderr.decode()[-2000:]}")
                stats["repairs"][f"{name} {how}"] += 1
    stats["seconds"] = time.monotonic() - started
    return stats


# The writes of a run on a timer store, each a point where a run is SIGKILLed right after it
# (kill9_soak.KILL_POINTS: the delay side's; counted once the run has put its first output).
# The wheel is written through its mapping: its fsync is the call after it.
TIMER_KILL_POINTS = {
    **{name: KILL_POINTS[name] for name in ("commit-log-write", "queue-unit-write", "index-write",
                                            "abort-mark-write", "commit-log-fsync", "checkpoint-write",
                                            "scheduler-state-write", "config-directory-fsync")},
    "timer-log-write": {"op": "pwrite", "path": "/timerlog/"},
    "timer-wheel-fsync": {"op": "fsync", "path": "/timerwheel$"},
    "timer-state-write": {"op": "pwrite", "path": "rmqdelay.timer.json.tmp"},
    "timercheck-write": {"op": "pwrite", "path": "timercheck.tmp"},
    "timercheck-backup-write": {"op": "pwrite", "path": "timercheck.bak.tmp"},
}


def stop_timer_runs_at(path: Path, points: list[str], rng: random.Random, work: Path, *,
                       clock: int = FRESH_READ_CLOCK, spread_ms: int = 5000, parked: tuple[int, ...] = (40, 80)) -> dict:
    """The deterministic counterpart of kill_timer_runs: park messages, start `run` reading
    four hours further, SIGKILL it right after the write TIMER_KILL_POINTS names; once per
    point, in turn. Every run must reach its point, so fewer messages (``parked``) than the
    soak's are parked before each: a stop lands where it is meant to, not where time ran out."""
    stats = {"killed": 0, "finished": 0, "parked": 0}
    serial = 1
    for point in points:
        stats["parked"] += park(path, rng, rng.choice(parked), clock, serial, spread_ms)
        serial += 1000
        clock += 4 * 3600_000
        command = run_cli(path, "--flush-interval", f"{rng.choice([0, 0.01, 0.2])}s", now=clock)
        kill_after(command[3:], TIMER_KILL_POINTS[point], work / "run.out", f"timer run ({point})")
        stats["killed"] += 1
    return stats


def recalled_delivered(path: Path) -> list[str]:
    """realTopic+uniqKey of the messages delivered although their cancellation reached the
    timer in time: its marker has a delete unit in the timer log (one dropped on enqueue,
    due already, has none: its target is delivered, as by the broker)."""
    from rmqdelay.formats.constants import TIMER_MAGIC_DELETE
    from rmqdelay.store import Store
    from rmqdelay.timer import TimerStore

    with Store(path) as store, TimerStore(store) as ts:
        units = ts.log.units()
        marker_at = set(units["offsetPy"][(units["magic"] & TIMER_MAGIC_DELETE) != 0].tolist())
        in_time, delivered = set(), set()
        for rec in store.commitlog.records():
            p = rec.properties
            if rec.topic == "rmq_sys_wheel_timer":
                if "TIMER_DEL_UNIQKEY" in p and rec.commitLogOffset in marker_at:
                    in_time.add(p["TIMER_DEL_UNIQKEY"])
            elif "TIMER_DEQUEUE_MS" in p:
                delivered.add(f"{rec.topic}+{p.get('UNIQ_KEY')}")
    return sorted(in_time & delivered)


def generated_store(path: Path, messages: int, seed: int) -> dict:
    """A store from `samples generate --timer` (with small commit log files, so they roll); its plan."""
    from rmqdelay.samples.generate import GenerateOptions
    from rmqdelay.samples.generate_timer import generate_timer

    return generate_timer(path, GenerateOptions(messages=messages, seed=seed, hours=30,
                                                commitlog_file_size=4 * 1024 * 1024))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=200)
    ap.add_argument("--seed", type=int, default=20261123)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--generated", type=int, default=None, metavar="N",
                    help="soak a store of N records from `samples generate --timer` instead of timer-fresh")
    ap.add_argument("--damage", action="store_true",
                    help="damage a timer file after a third of the stops and repair it before the next run")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="kill9-timer-"))
    path = work / "store"
    if path.exists():
        shutil.rmtree(path)
    clock = FRESH_READ_CLOCK
    if args.generated:
        plan = generated_store(path, args.generated, args.seed)
        clock = plan["timer"]["read_ms"]
        print(f"generated {plan['messages']} records: timer {plan['timer']['pending']} pending "
              f"({plan['timer']['pending_cancelled']} recalled, {plan['timer']['pending_rolled']} in roll units), "
              f"{plan['timer']['delivered']} delivered, {plan['timer']['cancelled']} cancelled")
    else:
        unpack(SAMPLE, path)
    rng = random.Random(args.seed)
    stats = kill_timer_runs(path, args.kills, rng, work, clock=clock, damage=args.damage)
    done = subprocess.run(run_cli(path), capture_output=True)
    if done.returncode != 0:
        print(done.stderr.decode()[-2000:], file=sys.stderr)
        return 1
    check = check_timer_store(path, strict_cancel=False)
    recalled = recalled_delivered(path)
    print(f"stops: {stats['killed']} killed mid-run, {stats['finished']} finished first, in {stats['seconds']:.0f} s")
    if args.damage:
        print(f"damaged and repaired {stats['damaged']} time(s): "
              + ", ".join(f"{k} x{n}" for k, n in sorted(stats["repairs"].items())))
        print(f"recalled messages delivered (cancellation in time): {len(recalled)}")
    print(f"timer messages parked {check.parked} (of which {stats['parked']} added between stops): delivered "
          f"{check.delivered}, cancelled {check.cancelled}, lost {len(check.lost)}, duplicated "
          f"{len(check.duplicated)}, misrouted {len(check.misrouted)}")
    print(f"delay messages: {check.delay_delivered} of {check.delay_parked} delivered once")
    print(f"verify and broker-resume problems: {len(check.problems)}")
    for line in (["lost " + line for line in check.lost_lines()[:5]] + check.duplicated[:5] + check.problems[:10]):
        print("  " + line)
    ok = not (check.lost or check.duplicated or check.misrouted or check.problems or (args.damage and recalled)) \
        and check.delivered + check.cancelled == check.parked and check.delay_delivered == check.delay_parked
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
