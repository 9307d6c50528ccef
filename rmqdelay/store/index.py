"""The index of a store (``index/``), read-only: its files, their geometry, and look-ups by
key and by message id as the broker's queryMessage makes them (IndexService.queryOffset).

The geometry of a file (maxHashSlotNum, maxIndexNum) is the broker's config, not in the
file; only its size (40 + 4 x slots + 20 x entries) is. rmqdelay takes it from, in order:
the broker config given (--broker-config: maxHashSlotNum / maxIndexNum), the broker's
defaults (5,000,000 / 20,000,000) when the size is theirs, and else the file itself: the
one split of its size whose last entry carries the header's endPhyOffset, whose first the
header's beginPhyOffset (and, when that is not enough to tell, whose unused entry 0 is
zeros and whose slot for the last entry's hash points at it).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError, UsageError
from rmqdelay.formats.index import (
    DEFAULT_MAX_HASH_SLOT_NUM,
    DEFAULT_MAX_INDEX_NUM,
    DEFAULT_MAX_MSGS_NUM_BATCH,
    INDEX_HEADER_SIZE,
    LONG_MAX,
    IndexHeader,
    entries_view,
    entry_position,
    index_file_size,
    index_key,
    is_time_matched,
    key_hashes,
    parse_index_header,
    select_phy_offsets,
    slots_view,
)
from rmqdelay.store import fileio
from rmqdelay.store.brokerprops import (
    bool_property,
    int_property,
    read_broker_properties,
)

INDEX_DIR = "index"
# MappedFile takes a file's name as a long (Long.parseLong); other names are skipped at load.
_NAME = re.compile(r"^\d{1,19}$")


@dataclass(frozen=True, slots=True)
class IndexSettings:
    """The broker settings that shape the index. None: the store's own (its index files), or
    the broker's default when it has none."""

    maxHashSlotNum: int | None = None
    maxIndexNum: int | None = None
    messageIndexEnable: bool = True

    @classmethod
    def from_broker_config(cls, path: Path | str | None) -> "IndexSettings":
        if path is None:
            return cls()
        props = read_broker_properties(path)
        slots = int_property(props, "maxHashSlotNum", path, 0) if "maxHashSlotNum" in props else None
        entries = int_property(props, "maxIndexNum", path, 0) if "maxIndexNum" in props else None
        return cls(slots, entries, bool_property(props, "messageIndexEnable", path, True))

    @property
    def explicit(self) -> bool:
        return self.maxHashSlotNum is not None or self.maxIndexNum is not None

    @property
    def geometry(self) -> tuple[int, int]:
        return (self.maxHashSlotNum or DEFAULT_MAX_HASH_SLOT_NUM, self.maxIndexNum or DEFAULT_MAX_INDEX_NUM)


def index_dir(store_path: Path | str) -> Path:
    return Path(store_path) / INDEX_DIR


def list_index_files(directory: Path) -> list[Path]:
    """The index files in the order IndexService.load takes them (sorted by name)."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise StoreError(directory, None, f"a readable directory ({exc.strerror})") from None
    return [Path(e.path) for e in entries if _NAME.match(e.name) and int(e.name) <= LONG_MAX and e.is_file()]


# -- geometry ----------------------------------------------------------------------------------

def _be_ints(data: np.ndarray, positions: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed ints of ``width`` bytes at each position of a uint8 array."""
    cols = data[positions[:, None] + np.arange(width)].astype(np.uint64)
    value = np.zeros(len(positions), dtype=np.uint64)
    for i in range(width):
        value = (value << np.uint64(8)) | cols[:, i]
    signed = value.astype(np.int64)
    if width == 4:
        signed = np.where(signed >= 2**31, signed - 2**32, signed)
    return signed


def infer_geometry(buf, header: IndexHeader) -> tuple[int, int] | None:
    """(maxHashSlotNum, maxIndexNum) told by a file's own bytes: the split of its size whose
    first and last entries hold the header's beginPhyOffset and endPhyOffset (and, if more
    than one does, whose entry 0 is unused and whose slot for the last entry's hash points at
    it). None when its entries cannot tell (none, or no single split fits best)."""
    size = len(buf)
    count = header.count
    if count <= 1 or (size - INDEX_HEADER_SIZE) % 4:
        return None
    quarter = (size - INDEX_HEADER_SIZE) // 4  # slots + 5 x entries
    slots = np.arange(quarter % 5, quarter + 1, 5, dtype=np.int64)
    slots = slots[slots > 0]
    entries = (quarter - slots) // 5
    keep = (entries >= count) & (slots >= header.hashSlotCount)
    slots, entries = slots[keep], entries[keep]
    if not len(slots):
        return None
    data = np.frombuffer(buf, dtype=np.uint8)
    last = INDEX_HEADER_SIZE + 4 * slots + 20 * (count - 1)
    first = INDEX_HEADER_SIZE + 4 * slots + 20
    ok = (_be_ints(data, last + 4, 8) == header.endPhyOffset) & (_be_ints(data, first + 4, 8) == header.beginPhyOffset)
    slots, entries, last = slots[ok], entries[ok], last[ok]
    if len(slots) > 1:
        # Several splits put such entries there (a record's keys share its offset). The right
        # one also has: position 0 never written, the newest entry heading its slot's chain
        # with a sane hash and prevIndex. Most of these checks passed wins.
        zero = INDEX_HEADER_SIZE + 4 * slots
        unused = np.all(data[zero[:, None] + np.arange(20)] == 0, axis=1)
        hashes = _be_ints(data, last, 4)
        prevs = _be_ints(data, last + 16, 4)
        heads = _be_ints(data, INDEX_HEADER_SIZE + 4 * (np.maximum(hashes, 0) % slots), 4)
        score = (unused.astype(int) + (hashes >= 0) + (heads == count - 1)
                 + ((prevs >= 0) & (prevs < count - 1)))
        best = score == score.max()
        slots, entries = slots[best], entries[best]
    if len(slots) != 1:
        return None
    return int(slots[0]), int(entries[0])


def file_geometry(path: Path, buf, header: IndexHeader, settings: IndexSettings) -> tuple[int, int]:
    size = len(buf)
    if settings.explicit:
        slots, entries = settings.geometry
        if index_file_size(slots, entries) != size:
            raise StoreError(path, None, f"an index file of {index_file_size(slots, entries)} bytes "
                                         f"(maxHashSlotNum={slots}, maxIndexNum={entries}), found {size} bytes")
        return slots, entries
    if size == index_file_size(DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM):
        return DEFAULT_MAX_HASH_SLOT_NUM, DEFAULT_MAX_INDEX_NUM
    found = infer_geometry(buf, header)
    if found is None:
        raise StoreError(path, None, f"an index file whose maxHashSlotNum and maxIndexNum its {size} bytes "
                                     f"and entries tell; give the broker's --broker-config")
    return found


# -- one file ------------------------------------------------------------------------------------

class IndexFileReader:
    """One index file, mapped read-only."""

    def __init__(self, path: Path, settings: IndexSettings) -> None:
        self.path = path
        self.name = path.name
        # Holes read as zeros without touching the file system: a page fault on a hole of a
        # sparse file on a full tmpfs would be a SIGBUS.
        self.buf = fileio.map_for_read(path)
        if len(self.buf) < INDEX_HEADER_SIZE:
            raise StoreError(path, 0, f"an index file of at least {INDEX_HEADER_SIZE} bytes, found {len(self.buf)}")
        self.header = parse_index_header(self.buf)
        self.hashSlotNum, self.indexNum = file_geometry(path, self.buf, self.header, settings)
        if self.header.indexCount > self.indexNum:
            raise StoreError(path, 36, f"an indexCount of at most maxIndexNum {self.indexNum}, "
                                       f"found {self.header.indexCount}")

    @property
    def entry_count(self) -> int:
        return self.header.entries

    def slots(self) -> np.ndarray:
        return slots_view(self.buf, self.hashSlotNum)

    def entries(self, first: int = 1, stop: int | None = None) -> np.ndarray:
        """Entries at positions [first, stop) (default: every entry the header counts)."""
        stop = self.header.count if stop is None else stop
        return entries_view(self.buf, self.hashSlotNum, first, stop)

    def entry_offset(self, position: int) -> int:
        """Byte offset of entry ``position`` in the file."""
        return entry_position(self.hashSlotNum, position)

    def select(self, key_hash: int, out: list[int], max_num: int, begin: int, end: int) -> None:
        select_phy_offsets(self.buf, self.header, self.hashSlotNum, key_hash, out, max_num, begin, end)

    def close(self) -> None:
        self.buf.release()  # the map goes with the last array over it


@dataclass(slots=True)
class QueryOffsetResult:
    phyOffsets: list[int] = field(default_factory=list)
    indexLastUpdateTimestamp: int = 0
    indexLastUpdatePhyoffset: int = 0


class StoreIndex:
    """Every index file of a store, oldest first, as IndexService.load keeps them."""

    def __init__(self, store_path: Path | str, settings: IndexSettings | None = None) -> None:
        self.directory = index_dir(store_path)
        self.settings = settings or IndexSettings()
        self.files: list[IndexFileReader] = []
        try:
            for path in list_index_files(self.directory):
                self.files.append(IndexFileReader(path, self.settings))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for f in self.files:
            f.close()
        self.files = []

    def __enter__(self) -> "StoreIndex":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def coverage(self) -> tuple[int, int] | None:
        """(beginPhyOffset of the oldest file with entries, endPhyOffset of the newest): the
        span of the commit log the index claims; None when it has no entries."""
        filled = [f for f in self.files if f.entry_count > 0]
        if not filled:
            return None
        return filled[0].header.beginPhyOffset, filled[-1].header.endPhyOffset

    def query_offsets(self, topic: str, key: str, max_num: int = DEFAULT_MAX_MSGS_NUM_BATCH,
                      begin: int = 0, end: int = LONG_MAX) -> QueryOffsetResult:
        """IndexService.queryOffset: files newest first, each whose time span meets
        [begin, end], stopping at a file older than ``begin`` or at ``max_num`` offsets.
        Offsets of other keys with the same hash are included, as the broker's are."""
        if max_num <= 0:
            raise UsageError(f"a maximum number of messages above 0, found {max_num}")
        result = QueryOffsetResult()
        key_hash = int(key_hashes([index_key(topic, key)])[0])
        for i in range(len(self.files) - 1, -1, -1):
            f = self.files[i]
            if i == len(self.files) - 1:
                result.indexLastUpdateTimestamp = f.header.endTimestamp
                result.indexLastUpdatePhyoffset = f.header.endPhyOffset
            if is_time_matched(f.header, begin, end):
                f.select(key_hash, result.phyOffsets, max_num, begin, end)
            if f.header.beginTimestamp < begin or len(result.phyOffsets) >= max_num:
                break
        return result
