"""`rmqdelay samples generate --timer` (rmqdelay/samples/generate_timer.py): a 5.x store whose timer
store `inspect timer --verify` passes, whose plan.json says what is pending, and on which
`rmqdelay run --until-empty` delivers every pending timer message exactly once to its real topic
and queue, skipping the recalled ones - killed with SIGKILL on the way or not."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from conftest import load_plan
import pytest
from clirun import run_cli
from support.kill9_timer_soak import generated_store, stop_timer_runs_at
from support.kill9_timer_soak import run_cli as run_command

from rmqdelay.commands.common import camel_keys
from rmqdelay.samples.generate import GenerateOptions
from rmqdelay.samples.generate_timer import DELAY_KINDS, generate_timer
from rmqdelay.store import Store
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR = 4_102_444_800_000  # 2100-01-01: everything is due
MESSAGES, SEED, HOURS = 6000, 7, 72  # three days: rolls come back to be re-put
CL_SIZE = 1024 * 1024


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    path = tmp_path_factory.mktemp("timer-samples") / "store"
    plan = generate_timer(path, GenerateOptions(messages=MESSAGES, seed=SEED, hours=HOURS,
                                                commitlog_file_size=CL_SIZE))
    return path, plan


def test_the_command_writes_the_same_store_and_it_verifies(generated, tmp_path, capsys):
    path, plan = generated
    mine = tmp_path / "store"
    result = run_cli(capsys, "samples", "generate", mine, "--timer", "--messages", MESSAGES, "--seed", SEED,
                     "--hours", HOURS, "--commitlog-file-size", CL_SIZE, "--json")
    assert result.code == 0, result.err
    assert camel_keys(plan) == json.loads((mine / "plan.json").read_text())  # docs/cli.md's names
    assert plan == load_plan(mine)
    assert json.loads(result.out) == camel_keys(plan)  # --json speaks docs/cli.md's names
    for name in ("commitlog", "timerlog"):  # same seed, same bytes
        files = sorted(p.name for p in (path / name).iterdir())
        assert files == sorted(p.name for p in (mine / name).iterdir()) and files
        for f in files:
            assert (path / name / f).read_bytes() == (mine / name / f).read_bytes()
    assert (path / "timerwheel").read_bytes() == (mine / "timerwheel").read_bytes()
    verify = run_cli(capsys, "inspect", "timer", mine, "--verify", "--now", plan["at_ms"])
    assert verify.code == 0, verify.out + verify.err
    assert "drift" not in verify.out  # the metrics hold the true counts
    assert run_cli(capsys, "inspect", "commitlog", mine, "--verify").code == 0


def test_the_plan_holds_every_kind_of_timer_traffic_and_inspect_agrees(generated, capsys):
    path, plan = generated
    t = plan["timer"]
    assert plan["messages"] >= MESSAGES
    assert t["parked"] == t["delivered"] + t["cancelled"] + t["pending"]
    assert t["parked"] == sum(t["kinds"].values()) and all(t["kinds"][name] > 0 for name, _ in DELAY_KINDS)
    assert min(t["delivered"], t["cancelled"], t["rolled"], t["pending"], t["pending_rolled"],
               t["pending_cancelled"]) > 0, t
    assert t["shared_ms_max"] >= 2
    assert t["expected_deliveries"] == t["pending"] - t["pending_cancelled"] \
        == sum(n for q in t["expected_by_queue"].values() for n in q.values())
    assert plan["records"]["normal"] > 0 and plan["records"]["delay"] > 0 and plan["records"]["retry"] > 0
    got = json.loads(run_cli(capsys, "inspect", "timer", path, "--json", "--now", plan["at_ms"]).out)
    assert got["dequeue"]["lastReadTimeMs"] == t["read_ms"]
    assert got["timerLog"]["units"] == t["units"]
    assert got["rolls"]["done"] == t["rolled"]
    assert got["cancellations"]["honoured"] == t["cancelled"]
    # The delivered copies already in the real topics are the broker's: one per delivered message.
    check = check_timer_store(path, drained=False)
    assert check.parked == t["parked"]
    assert check.delivered == t["delivered"] and not check.duplicated
    assert check.cancelled == t["cancelled"] + t["pending_cancelled"]
    assert len(check.lost) == t["expected_deliveries"]  # not delivered yet
    with Store(path) as store:
        wheel_queue = store.consume_queue("rmq_sys_wheel_timer", 0)
        assert wheel_queue.max_offset == t["queue_entries"]


def test_run_delivers_every_pending_timer_message_once_and_skips_the_recalled(generated, tmp_path):
    path, plan = generated
    copy = tmp_path / "store"
    shutil.copytree(path, copy)
    done = subprocess.run(run_command(copy, now=FAR), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    t = plan["timer"]
    delivered = Counter((e["topic"], str(e["queueId"])) for e in events
                        if e["event"] == "timerDelivered" and not e["rolled"])
    assert delivered == Counter({(topic, q): n for topic, queues in t["expected_by_queue"].items()
                                 for q, n in queues.items()})
    assert sum(1 for e in events if e["event"] == "timerCancelled") == t["pending_cancelled"]
    stopped = events[-1]
    assert stopped["timerDelivered"] == t["expected_deliveries"] and stopped["timerSkipped"] == 0
    check = check_timer_store(copy)
    assert check.problems == [] and check.lost == [] and check.misrouted == [] and check.duplicated == []
    assert check.parked == t["parked"]
    assert check.cancelled == t["cancelled"] + t["pending_cancelled"]
    assert check.delivered == t["parked"] - check.cancelled
    assert check.delay_delivered == check.delay_parked > 0


def tree(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


def test_the_templates_write_what_the_put_hook_and_the_dequeue_write(tmp_path):
    """Parked records and delivered copies are formatted from templates; watched through
    ``on_put`` every message goes through the put hook (transform.py), the dequeue's convert
    (convert.py) and the writer's put instead: the same store, byte for byte."""
    options = GenerateOptions(messages=4000, seed=5, hours=40, commitlog_file_size=CL_SIZE)
    fast = generate_timer(tmp_path / "fast", options)
    seen = []
    slow = generate_timer(tmp_path / "slow", options, on_put=lambda new, result: seen.append(result.topic))
    assert fast == slow and len(seen) == fast["messages"]
    assert fast["timer"]["delivered"] > 0 and fast["timer"]["rolled"] > 0
    a, b = tree(tmp_path / "fast"), tree(tmp_path / "slow")
    assert sorted(a) == sorted(b)
    assert [name for name in a if a[name] != b[name]] == []


@pytest.mark.slow
def test_kill_9_on_a_generated_timer_store_delivers_every_timer_message_exactly_once(tmp_path):
    path = tmp_path / "store"
    plan = generated_store(path, 3000, 11)
    rng = random.Random(11)
    # The publishing of a run's state, and the timer log and outputs, on a generated store
    # (the other points of TIMER_KILL_POINTS: tests/test_timer_run.py).
    points = ["scheduler-state-write", "config-directory-fsync", "commit-log-write", "timer-log-write"]
    stats = stop_timer_runs_at(path, points, rng, tmp_path, clock=plan["timer"]["read_ms"])
    assert stats["killed"] == len(points)
    done = subprocess.run(run_command(path), capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    check = check_timer_store(path, strict_cancel=False)
    assert check.problems == [] and check.lost == [] and check.duplicated == [] and check.misrouted == []
    assert check.parked == plan["timer"]["parked"] + stats["parked"]
    assert check.delivered + check.cancelled == check.parked
    assert check.delay_delivered == check.delay_parked
