"""Hostile input through the console script itself: every bad input gets one line on stderr
naming what is wrong, exit 2 (1 where a command reports problems and goes on), no traceback,
and not one byte of the store changed."""

from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest
from clirun import assert_one_line, console, problems_of
from test_bad_input import first_log, patch, snapshot

LEVEL4 = "SCHEDULE_TOPIC_XXXX/3"  # delay level 4: absent from delayOffset.json, so every unit is pending


def cq_dir(store: Path, queue: str) -> Path:
    return store / "consumequeue" / queue


def set_tags_code(store: Path, queue: str, unit: int, value: int) -> Path:
    path = cq_dir(store, queue) / f"{unit * 20 // 1280 * 1280:020d}"
    patch(path, unit * 20 % 1280 + 12, struct.pack(">q", value))
    return path


@pytest.fixture
def store(store_copy):
    path = store_copy("delay-partial")
    yield path


def unchanged(store: Path, run):
    """Run ``run()`` and check that the directory holding the store did not change."""
    before = snapshot(store.parent)
    result = run()
    assert snapshot(store.parent) == before
    return result


# -- file system ---------------------------------------------------------------------------------

def test_symlink_loop_in_the_commit_log(store):
    loop = store / "commitlog" / "00000000000099999999"
    os.symlink(loop.name, loop)
    for args in (["inspect", "commitlog", store], ["inspect", "delay", store], ["inspect", "message", store, 0],
                 ["inspect", "cq", store, "--topic", "TopicTest", "--queue", 0], ["offsets", "show", store],
                 ["analyze", "backlog", store], ["run", store, "--dry-run", "--once"]):
        proc = unchanged(store, lambda: console(*args))
        assert_one_line(proc, 2, str(loop), "Too many levels of symbolic links")
    for args in (["inspect", "store", store], ["inspect", "commitlog", store, "--verify"]):
        proc = unchanged(store, lambda: console(*args))
        assert proc.returncode == 1 and proc.stderr == "" and f"unreadable: {loop}" in proc.stdout


def test_symlink_loop_in_a_consume_queue(store):
    loop = cq_dir(store, LEVEL4) / "00000000000000099980"
    os.symlink(loop.name, loop)
    for args in (["inspect", "delay", store], ["inspect", "cq", store, "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", 3],
                 ["analyze", "backlog", store]):
        assert_one_line(unchanged(store, lambda: console(*args)), 2, str(loop), "Too many levels")
    proc = unchanged(store, lambda: console("inspect", "commitlog", store, "--verify", "--json"))
    assert proc.returncode == 1
    assert {"kind": "unreadable", "file": str(loop)}.items() <= problems_of(proc.stdout)[0].items()


def test_consumequeue_that_is_a_file(store):
    cq = store / "consumequeue"
    shutil.rmtree(cq)
    cq.write_bytes(b"not a directory")
    for args in (["inspect", "delay", store], ["analyze", "backlog", store], ["offsets", "show", store],
                 ["inspect", "cq", store, "--topic", "TopicTest", "--queue", 0]):
        assert_one_line(unchanged(store, lambda: console(*args)), 2, f"{cq}: a directory (found a file)")
    verify = unchanged(store, lambda: console("inspect", "commitlog", store, "--verify"))
    assert verify.returncode == 1 and f"notADirectory: {cq}" in verify.stdout
    assert "undispatched" not in verify.stdout  # queues never listed are not "missing"


def test_topic_directory_that_cannot_be_read(store):
    topic = store / "consumequeue" / "TopicTest"
    assert_one_line(unchanged(store, lambda: console("analyze", "backlog", store, unreadable=[topic])),
                    2, str(topic), "Permission denied")
    for args in (["inspect", "store", store], ["inspect", "commitlog", store, "--verify"]):
        proc = unchanged(store, lambda: console(*args, unreadable=[topic]))
        assert proc.returncode == 1 and proc.stderr == "", proc.stderr
        assert f"unreadable: {topic}: a readable directory (Permission denied)" in proc.stdout
        assert "TopicTest/0" not in proc.stdout.replace(str(topic), "")  # its queues are not judged


def test_queue_directory_names_are_read_as_the_broker_reads_them(store):
    # Integer.parseInt refuses '²' (Python's str.isdigit does not), and for '01' or '٣' the
    # broker would open the directory '1' or '3': none of them is a queue.
    for name in ("²", "01", "٣", " 1"):
        (store / "consumequeue" / "TopicTest" / name).mkdir()
    for args in (["inspect", "store", store, "--json"], ["analyze", "backlog", store, "--json"],
                 ["inspect", "commitlog", store, "--verify"]):
        proc = unchanged(store, lambda: console(*args))
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    [info] = [json.loads(line) for line in console("inspect", "store", store, "--json").stdout.splitlines()]
    assert sorted(q["queueId"] for q in info["queues"] if q["topic"] == "TopicTest") == [0, 1, 2, 3]


def test_delay_offsets_that_are_a_symlink_loop(store):
    main = store / "config" / "delayOffset.json"
    main.unlink()
    os.symlink(main.name, main)
    # ConfigManager.load finds no file there and reads the .bak, as rmqdelay does.
    for args in (["inspect", "delay", store, "--json"], ["offsets", "show", store, "--json"]):
        proc = unchanged(store, lambda: console(*args))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert json.loads(proc.stdout.splitlines()[0])["storedOffset"] == 83
    (store / "config" / "delayOffset.json.bak").unlink()
    for args in (["inspect", "delay", store], ["offsets", "show", store], ["analyze", "backlog", store]):
        assert_one_line(unchanged(store, lambda: console(*args)), 2, str(main), "Too many levels")


# -- numbers out of range ------------------------------------------------------------------------

def test_deliver_times_past_year_9999_or_into_consumequeue_ext(store):
    latest = set_tags_code(store, LEVEL4, 81, (1 << 63) - 1)
    for args in (["inspect", "cq", store, "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", 3],
                 ["inspect", "delay", store], ["analyze", "backlog", store], ["analyze", "lateness", store]):
        assert_one_line(unchanged(store, lambda: console(*args)), 2, f"{latest} at byte {81 * 20 % 1280 + 12}",
                        "found 9223372036854775807: past year 9999")
    set_tags_code(store, LEVEL4, 81, 1795349808000)
    set_tags_code(store, LEVEL4, 80, -(1 << 63))
    # An ext address: inspect cq shows it as one; what needs it as a time says why it cannot.
    listing = unchanged(store, lambda: console("inspect", "cq", store, "--topic", "SCHEDULE_TOPIC_XXXX",
                                               "--queue", 3, "--json"))
    assert listing.returncode == 0 and json.loads(listing.stdout.splitlines()[80])["deliverTimestamp"] is None
    for args in (["inspect", "delay", store], ["analyze", "retries", store], ["offsets", "show", store]):
        assert_one_line(unchanged(store, lambda: console(*args)), 2, "found -9223372036854775808",
                        "ConsumeQueueExt address")


def test_delay_offset_beyond_a_java_long(store):
    main = store / "config" / "delayOffset.json"
    main.write_text('{\n\t"offsetTable":{1:99999999999999999999,2:83\n\t}\n}')
    (store / "config" / "delayOffset.json.bak").unlink()
    for args in (["inspect", "delay", store], ["analyze", "backlog", store], ["inspect", "store", store]):
        proc = unchanged(store, lambda: console(*args))
        if args[1] == "store":
            assert proc.returncode == 1 and "at byte 20: an integer within a Java long" in proc.stdout
        else:
            assert_one_line(proc, 2, f"{main} at byte 20", "an integer within a Java long")


def test_delay_offset_keys_read_by_integer_parse_int(store):
    main = store / "config" / "delayOffset.json"
    main.write_text('{"offsetTable":{"1_0":83}}')
    (store / "config" / "delayOffset.json.bak").unlink()
    assert_one_line(unchanged(store, lambda: console("inspect", "delay", store)), 2, f"{main} at byte 16", "'1_0'")


@pytest.mark.parametrize("args,fragments", [
    (["inspect", "message", "{store}", "²"], ["ID: a physical offset (digits), or a msgId or UNIQ_KEY", "'²'"]),
    (["inspect", "delay", "{store}", "--now", "99999999999999999999"], ["--now: an instant between years 1 and 9999"]),
    (["inspect", "cq", "{store}", "--topic", "TopicTest", "--queue", "0", "--now=-9223372036854775808"],
     ["--now: an instant between years 1 and 9999"]),
    (["analyze", "backlog", "{store}", "--now", "99999999999999999999"], ["--now: an instant between years 1 and 9999"]),
    (["run", "{store}", "--flush-interval", "nan", "--dry-run"],
     ["--flush-interval: a number of seconds from 0 to 1000000000, found nan"]),
    (["run", "{store}", "--flush-interval", "inf"], ["--flush-interval"]),
    (["run", "{store}", "--flush-interval", "1e308"],
     ["--flush-interval: a number of seconds from 0 to 1000000000, found 1e+308"]),
    (["send", "{store}", "--topic", "TopicTest", "--queue", "2147483648"], ["--queue", "'2147483648'"]),
    (["send", "{store}", "--topic", "TopicTest", "--count", "1_0"], ["--count", "'1_0'"]),
    (["send", "{store}", "--topic", "abc\n"], ["invalid topic", "'abc\\n'"]),
    (["inspect", "commitlog", "{store}", "--topic", "TopicTest\n"], ["invalid topic"]),
    (["analyze", "backlog", "{store}", "--output", "{blocker}/out"], ["--output", "a directory to write into"]),
    (["analyze", "backlog", "{store}", "--report", "{blocker}/r.html"], ["--report", "a directory to write into"]),
    (["analyze", "backlog", "{store}", "--output", "{blocker}"], ["--output", "it is a file"]),
], ids=lambda v: "-".join(map(str, v))[:60] if isinstance(v, list) and v and v[0] in (
    "inspect", "analyze", "run", "send") else "")
def test_arguments_out_of_range(store, args, fragments):
    blocker = store.parent / "a-file"
    blocker.write_text("a file where a directory should be")
    argv = [a.format(store=store, blocker=blocker) for a in args]
    assert_one_line(unchanged(store, lambda: console(*argv)), 2, *fragments)


# -- text that is not UTF-8 ----------------------------------------------------------------------

def non_utf8_store(store: Path) -> None:
    log = first_log(store)
    data = log.read_bytes()
    tags = data.find(b"TAGS\x01")
    patch(log, tags + 5, b"\xff")  # properties: no CRC covers them
    topic = data.find(b"OrderTopic")
    patch(log, topic + 1, b"\xfe")
    (store / "consumequeue" / os.fsdecode(b"Topic\xfd") / "0").mkdir(parents=True)


def test_output_in_a_strict_utf8_encoding_never_fails(store):
    non_utf8_store(store)
    for args in (["inspect", "commitlog", store, "--limit", "3"], ["inspect", "message", store, 0],
                 ["inspect", "message", store, 425], ["inspect", "store", store]):
        proc = unchanged(store, lambda: console(*args, env={"PYTHONIOENCODING": "utf-8"}))
        assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "O\\xfederTopic" in console("inspect", "message", store, 0, env={"PYTHONIOENCODING": "utf-8"}).stdout


@pytest.mark.parametrize("encoding", ["utf-8", "ascii", "latin-1"])
def test_json_lines_are_always_valid_utf8_json(store, encoding):
    non_utf8_store(store)
    for args in (["inspect", "commitlog", store, "--limit", "3", "--json"], ["inspect", "store", store, "--json"],
                 ["inspect", "commitlog", store, "--verify", "--json"]):
        proc = unchanged(store, lambda: console(*args, env={"PYTHONIOENCODING": encoding}))
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
        rows = [json.loads(line.encode("utf-8", "surrogateescape").decode("utf-8")) for line in proc.stdout.splitlines()]
        text = json.dumps(rows, ensure_ascii=False)
        assert "\ufffd" in text and not any(0xD800 <= ord(c) < 0xE000 for c in text)
    [first] = [json.loads(x) for x in console("inspect", "commitlog", store, "--limit", "1", "--json").stdout.splitlines()]
    assert first["topic"] == "O\ufffdderTopic"  # a byte that is not UTF-8 is replaced, as in analyze's tables
