"""kill -9 soak: SIGKILL `rmqdelay run` at random points while it drains a store, many
times, then prove every delay message was delivered exactly once, no record is torn,
every consume queue unit points at a message of its topic/queue/queueOffset, and every
key of every record is in the index once (`inspect index --verify`).

    python3 benchmarks/kill9_soak.py --kills 200 [--messages 4000] [--seed 7]

The same functions drive tests/test_kill9.py with a smaller count.
"""

from __future__ import annotations

import argparse
import collections
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
    PROPERTY_REAL_TOPIC,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
)

from rmqdelay.schedule.levels import parse_delay_levels
from rmqdelay.store import Store
from rmqdelay.store.index_verify import iter_index_problems
from rmqdelay.store.verify import verify_store
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


@dataclass
class StoreCheck:
    scheduled: int = 0
    delivered: int = 0
    pending: int = 0
    problems: list[str] = field(default_factory=list)


def check_store(path: Path, *, drained: bool = True) -> StoreCheck:
    """Exactly once, whole records, valid units. Delivered copies are counted per
    UNIQ_KEY + level (each delivered record keeps DELAY=<level>)."""
    result = StoreCheck()
    levels = parse_delay_levels()
    with Store(path) as store:
        scheduled: dict[tuple[str, int], int] = {}
        delivered: collections.Counter = collections.Counter()
        for msg in store.commitlog.records():  # raises on a torn or corrupt record
            props = msg.properties
            key = (props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), int(props.get(PROPERTY_DELAY_TIME_LEVEL, "0")))
            if msg.topic == RMQ_SYS_SCHEDULE_TOPIC:
                scheduled[key] = msg.commitLogOffset
            elif PROPERTY_REAL_TOPIC in props and key[1] > 0:
                delivered[key] += 1
        result.scheduled = len(scheduled)
        result.delivered = sum(delivered.values())
        for key, n in delivered.items():
            if n > 1:
                result.problems.append(f"{key} delivered {n} times")
            if key not in scheduled:
                result.problems.append(f"{key} delivered but never scheduled")
        offsets = store.delay_offsets()
        table = offsets.offsetTable if offsets else {}
        for level in levels:
            cq = store.schedule_queue(level)
            done = table.get(level, cq.min_offset)
            for i, u in enumerate(cq.units(cq.min_offset, cq.max_offset), start=cq.min_offset):
                msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                key = (msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), level)
                if i < done and delivered[key] != 1:
                    result.problems.append(f"level {level} offset {i} {key}: below the offset, delivered "
                                           f"{delivered[key]} times")
                if i >= done:
                    result.pending += 1
                    if delivered[key]:
                        result.problems.append(f"level {level} offset {i} {key}: pending but delivered")
        if drained and result.pending:
            result.problems.append(f"{result.pending} units still pending")
        result.problems += [str(p) for p in verify_store(store)]
        # The index: every key of every record indexed once, chains and slots whole.
        result.problems += [f"{p.kind}: {p}" for p in iter_index_problems(store)]
        # Every unit points at a message of its own topic / queue / queueOffset.
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                for i, u in enumerate(cq.units(cq.min_offset, cq.max_offset), start=cq.min_offset):
                    msg = store.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                    if (msg.topic, msg.queueId, msg.queueOffset) != (topic, qid, i):
                        result.problems.append(f"{topic}/{qid} unit {i} points at {msg.topic}/{msg.queueId}/"
                                               f"{msg.queueOffset}")
    return result


def run_command(path: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rmqdelay", "run", str(path), "--until-empty", "--now", str(FAR_AHEAD_MS),
            "--json", *extra]


def pending_units(path: Path) -> int:
    with Store(path) as store:
        offsets = store.delay_offsets()
        table = offsets.offsetTable if offsets else {}
        return sum(max(store.schedule_queue(l).max_offset - table.get(l, 0), 0) for l in parse_delay_levels())


@dataclass
class SoakResult:
    kills: int = 0
    killed_mid_delivery: int = 0
    finished_before_kill: int = 0
    added: int = 0
    seconds: float = 0.0


def kill_cycles(path: Path, kills: int, rng: random.Random, *, top_up: int = 400,
                max_delay_s: float = 0.03, work: Path | None = None) -> SoakResult:
    """Start the scheduler, wait for its first delivery, SIGKILL it after a random delay;
    repeat. A store that runs dry between kills gets new delay messages (as producers would
    add), so every kill lands while there is work to do."""
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
        extra = ["--batch-size", str(rng.choice([1, 8, 64, 512])),
                 "--flush-interval", str(rng.choice([0, 0.005, 0.05, 10]))]
        with open(out, "wb") as fh:
            proc = subprocess.Popen(run_command(path, *extra), stdout=fh, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            if b'"delivered"' in out.read_bytes():
                break
            time.sleep(0.002)
        time.sleep(rng.uniform(0, max_delay_s))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            result.killed_mid_delivery += 1
        else:
            result.finished_before_kill += 1
        proc.wait()
        if proc.returncode not in (0, -signal.SIGKILL):
            raise RuntimeError(f"rmqdelay run failed ({proc.returncode}): {out.read_text()[-2000:]}")
        result.kills += 1
    result.seconds = time.monotonic() - started
    return result


def finish(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(run_command(path), capture_output=True, text=True, check=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=200)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the store directory")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="rmqdelay-kill9-"))
    path = work / "store"
    try:
        add_messages(path, args.messages, rng, 0, create=True)
        soak = kill_cycles(path, args.kills, rng, work=work)
        finish(path)
        check = check_store(path)
        print(f"command: python3 benchmarks/kill9_soak.py --kills {args.kills} --messages {args.messages} "
              f"--seed {args.seed}")
        print(f"kills: {soak.kills} ({soak.killed_mid_delivery} while delivering, "
              f"{soak.finished_before_kill} after the run had finished), {soak.seconds:.1f} s")
        print(f"delay messages scheduled: {check.scheduled} ({args.messages} + {soak.added} added between kills); "
              f"delivered: {check.delivered}; pending: {check.pending}")
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
