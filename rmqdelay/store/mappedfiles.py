"""A folder of files named by their 20-digit start offset (MappedFileQueue), read-only."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.store.fileio import map_for_read
from rmqdelay.store.problems import (
    FILE_SIZE,
    GAP,
    NOT_A_DIRECTORY,
    UNREADABLE,
    Problems,
    report,
)

_NAME = re.compile(r"^\d{20}$")


@dataclass(slots=True, frozen=True)
class MappedFile:
    path: Path
    start: int  # offset of the file's first byte in the whole queue
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


def list_mapped_files(directory: Path, problems: Problems | None = None) -> list[MappedFile]:
    """The files of one queue in offset order; sizes read from the files themselves.

    Strict (``problems`` None): the first problem raises a StoreError. Lenient: each problem
    is noted in ``problems`` and the files that could be listed are returned, gaps and all.
    Every file but the last must reach the next one; the broker also wants every file of
    the queue to have the same size (MappedFileQueue.load), which only the lenient listing
    checks of the last file, as reading a short last file is still possible.
    """
    files = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except NotADirectoryError:
        report(problems, NOT_A_DIRECTORY, directory, None, "a directory (found a file)")
        return []
    except OSError as exc:
        report(problems, UNREADABLE, directory, None, f"a readable directory ({exc.strerror})")
        return []
    for entry in entries:
        if not _NAME.match(entry.name):
            continue
        try:
            if entry.is_dir():
                continue  # not a file of the queue: a writer reaching its offset says so
            if not entry.is_file():
                # A dangling symlink, a FIFO, a device or a directory where a file of the queue
                # belongs: the broker's MappedFileQueue.load refuses it (its length is not the
                # file size), and skipping it would make the queue end before it.
                report(problems, UNREADABLE, entry.path, None,
                       f"a regular file of the queue, found {_special_kind(entry)}")
                continue
            size = entry.stat().st_size
        except OSError as exc:  # a symlink loop (ELOOP), an unreadable target, ...
            report(problems, UNREADABLE, entry.path, None, f"a readable file ({exc.strerror})")
            continue
        files.append(MappedFile(Path(entry.path), int(entry.name), size))
    usual = usual_size(files)
    for prev, cur in zip(files, files[1:]):
        if prev.end == cur.start:
            continue
        if prev.size != usual and prev.start + usual == cur.start or cur.start < prev.end:
            # Name the file whose size is off (truncated or grown), at the byte where it ends.
            report(problems, FILE_SIZE, prev.path, prev.size,
                   f"a file of {cur.start - prev.start} bytes, reaching the next file "
                   f"{cur.path.name}; found {prev.size} bytes (truncated?)")
        else:
            report(problems, GAP, cur.path, None,
                   f"a file starting at {prev.end}, where {prev.path.name} ends; found one starting at "
                   f"{cur.start}: bytes [{prev.end}, {cur.start}) of the queue are missing "
                   f"(a file lost, or a stray one)")
    if problems is not None and len(files) > 1 and files[-1].size != usual:
        last = files[-1]
        problems.add(FILE_SIZE, last.path, min(last.size, usual),
                     f"a file of {usual} bytes like the others of the queue; found {last.size} bytes"
                     + (" (truncated?)" if last.size < usual else ""))
    return files


def _special_kind(entry: os.DirEntry) -> str:
    if entry.is_symlink():
        try:
            os.stat(entry.path)
        except OSError:
            return f"a symlink to nothing ({os.readlink(entry.path)})"
    try:
        mode = os.stat(entry.path).st_mode
    except OSError as exc:
        return f"an unreadable entry ({exc.strerror})"
    return "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device or special file"


def usual_size(files: list[MappedFile]) -> int | None:
    """The size most files of the queue have (the broker's mapped file size)."""
    if not files:
        return None
    sizes = [mf.size for mf in files]
    return max(set(sizes), key=lambda size: (sizes.count(size), size))


class MappedFileReader:
    """Read-only maps of a queue's files, opened on first use (``fileio.map_for_read``:
    holes read as zeros, no file descriptor held)."""

    def __init__(self, files: list[MappedFile]) -> None:
        self.files = files
        self._maps: dict[int, memoryview] = {}

    def view(self, index: int) -> memoryview:
        view = self._maps.get(index)
        if view is None:
            mf = self.files[index]
            view = memoryview(b"") if mf.size == 0 else map_for_read(mf.path)
            self._maps[index] = view
        return view

    def index_of(self, offset: int) -> int:
        """The index of the file holding ``offset``, or -1."""
        lo, hi = 0, len(self.files) - 1
        while lo <= hi:
            mid = (lo + hi) // 2
            mf = self.files[mid]
            if offset < mf.start:
                hi = mid - 1
            elif offset >= mf.end:
                lo = mid + 1
            else:
                return mid
        return -1

    def close(self) -> None:
        for view in self._maps.values():
            try:
                view.release()
            except BufferError:
                pass  # arrays still point into the map; it is unmapped when they are gone
        self._maps.clear()
