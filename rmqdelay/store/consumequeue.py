"""One consume queue (consumequeue/TOPIC/QUEUEID/...), read-only."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import CQ_STORE_UNIT_SIZE
from rmqdelay.formats.consumequeue import CqUnit, decode_units
from rmqdelay.store.mappedfiles import MappedFile, MappedFileReader, list_mapped_files


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int) -> None:
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.files: list[MappedFile] = list_mapped_files(directory)
        for mf in self.files:
            if mf.start % CQ_STORE_UNIT_SIZE or mf.size % CQ_STORE_UNIT_SIZE:
                raise StoreError(mf.path, None, f"a consume queue file of whole {CQ_STORE_UNIT_SIZE}-byte units "
                                                f"({mf.size} bytes, starting at {mf.start})")
        self._reader = MappedFileReader(self.files)
        self._max_offset: int | None = None

    def close(self) -> None:
        self._reader.close()

    @property
    def file_size(self) -> int | None:
        return self.files[0].size if self.files else None

    def file_units(self, index: int) -> np.ndarray:
        return decode_units(self._reader.view(index))

    @property
    def max_offset(self) -> int:
        """The logical offset after the last written unit (ConsumeQueue.recover's rule:
        the first unit with offset < 0 or size <= 0 ends the queue)."""
        if self._max_offset is None:
            end = self.files[0].start // CQ_STORE_UNIT_SIZE if self.files else 0
            for index in range(len(self.files) - 1, -1, -1):
                units = self.file_units(index)
                valid = (units["commitLogOffset"] >= 0) & (units["size"] > 0)
                if not valid.any() and index > 0:
                    continue
                first_invalid = int(np.argmin(valid)) if not valid.all() else len(units)
                end = self.files[index].start // CQ_STORE_UNIT_SIZE + first_invalid
                break
            self._max_offset = end
        return self._max_offset

    @property
    def min_offset(self) -> int:
        """The first logical offset with a real unit (pre-blank units are skipped)."""
        if not self.files:
            return 0
        for index in range(len(self.files)):
            units = self.file_units(index)
            real = (units["size"] > 0) & (units["size"] != 0x7FFFFFFF)
            if real.any():
                return self.files[index].start // CQ_STORE_UNIT_SIZE + int(np.argmax(real))
        return self.max_offset

    def units(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Units [start, stop) as one structured array (stop defaults to max_offset)."""
        stop = self.max_offset if stop is None else min(stop, self.max_offset)
        parts = []
        for index, mf in enumerate(self.files):
            first = mf.start // CQ_STORE_UNIT_SIZE
            last = first + mf.size // CQ_STORE_UNIT_SIZE
            if last <= start or first >= stop:
                continue
            units = self.file_units(index)
            parts.append(units[max(start, first) - first:min(stop, last) - first])
        if not parts:
            return decode_units(b"")
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def unit(self, offset: int) -> CqUnit | None:
        units = self.units(offset, offset + 1)
        if len(units) == 0:
            return None
        u = units[0]
        return CqUnit(int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"]))

    @property
    def max_physic_offset(self) -> int:
        """The commit log offset just after the last unit's message (ConsumeQueue.maxPhysicOffset)."""
        if self.max_offset == 0 or self.max_offset <= (self.files[0].start // CQ_STORE_UNIT_SIZE if self.files else 0):
            return -1
        u = self.unit(self.max_offset - 1)
        return u.commitLogOffset + u.size
