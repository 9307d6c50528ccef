"""Files that survive a crash: written whole, fsynced, then published by rename.

Several files that belong together (the scheduler file and delayOffset.json) are published
in two phases: every new content is first written to its temporary file and fsynced - the
step that needs disk space and can fail - and only when all of them are on disk are they
renamed over the old files, in the order given. A failure in the first phase removes the
temporary files and leaves every old file as it was.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreReadError, StoreWriteError
from rmqdelay.store import fileio
from rmqdelay.store.fileio import fsync_dir

__all__ = ["FileUpdate", "atomic_write", "config_dir", "fsync_dir", "publish_files"]


def config_dir(store_path: Path | str) -> Path:
    return Path(store_path) / "config"


@dataclass(slots=True, frozen=True)
class FileUpdate:
    path: Path
    data: bytes
    keep_bak: bool = False  # the old file becomes ``.bak``, as the broker's MixAll.string2File


def _tmp(path: Path, suffix: str = ".tmp") -> Path:
    return path.with_name(path.name + suffix)


def _write_synced(path: Path, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StoreWriteError(path, None, f"open for writing failed: {exc.strerror}") from None
    try:
        fileio.write_all(fd, data, 0, path)
        fileio.fsync(fd, path)
    finally:
        os.close(fd)


def _old_content(path: Path) -> bytes | None:
    """The file being replaced, for its ``.bak``; None when there is none or it cannot be
    read (there is nothing to keep then)."""
    try:
        return fileio.read_file(path)
    except StoreReadError:
        return None


def _check_target(path: Path) -> None:
    """A rename cannot replace a directory: found before anything is renamed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StoreWriteError(path, None, f"a file to replace ({exc.strerror})") from None
    if stat.S_ISDIR(st.st_mode):
        raise StoreWriteError(path, None, "a regular file to replace, found a directory")


def publish_files(updates: list[FileUpdate]) -> None:
    """Write every update to its temporary file and fsync them all, then rename each over
    its file in order (the old one kept as ``.bak`` where asked) and fsync the directories."""
    staged: list[Path] = []
    renames: list[tuple[Path, Path]] = []
    try:
        for update in updates:
            fileio.make_dirs(update.path.parent)
            _check_target(update.path)
            if update.keep_bak:
                old = _old_content(update.path)
                if old is not None:
                    bak_tmp = _tmp(update.path, ".bak.tmp")
                    staged.append(bak_tmp)
                    _write_synced(bak_tmp, old)
                    renames.append((bak_tmp, _tmp(update.path, ".bak")))
            tmp = _tmp(update.path)
            staged.append(tmp)
            _write_synced(tmp, update.data)
            renames.append((tmp, update.path))
    except BaseException:
        for path in staged:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    for src, dst in renames:
        fileio.replace(src, dst)
    for directory in dict.fromkeys(update.path.parent for update in updates):
        fsync_dir(directory)


def atomic_write(path: Path, data: bytes, *, keep_bak: bool = False) -> None:
    """Temp file + fsync + rename (+ fsync of the directory); the old file becomes ``.bak``."""
    publish_files([FileUpdate(path, data, keep_bak)])
