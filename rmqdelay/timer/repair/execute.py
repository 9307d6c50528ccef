"""``execute_repair``: what a RepairPlan changes, written.

Nothing is lost: every file replaced keeps its old bytes in a backup (``config/*.bak``,
``timerwheel.bak``, ``timerlog.bak/NAME`` - never inside ``timerlog/``, where the broker would
try to load a file of that name as part of the log).

Writing is a small transaction (``execute_repair``): every new file is written in full to
``.timer-repair/`` in the store and fsynced; a journal naming the renames is published by
rename; then each old file is linked to its backup and the new one renamed over it; the
journal goes last. A kill at any point leaves every file old or new, never torn, and the next
``--execute`` finishes the renames the journal names before it plans again.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError, StoreWriteError
from rmqdelay.formats.timerwheel import SLOT_DTYPE, SLOT_SIZE, WHEEL_FILE_SIZE
from rmqdelay.store import fileio

from .plan import JOURNAL, LOG_BACKUP_DIR, STAGING_DIR, WHEEL_BACKUP, RepairPlan


@dataclass(slots=True, frozen=True)
class _Entry:
    staged: str | None  # None: the target is removed (moved to its backup)
    target: str
    backup: str | None

    def as_json(self) -> list:
        return [self.staged, self.target, self.backup]


def pending_journal(store_path: Path) -> bool:
    return (Path(store_path) / STAGING_DIR / JOURNAL).exists()


def finish_interrupted(store_path: Path) -> bool:
    """Complete the renames of an interrupted --execute (its journal names them), or discard
    what it staged before its journal was published. True when a journal was completed.
    Call under the store's lock."""
    root = Path(store_path)
    staging = root / STAGING_DIR
    journal = staging / JOURNAL
    data = fileio.read_file(journal)
    if data is None:
        _discard(staging)
        return False
    try:
        entries = [_Entry(*e) for e in json.loads(data.decode("utf-8"))["entries"]]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise StoreError(journal, None, "the journal of an interrupted timer repair (JSON naming its renames); "
                                        "it is not readable: restore the files from their .bak copies") from None
    _commit(root, entries)
    return True


def execute_repair(store_path: Path, plan: RepairPlan) -> None:
    """Stage every new file, publish the journal, then rename. Call under the store's lock."""
    if not plan.changed:
        return
    root = Path(store_path)
    staging = root / STAGING_DIR
    _discard(staging)
    entries: list[_Entry] = []
    try:
        fileio.make_dirs(staging)
        fileio.fsync_dir(root)
        for name in sorted(plan.log_files):
            target = f"timerlog/{name}"
            staged = f"{STAGING_DIR}/timerlog-{name}"
            _check_target(root / target)
            _write_file(root / staged, plan.log_files[name], plan.log_file_size)
            entries.append(_Entry(staged, target, f"{LOG_BACKUP_DIR}/{name}"))
        for name in plan.log_removed:
            entries.append(_Entry(None, f"timerlog/{name}", f"{LOG_BACKUP_DIR}/{name}"))
        if plan.wheel is not None:
            _check_target(root / "timerwheel")
            _write_wheel(root / STAGING_DIR / "timerwheel", plan.wheel)
            entries.append(_Entry(f"{STAGING_DIR}/timerwheel", "timerwheel", WHEEL_BACKUP))
        # The run state before the checkpoint: a run finding only the state renamed takes the
        # checkpoint it names (the file then still holds the one named as previous).
        for data, name in ((plan.state, "rmqdelay.timer.json"), (plan.checkpoint, "timercheck"),
                           (plan.metrics, "timermetrics")):
            if data is None:
                continue
            _check_target(root / "config" / name)
            _write_file(root / STAGING_DIR / name, data, len(data))
            entries.append(_Entry(f"{STAGING_DIR}/{name}", f"config/{name}", f"config/{name}.bak"))
        if plan.log_files or plan.log_removed:
            fileio.make_dirs(root / LOG_BACKUP_DIR)
            fileio.fsync_dir(root)
        body = json.dumps({"entries": [e.as_json() for e in entries]}).encode("utf-8")
        _write_file(staging / (JOURNAL + ".tmp"), body, len(body))
        fileio.fsync_dir(staging)
    except BaseException:
        _discard(staging)
        raise
    fileio.replace(staging / (JOURNAL + ".tmp"), staging / JOURNAL)
    fileio.fsync_dir(staging)
    _commit(root, entries)


def _check_target(path: Path) -> None:
    """A file that cannot be replaced (immutable, a directory, ...) is found before any rename.
    A FIFO, a socket or a symlink to nothing in a file's place is replaced (the rename takes
    its name; the backup keeps it), never opened: a FIFO would block."""
    if not os.path.lexists(path):
        return
    kind = fileio.not_regular(path)
    if kind == "a directory":
        raise StoreWriteError(path, None, "a regular file to replace, found a directory: move it out of the store, "
                                          "then run `rmqdelay timer repair --execute` again")
    if kind is not None:
        return
    fd, _ = fileio.open_for_write(path, create=False)
    os.close(fd)


def _write_file(path: Path, data: bytes, size: int) -> None:
    """``data`` at the start of a new file of ``size`` bytes (the rest a hole reading as zeros), fsynced."""
    fd, _ = fileio.open_for_write(path)
    try:
        fileio.write_all(fd, data, 0, path)
        if size > len(data):
            fileio.ftruncate(fd, size, path)
        fileio.fsync(fd, path)
    finally:
        os.close(fd)


def _write_wheel(path: Path, slots: np.ndarray) -> None:
    """The wheel, sparse: the file is sized first and only runs of non-empty slots are written."""
    raw = np.zeros(len(slots), dtype=SLOT_DTYPE)
    for name in SLOT_DTYPE.names:
        raw[name] = slots[name]
    index = slots["index"].astype(np.int64)
    fd, _ = fileio.open_for_write(path)
    try:
        fileio.ftruncate(fd, WHEEL_FILE_SIZE, path)
        breaks = np.flatnonzero(np.diff(index) != 1) + 1
        for run in np.split(np.arange(len(slots)), breaks):
            if len(run):
                fileio.write_all(fd, raw[run[0]:run[-1] + 1].tobytes(), int(index[run[0]]) * SLOT_SIZE, path)
        fileio.fsync(fd, path)
    finally:
        os.close(fd)


def _commit(root: Path, entries: list[_Entry]) -> None:
    """Each old file linked to its backup, then the new one renamed over it; removals moved to
    their backup. Every step can be repeated: a rerun after a kill picks up where it stopped."""
    dirs = {root}
    try:
        for e in entries:
            target = root / e.target
            dirs.add(target.parent)
            backup = root / e.backup if e.backup else None
            if backup is not None:
                dirs.add(backup.parent)
            if e.staged is None:
                if os.path.lexists(target) and backup is not None:
                    fileio.make_dirs(backup.parent)
                    fileio.replace(target, backup)
                continue
            staged = root / e.staged
            if not os.path.lexists(staged):
                continue  # renamed before an interruption
            if backup is not None and os.path.lexists(target):
                fileio.make_dirs(backup.parent)
                tmp = backup.with_name(backup.name + ".tmp")
                fileio.unlink(tmp)
                fileio.link(target, tmp)
                fileio.replace(tmp, backup)
            fileio.make_dirs(target.parent)
            fileio.replace(staged, target)
        for directory in sorted(dirs):
            fileio.fsync_dir(directory)
    except StoreWriteError as exc:
        raise StoreWriteError(exc.path, exc.offset, f"{exc.what} (the repair is half applied: every file is "
                                                    "whole, old or new; run `rmqdelay timer repair --execute` "
                                                    "again once the fault is gone to finish it)") from None
    staging = root / STAGING_DIR
    fileio.unlink(staging / JOURNAL)
    fileio.fsync_dir(staging)
    _discard(staging)


def _discard(staging: Path) -> None:
    """Remove what an unfinished staging left (never a journal: that is finished, not discarded)."""
    if not staging.is_dir():
        return
    for entry in os.scandir(staging):
        if entry.name != JOURNAL:
            fileio.unlink(Path(entry.path))
    if not (staging / JOURNAL).exists():
        fileio.remove_dir(staging)
        fileio.fsync_dir(staging.parent)
