"""Writing commands never make a store by accident, and inputs that cannot be taken are one
line on stderr, exit 2, at once: a mistyped STORE (an empty directory, a directory of other
files, a path that does not exist) creates nothing; an interval that overflows milliseconds,
a body that is not UTF-8 text and a FIFO as --body-file are refused before anything is
written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from clirun import console
from test_bad_input import snapshot

DOCS = Path(__file__).resolve().parents[1] / "docs"


def one_line_usage_error(result) -> str:
    assert result.returncode == 2, (result.stdout[-500:], result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqdelay: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(params=["empty", "docs"])
def not_a_store(request, tmp_path) -> Path:
    path = tmp_path / "typo"
    if request.param == "empty":
        path.mkdir()
    else:
        shutil.copytree(DOCS, path)
    return path


@pytest.mark.parametrize("args", [
    ("run", "{}", "--until-empty"),
    ("run", "{}", "--once"),
    ("offsets", "reset", "{}", "--all-levels", "--to-latest", "--execute"),
    ("consumers", "reset", "{}", "--group", "G", "--all-topics", "--to-latest", "--execute"),
    ("dlq", "resend", "{}", "--group", "G", "--execute"),
    ("send", "{}", "--topic", "TopicTest", "--delay-level", "3", "--body", "hi"),
    ("timer", "repair", "{}", "--execute"),
])
def test_a_writing_command_on_a_directory_without_a_store_creates_nothing(not_a_store, args):
    before = snapshot(not_a_store)
    result = console(*[str(not_a_store) if a == "{}" else a for a in args])
    line = one_line_usage_error(result)
    assert str(not_a_store) in line
    # Says what is missing and how a new store is made.
    assert "commitlog/" in line or "timer store" in line
    if args[0] in ("run", "offsets", "consumers", "dlq", "send"):
        assert "--create" in line
    assert snapshot(not_a_store) == before  # no commitlog/, config/, lock, ...


def test_send_to_a_path_that_does_not_exist_creates_nothing(tmp_path):
    path = tmp_path / "typo-store"
    line = one_line_usage_error(console("send", path, "--topic", "TopicTest", "--delay-level", "3", "--body", "hi"))
    assert "--create" in line and not path.exists()


def test_a_flush_interval_that_overflows_is_one_line(store_copy):
    store = store_copy("delay-partial")
    before = snapshot(store)
    line = one_line_usage_error(console("run", store, "--flush-interval", "1e308", "--until-empty"))
    assert "--flush-interval" in line
    assert snapshot(store) == before


def test_a_body_that_is_not_utf8_is_one_line(store_copy):
    store = store_copy("delay-partial")
    before = snapshot(store)
    # What Python makes of the byte 0xff given on the command line.
    line = one_line_usage_error(console("send", store, "--topic", "TopicTest", "--body", os.fsdecode(b"\xff")))
    assert "--body" in line and "--body-file" in line
    assert snapshot(store) == before


def test_a_fifo_as_body_file_is_refused_at_once(store_copy, tmp_path):
    store = store_copy("delay-partial")
    fifo = tmp_path / "body"
    os.mkfifo(fifo)
    before = snapshot(store)
    # A child process with a time limit: reading the FIFO would block until a writer came.
    line = one_line_usage_error(console("send", store, "--topic", "TopicTest", "--body-file", fifo, timeout=30))
    assert "FIFO" in line
    assert snapshot(store) == before
