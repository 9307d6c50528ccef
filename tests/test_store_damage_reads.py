"""Reads of a store as an incident brings it: under a directory whose name is not UTF-8, on a
mount that takes no writes, with special files where store files belong, and while a writer
appends. A read answers (or refuses in one line), never changes the store, never blocks and
never shows a traceback."""

from __future__ import annotations

import builtins
import errno
import io
import json
import os
import shutil
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, assert_one_line, console, problems_of
from test_bad_input import first_log, patch, snapshot

# A directory name whose bytes are not UTF-8, as Python holds them (surrogate escapes).
NOT_UTF8 = "st\udcff\udcfeore"


def non_utf8_copy(tmp_path: Path, sample_store, name: str) -> Path:
    """A copy of a sample store in a directory named NOT_UTF8 (the store's label then has
    the bytes too: NOT_UTF8/store is labelled by NOT_UTF8)."""
    store = tmp_path / NOT_UTF8 / "store"
    shutil.copytree(sample_store(name), store)
    return store


def test_a_store_path_that_is_not_utf8_is_served(tmp_path, sample_store):
    label = "st\ufffd\ufffdore"  # how JSON and Parquet name the store (docs/cli.md)
    for name in ("delay-partial", "timer-partial"):
        store = non_utf8_copy(tmp_path / name, sample_store, name)
        before = snapshot(store)
        out = tmp_path / name / "out\udcfa"
        proc = console("analyze", "all", store, "--json", "--output", out, "--report", out / "r.html")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        rows = [json.loads(line) for line in proc.stdout.splitlines()]
        assert rows and {r["store"] for r in rows if "store" in r} == {label}
        assert (out / "lateness_messages.parquet").is_file() and (out / "r.html").is_file()
        table = console("analyze", "backlog", store)
        assert table.returncode == 0 and "Traceback" not in table.stderr
        assert snapshot(store) == before
    # A damaged file under such a path is named in one line (the table escapes the bytes, the
    # JSON replaces them).
    patch(first_log(store), 400, bytes(4096))
    assert_one_line(console("analyze", "lateness", store), 2, "st\\xff\\xfeore/store/commitlog/", "at byte ")
    verify = console("inspect", "commitlog", store, "--verify", "--json")
    assert verify.returncode == 1 and problems_of(verify.stdout)[0]["file"].startswith(str(tmp_path / name / label))
    index = console("inspect", "index", store, "--verify", "--json")
    assert index.returncode == 1 and "Traceback" not in index.stderr and problems_of(index.stdout)
    # Spark's writer names files through the JVM: a --output it cannot name is refused before
    # anything starts.
    assert_one_line(console("analyze", "backlog", store, "--spark", "--output", tmp_path / "out\udcfa"), 2,
                    "its path is not UTF-8")


# -- a mount that takes no writes --------------------------------------------------------------

@contextmanager
def read_only_mount(monkeypatch, root: Path):
    """Every call that would change a file under ``root`` fails with EROFS, as on a read-only
    mount (the bind mount itself needs privileges a test may not have; a child in its own
    mount namespace covers that where it can, below). Yields the calls that were refused."""
    root_b = os.fsencode(os.path.abspath(root))
    refused: list[str] = []

    def under(path) -> bool:
        try:
            return os.fsencode(os.path.abspath(os.fsdecode(path))).startswith(root_b)
        except TypeError:
            return False  # an fd

    def refuse(name: str, path) -> None:
        refused.append(f"{name} {os.fsdecode(path)}")
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fsdecode(path))

    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    real_open, real_io_open = os.open, io.open

    def guarded_open(path, flags, *args, **kwargs):
        if flags & write_flags and under(path):
            refuse("open", path)
        return real_open(path, flags, *args, **kwargs)

    def guarded_io_open(file, mode="r", *args, **kwargs):
        if any(c in mode for c in "wax+") and not isinstance(file, int) and under(file):
            refuse("open", file)
        return real_io_open(file, mode, *args, **kwargs)

    def guarded(name: str, nargs: int = 1):
        real = getattr(os, name)

        def call(*args, **kwargs):
            for path in args[:nargs]:
                if under(path):
                    refuse(name, path)
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_io_open)
    monkeypatch.setattr(builtins, "open", guarded_io_open)
    for name, nargs in (("mkdir", 1), ("rmdir", 1), ("unlink", 1), ("remove", 1), ("truncate", 1),
                        ("replace", 2), ("rename", 2), ("link", 2), ("symlink", 2), ("utime", 1),
                        ("chmod", 1)):
        monkeypatch.setattr(os, name, guarded(name, nargs))
    yield refused


def test_a_dry_run_opens_nothing_for_writing(tmp_path, sample_store, monkeypatch):
    stores = {}
    for name in ("delay-partial", "timer-partial"):
        stores[name] = tmp_path / name
        shutil.copytree(sample_store(name), stores[name])
    before = {name: snapshot(store) for name, store in stores.items()}
    with read_only_mount(monkeypatch, tmp_path) as refused:
        for name, store in stores.items():
            for args in (["run", store, "--dry-run", "--json"], ["run", store, "--dry-run", "--until-empty"],
                         ["offsets", "reset", store, "--all-levels", "--to-latest"],
                         ["inspect", "store", store], ["inspect", "delay", store]):
                proc = console(*args)
                assert proc.returncode in (0, 1) and not refused and "Traceback" not in proc.stderr, \
                    (args, refused, proc.stderr)
            if name == "timer-partial":
                for args in (["timer", "repair", store], ["inspect", "timer", store, "--units"]):
                    proc = console(*args)
                    assert proc.returncode in (0, 1) and not refused, (args, refused, proc.stderr)
        # A run that would write says so in one line, before it changes anything.
        assert_one_line(console("run", stores["timer-partial"], "--once"), 2, "Read-only file system")
    for name, store in stores.items():
        assert snapshot(store) == before[name]


def test_a_dry_run_on_a_read_only_bind_mount(tmp_path, sample_store):
    # The real thing, where the test may make a mount namespace of its own (root): the store
    # bound read-only, the console script run in it. The mount goes with the namespace.
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a read-only bind mount needs root and unshare")
    store = tmp_path / "src"
    shutil.copytree(sample_store("timer-partial"), store)
    ro = tmp_path / "ro"
    ro.mkdir()
    script = (f'mount --bind "$1" "$2" && mount -o remount,bind,ro "$2" || exit 99; '
              f'exec "{CONSOLE_SCRIPT}" run "$2" --dry-run --json')
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(store), str(ro)], capture_output=True,
                          text=True, timeout=120)
    if proc.returncode == 99:
        pytest.skip(f"cannot bind mount here: {proc.stderr.strip()}")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert [json.loads(line) for line in proc.stdout.splitlines()]


# -- special files where the timer store's files belong ----------------------------------------

def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


def _dangling(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.parent / "nowhere" / path.name)


def _events(proc) -> list[dict]:
    """What a run delivers, drops and says of it (its notices name the wall clock: left out)."""
    return [e for e in map(json.loads, proc.stdout.splitlines()) if e["event"] != "timerNotice"]


def test_a_fifo_or_a_symlink_to_nothing_as_the_wheel_has_a_way_out_that_takes_it(tmp_path, sample_store):
    # Never opened (a FIFO would block the reader); run refuses in one line naming the repair,
    # and the repair takes the file's place (keeping it as the .bak): then run goes on as on the
    # intact store.
    reference = tmp_path / "intact"
    shutil.copytree(sample_store("timer-partial"), reference)
    now = ["--now", "2026-11-23T17:00:00Z"]
    want = console("run", reference, "--dry-run", "--json", *now)
    assert want.returncode == 0
    for damage, name, kind in ((_fifo, "timerwheel", "a FIFO"), (_dangling, "timerwheel", "a symlink to nothing"),
                               (_fifo, "config/timercheck", "a FIFO")):
        store = tmp_path / f"{damage.__name__}-{name.replace('/', '-')}"
        shutil.copytree(reference, store)
        damage(store / name)
        before = snapshot(store)
        for args in (["run", store, "--dry-run"], ["run", store, "--once"], ["inspect", "timer", store]):
            assert_one_line(console(*args, *now), 2, f"{store / name}: ", f"found {kind}",
                            f"run `rmqdelay timer repair {store} --execute`")
        assert snapshot(store) == before
        assert console("timer", "repair", store, *now).returncode == 1  # the dry run lists the changes
        assert console("timer", "repair", store, "--execute", *now).returncode == 0
        assert (store / name).is_file() and os.path.lexists(store / f"{name}.bak")
        got = console("run", store, "--dry-run", "--json", *now)
        assert got.returncode == 0 and _events(got) == _events(want), name
    # A FIFO as config/timermetrics: refused naming the repair, which takes its place too.
    from clirun import in_process

    store = tmp_path / "fifo-timermetrics"
    shutil.copytree(reference, store)
    _fifo(store / "config" / "timermetrics")
    code, _, err = in_process(["run", store, "--dry-run", *now])
    assert code == 2 and "found a FIFO" in err and f"rmqdelay timer repair {store}" in err, err
    assert in_process(["timer", "repair", store, "--execute", *now])[0] == 0
    assert (store / "config" / "timermetrics").is_file()
    code, out, err = in_process(["run", store, "--dry-run", "--json", *now])
    assert code == 0 and [e for e in map(json.loads, out.splitlines()) if e["event"] != "timerNotice"] == _events(want)
    # A directory cannot be renamed over: both say to move it first.
    store = tmp_path / "dir"
    shutil.copytree(reference, store)
    (store / "timerwheel").unlink()
    (store / "timerwheel").mkdir()
    assert_one_line(console("run", store, "--dry-run", *now), 2, "found a directory: move it out of the store, then run")
    assert_one_line(console("timer", "repair", store, "--execute", *now), 2,
                    "found a directory: move it out of the store, then run")


# -- reads while a writer appends --------------------------------------------------------------

_SLOT_WRITER = """
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
print("writing", flush=True)
while True:  # what a run or a broker does to the wheel: slots rewritten in place, again and again
    for index in range(int(sys.argv[2]), int(sys.argv[2]) + 4096, 64):
        os.pwrite(fd, b"\\x02" * 32 * 32, index * 32)
        os.pwrite(fd, bytes(32 * 32), index * 32)
"""


def test_the_wheel_read_while_a_writer_rewrites_its_slots(tmp_path, sample_store):
    # numpy's nonzero over a shared map of the wheel counts, then fills: a slot written between
    # the two was "RuntimeError: number of non-zero array elements changed". A reader now
    # works on its own copy of the wheel's data: one state, whatever the writer does.
    from rmqdelay.timer.wheel import TimerWheel

    store = tmp_path / "s"
    shutil.copytree(sample_store("timer-partial"), store)
    wheel = store / "timerwheel"
    with TimerWheel(wheel, 1000) as w:
        before = {int(i) for i in w.non_empty()["index"]}
    spare = max(before) + 8192  # slots the sample does not use
    writer = subprocess.Popen([sys.executable, "-c", _SLOT_WRITER, str(wheel), str(spare)], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        for _ in range(20):
            with TimerWheel(wheel, 1000) as w:
                seen = {int(i) for i in w.non_empty()["index"]}
            assert before <= seen and all(spare <= i < spare + 4096 for i in seen - before)
        proc = console("inspect", "timer", store, "--json", "--now", "2026-11-23T17:00:00Z")
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    finally:
        writer.kill()
        writer.wait()


_LOG_WRITER = """
import sys
from rmqdelay.send import SendRequest, send_messages
print("writing", flush=True)
while True:  # what a producer does through a broker: records appended, then their units
    send_messages(sys.argv[1], SendRequest(topic="TopicTest", body=b"y" * 300, count=50),
                  commitlog_file_size=262144, cq_file_size=1280)
"""


def test_reads_while_a_writer_appends_end_where_they_find_the_end(tmp_path, sample_store):
    # A record half copied at the end of the log was "a properties length ... found 0" (run
    # --dry-run, exit 2), a message whose unit was not written yet "undispatched" (verify): a
    # record cut at the end of the data is the end, and a live store's queues are checked as
    # far as they were read. Once the writer stops, the store has no problem.
    from clirun import in_process

    store = tmp_path / "s"
    shutil.copytree(sample_store("timer-partial"), store)
    now = ["--now", "2026-11-23T17:00:00Z"]
    reads = [["run", store, "--dry-run", "--json", *now], ["inspect", "timer", store, "--units", "--json", *now],
             ["analyze", "lateness", store, "--json", *now], ["inspect", "commitlog", store, "--verify", "--json"]]
    writer = subprocess.Popen([sys.executable, "-c", _LOG_WRITER, str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        for _ in range(3):
            for args in reads:
                code, out, err = in_process(args)
                assert code == 0, (args[:2], out[:1500])
                if "--verify" in args:
                    assert not [p for p in problems_of(out) if not p.get("advisory")], out[-2000:]
    finally:
        writer.kill()
        writer.wait()
    code, out, err = in_process(["inspect", "commitlog", store, "--verify", "--json"])
    assert code == 0 and not problems_of(out), err
