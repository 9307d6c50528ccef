"""A folder of files named by their 20-digit start offset (MappedFileQueue), read-only."""

from __future__ import annotations

import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError

_NAME = re.compile(r"^\d{20}$")


@dataclass(slots=True, frozen=True)
class MappedFile:
    path: Path
    start: int  # offset of the file's first byte in the whole queue
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size


def list_mapped_files(directory: Path) -> list[MappedFile]:
    """The files of one queue in offset order; sizes read from the files themselves."""
    files = []
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(directory, None, f"a readable directory ({exc.strerror})") from None
    for entry in entries:
        if not _NAME.match(entry.name) or not entry.is_file():
            continue
        files.append(MappedFile(Path(entry.path), int(entry.name), entry.stat().st_size))
    for prev, cur in zip(files, files[1:]):
        if prev.end != cur.start:
            # Name the file whose size is off (truncated or grown), at the byte where it ends.
            raise StoreError(prev.path, prev.size,
                             f"a file of {cur.start - prev.start} bytes, reaching the next file "
                             f"{cur.path.name}; found {prev.size} bytes (truncated?)")
    return files


class MappedFileReader:
    """Read-only maps of a queue's files, opened on first use."""

    def __init__(self, files: list[MappedFile]) -> None:
        self.files = files
        self._maps: dict[int, memoryview] = {}

    def view(self, index: int) -> memoryview:
        view = self._maps.get(index)
        if view is None:
            mf = self.files[index]
            if mf.size == 0:
                view = memoryview(b"")
            else:
                try:
                    with open(mf.path, "rb") as fh:
                        view = memoryview(mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ))
                except OSError as exc:
                    raise StoreError(mf.path, None, f"a readable file ({exc.strerror})") from None
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
            obj = view.obj
            try:
                view.release()
                if isinstance(obj, mmap.mmap):
                    obj.close()
            except BufferError:
                pass  # arrays still point into the map; it closes when they are gone
        self._maps.clear()
