"""The damage matrix of a 5.x timer store: each timer file (the first, a middle and the last
timer log file, timerwheel, config/timercheck, config/timermetrics) deleted, truncated at the
start / middle / end, zeroed, overwritten with random bytes in a slot or unit, or of the wrong
size; then `timer repair --execute` and `run --until-empty`, on the timer-partial sample (a
real 5.3.3 store) and on a `samples generate --timer` store.

The commit log is the one source of truth: every parked timer message, every cancellation
marker and every delivered copy is there, the timer log and wheel are derived. So every cell
ends in exactly the deliveries the undamaged store gives at the same --now - nothing lost,
nothing twice, no recalled message delivered - and `inspect timer --verify` is clean after
the repair. No cell needs a refusal: whatever is left of a damaged file is read as far as it
goes, what it held is made again from the commit log (a unit for every enqueued message or
waiting cancellation marker that lost its own, the wheel from the units, the checkpoint from
the delivered copies and re-puts when it cannot be trusted).

The references are built once per session; the cells that reproduce the reported failures
run in the quick loop, the rest of the matrix is `slow`.
"""

from __future__ import annotations

import random
import subprocess
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
from clirun import console
from support.timerdamage import DAMAGES, FILES, damage_store

from rmqdelay.samples.generate import GenerateOptions
from rmqdelay.samples.generate_timer import TimerOptions, generate_timer
from rmqdelay.store import Store
from rmqdelay.store.index import IndexSettings
from rmqdelay.timer.config import timer_config

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR = "4102444800000"  # 2100-01-01: everything is due
SKIP_TOPICS = {"rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"}
# The cells of the reported failures: the quick loop runs them.
QUICK = {("log-first", "deleted"), ("log-last", "truncated-middle"), ("log-mid", "truncated-middle"),
         ("config/timercheck", "truncated-start"), ("timerwheel", "truncated-end"), ("timerwheel", "random"),
         ("config/timercheck", "zeroed")}


def copy_store(src: Path, dst: Path) -> Path:
    # cp keeps the wheel sparse (38 MB of mostly holes).
    subprocess.run(["cp", "-r", "--sparse=always", str(src), str(dst)], check=True)
    return dst


def log_end(store: Path) -> int:
    with Store(store) as s:
        return s.commitlog.end_offset()


def deliveries(store: Path, start: int) -> Counter:
    """What a run put after ``start``: (topic, queue, UNIQ_KEY) of every record outside the
    parking topics, counted."""
    out: Counter = Counter()
    with Store(store) as s:
        for rec in s.commitlog.records(start):
            if rec.topic not in SKIP_TOPICS:
                out[(rec.topic, rec.queueId, rec.properties.get("UNIQ_KEY"))] += 1
    return out


def recalled(store: Path) -> set[tuple[str, str]]:
    """(realTopic, UNIQ_KEY) of every message a cancellation marker names."""
    keys = set()
    with Store(store) as s:
        for rec in s.commitlog.records():
            target = rec.properties.get("TIMER_DEL_UNIQKEY") if rec.topic == "rmq_sys_wheel_timer" else None
            if target:
                topic, _, uniq = target.rpartition("+")
                keys.add((topic, uniq))
    return keys


def generate(dest: Path) -> dict:
    """The matrix's generated store, as `samples generate --timer` writes it, with small commit
    log, consume queue, index and timer log files (the timer log's is the broker's
    mappedFileSizeTimerLog, which the command leaves at 5.3.3's 100 MB): several files of each,
    so the first, a middle and the last timer log file are three files, and nothing a cell
    reads is large. Its plan."""
    options = GenerateOptions(messages=1500, seed=5, commitlog_file_size=128 << 10, cq_file_size=20 * 1000,
                              index=IndexSettings(maxHashSlotNum=5000, maxIndexNum=20000), writer_process=False)
    return generate_timer(dest, options, TimerOptions(config=replace(timer_config(), timerLogFileSize=4096)))


@pytest.fixture(scope="session")
def damage_reference(tmp_path_factory, sample_store):
    """Per store: (the undamaged store, its commit log end, the deliveries of a run to the end,
    the recalled messages), built once."""
    built = {}

    def get(name: str):
        if name not in built:
            base = tmp_path_factory.mktemp(f"damage-{name}")
            if name == "timer-partial":
                src = copy_store(sample_store(name), base / "src")
            else:
                src = base / "src"
                plan = generate(src)
                # It exercises every file of the matrix: several commit log and timer log files,
                # rolled messages still to come back, recalls.
                assert len(list((src / "commitlog").iterdir())) > 2
                assert len(list((src / "timerlog").iterdir())) >= 4
                assert plan["timer"]["pending_rolled"] and plan["timer"]["recalls"]
            end = log_end(src)
            ref = copy_store(src, base / "ref")
            code, _, err = _cli("run", ref, "--until-empty", "--now", FAR)
            assert code == 0, err
            wanted = deliveries(ref, end)
            cancelled = recalled(src)
            # The reference itself honours the cancellations: the matrix compares against it.
            assert cancelled and not any((t, u) in cancelled for t, _, u in wanted)
            built[name] = (src, end, wanted, cancelled)
        return built[name]

    return get


def _cli(*args) -> tuple[int, str, str]:
    result = console(*args)
    return result.returncode, result.stdout, result.stderr


def cells():
    for store in ("timer-partial", "generated"):
        for name in FILES:
            for how in DAMAGES:
                marks = () if store == "timer-partial" and (name, how) in QUICK else (pytest.mark.slow,)
                yield pytest.param(store, name, how, id=f"{store}-{name.replace('/', '-')}-{how}", marks=marks)


@pytest.mark.parametrize("store_name, name, how", list(cells()))
def test_damaged_timer_file_repaired_then_run_gives_the_undamaged_deliveries(tmp_path, damage_reference,
                                                                            store_name, name, how):
    src, end, wanted, cancelled = damage_reference(store_name)
    store = copy_store(src, tmp_path / "store")
    assert damage_store(store, name, how, random.Random(f"{store_name}/{name}/{how}")) is not None

    code, out, err = _cli("timer", "repair", store, "--execute", "--now", FAR)
    assert code == 0, (out[-2000:], err)
    assert not [line for line in err.splitlines() if line.startswith("rmqdelay:") and "warning" not in line], err
    code, out, err = _cli("inspect", "timer", store, "--verify", "--now", FAR)
    assert code == 0, out[-2000:]  # no "repaired" followed by a refusal
    code, out, err = _cli("run", store, "--until-empty", "--now", FAR)
    assert code == 0, err[-2000:]
    got = deliveries(store, end)
    assert not [key for key in got if (key[0], key[2]) in cancelled], "a recalled message was delivered"
    assert got - wanted == Counter(), "delivered twice or not by the undamaged store"
    assert wanted - got == Counter(), "lost"
    # The store is whole again: a second repair finds nothing to do (it would not make a unit
    # for a message the run delivered or that was recalled).
    code, out, err = _cli("timer", "repair", store, "--now", FAR)
    assert code == 0 and "nothing to repair" in out, out[-2000:]
