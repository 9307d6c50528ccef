"""Files that survive a crash: written whole, fsynced, then published by rename."""

from __future__ import annotations

import os
from pathlib import Path


def config_dir(store_path: Path | str) -> Path:
    return Path(store_path) / "config"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_synced(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, *, keep_bak: bool = False) -> None:
    """Temp file + fsync + rename (+ fsync of the directory); the old file becomes ``.bak``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    _write_synced(tmp, data)
    if keep_bak:
        try:
            old = path.read_bytes()
        except FileNotFoundError:
            old = None
        if old is not None:
            bak = path.with_name(path.name + ".bak")
            bak_tmp = path.with_name(path.name + ".bak.tmp")
            _write_synced(bak_tmp, old)
            os.replace(bak_tmp, bak)
    os.replace(tmp, path)
    fsync_dir(path.parent)
