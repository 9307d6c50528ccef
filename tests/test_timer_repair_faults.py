"""`timer repair --execute` under faults: a file size limit, a full disk, a file that cannot be
replaced, a failing rename, kill -9 between the files; a broker holding the lock; bad input.
Every file is whole afterwards (the old one or the new one), nothing is left staged where the
broker would load it, and a rerun finishes the repair to the same bytes an undisturbed one
writes."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import assert_one_line, broker_holding_lock, console, problems_of
from conftest import SAMPLES, load_expected
from test_bad_input import snapshot
from test_faults import assert_one_line as one_line
from test_faults import cli, fill, small_disk  # noqa: F401 (a fixture)

from rmqdelay.samples.pack import ARCHIVE_NAME, unpack

# The 5.x samples' times (tests/wallclock.py); child processes under faults and kills.
pytestmark = [pytest.mark.clock, pytest.mark.slow]

PARTIAL = load_expected("timer-partial")
NOW = str(PARTIAL["timercheck"][0]["raw"]["lastReadTimeMs"] + 1000)
TIMER_FILES = ("timerwheel", "config/timercheck", "config/timermetrics")


def damaged(where: Path) -> Path:
    """timer-partial after retention deleted its first commit log file: the repair drops
    units, moves the rest up, removes a timer log file, rebuilds the wheel, and rewrites
    timercheck and timermetrics."""
    store = where / "timer-partial"
    unpack(SAMPLES / "timer-partial" / ARCHIVE_NAME, store)
    (store / "commitlog" / "00000000000000000000").unlink()
    return store


def timer_state(store: Path) -> dict[str, bytes]:
    files = {f"timerlog/{p.name}": p.read_bytes() for p in sorted((store / "timerlog").iterdir())}
    return files | {name: (store / name).read_bytes() for name in TIMER_FILES}


def stable(state: dict[str, bytes]) -> dict[str, object]:
    """The state without the clock stamps a repair writes (dataVersion timestamps)."""
    out: dict[str, object] = dict(state)
    cp = state["config/timercheck"]
    out["config/timercheck"] = cp[:40] + cp[48:]
    metrics = json.loads(state["config/timermetrics"])
    out["config/timermetrics"] = ({t: m["count"] for t, m in metrics["timingCount"].items()},
                                  metrics["dataVersion"]["counter"])
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[dict[str, bytes], dict[str, object]]:
    """(the damaged state, what an undisturbed repair makes of it)."""
    store = damaged(tmp_path_factory.mktemp("reference"))
    before = timer_state(store)
    result = cli("timer", "repair", store, "--execute", "--now", NOW)
    assert result.code == 0, result.err
    return before, stable(timer_state(store))


def assert_verified(store: Path) -> None:
    result = cli("inspect", "timer", store, "--verify", "--json", "--now", NOW)
    found = problems_of(result.out)
    assert [p for p in found if not p["advisory"]] == [] and result.code == 0, result.out[-2000:] + result.err


def assert_whole(store: Path, before: dict[str, bytes], after: dict[str, object]) -> None:
    """Every timer file is the old one or the new one, never anything in between; nothing is
    staged inside timerlog/."""
    state = timer_state(store)
    now = stable(state)
    for name, data in state.items():
        assert data == before.get(name) or now[name] == after.get(name), name
    assert all(p.name.isdigit() for p in (store / "timerlog").iterdir())


def finish(store: Path, reference) -> None:
    again = cli("timer", "repair", store, "--execute", "--now", NOW, "--json")
    assert again.code == 0, again.err
    assert stable(timer_state(store)) == reference[1]
    assert not (store / ".timer-repair").exists()
    assert_verified(store)


def test_a_file_size_limit_fails_before_anything_is_replaced(tmp_path, reference):
    store = damaged(tmp_path)
    files = snapshot(store)
    result = cli("timer", "repair", store, "--execute", "--now", NOW, rlimits={resource.RLIMIT_FSIZE: 1 << 20})
    one_line(result, "File too large", ".timer-repair/timerwheel")
    assert snapshot(store) == files  # nothing replaced, nothing staged left
    finish(store, reference)


def test_a_full_disk_fails_before_anything_is_replaced(tmp_path, small_disk, reference):  # noqa: F811
    disk = small_disk(16 * 1024)
    store = damaged(disk)
    files = snapshot(store)
    filler = fill(disk, 32)
    result = cli("timer", "repair", store, "--execute", "--now", NOW)
    one_line(result, "No space left on device")
    filler.unlink()
    assert snapshot(store) == files
    finish(store, reference)


def test_a_file_that_cannot_be_replaced_is_found_before_any_rename(tmp_path, reference):
    store = damaged(tmp_path)
    target = store / "config" / "timercheck"
    if subprocess.run(["chattr", "+i", str(target)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        files = snapshot(store)
        result = cli("timer", "repair", store, "--execute", "--now", NOW)
        one_line(result, str(target))
        assert snapshot(store) == files
    finally:
        subprocess.run(["chattr", "-i", str(target)], capture_output=True)
    finish(store, reference)


@pytest.mark.parametrize("nth", [1, 3, 6])
def test_a_rename_failing_half_way_leaves_whole_files_and_a_rerun_finishes(tmp_path, reference, nth):
    store = damaged(tmp_path)
    result = cli("timer", "repair", store, "--execute", "--now", NOW,
                 faults=[{"op": "replace", "nth": nth, "errno": "EIO"}])
    if nth == 1:  # the journal's own rename: nothing was replaced
        one_line(result, "journal.json", "Input/output error")
        assert timer_state(store) == reference[0]
    else:
        one_line(result, "Input/output error", "half applied", "--execute")
    assert_whole(store, *reference)
    finish(store, reference)


KILLER = """
import os, signal, sys
nth = int(sys.argv[1])
seen = 0
real = os.replace
def replace(src, dst, **kw):
    global seen
    seen += 1
    if seen == nth:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(src, dst, **kw)
os.replace = replace
sys.argv = ["rmqdelay"] + sys.argv[2:]
from rmqdelay.commands.main import main
main()
"""


@pytest.mark.parametrize("nth", [1, 2, 3, 4, 5, 7, 9, 11, 13])
def test_kill_9_between_files_leaves_whole_files_and_a_rerun_finishes(tmp_path, reference, nth):
    store = damaged(tmp_path)
    proc = subprocess.run([sys.executable, "-c", KILLER, str(nth), "timer", "repair", str(store), "--execute",
                           "--now", NOW], capture_output=True, text=True, timeout=300)
    assert proc.returncode in (-9, 0), proc.stderr
    assert_whole(store, *reference)
    if (store / ".timer-repair" / "journal.json").exists():  # killed after the journal: renames to finish
        dry = cli("timer", "repair", store, "--now", NOW)
        assert "interrupted repair" in dry.out
        # A half-applied repair is no state to deliver from: `run` refuses, says how to finish.
        files = snapshot(store)
        refused = cli("run", store, "--until-empty", "--now", NOW)
        one_line(refused, "journal.json", "timer repair STORE --execute")
        assert snapshot(store) == files
    finish(store, reference)


def test_a_broker_holding_the_lock_is_refused_with_exit_3(tmp_path):
    store = damaged(tmp_path)
    files = snapshot(store)
    with broker_holding_lock(store):
        result = console("timer", "repair", store, "--execute", "--now", NOW)
        assert_one_line(result, 3, str(store / "lock"))
        dry = console("timer", "repair", store, "--now", NOW)  # a dry run only reads
        assert dry.returncode == 1 and "--execute" in dry.stdout
    assert snapshot(store) == files


# A wheel of the wrong size or a short checkpoint is no longer bad input: repair rebuilds them
# from the commit log (tests/test_timer_damage.py).
@pytest.mark.parametrize("how", ["no-store", "no-timer", "bad-now"])
def test_bad_input_is_one_line_exit_2(tmp_path, how):
    store = damaged(tmp_path)
    args = ["timer", "repair", store, "--execute", "--now", NOW]
    needle = str(store)
    if how == "no-store":
        args[2] = needle = str(tmp_path / "nothing")
    elif how == "no-timer":
        store = tmp_path / "delay-partial"
        shutil.copytree(SAMPLES / "delay-partial" / "store", store)
        args[2] = store
        needle = "timer store"
    else:
        args[-1] = "yesterday"
        needle = "--now"
    files = snapshot(store) if Path(args[2]).exists() else None
    result = console(*args)
    assert_one_line(result, 2, needle)
    if files is not None:
        assert snapshot(store) == files
