"""`inspect index --verify`: the index against itself and against the commit log.

Each file on its own: the header (counts within maxIndexNum, begin/end offsets those of its
first and last entry, hashSlotCount the slots in use), every entry's prevIndex the previous
entry of its slot (so the broker's walk from the slot reaches every entry), every slot the
newest entry of its slot. Then against the log: every entry points at the start of a
message, with the hash of one of that message's keys and the timeDiff of its store time;
and every key of every message that buildIndex would have indexed has exactly one entry
(``index-missing`` names the message when it has none, ``index-duplicate`` when it has
more). One problem per line, with the file and the byte offset.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.formats.constants import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.formats.index import (
    INVALID_INDEX,
    IndexHeader,
    index_file_size,
    indexed_by_broker,
    key_hashes,
    message_index_keys,
    slots_position,
    time_diffs,
)
from rmqdelay.store import Store
from rmqdelay.store.index import (
    IndexFileReader,
    IndexSettings,
    index_dir,
    list_index_files,
)
from rmqdelay.store.fileio import release_pages
from rmqdelay.store.indexer import file_index_rows
from rmqdelay.store.verify import UNREADABLE, Problem

INDEX_FILE = "indexFile"
INDEX_HEADER = "indexHeader"
INDEX_SLOT = "indexSlot"
INDEX_CHAIN = "indexChain"
INDEX_ENTRY = "indexEntry"
INDEX_TIME = "indexTime"
INDEX_MISSING = "indexMissing"
INDEX_DUPLICATE = "indexDuplicate"


@dataclass(slots=True)
class IndexVerifyCounts:
    files: int = 0
    entries: int = 0
    messages: int = 0
    keys: int = 0


def _pair_keys(offsets: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """(offset, hash) pairs as 12-byte big-endian values: byte order is numeric order for
    non-negative numbers, so np.unique and searchsorted work on them directly."""
    packed = np.empty(len(offsets), dtype=[("o", ">i8"), ("h", ">i4")])
    packed["o"] = offsets
    packed["h"] = hashes
    return packed.view("V12")


def _counted(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.unique(keys, return_counts=True)


def _lookup(table: np.ndarray, counts: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """How many times each of ``wanted`` is in ``table`` (unique, sorted, with ``counts``)."""
    if not len(table):
        return np.zeros(len(wanted), dtype=np.int64)
    idx = np.minimum(np.searchsorted(table, wanted), len(table) - 1)
    return np.where(table[idx] == wanted, counts[idx], 0)


def iter_index_problems(store: Store, settings: IndexSettings | None = None,
                        counts: IndexVerifyCounts | None = None,
                        advance: Callable[[int], None] | None = None) -> Iterator[Problem]:
    settings = settings or IndexSettings()
    counts = counts if counts is not None else IndexVerifyCounts()
    advance = advance or (lambda n: None)
    directory = index_dir(store.path)
    files: list[IndexFileReader] = []
    try:
        for path in list_index_files(directory):
            try:
                files.append(IndexFileReader(path, settings))
            except StoreError as exc:
                yield Problem(INDEX_FILE, str(exc.path), exc.offset, exc.expected)
        counts.files = len(files)
        yield from _check_geometry(files)
        for f in files:
            yield from _check_file(f)
            counts.entries += f.entry_count
        yield from _check_against_log(store, files, counts, advance)
    finally:
        for f in files:
            f.close()


def _check_geometry(files: list[IndexFileReader]) -> Iterator[Problem]:
    if not files:
        return
    newest = files[-1]
    for f in files[:-1]:
        if (f.hashSlotNum, f.indexNum) != (newest.hashSlotNum, newest.indexNum):
            yield Problem(INDEX_FILE, str(f.path), None,
                          f"the geometry of the newest file (maxHashSlotNum={newest.hashSlotNum}, maxIndexNum="
                          f"{newest.indexNum}: one broker config reads them all), found {f.hashSlotNum} and "
                          f"{f.indexNum} ({index_file_size(f.hashSlotNum, f.indexNum)} bytes)")
    for prev, cur in zip(files, files[1:]):
        if cur.entry_count and prev.entry_count and cur.header.beginPhyOffset < prev.header.endPhyOffset:
            yield Problem(INDEX_HEADER, str(cur.path), 16,
                          f"a beginPhyOffset at or after the endPhyOffset {prev.header.endPhyOffset} of the file "
                          f"before it ({prev.name}), found {cur.header.beginPhyOffset}")


# Entries taken at a time: what a check holds at once is a chunk (and a table of the slots),
# not a file of up to maxIndexNum entries.
_CHUNK = 1 << 20
# Keys of the log checked at a time against the entries at their messages.
_WINDOW_KEYS = 1 << 19


def _release(f: IndexFileReader, position: int) -> None:
    """The index file's pages before entry ``position`` let go of (passed)."""
    release_pages(f.buf, f.entry_offset(position))


def _check_file(f: IndexFileReader) -> Iterator[Problem]:
    name, header = str(f.path), f.header
    count = header.count
    slots = f.slots()
    if count <= 1:
        used = np.flatnonzero(slots)
        if len(used):
            s = int(used[0])
            yield Problem(INDEX_SLOT, name, slots_position(s), f"empty slots in a file without entries, found "
                                                                 f"{len(used)} set (slot {s} holds {int(slots[s])})")
        return
    # What the broker's putKey leaves: each entry's prevIndex is the previous entry of its
    # slot; ``heads`` the newest entry of each slot so far, as the entries are walked in order.
    heads = np.zeros(f.hashSlotNum, dtype=np.int64)
    for first in range(1, count, _CHUNK):
        stop = min(first + _CHUNK, count)
        entries = f.entries(first, stop)
        positions = np.arange(first, stop, dtype=np.int64)
        hashes = entries["keyHash"].astype(np.int64)
        negative = hashes < 0
        for row in np.flatnonzero(negative):
            yield Problem(INDEX_ENTRY, name, f.entry_offset(int(positions[row])),
                          f"a keyHash of 0 or more (indexKeyHashMethod), found {int(hashes[row])}")
        slot_of = np.where(negative, 0, hashes) % f.hashSlotNum
        del hashes, negative
        order = np.argsort(slot_of, kind="stable")
        sorted_slots = slot_of[order]
        sorted_positions = positions[order]
        starts = np.ones(len(order), dtype=bool)
        starts[1:] = sorted_slots[1:] != sorted_slots[:-1]
        expected_prev = np.empty(len(order), dtype=np.int64)
        expected_prev[1:] = sorted_positions[:-1]
        expected_prev[starts] = heads[sorted_slots[starts]]
        prev_of = np.empty(len(order), dtype=np.int64)
        prev_of[order] = expected_prev
        del expected_prev
        stored_prev = entries["prevIndex"].astype(np.int64)
        for row in np.flatnonzero(stored_prev != prev_of):
            p = int(positions[row])
            got, want = int(stored_prev[row]), int(prev_of[row])
            what = ("no previous entry (0)" if want == INVALID_INDEX
                    else f"prevIndex {want}, the previous entry of its slot")
            yield Problem(INDEX_CHAIN, name, f.entry_offset(p) + 16, f"entry {p} (slot {int(slot_of[row])}): "
                                                                     f"{what}, found {got}")
        ends = np.ones(len(order), dtype=bool)
        ends[:-1] = starts[1:]
        heads[sorted_slots[ends]] = sorted_positions[ends]
        del entries, order, sorted_slots, sorted_positions, starts, ends, prev_of, stored_prev, slot_of
        _release(f, stop)
    for s in np.flatnonzero(slots != heads):
        s = int(s)
        want = int(heads[s])
        yield Problem(INDEX_SLOT, name, slots_position(s),
                      f"slot {s}: " + (f"entry {want}, the newest of the slot" if want else "empty (no entry)") +
                      f", found {int(slots[s])}")
    used = int(np.count_nonzero(heads))
    if header.hashSlotCount != used:
        yield Problem(INDEX_HEADER, name, 32, f"hashSlotCount {used} (slots in use), found {header.hashSlotCount}")
    first_phy = int(f.entries(1, 2)["phyOffset"][0])
    last_phy = int(f.entries(count - 1, count)["phyOffset"][0])
    if header.beginPhyOffset != first_phy:
        yield Problem(INDEX_HEADER, name, 16, f"beginPhyOffset {first_phy} (entry 1's), "
                                              f"found {header.beginPhyOffset}")
    if header.endPhyOffset != last_phy:
        yield Problem(INDEX_HEADER, name, 24, f"endPhyOffset {last_phy} (entry {count - 1}'s), "
                                              f"found {header.endPhyOffset}")


class _LogKeys:
    """The messages of a stretch of the log: their offsets and store times; every key
    buildIndex would put: the message's offset and the key's hash."""

    def __init__(self) -> None:
        self.offsets: list[np.ndarray] = []
        self.timestamps: list[np.ndarray] = []
        self.key_offsets: list[np.ndarray] = []
        self.key_hashes: list[np.ndarray] = []
        self.keys = 0

    def add(self, rows: list[tuple[int, int, str, list[str]]]) -> None:
        self.offsets.append(np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows)))
        self.timestamps.append(np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows)))
        keys = [k for r in rows for k in r[3]]
        self.key_offsets.append(np.repeat(self.offsets[-1], [len(r[3]) for r in rows]))
        self.key_hashes.append(key_hashes(keys))
        self.keys += len(keys)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        def cat(parts: list[np.ndarray]) -> np.ndarray:
            return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

        return cat(self.offsets), cat(self.timestamps), cat(self.key_offsets), cat(self.key_hashes)


def _ordered(f: IndexFileReader) -> bool:
    """Whether the file's entries are in the order of their phyOffset (as buildIndex puts them)."""
    last = None
    for first in range(1, f.header.count, _CHUNK):
        phy = f.entries(first, min(first + _CHUNK, f.header.count))["phyOffset"]
        if (last is not None and int(phy[0]) < last) or bool(np.any(phy[1:] < phy[:-1])):
            return False
        last = int(phy[-1])
        _release(f, first + len(phy))
    return True


def _bisect(phy: np.ndarray, value: int | None) -> int:
    """The first row of the sorted ``phy`` (a view of the map) at or after ``value`` (None:
    past them all), reading log2(n) of them."""
    if value is None:
        return len(phy)
    lo, hi = 0, len(phy)
    while lo < hi:
        mid = (lo + hi) // 2
        if int(phy[mid]) < value:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _entries_within(f: IndexFileReader, ordered: bool, lo: int | None,
                    hi: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(positions, entries) of the file's entries with a phyOffset in [lo, hi) (None: no
    bound), in the order of their position."""
    count = f.header.count
    if count <= 1:
        return np.zeros(0, dtype=np.int64), f.entries(1, 1)
    if ordered:
        phy = f.entries()["phyOffset"]
        a, b = (0 if lo is None else _bisect(phy, lo)), _bisect(phy, hi)
        return np.arange(a + 1, b + 1, dtype=np.int64), f.entries(a + 1, b + 1)
    positions, parts = [], []
    for first in range(1, count, _CHUNK):
        chunk = f.entries(first, min(first + _CHUNK, count))
        phy = chunk["phyOffset"]
        inside = np.ones(len(phy), dtype=bool)
        if lo is not None:
            inside &= phy >= lo
        if hi is not None:
            inside &= phy < hi
        rows = np.flatnonzero(inside)
        positions.append(rows + first)
        parts.append(chunk[rows])
    return np.concatenate(positions), np.concatenate(parts)


def _check_against_log(store: Store, files: list[IndexFileReader], counts: IndexVerifyCounts,
                       advance: Callable[[int], None]) -> Iterator[Problem]:
    """The log a stretch at a time (about _WINDOW_KEYS keys): its keys against the entries
    whose phyOffset lies in the stretch, so what is held does not grow with the store. The
    first stretch starts below every offset and the last ends above, so each entry is in one."""
    log = store.commitlog
    ordered = [_ordered(f) for f in files]
    keys = _LogKeys()
    lo = None
    for i, mf in enumerate(log.files):
        try:
            for rows in file_index_rows(log, i, mf.start, mf.end):
                if keys.keys >= _WINDOW_KEYS:
                    yield from _check_window(store, files, ordered, keys, lo, rows[0][0], counts)
                    keys, lo = _LogKeys(), rows[0][0]
                keys.add(rows)
        except StoreError as exc:
            yield Problem(UNREADABLE, str(exc.path), exc.offset,
                          f"{exc.expected} (the index is checked against the messages before it)")
        advance(mf.size)
    yield from _check_window(store, files, ordered, keys, lo, None, counts)


def _check_window(store: Store, files: list[IndexFileReader], ordered: list[bool], keys: _LogKeys,
                  lo: int | None, hi: int | None, counts: IndexVerifyCounts) -> Iterator[Problem]:
    msg_off, msg_ts, key_off, key_hash = keys.arrays()
    counts.messages += len(msg_off)
    counts.keys += len(key_off)
    within = [_entries_within(f, ordered[n], lo, hi) for n, f in enumerate(files)]
    entries = [e for _, e in within]
    ent_off = np.concatenate([e["phyOffset"].astype(np.int64) for e in entries]) if entries else np.zeros(0, np.int64)
    ent_hash = np.concatenate([e["keyHash"].astype(np.int64) for e in entries]) if entries else np.zeros(0, np.int64)
    expected, expected_n = _counted(_pair_keys(key_off, key_hash))
    del key_off, key_hash
    valid = ent_hash >= 0  # negative hashes were reported per file
    indexed, indexed_n = _counted(_pair_keys(ent_off[valid], ent_hash[valid]))

    # Entries: each at a message, with one of its keys, and the time of that message.
    known = _lookup(expected, expected_n, _pair_keys(ent_off, ent_hash)) > 0
    at = np.minimum(np.searchsorted(msg_off, ent_off), max(len(msg_off) - 1, 0))
    is_message = (msg_off[at] == ent_off) if len(msg_off) else np.zeros(len(ent_off), dtype=bool)
    base = 0
    for n, f in enumerate(files):
        positions, e = within[n]
        rows = slice(base, base + len(e))
        base += len(e)
        for row in np.flatnonzero(~known[rows] & valid[rows]):
            p = int(positions[row])
            phy = int(e["phyOffset"][row])
            if not is_message[rows][row]:
                yield Problem(INDEX_ENTRY, str(f.path), f.entry_offset(p),
                              f"entry {p}: a phyOffset at the start of a message, found {phy}", phy)
            else:
                yield Problem(INDEX_ENTRY, str(f.path), f.entry_offset(p),
                              f"entry {p}: the hash of a key of the message at {phy}, found keyHash "
                              f"{int(e['keyHash'][row])}", phy)
        yield from _check_times(f, e, positions, n, files, is_message[rows],
                                msg_ts[at[rows]] if len(msg_ts) else None)
    for n, f in enumerate(files):
        if ordered[n] and len(within[n][0]):
            _release(f, int(within[n][0][-1]) + 1)
    del within, entries

    # Keys: each indexed exactly once.
    have = _lookup(indexed, indexed_n, expected)
    short = np.flatnonzero(have < expected_n)
    extra = np.flatnonzero(have > expected_n)
    pairs = expected.view([("o", ">i8"), ("h", ">i4")])
    yield from _report_keys(store, pairs[short], have[short], expected_n[short], missing=True)
    yield from _report_keys(store, pairs[extra], have[extra], expected_n[extra], missing=False)


def _check_times(f: IndexFileReader, e: np.ndarray, positions: np.ndarray, n: int, files: list[IndexFileReader],
                 is_message: np.ndarray, store_ts: np.ndarray | None) -> Iterator[Problem]:
    """timeDiff = whole seconds from the file's beginTimestamp to the message's store time;
    the first entry's is from the begin the file was created with (the previous file's end),
    not known for the oldest file. ``e`` the entries at ``positions`` of the file."""
    if store_ts is None or not len(e):
        return
    begin = np.full(len(e), f.header.beginTimestamp, dtype=np.int64)
    check = is_message.copy()
    first = positions[0] == 1
    if first:
        if n == 0:
            check[0] = False
        else:
            begin[0] = max(files[n - 1].header.endTimestamp, 0)
    want = time_diffs(store_ts, begin)
    got = e["timeDiff"].astype(np.int64)
    for row in np.flatnonzero(check & (got != want)):
        p = int(positions[row])
        yield Problem(INDEX_TIME, str(f.path), f.entry_offset(p) + 12,
                      f"entry {p}: timeDiff {int(want[row])} (the message's store time {int(store_ts[row])} less "
                      f"beginTimestamp, in seconds), found {int(got[row])}", int(e["phyOffset"][row]))
    if first and f.header.beginTimestamp != int(store_ts[0]) and is_message[0]:
        yield Problem(INDEX_HEADER, str(f.path), 0, f"beginTimestamp {int(store_ts[0])} (entry 1's message), "
                                                    f"found {f.header.beginTimestamp}")
    if positions[-1] == f.header.count - 1 and f.header.endTimestamp != int(store_ts[-1]) and is_message[-1]:
        yield Problem(INDEX_HEADER, str(f.path), 8, f"endTimestamp {int(store_ts[-1])} (the last entry's message), "
                                                    f"found {f.header.endTimestamp}")


def _report_keys(store: Store, pairs: np.ndarray, have: np.ndarray, want: np.ndarray,
                 *, missing: bool) -> Iterator[Problem]:
    """One line per message: the keys it lacks entries for (or has too many of)."""
    by_message: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for (off, h), got, wanted in zip(pairs.tolist(), have.tolist(), want.tolist()):
        by_message[int(off)].append((int(h), got, wanted))
    log = store.commitlog
    for off in sorted(by_message):
        index = log.file_index(off)
        mf = log.files[index]
        msg = log.read_message(off)
        keys = message_index_keys(msg.topic, msg.properties.get(PROPERTY_KEYS),
                                  msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)) \
            if indexed_by_broker(msg.sysFlag) else []
        names = dict(zip(key_hashes(keys).tolist(), keys))
        if missing:
            listed = ", ".join(repr(names.get(h, f"hash {h}")) + ("" if got == 0 else f" ({got} of {wanted})")
                               for h, got, wanted in by_message[off])
            yield Problem(INDEX_MISSING, str(mf.path), off - mf.start,
                          f"index entries for {listed} of this message, found none", off)
        else:
            listed = ", ".join(f"{names.get(h, f'hash {h}')!r} {got} times" for h, got, wanted in by_message[off])
            yield Problem(INDEX_DUPLICATE, str(mf.path), off - mf.start,
                          f"one index entry per key of this message, found {listed}", off)


def header_summary(header: IndexHeader) -> dict:
    return {"beginTimestamp": header.beginTimestamp, "endTimestamp": header.endTimestamp,
            "beginPhyOffset": header.beginPhyOffset, "endPhyOffset": header.endPhyOffset,
            "hashSlotCount": header.hashSlotCount, "indexCount": header.indexCount}


