"""Faults while writing: I/O errors, full disks, short writes, fd limits, deleted consume
queues, foreign corruption, special files. Each one is real where it can be (RLIMIT_FSIZE
and RLIMIT_NOFILE in the child, a small tmpfs, chattr +i, FIFOs, directories where files
belong, kill -9); the rest comes from tests/support/faultinject.py, which makes chosen system
calls fail in the rmqdelay process. For every fault: a non-zero exit with one line and no
traceback; the store still passes `inspect commitlog --verify`; once the fault is gone a
rerun delivers every delay message exactly once; no byte of the records there before
changed. Rows are those of issue 10 (docs in the module of each test)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, in_process, problems_of
from conftest import SAMPLES
from rmqdelay.formats.commitlog import Blank

from rmqdelay.schedule.audit import check_store
from rmqdelay.schedule.offsets import read_scheduler_state
from rmqdelay.store import Store
from rmqdelay.store.verify import verify_store
from rmqdelay.store.writer import NewMessage, StoreWriter

FAULTINJECT = str(Path(__file__).resolve().parent / "support" / "faultinject.py")
FAR = "4102444800000"  # 2100-01-01: every delay message is due
ROOT = os.geteuid() == 0

pytestmark = pytest.mark.slow  # child processes under faults and limits


@dataclass
class Result:
    code: int
    out: str
    err: str


def cli(*args, faults: list[dict] | None = None, rlimits: dict[int, int] | None = None,
        timeout: float | None = None) -> Result:
    """``rmqdelay ARGS``; with injected faults, resource limits or a time limit in a child
    process (the faults and limits are the process's), otherwise in this process."""
    args = [str(a) for a in args]
    if not faults and not rlimits and timeout is None:
        return Result(*in_process(args))
    cmd = [sys.executable, FAULTINJECT, json.dumps(faults), *args] if faults else [CONSOLE_SCRIPT, *args]

    def limits() -> None:
        for which, value in (rlimits or {}).items():
            resource.setrlimit(which, (value, value))

    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout or 180,
                          preexec_fn=limits if rlimits else None)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run(store: Path, *extra, **kw) -> Result:
    return cli("run", store, "--until-empty", "--now", FAR, "--json", *extra, **kw)


def assert_one_line(result: Result, *needles: str, code: int = 2) -> str:
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert result.code == code, result.err
    assert "Traceback" not in result.err, result.err
    assert len(lines) == 1 and lines[0].startswith("rmqdelay: "), result.err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def log_data(store: Path) -> bytes:
    """The commit log's records, every byte up to the end of its data."""
    with Store(store) as s:
        end = s.end_offset()
        return b"".join(mf.path.read_bytes()[:max(0, min(mf.size, end - mf.start))] for mf in s.commitlog.files)


def assert_records_kept(store: Path, before: bytes) -> None:
    assert log_data(store)[:len(before)] == before


def assert_verified(store: Path, *allowed: str) -> None:
    result = cli("inspect", "commitlog", store, "--verify", "--json")
    kinds = [p["kind"] for p in problems_of(result.out)]
    assert sorted(kinds) == sorted(allowed) and result.code == (1 if allowed else 0), result.out + result.err


def assert_exactly_once(store: Path, *allowed: str) -> Result:
    """A rerun with the fault gone: exit 0, then every delay message delivered once."""
    again = run(store)
    assert again.code == 0, again.err
    check = check_store(store)
    problems = [p for p in check.problems if not any(a in p for a in allowed)]
    assert problems == [] and check.delivered == check.scheduled, problems[:5]
    return again


def copy_sample(tmp_path: Path, name: str = "delay-partial", where: Path | None = None) -> Path:
    dest = (where or tmp_path) / name
    shutil.copytree(SAMPLES / name / "store", dest)
    return dest


def next_commitlog_file(store: Path) -> Path:
    files = sorted((store / "commitlog").iterdir())
    return store / "commitlog" / f"{int(files[-1].name) + files[-1].stat().st_size:020d}"


# -- small file systems ----------------------------------------------------------------------
@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the given size (KiB), unmounted afterwards; skipped where mounting is not
    possible (not root, no CAP_SYS_ADMIN)."""
    mounts: list[Path] = []

    def make(size_kb: int) -> Path:
        if not ROOT:
            pytest.skip("mounting a small tmpfs needs root")
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(where)
        return where

    yield make
    for where in reversed(mounts):
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave_kb: int) -> Path:
    """Take all the free space of ``disk`` but ``leave_kb``."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize - leave_kb * 1024
    filler = disk / "filler"
    with open(filler, "wb") as fh:
        chunk = b"\xff" * (1 << 20)
        while free > 0:
            try:
                free -= fh.write(chunk[:min(len(chunk), free)])
            except OSError:
                break
    return filler


# -- row 1: a write error on the commit log -------------------------------------------------
def test_a_directory_where_the_next_commit_log_file_goes_stops_the_run_and_publishes_nothing_past_it(tmp_path):
    store = copy_sample(tmp_path)
    before = log_data(store)
    blocker = next_commitlog_file(store)
    blocker.mkdir()
    result = run(store)
    assert_one_line(result, str(blocker), "Is a directory")
    state = read_scheduler_state(store)
    with Store(store) as s:
        assert state.commitLogOffset <= s.end_offset()
    assert (store / "abort").exists()
    assert_verified(store)
    assert_records_kept(store, before)
    blocker.rmdir()
    assert_exactly_once(store)
    assert not (store / "abort").exists()  # the rerun recovered and closed cleanly


def test_a_commit_log_file_that_may_not_be_written_stops_the_run(tmp_path):
    store = copy_sample(tmp_path)
    before = log_data(store)
    last = sorted((store / "commitlog").iterdir())[-1]
    if subprocess.run(["chattr", "+i", str(last)], capture_output=True).returncode:
        pytest.skip("chattr +i is not available here")
    try:
        assert_one_line(run(store), str(last), "Operation not permitted")
        assert_verified(store)
    finally:
        subprocess.run(["chattr", "-i", str(last)], capture_output=True)
    assert_records_kept(store, before)
    assert_exactly_once(store)


# -- row 1b: a file size limit (prlimit --fsize): short writes ------------------------------------
def test_a_file_size_limit_is_a_short_write_and_an_error_not_lost_messages(tmp_path):
    store = copy_sample(tmp_path)
    before = log_data(store)
    result = run(store, "--levels", "4", rlimits={resource.RLIMIT_FSIZE: 200_000})
    assert_one_line(result, "File too large")
    assert_verified(store)
    assert_records_kept(store, before)
    assert_exactly_once(store)


@pytest.mark.parametrize("short", [1, 4096, 100_001])
def test_a_short_write_then_a_full_disk_on_the_commit_log(tmp_path, short):
    store = copy_sample(tmp_path)
    before = log_data(store)
    faults = [{"op": "pwrite", "path": "/commitlog/", "nth": 2, "short": short, "errno": "ENOSPC"}]
    result = run(store, "--batch-size", "64", faults=faults)
    assert_one_line(result, "/commitlog/", "No space left on device", f"wrote {short} of")
    assert_verified(store)
    assert_records_kept(store, before)
    assert_exactly_once(store)


def test_units_past_the_log_are_all_dropped_however_many(tmp_path):
    """Units written for records that never reached the disk (the old closing flush, a power
    loss): recovery drops every one of them, not only those among a queue's last 4096."""
    store = tmp_path / "store"
    with StoreWriter(store, create=True, commitlog_file_size=1 << 20, cq_file_size=64 * 1024 * 20) as w:
        for i in range(12_000):
            w.put(NewMessage(topic="Busy", queueId=0, body=b"x" * 40, properties={"UNIQ_KEY": f"U{i}"}))
        keep = w.next_queue_offset("Busy", 0) - 10_000
    with Store(store) as s:
        unit = s.consume_queue("Busy", 0).unit(keep)
        mf = s.commitlog.files[s.commitlog.file_index(unit.commitLogOffset)]
        later = [f for f in s.commitlog.files if f.start > mf.start]
    # The records from unit `keep` on are lost (zeros), their units are not.
    with open(mf.path, "r+b") as fh:
        fh.seek(unit.commitLogOffset - mf.start)
        fh.write(bytes(mf.end - unit.commitLogOffset))
    for f in later:
        f.path.unlink()
    with StoreWriter(store) as w:
        assert w.recovery.truncated_units == 10_000
        assert w.next_queue_offset("Busy", 0) == keep
    with Store(store) as s:
        assert verify_store(s) == []


# -- row 2: consume queues deleted, a flipped byte, then a write -----------------------------
def flip_body_byte(store: Path) -> int:
    """Flip a byte in the body of an early record; returns its commit log offset."""
    with Store(store) as s:
        for msg in s.commitlog.records():
            if len(msg.body) > 10:
                break
        tail = 1 + len(msg.topic.encode()) + 2 + len(msg.propertiesRaw.encode())
        at = msg.commitLogOffset + msg.storeSize - tail - 5
        path = s.commitlog.files[0].path
    with open(path, "r+b") as fh:
        fh.seek(at)
        byte = fh.read(1)
        fh.seek(at)
        fh.write(bytes([byte[0] ^ 0xFF]))
    return msg.commitLogOffset


@pytest.mark.parametrize("writer", ["send", "run-once"])
def test_deleted_consume_queues_are_rebuilt_from_the_whole_log_as_the_broker_would(tmp_path, writer):
    original = SAMPLES / "delay-fresh" / "store"
    store = copy_sample(tmp_path, "delay-fresh")
    shutil.rmtree(store / "consumequeue")
    flip_body_byte(store)
    files = sorted(p.name for p in (store / "commitlog").iterdir())
    before = log_data(store)
    if writer == "send":
        result = cli("send", store, "--topic", "TopicTest", "--body", "x")
        assert result.code == 0, result.err
        assert "body CRC mismatch; dispatched all the same" in result.err
        assert "queueOffset 73 " in result.out  # after the 73 messages TopicTest/0 already holds
    else:
        result = cli("run", store, "--once", "--now", FAR, "--json")
        assert result.code == 0, result.err
    assert set(files) <= {p.name for p in (store / "commitlog").iterdir()}  # every file kept
    assert_records_kept(store, before)
    # Every rebuilt queue holds the units the real broker wrote (in files of the default
    # size: the store's own size is broker config rmqdelay cannot see once no queue is left).
    with Store(original) as old, Store(store) as new:
        for topic, ids in old.topics().items():
            for qid in ids:
                want = old.consume_queue(topic, qid).units()
                assert (new.consume_queue(topic, qid).units(0, len(want)) == want).all(), (topic, qid)
    assert_verified(store, "crc")
    assert_exactly_once(store, "bodyCRC")


def test_a_record_that_cannot_be_framed_before_the_end_is_refused_and_nothing_changes(tmp_path):
    store = copy_sample(tmp_path, "delay-fresh")
    shutil.rmtree(store / "consumequeue")
    first = store / "commitlog" / "00000000000000000000"
    with open(first, "r+b") as fh:
        fh.seek(425 + 4)
        fh.write(b"\0\0\0\1")  # the magic code of the second record
    snapshot = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    result = cli("send", store, "--topic", "TopicTest", "--body", "x")
    assert_one_line(result, str(first), "at byte 429", "not a torn tail", "changed nothing")
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == snapshot


def test_a_torn_record_at_the_end_of_the_last_file_is_wiped_and_the_log_goes_on(tmp_path):
    store = copy_sample(tmp_path)
    before = log_data(store)
    last = sorted((store / "commitlog").iterdir())[-1]
    end = len(before)
    with open(last, "r+b") as fh:  # the first 300 bytes of a 425-byte record
        fh.seek(end - int(last.name))
        fh.write(struct.pack(">ii", 425, -626843481) + b"\x07" * 292)
    result = cli("send", store, "--topic", "TopicTest", "--body", "x")
    assert result.code == 0, result.err
    assert "300 bytes of a torn record after the last whole one zeroed" in result.err
    assert f"commitLogOffset {end} " in result.out
    assert_records_kept(store, before)
    assert_verified(store)


# -- row 3: a commit log file unreadable for a while ------------------------------------------
@pytest.mark.parametrize("errno", ["EACCES", "EIO", "EMFILE"])
def test_a_commit_log_file_that_cannot_be_read_stops_the_run_instead_of_skipping(tmp_path, errno):
    store = copy_sample(tmp_path)
    before = log_data(store)
    victim = "/commitlog/00000000000000786432"
    result = run(store, faults=[{"op": "open", "path": victim, "mode": "read", "errno": errno}])
    assert_one_line(result, victim, "a readable file")
    assert '"skipped"' not in result.out
    assert_verified(store)
    assert_records_kept(store, before)
    assert_exactly_once(store)


# -- row 4: kill -9, then a run with other delay levels -----------------------------------------
def kill_mid_delivery(store: Path, *extra: str) -> None:
    out = store.parent / "run.out"
    with open(out, "wb") as fh:
        proc = subprocess.Popen([CONSOLE_SCRIPT, "run", str(store), "--until-empty", "--now", FAR, "--json",
                                 "--batch-size", "8", "--flush-interval", "10", *extra], stdout=fh,
                                stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if out.read_bytes().count(b'"delivered"') >= 300:
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, out.read_text()[-2000:]


@pytest.mark.parametrize("other", [["--message-delay-level", "1s 5s"], ["--broker-config", "CONF"]])
def test_a_replay_under_other_delay_levels_is_exact(tmp_path, other):
    store = copy_sample(tmp_path, "delay-fresh")
    if other[0] == "--broker-config":
        conf = tmp_path / "broker.conf"
        conf.write_text("messageDelayLevel=2s 4s 6s 8s 10s\n")
        other = ["--broker-config", str(conf)]
    kill_mid_delivery(store)
    assert (store / "abort").exists()
    partial = run(store, *other)
    assert partial.code == 0, partial.err
    assert_exactly_once(store)
    assert not (store / "abort").exists()


# -- row 5: more queues than file descriptors ---------------------------------------------------
def wide_store(path: Path, queues: int) -> None:
    born = 1_700_000_000_000
    with StoreWriter(path, create=True, commitlog_file_size=1 << 20, cq_file_size=64 * 20,
                     clock=lambda: born) as w:
        for i in range(queues):
            w.put(NewMessage(topic="Wide", queueId=i, body=b"w", bornTimestamp=born,
                             properties={"UNIQ_KEY": f"W{i:05d}", "DELAY": "1"}))


def test_more_queues_than_the_fd_limit_drain_and_verify(tmp_path):
    """Five times more queues than `ulimit -n`: the writer keeps a quarter of the limit open."""
    store = tmp_path / "wide"
    wide_store(store, 320)
    limit = {resource.RLIMIT_NOFILE: 64}
    result = run(store, rlimits=limit)
    assert result.code == 0, result.err
    assert result.out.count('"event":"delivered"') == 320
    assert cli("inspect", "store", store, "--json", rlimits=limit).code == 0
    verify = cli("inspect", "commitlog", store, "--verify", rlimits=limit)
    assert verify.code == 0 and "321 consume queue(s)" in verify.out, verify.out + verify.err
    assert_exactly_once(store)


# -- row 6: offsets reset on a full disk --------------------------------------------------------
def config_files(store: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (store / "config").iterdir()}


def test_offsets_reset_on_a_full_disk_publishes_neither_file(tmp_path, small_disk):
    disk = small_disk(6 * 1024)
    store = copy_sample(tmp_path, where=disk)
    assert run(store, "--levels", "4").code == 0  # the scheduler file exists now
    before = config_files(store)
    filler = fill(disk, 0)
    result = cli("offsets", "reset", store, "--all-levels", "--to-earliest", "--execute")
    assert_one_line(result, "No space left on device")
    assert config_files(store) == before  # no half-published table, no .tmp left
    filler.unlink()
    assert_exactly_once(store)


def test_offsets_reset_failing_on_the_second_file_publishes_neither(tmp_path):
    store = copy_sample(tmp_path)
    assert run(store, "--levels", "4").code == 0
    before = config_files(store)
    result = cli("offsets", "reset", store, "--all-levels", "--to-earliest", "--execute",
                 faults=[{"op": "pwrite", "path": "delayOffset.json.tmp", "errno": "ENOSPC"}])
    assert_one_line(result, "delayOffset.json.tmp", "No space left on device")
    assert config_files(store) == before
    assert_exactly_once(store)


# -- row 7 / 8: a full disk under run and send --------------------------------------------------
@pytest.mark.parametrize("free_kb", [8, 64, 200])
def test_a_full_disk_during_run_is_one_line_not_sigbus(tmp_path, small_disk, free_kb):
    disk = small_disk(8 * 1024)
    store = copy_sample(tmp_path, where=disk)
    before = log_data(store)
    filler = fill(disk, free_kb)
    result = run(store)
    assert_one_line(result, "No space left on device")
    # Reading a store on a full tmpfs maps its sparse files: no SIGBUS either.
    verify = cli("inspect", "commitlog", store, "--verify")
    assert verify.code == 0, verify.out + verify.err
    assert cli("inspect", "delay", store).code == 0
    filler.unlink()
    assert_records_kept(store, before)
    assert_exactly_once(store)


@pytest.mark.parametrize("free_kb", [8, 300])
def test_send_on_a_full_disk_writes_no_unit_for_a_record_it_could_not_write(tmp_path, small_disk, free_kb):
    disk = small_disk(8 * 1024)
    store = copy_sample(tmp_path, where=disk)
    before = log_data(store)
    filler = fill(disk, free_kb)
    result = cli("send", store, "--topic", "TopicTest", "--delay-level", "3", "--count", "3000",
                 "--body", "b" * 200)
    line = assert_one_line(result, "No space left on device", "of 3000 messages were stored before it")
    stored = int(line.split("; ")[-1].split(" of ")[0])
    assert (store / "abort").exists()
    assert_verified(store)  # no unit past the log
    filler.unlink()
    assert_records_kept(store, before)
    assert_exactly_once(store)
    with Store(store) as s:
        assert s.schedule_queue(3).max_offset == 83 + stored
    assert not (store / "abort").exists()


def test_a_read_only_file_system_is_one_line_for_every_writer(tmp_path, small_disk):
    disk = small_disk(8 * 1024)
    store = copy_sample(tmp_path, where=disk)
    done = subprocess.run(["mount", "-o", "remount,ro", str(disk)], capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot remount read-only: {done.stderr.strip()}")
    assert_one_line(run(store), "Read-only file system")
    assert_one_line(cli("send", store, "--topic", "TopicTest", "--body", "x"), "Read-only file system")
    assert_one_line(cli("offsets", "reset", store, "--levels", "4", "--to-latest", "--execute"),
                    "Read-only file system")
    assert cli("inspect", "store", store).code == 0
    subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
    assert_exactly_once(store)


@pytest.mark.parametrize("fault", [
    {"op": "open", "path": "/consumequeue/", "mode": "create", "errno": "EIO"},
    {"op": "pwrite", "path": "/consumequeue/", "nth": 5, "count": 1, "errno": "EIO"},
    {"op": "fsync", "path": "/commitlog/", "errno": "EIO"},
    {"op": "ftruncate", "path": "/commitlog/", "errno": "EFBIG"},
    {"op": "pwrite", "path": "rmqdelay.scheduler.json.tmp", "nth": 2, "errno": "ENOSPC"},
    {"op": "pwrite", "path": "/checkpoint", "errno": "EIO"},
], ids=["create-cq", "write-cq", "fsync-log", "grow-log", "publish", "checkpoint"])
def test_every_failing_system_call_of_a_run_is_one_line_and_a_clean_rerun(tmp_path, fault):
    store = copy_sample(tmp_path)
    before = log_data(store)
    assert_one_line(run(store, faults=[fault]))
    assert_verified(store)
    assert_records_kept(store, before)
    assert_exactly_once(store)


# -- row 9: a schedule record the broker cannot dispatch --------------------------------------
def test_an_undispatched_schedule_record_with_a_bad_delay_is_reported_not_a_crash_loop(tmp_path):
    store = copy_sample(tmp_path, "delay-fresh")
    with StoreWriter(store) as w:
        bad = w.put(NewMessage(topic="TopicTest", queueId=1, body=b"late", properties={"DELAY": "18"}))
    path = store / "commitlog" / sorted(p.name for p in (store / "commitlog").iterdir())[-1]
    data = bytearray(path.read_bytes())
    at = bad.commitLogOffset - int(path.name)
    record = data[at:at + bad.storeSize]
    value = record.index(b"DELAY\x0118") + 6
    record[value:value + 2] = b"ab"
    data[at:at + bad.storeSize] = record
    path.write_bytes(bytes(data))
    at = bad.queueOffset * 20
    cq = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "17" / f"{at - at % 1280:020d}"
    with open(cq, "r+b") as fh:  # as if the record had never been dispatched
        fh.seek(at % 1280)
        fh.write(bytes(20))
    before = log_data(store)
    first = cli("send", store, "--topic", "TopicTest", "--body", "x")
    assert first.code == 0, first.err
    assert "DELAY 'ab' is not a number; not dispatched, as the broker does not dispatch it" in first.err
    again = cli("send", store, "--topic", "TopicTest", "--body", "x")  # no crash loop, no repeat
    assert again.code == 0 and again.err == "", again.err
    assert_records_kept(store, before)
    assert_verified(store, "delay")
    assert_exactly_once(store, "DELAY the broker can read")
    assert not (store / "abort").exists()


def test_a_bad_delay_property_is_refused_at_send_as_the_broker_refuses_it(tmp_path):
    store = copy_sample(tmp_path)
    before = log_data(store)
    result = cli("send", store, "--topic", "TopicTest", "--property", "DELAY=abc")
    assert_one_line(result, "DELAY='abc'", "not a number")
    assert log_data(store) == before


# -- row 10: abort after a kill -9 -------------------------------------------------------------
def test_a_clean_run_after_a_kill_removes_the_abort_rmqdelay_left_but_not_the_brokers(tmp_path):
    store = copy_sample(tmp_path, "delay-fresh")
    kill_mid_delivery(store)
    mark = (store / "abort").read_bytes()
    assert mark.startswith(b"rmqdelay ")
    again = assert_exactly_once(store)
    assert not (store / "abort").exists(), (mark, (store / "abort").read_bytes(), again.err[-2000:],
                                            (store.parent / "run.out").read_text()[-1000:])
    assert json.loads(cli("inspect", "store", store, "--json").out)["abortPresent"] is False
    (store / "abort").touch()  # what a broker that did not shut down cleanly leaves
    assert cli("send", store, "--topic", "TopicTest", "--body", "x").code == 0
    assert (store / "abort").exists() and (store / "abort").read_bytes() == b""


@pytest.mark.parametrize("where", ["first-fsync-of-the-store-directory", "abort-written-not-linked"])
def test_a_kill_while_the_abort_is_made_never_leaves_an_abort_without_a_mark(tmp_path, where):
    """An empty abort is what a broker that crashed leaves, and it is never taken as
    rmqdelay's. The abort is made with its mark in it (written under another name, then
    linked), so a kill at any point leaves either no abort or one whose mark the rerun
    proves its own; the rerun delivers everything once and leaves no abort behind."""
    store = copy_sample(tmp_path, "delay-fresh")
    path = f"{store.name}$" if where.startswith("first") else "abort.rmqdelay-new"
    killed = run(store, faults=[{"op": "fsync", "path": path, "kill": True}])
    assert killed.code == -signal.SIGKILL, killed.err[-2000:]
    if (store / "abort").exists():
        assert (store / "abort").read_bytes().startswith(b"rmqdelay "), (store / "abort").read_bytes()
    assert_exactly_once(store)
    assert not (store / "abort").exists()
    assert not (store / "abort.rmqdelay-new").exists()


def test_a_full_disk_while_the_abort_is_made_is_one_line_and_changes_nothing(tmp_path):
    store = copy_sample(tmp_path, "delay-fresh")
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    result = run(store, faults=[{"op": "pwrite", "path": "abort.rmqdelay-new", "errno": "ENOSPC"}])
    assert_one_line(result, "abort.rmqdelay-new", "No space left on device")
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before


BLANK_MAGIC_HEX = "cbd43194"  # the write that ends a commit log file holds a BLANK head


def kill_after_a_file_is_ended(store: Path) -> tuple[bytes, Path]:
    """A run SIGKILLed right after the write that ends the last commit log file with a BLANK
    record (the next file not started yet): its abort mark and that file."""
    faults = [{"op": "pwrite", "path": "/commitlog/", "contains_hex": BLANK_MAGIC_HEX, "kill": True}]
    killed = run(store, "--batch-size", "8", faults=faults)
    assert killed.code == -signal.SIGKILL, killed.err[-2000:]
    last = sorted((store / "commitlog").iterdir())[-1]
    with Store(store) as s:
        assert s.end_offset() == int(last.name) + last.stat().st_size  # the log ends with that BLANK
    return (store / "abort").read_bytes(), last


def test_a_kill_right_after_a_commit_log_file_is_ended_leaves_an_abort_the_rerun_removes(tmp_path):
    """The window of the rare failure above: a kill between the flush that ends a file with a
    BLANK record and the next flush. Recovery takes the log to end at the end of that file;
    the mark must say the writer got that far, or the rerun cannot prove the abort its own."""
    store = copy_sample(tmp_path, "delay-fresh")
    mark, _ = kill_after_a_file_is_ended(store)
    assert mark.startswith(b"rmqdelay ")
    assert_exactly_once(store)
    assert not (store / "abort").exists(), mark


@pytest.mark.parametrize("short_by", [0, 1, 8])
def test_an_abort_marked_up_to_the_blank_head_only_is_taken_only_when_the_mark_covers_that_head(tmp_path, short_by):
    """What a writer before the fix marked for that flush: its bytes, the BLANK's 8-byte head
    last. Such a mark still proves the abort rmqdelay's own (the log ends at the end of the
    file that BLANK closes); a mark short of the BLANK's head proves nothing and is kept."""
    store = copy_sample(tmp_path, "delay-fresh")
    _, last = kill_after_a_file_is_ended(store)
    with Store(store) as s:
        blank = [r for r in s.commitlog.records(int(last.name), include_blanks=True) if isinstance(r, Blank)][-1]
    mark = b"rmqdelay %020d\n" % (blank.physicalOffset + 8 - short_by)
    (store / "abort").write_bytes(mark)
    assert_exactly_once(store)
    assert (store / "abort").exists() == bool(short_by)
    if short_by:
        assert (store / "abort").read_bytes() == mark  # not ours to touch: as it was


# -- row 11: delayOffset.json unreadable, malformed, a directory -----------------------------
def break_delay_offsets(store: Path, how: str) -> None:
    path = store / "config" / "delayOffset.json"
    if how == "malformed":
        path.write_text('{"offsetTable":{1:83,2:')
    elif how == "directory":
        path.unlink()
        path.mkdir()


@pytest.mark.parametrize("how", ["malformed", "directory", "unreadable"])
def test_a_broken_delay_offset_file_is_refused_by_run_and_named_by_reads(tmp_path, how):
    """run refuses what it would have to guess; reads take the .bak as the broker does and
    say so in one line, except for a directory in the file's place, which they refuse."""
    store = copy_sample(tmp_path)
    good = (store / "config" / "delayOffset.json").read_bytes()
    break_delay_offsets(store, how)
    before = log_data(store)
    faults = [{"op": "open", "path": "config/delayOffset.json$", "mode": "read", "errno": "EIO"}] \
        if how == "unreadable" else None
    result = run(store, faults=faults)
    if how == "directory":
        assert_one_line(result, "delayOffset.json", "a regular file, found a directory")
    else:
        assert_one_line(result, "delayOffset.json", "the broker would fall back to delayOffset.json.bak")
    assert log_data(store) == before  # nothing delivered
    reads = cli("inspect", "delay", store, "--now", FAR, faults=faults)
    if how == "directory":
        assert_one_line(reads, "delayOffset.json", "a regular file, found a directory")
    else:
        assert reads.code == 0, reads.err
        assert reads.err.startswith("rmqdelay: warning: ") and "read delayOffset.json.bak instead" in reads.err
        assert len(reads.err.splitlines()) == 1
    path = store / "config" / "delayOffset.json"
    if path.is_dir():
        path.rmdir()
    path.write_bytes(good)
    assert_verified(store)
    assert_exactly_once(store)


# -- row 12: FIFOs where files belong -----------------------------------------------------------
# What reads each file: these must refuse a FIFO at once (a reader of a FIFO waits forever).
READERS = {
    "config/delayOffset.json": [("inspect", "store"), ("inspect", "delay"), ("offsets", "show"),
                                ("run", "--dry-run", "--now", FAR), ("run", "--once", "--now", FAR)],
    "checkpoint": [("inspect", "store"), ("run", "--once", "--now", FAR), ("send", "--topic", "T", "--body", "x")],
    "lock": [("inspect", "store"), ("run", "--once", "--now", FAR), ("send", "--topic", "T", "--body", "x")],
}


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_fifo_where_a_file_belongs_is_refused_at_once(tmp_path, name):
    store = copy_sample(tmp_path)
    path = store / name
    saved = path.read_bytes() if path.exists() else None
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    before = log_data(store)
    for command in READERS[name]:
        args = [*command[:1], *command[1:2], store, *command[2:]] if command[0] in ("inspect", "offsets") \
            else [command[0], store, *command[1:]]
        result = cli(*args, timeout=30)
        if command[:2] == ("inspect", "store") and result.code == 1:  # a problem it lists among others
            assert f"{path}: a regular file, found a FIFO" in result.out, result.out
            continue
        assert_one_line(result, str(path), "found a FIFO")
    assert log_data(store) == before
    path.unlink()
    if saved is not None:
        path.write_bytes(saved)
    assert_exactly_once(store)


@pytest.mark.clock  # timer-fresh's times (tests/wallclock.py)
@pytest.mark.parametrize("free_kb", [8, 300])
def test_timer_send_on_a_full_disk_leaves_no_unit_past_the_log_and_a_clean_timer_store(tmp_path, small_disk,
                                                                                        free_kb):
    from rmqdelay.samples.pack import unpack

    disk = small_disk(12 * 1024)
    store = disk / "timer-fresh"
    unpack(SAMPLES / "timer-fresh" / "store.tar.xz", store)
    before = log_data(store)
    with Store(store) as s:
        parked_before = s.consume_queue("rmq_sys_wheel_timer", 0).max_offset
    filler = fill(disk, free_kb)
    result = cli("send", store, "--topic", "TimerTopic", "--delay-sec", "3600", "--count", "3000",
                 "--body", "b" * 200)
    line = assert_one_line(result, "No space left on device", "of 3000 messages were stored before it")
    stored = int(line.split("; ")[-1].split(" of ")[0])
    assert_verified(store)  # no unit past the log
    filler.unlink()
    assert_records_kept(store, before)
    timer = cli("inspect", "timer", store, "--verify")
    assert timer.code == 0, timer.out + timer.err
    # The next writer's recovery finishes what the kill-like stop left; every stored message is
    # parked once in rmq_sys_wheel_timer, none twice.
    again = cli("send", store, "--topic", "TimerTopic", "--delay-sec", "3600", "--body", "x")
    assert again.code == 0, again.err
    with Store(store) as s:
        assert s.consume_queue("rmq_sys_wheel_timer", 0).max_offset == parked_before + stored + 1
    assert_verified(store)
    assert not (store / "abort").exists()
