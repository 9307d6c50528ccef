"""Bad input to every read command: one line naming the file, the byte offset and what was
expected; a non-zero exit; no traceback; and not one byte of the store changed."""

from __future__ import annotations

import hashlib
import os
import struct
import subprocess
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, run_cli
from conftest import load_expected

EXPECTED = load_expected("delay-partial")
# A message in the first commit log file, well inside it.
VICTIM = [m for m in EXPECTED["msg"] if m["file"] == "00000000000000000000" and m["bodyLength"] > 0][10]


def snapshot(path: Path) -> dict[str, str]:
    """Every file under the store and a digest of its bytes (new or vanished files show too)."""
    result = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            result[os.path.join(root, name)] = "dir"
        for name in files:
            full = os.path.join(root, name)
            if os.path.islink(full):  # a symlink (a loop, say) is kept as where it points
                result[full] = "link to " + os.readlink(full)
                continue
            if not os.path.isfile(full):
                result[full] = "special"
                continue
            with open(full, "rb") as fh:
                result[full] = hashlib.sha256(fh.read()).hexdigest()
    return result


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def first_log(store: Path) -> Path:
    return store / "commitlog" / "00000000000000000000"


# Each corruption: what it does, the file the message must name, "at byte N" when it has one,
# and the exit code of each command: store, commitlog, commitlog --verify, delay, cq, message.
# `inspect store` and `--verify` report what they cannot read as problems (exit 1) and go on.
def truncate_middle_file(store: Path):
    victim = store / "commitlog" / "00000000000000262144"
    with open(victim, "r+b") as fh:
        fh.truncate(100_000)
    return victim, "at byte 100000", [1, 2, 1, 2, 2, 2]


def bad_magic(store: Path):
    patch(first_log(store), VICTIM["filePos"] + 4, b"\x00\x00\x00\x01")
    return first_log(store), f"at byte {VICTIM['filePos'] + 4}", [0, 2, 1, 0, 0, 2]


def size_past_the_file(store: Path):
    patch(first_log(store), VICTIM["filePos"], struct.pack(">i", 300_000))
    return first_log(store), f"at byte {VICTIM['filePos']}", [0, 2, 1, 0, 0, 2]


def crc_mismatch(store: Path):
    body_end = VICTIM["filePos"] + VICTIM["storeSize"] - 2 - len(VICTIM["propertiesRaw"].encode()) \
        - 1 - len(VICTIM["topic"])
    data = first_log(store).read_bytes()[body_end - 1]
    patch(first_log(store), body_end - 1, bytes([data ^ 1]))
    return first_log(store), f"at byte {VICTIM['filePos'] + 8}", [0, 0, 1, 0, 0, 0]


def cq_unit_past_the_log(store: Path):
    cq = store / "consumequeue" / "TopicTest" / "0" / "00000000000000000000"
    patch(cq, 20, struct.pack(">q", 1 << 40))
    return cq, "at byte 20", [0, 0, 1, 0, 0, 0]


def malformed_delay_offsets(store: Path):
    main = store / "config" / "delayOffset.json"
    main.write_text('{\n\t"offsetTable":{1:83,2:x3\n\t}\n}')
    (store / "config" / "delayOffset.json.bak").write_text("")
    return main, "at byte 25", [1, 0, 0, 2, 0, 0]


def missing_directory(store: Path):
    os.rename(store, store.with_name("elsewhere"))
    return store, None, [2, 2, 2, 2, 2, 2]


def empty_directory(store: Path):
    os.rename(store, store.with_name("elsewhere"))
    store.mkdir()
    return store, None, [2, 2, 2, 2, 2, 2]


def unreadable_checkpoint(store: Path):
    cp = store / "checkpoint"
    cp.unlink()
    cp.mkdir()  # reading it fails as an unreadable file would, even for root
    return cp, None, [1, 0, 0, 0, 0, 0]


CORRUPTIONS = [truncate_middle_file, bad_magic, size_past_the_file, crc_mismatch, cq_unit_past_the_log,
               malformed_delay_offsets, missing_directory, empty_directory, unreadable_checkpoint]


def commands(store: Path) -> list[list]:
    return [
        ["inspect", "store", store],
        ["inspect", "commitlog", store, "--json"],
        ["inspect", "commitlog", store, "--verify", "--json"],
        ["inspect", "delay", store, "--json", "--now", 0],
        ["inspect", "cq", store, "--topic", "TopicTest", "--queue", 0, "--json"],
        ["inspect", "message", store, VICTIM["commitLogOffset"], "--json"],
    ]


@pytest.mark.parametrize("corrupt", CORRUPTIONS, ids=lambda f: f.__name__)
def test_every_read_command_on_bad_input(capsys, store_copy, corrupt):
    store = store_copy("delay-partial")
    named, at_byte, codes = corrupt(store)
    before = snapshot(store.parent)
    for args, code in zip(commands(store), codes):
        result = run_cli(capsys, *args)
        assert result.code == code, (args, result.err)
        assert "Traceback" not in result.err + result.out
        if code == 2:
            assert result.err.count("\n") == 1 and result.err.startswith("rmqdelay: "), result.err
            assert str(named) in result.err, result.err
            if at_byte and args[1] != "message":
                assert at_byte in result.err, result.err
        if code == 1 and args[1] == "store":  # the problems listed after what could be read
            assert f"{named}{' ' + at_byte if at_byte else ''}:" in result.out.replace("\n", ""), result.out
        elif code == 1:  # --verify: the problems, one JSON object each, naming the damaged file
            problems = result.json_lines()
            assert problems and problems[0]["file"] == str(named)
            assert at_byte == f"at byte {problems[0]['offset']}"
        assert snapshot(store.parent) == before, f"{args} changed the store"


def test_unreadable_commit_log_file(capsys, store_copy, monkeypatch):
    store = store_copy("delay-partial")
    victim = str(first_log(store))
    real_open = os.open

    def deny(file, *args, **kwargs):
        if str(file) == victim:
            raise PermissionError(13, "Permission denied", victim)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    listing = run_cli(capsys, "inspect", "commitlog", store)
    assert listing.code == 2 and listing.err == f"rmqdelay: {victim}: a readable file (Permission denied)\n"
    message = run_cli(capsys, "inspect", "message", store, 0)
    assert message.code == 2 and victim in message.err
    verify = run_cli(capsys, "inspect", "commitlog", store, "--verify", "--json")
    assert verify.code == 1
    assert verify.problems()[0] == {"kind": "unreadable", "file": victim, "offset": None,
                                      "expected": "a readable file (Permission denied)", "physicalOffset": None}


def test_crc_mismatch_shows_in_the_listing_and_the_message(capsys, store_copy):
    store = store_copy("delay-partial")
    crc_mismatch(store)
    result = run_cli(capsys, "inspect", "message", store, VICTIM["commitLogOffset"])
    assert "MISMATCH" in result.out


@pytest.mark.parametrize("corrupt,args,code", [
    (bad_magic, ["inspect", "commitlog"], 2),
    (malformed_delay_offsets, ["inspect", "delay"], 2),
    (missing_directory, ["inspect", "store"], 2),
    (cq_unit_past_the_log, ["inspect", "commitlog", "--verify"], 1),
    (truncate_middle_file, ["inspect", "cq", "--topic", "TopicTest", "--queue", "0"], 2),
], ids=lambda v: getattr(v, "__name__", None))
def test_console_script_exit_codes_and_no_traceback(store_copy, corrupt, args, code):
    store = store_copy("delay-partial")
    named, at_byte, _ = corrupt(store)
    before = snapshot(store.parent)
    argv = [CONSOLE_SCRIPT, *args[:2], str(store), *args[2:]]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    if code == 2:
        assert proc.stderr.count("\n") == 1 and str(named) in proc.stderr
    else:
        assert proc.stderr == "" and str(named) in proc.stdout
    assert snapshot(store.parent) == before
