"""Damage that used to give wrong answers without an error: a scan that stops early says where
and why and exits non-zero; a gap, a file of the wrong size or a stray file is reported by
--verify (which goes on) and refused in one line by the rest; a store a broker is writing
is judged as the broker would judge it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from clirun import CONSOLE_SCRIPT, assert_one_line, broker_holding_lock, console, problems_of
from conftest import load_expected
from test_bad_input import first_log, patch, snapshot

from rmqdelay.store.lock import lock_holder
from rmqdelay.store.writer import NewMessage, StoreWriter

EXPECTED = load_expected("delay-partial")
FIRST = first_log(Path("x")).name
# 4,096 zero bytes at byte 400 of the first commit log file: the tail of the first record and
# the head of the second (at 425) become zeros, so a scan finds "the end of the data" there.
HOLE_AT = 425


def read_only(*args, **kwargs):
    """The console script running a command that must not change the store: the directory
    holding it is the same, byte for byte, after as before."""
    store = next(a for a in args if isinstance(a, Path))
    before = snapshot(store.parent)
    proc = console(*args, **kwargs)
    assert snapshot(store.parent) == before, args
    return proc


def punch_hole(store: Path) -> Path:
    patch(first_log(store), 400, bytes(4096))
    return first_log(store)


def test_a_scan_stopping_at_a_hole_says_so(store_copy):
    store = store_copy("delay-partial")
    log = punch_hole(store)
    before = snapshot(store.parent)
    listing = console("inspect", "commitlog", store, "--json")
    assert_one_line(listing, 2, f"{log} at byte {HOLE_AT}", "found zeros with more data after them",
                    "at byte 4496 of this file")
    assert len(listing.stdout.splitlines()) == 1  # what was read before the hole, then the error
    # Through the index, a key after the hole is found without reading the damaged bytes.
    key = console("inspect", "message", store, "--key", "ORDER_50", "--json")  # at 42721, after the hole
    assert key.returncode == 0 and [m["commitLogOffset"] for m in map(json.loads, key.stdout.splitlines())] == \
        [42721, 1958683]  # the parked copy and the delivered one
    lateness = console("analyze", "lateness", store)
    assert_one_line(lateness, 2, f"{log} at byte {HOLE_AT}")
    kept = console("analyze", "lateness", store, "--keep-going", "--json")
    assert kept.returncode == 1 and "Traceback" not in kept.stderr
    assert kept.stderr.splitlines()[0].startswith("rmqdelay: skipped ")
    assert f"{log} at byte {HOLE_AT}: " in kept.stderr
    verify = console("inspect", "commitlog", store, "--verify", "--json")
    assert verify.returncode == 1
    assert snapshot(store.parent) == before
    # Without an index, the scan stops at the hole and says so.
    bare = store.parent / "no-index"
    shutil.copytree(store, bare)
    shutil.rmtree(bare / "index")
    scanned = console("inspect", "message", bare, "--key", "ORDER_50")
    assert_one_line(scanned, 2, f"{first_log(bare)} at byte {HOLE_AT}")


def test_analyze_on_spark_refuses_bad_schedule_data_before_starting(store_copy):
    # Read on the driver before any task (and before the JVM starts): one line, no Spark noise.
    store = store_copy("delay-partial")
    cq = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "3" / "00000000000000001280"
    patch(cq, 17 * 20 + 12, ((1 << 63) - 1).to_bytes(8, "big"))
    assert_one_line(read_only("analyze", "lateness", store, "--spark"), 2, f"{cq} at byte {17 * 20 + 12}")
    patch(cq, 17 * 20 + 12, (1795349808000).to_bytes(8, "big"))
    main = store / "config" / "delayOffset.json"
    main.write_text('{"offsetTable":{1:9223372036854775808}}')
    (store / "config" / "delayOffset.json.bak").unlink()
    assert_one_line(read_only("analyze", "backlog", store, "--spark"), 2, f"{main} at byte 18", "Java long")


def test_data_in_the_next_file_after_the_end_of_the_data(store_copy):
    # The second file's BLANK is gone: its data ends in zeros while the third file holds data.
    store = store_copy("delay-partial")
    blank = [e for e in EXPECTED["blank"] if e["file"] == "00000000000000262144"][0]
    victim = store / "commitlog" / "00000000000000262144"
    patch(victim, blank["filePos"], bytes(8))
    proc = read_only("inspect", "commitlog", store, "--json")
    assert_one_line(proc, 2, f"{victim} at byte {blank['filePos']}", "in the next file 00000000000000524288")
    verify = read_only("inspect", "commitlog", store, "--verify", "--json")
    problems = problems_of(verify.stdout)
    assert verify.returncode == 1 and problems[0]["kind"] == "missingBlank" and problems[0]["file"] == str(victim)


def test_gap_in_the_commit_log(store_copy):
    store = store_copy("delay-partial")
    lost = store / "commitlog" / "00000000000000524288"
    lost.unlink()
    after = store / "commitlog" / "00000000000000786432"
    before = snapshot(store.parent)
    for args in (["inspect", "commitlog", store], ["inspect", "delay", store], ["analyze", "backlog", store]):
        assert_one_line(read_only(*args), 2, str(after), "bytes [524288, 786432) of the queue are missing")
    verify = read_only("inspect", "commitlog", store, "--verify", "--json")
    problems = problems_of(verify.stdout)
    assert verify.returncode == 1 and problems[0]["kind"] == "gap" and problems[0]["file"] == str(after)
    # ... and went on: the files after the gap were read and their messages checked.
    later = [m for m in EXPECTED["msg"] if m["commitLogOffset"] >= 786432]
    assert not [p for p in problems if p["kind"] == "undispatched" and p["physicalOffset"] >= 786432]
    assert later and {p["kind"] for p in problems[1:]} <= {"cqNoMessage"}
    assert snapshot(store.parent) == before


def test_gap_in_a_consume_queue(store_copy):
    store = store_copy("delay-partial")
    queue = store / "consumequeue" / "TopicTest" / "2"
    (queue / "00000000000000001280").unlink()
    assert_one_line(read_only("inspect", "cq", store, "--topic", "TopicTest", "--queue", 2), 2,
                    str(queue / "00000000000000002560"), "missing")
    verify = read_only("inspect", "commitlog", store, "--verify", "--json")
    problems = problems_of(verify.stdout)
    assert verify.returncode == 1 and problems[0]["kind"] == "gap"
    # The units of the file after the gap are checked at their own offsets: none is misjudged.
    assert not [p for p in problems if p["kind"] in ("cqQueueOffset", "cqNoMessage")]
    lost = [p for p in problems if p["kind"] == "undispatched"]
    assert lost and all("TopicTest/2 at queueOffset" in p["expected"] for p in lost)
    assert {int(p["expected"].split("queueOffset ")[1].split()[0]) for p in lost} == set(range(64, 128))


def test_stray_file_far_beyond_the_log(store_copy):
    store = store_copy("delay-partial")
    stray = store / "commitlog" / "00000000000099999999"
    shutil.copy(store / "commitlog" / "00000000000000262144", stray)
    assert_one_line(read_only("inspect", "delay", store), 2, str(stray), "a file lost, or a stray one")
    verify = read_only("inspect", "commitlog", store, "--verify", "--json")
    problems = problems_of(verify.stdout)
    assert verify.returncode == 1 and problems[0] == {
        "kind": "gap", "file": str(stray), "offset": None, "physicalOffset": None,
        "expected": "a file starting at 2359296, where 00000000000002097152 ends; found one starting at 99999999: "
                    "bytes [2359296, 99999999) of the queue are missing (a file lost, or a stray one)"}


def test_inspect_store_reports_a_short_last_file_and_checkpoint(store_copy):
    store = store_copy("delay-partial")
    last = sorted((store / "commitlog").iterdir())[-1]
    end = [e for e in EXPECTED["end"]][0]["filePos"]
    with open(last, "r+b") as fh:
        fh.truncate(end - 10)
    (store / "checkpoint").write_bytes(b"\0" * 10)
    proc = read_only("inspect", "store", store)
    assert proc.returncode == 1 and proc.stderr == ""
    assert "commit log: 9 file(s)" in proc.stdout and "SCHEDULE_TOPIC_XXXX" in proc.stdout  # the rest is shown
    assert f"fileSize: {last} at byte {end - 10}: a file of 262144 bytes" in proc.stdout
    assert f"endOfData: {last}" in proc.stdout
    assert f"checkpoint: {store / 'checkpoint'} at byte 10: 24 bytes of checkpoint timestamps" in proc.stdout
    [info] = [json.loads(x) for x in read_only("inspect", "store", store, "--json").stdout.splitlines()]
    assert info["maxPhysicalOffset"] is None and info["checkpoint"] is None
    assert [p["kind"] for p in info["problems"]] == ["fileSize", "endOfData", "checkpoint"]


# -- a store a broker is writing -------------------------------------------------------------

def preallocate_next_file(store: Path) -> Path:
    """What a running broker has: the next commit log file, created ahead and all zeros, after
    a current file whose data ends in zeros (no BLANK yet)."""
    files = sorted((store / "commitlog").iterdir())
    last = files[-1]
    size = last.stat().st_size
    spare = last.with_name(f"{int(last.name) + size:020d}")
    with open(spare, "wb") as fh:
        fh.truncate(size)
    return spare


def test_verify_judges_a_preallocated_file_as_the_broker_does(store_copy):
    store = store_copy("delay-partial")
    spare = preallocate_next_file(store)
    verify = read_only("inspect", "commitlog", store, "--verify")
    assert verify.returncode == 0 and verify.stderr == "", verify.stdout
    assert "1 after the end of the data holding only zeros, as the broker preallocates them" in verify.stdout
    assert str(spare) not in verify.stdout
    with broker_holding_lock(store):
        live = read_only("inspect", "commitlog", store, "--verify", "--json")
    assert live.returncode == 0 and problems_of(live.stdout) == []
    assert live.stderr.startswith(f"rmqdelay: note: {store / 'lock'} is held by") and "the store is live" in live.stderr
    # Once a later file holds data, the zeros are a hole: the missing BLANK is reported.
    shutil.copy(store / "commitlog" / "00000000000000262144", spare.with_name(f"{int(spare.name) + 262144:020d}"))
    problems = problems_of(read_only("inspect", "commitlog", store, "--verify", "--json").stdout)
    assert problems[0]["kind"] == "missingBlank" and problems[0]["file"] == str(sorted(
        (store / "commitlog").iterdir())[-3])


# -- what the broker's own rules say ---------------------------------------------------------

def schedule_message(writer: StoreWriter, real_topic: str, real_qid: str, store_ms: int):
    """A unit put straight into level 1 (no DELAY property, so the writer does not rewrite it):
    REAL_TOPIC and REAL_QID values no producer could send. Its tagsCode is 0: due at once."""
    writer.put(NewMessage(topic="SCHEDULE_TOPIC_XXXX", queueId=0, body=b"hello", storeTimestamp=store_ms,
                          properties={"REAL_TOPIC": real_topic, "REAL_QID": real_qid,
                                      "UNIQ_KEY": f"K{real_topic!r}{real_qid!r}"}))


def test_run_skips_what_the_broker_drops_and_exits_1(tmp_path):
    store = tmp_path / "s"
    with StoreWriter(store, create=True, commitlog_file_size=1 << 20, sync=False) as writer:
        for topic, qid in (("abc\n", "0"), ("TopicTest", " 3"), ("TopicTest", "3 "), ("TopicTest", "1_0"),
                           ("TopicTest", "²"), ("TopicTest", "1")):
            schedule_message(writer, topic, qid, 1_700_000_000_000)
    proc = console("run", store, "--once", "--now", "1700000100000", "--json")
    events = [json.loads(x) for x in proc.stdout.splitlines()]
    skipped = [e for e in events if e["event"] == "skipped"]
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert [e["reason"] for e in skipped] == [
        "REAL_TOPIC is a topic name outside ^[%|a-zA-Z0-9_-]+$: 'abc\\n'",
        "REAL_QID is not a queue id: ' 3'", "REAL_QID is not a queue id: '3 '",
        "REAL_QID is not a queue id: '1_0'", "REAL_QID is not a queue id: '²'"]
    assert [e["queueId"] for e in events if e["event"] == "delivered"] == [1]
    again = console("run", store, "--once", "--now", "1700000100000")
    assert again.returncode == 0  # nothing left to skip


def test_an_offset_outside_the_queue_is_corrected_everywhere_alike(store_copy):
    store = store_copy("delay-partial")
    (store / "config" / "delayOffset.json").write_text('{\n\t"offsetTable":{1:-5,2:-100,3:500\n\t}\n}')
    delay = {r["level"]: r for r in map(json.loads, read_only("inspect", "delay", store, "--json",
                                                           "--now", 0).stdout.splitlines())}
    show = {r["level"]: r for r in map(json.loads, read_only("offsets", "show", store, "--json",
                                                          "--now", 0).stdout.splitlines())}
    backlog = {r["level"]: r for r in map(json.loads, read_only("analyze", "backlog", store, "--json",
                                                             "--now", 0).stdout.splitlines()) if r["table"] == "levels"}
    for level in (1, 2, 3, 4):
        assert delay[level]["pending"] == show[level]["pending"] == backlog[level]["pending"], level
        assert delay[level]["offset"] == show[level]["offset"] == backlog[level]["offset"], level
    assert [delay[level]["pending"] for level in (1, 2, 3)] == [83, 83, 0]
    assert [delay[level]["storedOffset"] for level in (1, 2, 3, 4)] == [-5, -100, 500, None]
    table = read_only("inspect", "delay", store, "--now", 0).stdout
    assert "level 1: -5 -> 0, level 2: -100 -> 0, level 3: 500 -> 83" in table and "correctDelayOffset" in table


def test_the_lock_error_names_another_rmqdelay(store_copy):
    store = store_copy("delay-partial")
    holder = subprocess.Popen([CONSOLE_SCRIPT, "run", str(store), "--json"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while lock_holder(store / "lock") != holder.pid:
            assert time.monotonic() < deadline and holder.poll() is None
            time.sleep(0.05)
        proc = console("offsets", "reset", store, "--levels", 1, "--to-latest", "--execute")
        assert_one_line(proc, 3, f"held by another rmqdelay (pid {holder.pid}: ", f"rmqdelay run {store}",
                        "wait for it to finish, or stop it")
        info = json.loads(console("inspect", "store", store, "--json").stdout)
        assert info["lockHolder"]["kind"] == "rmqdelay" and info["lockHolder"]["pid"] == holder.pid
    finally:
        holder.terminate()
        holder.wait(timeout=60)


def test_the_lock_holder_is_told_from_its_command_line(tmp_path):
    from rmqdelay.store.lock import describe_holder

    def proc_with(pid: int, *argv: str) -> Path:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        return tmp_path

    broker = describe_holder(11, proc_with(11, "/usr/bin/java", "-server", "-cp", "lib/*",
                                           "org.apache.rocketmq.broker.BrokerStartup", "-c", "broker.conf"))
    assert broker.kind == "broker" and "BrokerStartup" in broker.text and "stop the broker" in broker.advice
    ours = describe_holder(12, proc_with(12, sys.executable, "/venv/bin/rmqdelay", "run", "/data/store"))
    assert ours.kind == "rmqdelay" and ours.text.startswith("another rmqdelay (pid 12: ")
    assert describe_holder(13, tmp_path).text == "a process (pid 13)"  # gone, or /proc not visible
    assert describe_holder(0).text.startswith("a process (its pid is not visible")


def test_run_on_a_regular_file_says_it_is_no_directory(tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("x")
    for args in (["run", plain], ["run", plain, "--dry-run"], ["offsets", "reset", plain, "--levels", 1,
                                                             "--to-latest", "--execute"], ["send", plain, "--topic", "T"]):
        assert_one_line(console(*args), 2, f"{plain}: a broker store directory (this is a file, not a directory)")
    assert plain.read_text() == "x" and sorted(os.listdir(tmp_path)) == ["plain"]
