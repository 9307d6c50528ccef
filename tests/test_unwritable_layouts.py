"""Every writing command refuses a DLedger store and a RocksDB store at its door: one line
naming the layout and why, exit 2, and not a byte of the store changed (no lock file
written, no commitlog/ made)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from clirun import console
from test_dledger import sparse_copy

from rmqdelay.errors import UnwritableLayoutError
from rmqdelay.store.lock import BrokerLock

WRITERS = [
    ("run", "{}", "--until-empty"),
    ("run", "{}", "--once"),
    ("send", "{}", "--topic", "TopicTest", "--delay-level", "3", "--body", "hi"),
    ("send", "{}", "--create", "--topic", "TopicTest", "--body", "hi"),
    ("offsets", "reset", "{}", "--all-levels", "--to-latest", "--execute"),
    ("timer", "repair", "{}", "--execute"),
]


def snapshot(path: Path) -> dict[str, tuple]:
    """Every entry under ``path``: each file's size, times and a digest of its data extents
    (the sparse 160 MiB DLedger index and 420 MB index file are read only where they hold data)."""
    result = {}
    for root, dirs, files in os.walk(path):
        for name in dirs:
            result[os.path.join(root, name)] = ("dir",)
        for name in files:
            full = os.path.join(root, name)
            st = os.stat(full)
            digest = hashlib.sha256()
            with open(full, "rb") as fh:
                pos = 0
                while pos < st.st_size:
                    try:
                        pos = os.lseek(fh.fileno(), pos, os.SEEK_DATA)
                        hole = os.lseek(fh.fileno(), pos, os.SEEK_HOLE)
                    except OSError:
                        break
                    fh.seek(pos)
                    digest.update(pos.to_bytes(8, "big") + fh.read(hole - pos))
                    pos = hole
            result[full] = (st.st_size, st.st_mtime_ns, digest.hexdigest())
    return result


@pytest.fixture(scope="module")
def dledger_store(tmp_path_factory, sample_store) -> Path:
    path = tmp_path_factory.mktemp("unwritable") / "dledger"
    sparse_copy(sample_store("dledger-clean"), path)
    return path


@pytest.fixture(scope="module")
def rocksdb_store(tmp_path_factory) -> Path:
    """A store whose consume queues are a RocksDB database (storeType=defaultRocksDB): the
    names a database always has, beside a commit log and configs."""
    path = tmp_path_factory.mktemp("unwritable") / "rocksdb"
    sample = Path(__file__).resolve().parents[1] / "samples" / "delay-partial" / "store"
    shutil.copytree(sample / "commitlog", path / "commitlog")
    shutil.copytree(sample / "config", path / "config")
    db = path / "consumequeue"
    db.mkdir()
    (db / "CURRENT").write_text("MANIFEST-000001\n")
    (db / "IDENTITY").write_text("3f1a6c1e-0000-0000-0000-000000000000")
    (db / "MANIFEST-000001").write_bytes(b"\0" * 64)
    return path


@pytest.mark.parametrize("args", WRITERS, ids=lambda a: " ".join(a[:2]) + (" --create" if "--create" in a else ""))
@pytest.mark.parametrize("layout", ["dledger", "rocksdb"])
def test_a_writing_command_refuses_the_layout_in_one_line_and_changes_nothing(layout, args, dledger_store,
                                                                             rocksdb_store):
    store = dledger_store if layout == "dledger" else rocksdb_store
    before = snapshot(store)
    result = console(*[str(store) if a == "{}" else a for a in args])
    assert result.returncode == 2, (result.stdout[-500:], result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rmqdelay: ") and "Traceback" not in result.stderr, result.stderr
    line = lines[0]
    assert str(store) in line
    if layout == "dledger":
        assert "a DLedger store (dledger-n0/data/)" in line and "forks the group's Raft log" in line
    else:
        assert "a RocksDB store" in line and "consumequeue/ is a RocksDB database" in line
        assert "only the broker's own RocksDB may write" in line
    assert snapshot(store) == before


def test_the_lock_is_the_door_for_every_writer(dledger_store):
    """A writer that takes the store's lock (the incident writers too) is refused there,
    before the lock file is touched."""
    before = snapshot(dledger_store)
    with pytest.raises(UnwritableLayoutError, match="DLedger"):
        BrokerLock(dledger_store).acquire()
    assert snapshot(dledger_store) == before
