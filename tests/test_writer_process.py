"""The writer in a process of its own (store/writerprocess.py): the same store, byte for byte,
as the writer in the caller's process; the child's errors and its death reach the caller as
one error; the store's lock is the child's while it writes."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path

import pytest

from rmqdelay.errors import StoreLockedError, StoreWriteError
from rmqdelay.samples.generate import GenerateOptions, generate
from rmqdelay.samples.generate_timer import generate_timer
from rmqdelay.store import Store
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.store.writerprocess import WriterProcess

SMALL_FILES = dict(commitlog_file_size=65536, cq_file_size=1280)


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.slow  # byte identity on a store of real size: CI runs it, the quick loop does not
@pytest.mark.parametrize("make", [generate, generate_timer], ids=["4.x", "5.x-timer"])
def test_a_generated_store_is_the_same_bytes_whichever_process_writes_it(tmp_path, make):
    """Small files: records roll over to new commit log files (BLANK ends) and units to new
    queue files many times, so every place the child could disagree is met."""
    here, there = tmp_path / "here", tmp_path / "there"
    plan_here = make(here, GenerateOptions(messages=6000, seed=11, writer_process=False, **SMALL_FILES))
    plan_there = make(there, GenerateOptions(messages=6000, seed=11, writer_process=True, **SMALL_FILES))
    assert plan_here == plan_there
    assert len(list((there / "commitlog").iterdir())) > 40
    assert tree_digest(here) == tree_digest(there)


def message(i: int, **kw) -> NewMessage:
    return NewMessage("TopicTest", i % 4, f"body {i}".encode(), {"KEYS": f"K{i}", "UNIQ_KEY": f"U{i:032d}"},
                      storeTimestamp=1_767_225_600_000 + i, **kw)


def test_put_answers_what_the_writer_in_this_process_answers(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    with StoreWriter(here, create=True, sync=False, **SMALL_FILES) as writer:
        expected = [writer.put(message(i)) for i in range(3000)]
    with WriterProcess(there, create=True, sync=False, **SMALL_FILES) as writer:
        got = [writer.put(message(i)) for i in range(3000)]
        assert writer.end_offset == expected[-1].commitLogOffset + expected[-1].storeSize
    assert got == expected
    assert tree_digest(here) == tree_digest(there)


def test_the_store_is_locked_while_the_child_writes_and_free_after(tmp_path):
    with WriterProcess(tmp_path / "s", create=True, sync=False) as writer:
        writer.put(message(1))
        with pytest.raises(StoreLockedError):
            StoreWriter(tmp_path / "s").open()
    with StoreWriter(tmp_path / "s") as writer:
        assert writer.end_offset > 0
        with pytest.raises(StoreLockedError):  # the child's refusal, as the caller's error
            with WriterProcess(tmp_path / "s"):
                pass


def test_an_error_in_the_child_reaches_the_caller_as_the_same_error(tmp_path):
    """The commit log's second file cannot be made (a directory holds its name): the child's
    writer stops at that flush, and the caller's next call raises its error."""
    store = tmp_path / "s"
    with StoreWriter(store, create=True, **SMALL_FILES) as writer:
        writer.put(message(0))
    (store / "commitlog" / f"{65536:020d}").mkdir()
    with pytest.raises(StoreWriteError) as caught:
        with WriterProcess(store, sync=False, **SMALL_FILES) as writer:
            for i in range(1, 100_000):
                writer.put(message(i))
    assert f"{65536:020d}" in str(caught.value) and "Is a directory" in str(caught.value)
    with StoreWriter(store, **SMALL_FILES) as writer:  # recovery keeps the first file's whole records
        assert writer.end_offset <= 65536
    with Store(store) as st:
        bodies = [m.body for m in st.commitlog.records(0)]
    assert bodies == [f"body {i}".encode() for i in range(len(bodies))] and len(bodies) > 1


def test_a_killed_child_is_an_error_for_the_caller_not_a_hang(tmp_path):
    with pytest.raises(StoreWriteError, match="the writer process ended unexpectedly"):
        with WriterProcess(tmp_path / "s", create=True, sync=False) as writer:
            writer.put(message(0))
            writer.sync_to_disk()
            os.kill(writer._process.pid, signal.SIGKILL)
            for i in range(1, 100_000):
                writer.put(message(i))
            writer.sync_to_disk()
    with StoreWriter(tmp_path / "s") as writer:  # what a crash leaves: the synced record stays
        assert writer.end_offset >= message_size_of_first(tmp_path / "s")


def message_size_of_first(store: Path) -> int:
    with Store(store) as st:
        first = next(iter(st.commitlog.records(0)))
    return first.storeSize
