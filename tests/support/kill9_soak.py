"""kill -9 and fault soak: stop `rmqdelay run` at random points while it drains a store,
many times - SIGKILL, or a system call made to fail (faultinject.py, beside this file): a short
write then a full disk, ENOSPC on the commit log, a consume queue or the offsets being
published, EIO creating a file, EIO from fsync - then prove every delay message was
delivered exactly once, no record is torn, every consume queue unit points at a message
of its topic/queue/queueOffset, every key of every record is in the index once
(`inspect index --verify`), and the abort the stopped runs left is gone after the clean run. A run stopped by a fault must exit 2 with one line
on stderr and no traceback (the check itself: rmqdelay.schedule.audit).

    python3 tests/support/kill9_soak.py --kills 200 [--messages 4000] [--seed 7] [--faults 0.6] [--damage 0.3]

--faults is the share of the stops made by a fault rather than SIGKILL. --damage is the share of
the stops after which the store is damaged as an incident leaves it (rowdamage.py: a queue unit
zeroed, a queue file cut short, the scheduler state or delayOffset.json lost - rebuilt by the next
run; the last commit log file moved away, a record's size zeroed - refused in one line with
nothing changed, then put back). tests/test_kill9.py
stops runs at chosen points instead (KILL_POINTS and one fault of each kind, in turn:
stop_at_every_point) with the same store, runs and checks.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.formats.constants import (
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.schedule.audit import check_store
from rmqdelay.store import Store
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.writer import NewMessage, StoreWriter

FAR_AHEAD_MS = 4_102_444_800_000  # 2100-01-01: everything is due
TOPICS = {"TopicA": 4, "TopicB": 2, "%RETRY%GID_X": 1}
LEVELS = [1, 2, 3, 5, 8, 18]
COMMITLOG_FILE_SIZE = 64 * 1024  # small files: rollovers (BLANK records) happen often
CQ_FILE_SIZE = 64 * 20


def delay_messages(count: int, rng: random.Random, start: int, born_ms: int) -> list[NewMessage]:
    """Delay messages over several levels and topics, bodies 0..2 KiB, tags and keys."""
    msgs = []
    for i in range(start, start + count):
        topic = rng.choice(list(TOPICS))
        props = {PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"K{i:08d}", PROPERTY_DELAY_TIME_LEVEL: str(rng.choice(LEVELS)),
                 "KEYS": f"order-{i}", "WAIT": "true"}
        if rng.random() < 0.7:
            props["TAGS"] = rng.choice(["TagA", "TagB", "支付"])
        msgs.append(NewMessage(topic=topic, queueId=rng.randrange(TOPICS[topic]),
                               body=rng.randbytes(rng.choice([0, 10, 200, 2048])), properties=props,
                               bornTimestamp=born_ms + i, reconsumeTimes=rng.choice([0, 0, 1, 3])))
    return msgs


def add_messages(path: Path, count: int, rng: random.Random, start: int, *, create: bool = False) -> None:
    """Put ``count`` delay messages (and a few plain ones) with the one writer."""
    born = 1_700_000_000_000
    with StoreWriter(path, create=create, commitlog_file_size=COMMITLOG_FILE_SIZE, cq_file_size=CQ_FILE_SIZE,
                     clock=lambda: born + 5_000, sync=False) as writer:
        for msg in delay_messages(count, rng, start, born):
            writer.put(msg)
            if rng.random() < 0.05:
                writer.put(NewMessage(topic="TopicA", queueId=0, body=b"plain", bornTimestamp=born,
                                      properties={PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: f"P{start}-{rng.random()}"}))


def run_command(path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rmqdelay", "run", str(path), "--until-empty", "--now", str(FAR_AHEAD_MS),
            "--json", *extra]


def run_options(rng: random.Random) -> list[str]:
    """A run's batch size and flush interval, from one at a time to more than a level holds."""
    return ["--batch-size", str(rng.choice([1, 8, 64, 512])),
            "--flush-interval", f"{rng.choice([0, 0.005, 0.05, 10])}s"]


def pending_units(path: Path) -> int:
    with Store(path) as store:
        offsets = store.delay_offsets()
        table = offsets.offsetTable if offsets else {}
        return sum(max(store.schedule_queue(l).max_offset - table.get(l, 0), 0) for l in parse_delay_levels())


@dataclass
class SoakResult:
    kills: int = 0  # every stop, SIGKILL or fault
    killed_mid_delivery: int = 0
    finished_before_kill: int = 0
    added: int = 0
    seconds: float = 0.0
    faults: collections.Counter = field(default_factory=collections.Counter)  # kind -> runs it stopped
    faults_missed: int = 0  # fault runs that finished before meeting their fault
    damaged: collections.Counter = field(default_factory=collections.Counter)  # damage kind -> times


FAULTINJECT = str(Path(__file__).resolve().parent / "faultinject.py")


def fault_kinds(rng: random.Random) -> dict[str, list[dict]]:
    """One fault of each kind, at a random point of the run (faultinject rules)."""
    nth = rng.randint(1, 6)
    return {
        "short-write": [{"op": "pwrite", "path": "/commitlog/", "nth": nth, "short": rng.choice([1, 20, 4096, 9000]),
                         "errno": "ENOSPC"}],
        "enospc-commitlog": [{"op": "pwrite", "path": "/commitlog/", "nth": nth, "errno": "ENOSPC"}],
        "enospc-queue": [{"op": "pwrite", "path": "/consumequeue/", "nth": nth, "errno": "ENOSPC"}],
        "enospc-offsets": [{"op": "pwrite", "path": rng.choice(["delayOffset.json.tmp", "rmqdelay.scheduler.json.tmp"]),
                            "nth": rng.randint(1, 3), "errno": "ENOSPC"}],
        "eio-create": [{"op": "open", "path": rng.choice(["/commitlog/", "/consumequeue/"]), "mode": "create",
                        "nth": rng.randint(1, 2), "errno": "EIO"}],
        "eio-fsync": [{"op": "fsync", "path": rng.choice(["/commitlog/", "/consumequeue/"]), "nth": nth,
                       "count": 1, "errno": "EIO"}],
    }


def fault_run(path: Path, kind: str, rules: list[dict], extra: list[str], result: SoakResult, out: Path) -> None:
    """A run made to fail: exit 2 and one line, or exit 0 when it never met the fault."""
    cmd = [sys.executable, FAULTINJECT, json.dumps(rules), *run_command(path, *extra)[3:]]
    with open(out, "wb") as fh:
        proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.PIPE, timeout=120)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode == 0:
        result.faults_missed += 1
        return
    lines = [line for line in err.splitlines() if line.strip()]
    if proc.returncode != 2 or len(lines) != 1 or not lines[0].startswith("rmqdelay: ") or "Traceback" in err:
        raise RuntimeError(f"rmqdelay run under {kind} {rules}: exit {proc.returncode}, stderr: {err[-2000:]}")
    result.faults[kind] += 1


# Every kind of write a run makes, each a point where a run is SIGKILLed right after that
# system call (faultinject.py's "kill"): together, the states a kill between any two of its
# system calls can leave (a kill -9 leaves what was written in the page cache, so right after
# a file's write and right after its fsync are the same state, and the fsync is killed only
# where other writes come between). Each counts only once the run has put its first message
# (the stop: the first such call from there), so every stop lands while it delivers.
KILL_POINTS = {
    "commit-log-write": {"op": "pwrite", "path": "/commitlog/", "nth": 2},
    "commit-log-directory-fsync": {"op": "fsync", "path": "/commitlog$"},
    "queue-unit-write": {"op": "pwrite", "path": "/consumequeue/"},
    "queue-fsync": {"op": "fsync", "path": "/consumequeue/"},
    "index-write": {"op": "pwrite", "path": "/index/"},
    "abort-mark-write": {"op": "pwrite", "path": "abort.rmqdelay-new"},
    "commit-log-fsync": {"op": "fsync", "path": "/commitlog/"},
    "checkpoint-write": {"op": "pwrite", "path": "/checkpoint$"},
    "offsets-write": {"op": "pwrite", "path": "delayOffset.json.tmp"},
    "offsets-backup-write": {"op": "pwrite", "path": "delayOffset.json.bak.tmp"},
    "scheduler-state-write": {"op": "pwrite", "path": "rmqdelay.scheduler.json.tmp"},
    "config-directory-fsync": {"op": "fsync", "path": "/config$"},
}


def kill_after(args: list[str], rule: dict, out: Path, what: str) -> None:
    """``rmqdelay ARGS`` SIGKILLed right after the system call ``rule`` names (counted once
    the run has put its first message); an error if it finished or failed instead (the
    point was not reached, or the run broke)."""
    rules = [dict(rule, kill=True, after="/commitlog/")]
    with open(out, "wb") as fh:
        proc = subprocess.run([sys.executable, FAULTINJECT, json.dumps(rules), *args], stdout=fh,
                              stderr=subprocess.STDOUT, timeout=120)
    if proc.returncode != -signal.SIGKILL:
        raise RuntimeError(f"rmqdelay {what} to be killed at {rules}: exit {proc.returncode}, "
                           f"output: {out.read_text(errors='replace')[-2000:]}")


def killed_at(path: Path, point: str, extra: list[str], out: Path) -> None:
    """A run SIGKILLed right after the system call KILL_POINTS names."""
    kill_after(run_command(path, *extra)[3:], KILL_POINTS[point], out, f"run ({point})")


def stop_at_every_point(path: Path, rng: random.Random, work: Path, *, faults: bool = False,
                        top_up: int = 150) -> SoakResult:
    """The deterministic counterpart of kill_cycles: a run killed at each of KILL_POINTS, in
    turn (or, ``faults``, one stopped by each kind of fault_kinds, every one of which must
    stop its run); ``top_up`` new messages before every stop, so each run has messages to put
    (and files to start) besides what it replays."""
    result = SoakResult()
    next_key = 10_000_000
    started = time.monotonic()
    stops = sorted(fault_kinds(rng)) if faults else list(KILL_POINTS)
    for point in stops:
        add_messages(path, top_up, rng, next_key)
        next_key += top_up
        result.added += top_up
        out = work / "run.out"
        extra = run_options(rng)
        if faults:
            fault_run(path, point, fault_kinds(rng)[point], extra, result, out)
        else:
            killed_at(path, point, extra, out)
            result.killed_mid_delivery += 1
        result.kills += 1
    result.seconds = time.monotonic() - started
    return result


def run_and_kill(command: list[str], out: Path, env: dict, first: bytes, delay_s: float, wait_s: float) -> bool:
    """Start ``command`` (its output into ``out``), wait for ``first`` in that output (its first
    delivery) or its end, then ``delay_s`` more, and SIGKILL it if it still runs: whether it
    was killed. A run that failed (not killed, not exit 0) is an error of the soak."""
    with open(out, "wb") as fh:
        proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + wait_s
    while proc.poll() is None and time.monotonic() < deadline:
        if first in out.read_bytes():
            break
        time.sleep(0.002)
    time.sleep(delay_s)
    killed = proc.poll() is None
    if killed:
        proc.send_signal(signal.SIGKILL)
    proc.wait()
    if proc.returncode not in (0, -signal.SIGKILL):
        raise RuntimeError(f"rmqdelay run failed ({proc.returncode}): {out.read_text()[-2000:]}")
    return killed


def kill_cycles(path: Path, kills: int, rng: random.Random, *, top_up: int = 400,
                max_delay_s: float = 0.03, work: Path | None = None, faults: float = 0.0,
                damage: float = 0.0) -> SoakResult:
    """Start the scheduler, wait for its first delivery, SIGKILL it after a random delay;
    or (a share ``faults`` of the time) start it with a system call made to fail; repeat.
    A store that runs dry between stops gets new delay messages (as producers would add),
    so every stop lands while there is work to do."""
    result = SoakResult()
    work = work or path.parent
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    next_key = 10_000_000
    started = time.monotonic()
    while result.kills < kills:
        if pending_units(path) < top_up // 2:
            add_messages(path, top_up, rng, next_key)
            next_key += top_up
            result.added += top_up
        out = work / "run.out"
        extra = run_options(rng)
        if rng.random() < faults:
            kind, rules = rng.choice(sorted(fault_kinds(rng).items()))
            fault_run(path, kind, rules, extra, result, out)
            result.kills += 1
            continue
        if run_and_kill(run_command(path, *extra), out, env, b'"delivered"', rng.uniform(0, max_delay_s), 30):
            result.killed_mid_delivery += 1
        else:
            result.finished_before_kill += 1
        result.kills += 1
        if rng.random() < damage:
            try:
                from support.rowdamage import REBUILT, REFUSED, inject
            except ImportError:
                from rowdamage import REBUILT, REFUSED, inject
            kind = rng.choice(REBUILT + REFUSED)
            what = inject(path, kind, rng, run=run_command(path), env=env)
            if what is not None:
                result.damaged[kind] += 1
                with open(work / "damage.log", "a") as log:
                    log.write(f"after stop {result.kills}: {kind}: {what}\n")
    result.seconds = time.monotonic() - started
    return result


def finish(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(run_command(path), capture_output=True, text=True, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--faults", type=float, default=0.6, help="share of stops made by a fault, not SIGKILL")
    parser.add_argument("--damage", type=float, default=0.0, help="share of stops after which the store is damaged")
    parser.add_argument("--keep", action="store_true", help="keep the store directory")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="rmqdelay-kill9-"))
    path = work / "store"
    try:
        add_messages(path, args.messages, rng, 0, create=True)
        soak = kill_cycles(path, args.kills, rng, work=work, faults=args.faults, damage=args.damage)
        finish(path)
        check = check_store(path)
        if (path / "abort").exists():
            # Every stop left an abort rmqdelay marked; the clean run after them removes it.
            check.problems.append(f"abort left after the clean run: {(path / 'abort').read_bytes()!r}")
        print(f"command: python3 tests/support/kill9_soak.py --kills {args.kills} --messages {args.messages} "
              f"--seed {args.seed} --faults {args.faults} --damage {args.damage}")
        sigkills = soak.killed_mid_delivery + soak.finished_before_kill
        print(f"stops: {soak.kills} in {soak.seconds:.1f} s: {sigkills} SIGKILL ({soak.killed_mid_delivery} while "
              f"delivering, {soak.finished_before_kill} after the run had finished), "
              f"{sum(soak.faults.values())} by a fault (exit 2, one line), {soak.faults_missed} fault runs "
              f"finished before meeting their fault")
        print("faults: " + ", ".join(f"{kind} {n}" for kind, n in sorted(soak.faults.items())))
        print("damage: " + ", ".join(f"{kind} {n}" for kind, n in sorted(soak.damaged.items())))
        print(f"delay messages scheduled: {check.scheduled} ({args.messages} + {soak.added} added between stops); "
              f"delivered: {check.delivered}; pending: {check.pending}; lost: {check.lost}; "
              f"duplicated: {check.duplicated}")
        print("result: " + ("OK - every delay message delivered exactly once, no torn record, every unit valid, "
                            "every key indexed once"
                            if not check.problems and check.delivered == check.scheduled
                            else f"FAILED - {len(check.problems)} problems: " + "; ".join(check.problems[:20])))
        return 0 if not check.problems and check.delivered == check.scheduled else 1
    finally:
        if args.keep:
            print(f"store kept at {path}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
