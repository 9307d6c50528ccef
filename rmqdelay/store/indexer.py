"""The write side of ``index/``: what IndexService.buildIndex does for every record the one
writer appends, and the same over a commit log to rebuild or complete an index.

Every dispatched record but a transaction rollback gets an entry for ``topic#UNIQ_KEY`` and
one for ``topic#k`` per token of KEYS, in commit log order; a full file (indexCount =
maxIndexNum) rolls into a new one named by local time (UtilAll.timeMillisToHumanString)
whose begin is the previous file's end. The bytes are the broker's: rebuilding a real
broker's index from its commit log gives its file back, byte for byte.

Crash safety. Files are written with pwrite, never through a writable map, so a full disk
is an error (ENOSPC) and never a SIGBUS; new files are sparse, as the broker's are. A batch
goes in this order: entries (past indexCount: invisible), slots, [fsync], header (the
commit), [fsync]. A kill at any point leaves a header that counts only whole entries; slots
that point at uncounted entries are repaired on the next open, from the counted entries.
The next open also indexes what the commit log holds past the index (the records of the
batch that was lost, records appended by an older rmqdelay): resuming at the header's
endPhyOffset, with the keys of that last record already there left out, so every record is
indexed once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError, UsageError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.index import (
    ENTRY_DTYPE,
    INDEX_ENTRY_SIZE,
    INDEX_HEADER_SIZE,
    SLOT_DTYPE,
    IndexHeader,
    append_entries,
    build_index_header,
    entry_position,
    index_file_size,
    indexed_by_broker,
    key_hashes,
    message_index_keys,
    new_file_header,
    parse_index_header,
    slots_position,
)
from rmqdelay.formats.properties import property_value
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.durable import fsync_dir
from rmqdelay.store.fileio import release_pages
from rmqdelay.store.index import IndexFileReader, IndexSettings, list_index_files

# Slots closer than this many are written in one pwrite (a page of them).
_SLOT_RUN_GAP = 1024


def index_file_name(ms: int, after: str | None = None) -> str:
    """yyyyMMddHHmmssSSS of ``ms`` in the local time zone (the broker names a new file by
    its own clock, Calendar.getInstance()); the name after ``after`` when it would not sort
    after it, so that the files keep their order (IndexService.load sorts them by name)."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"
    if after is not None and int(stamp) <= int(after):
        stamp = str(int(after) + 1).zfill(len(after))
    return stamp


def pwrite_all(fd: int, data, pos: int, path: Path) -> None:
    """Write all of ``data`` at ``pos``; a failed or short write is an error."""
    view = memoryview(data).cast("B")
    while view:
        try:
            written = os.pwrite(fd, view, pos)
        except OSError as exc:
            raise StoreError(path, pos, f"room to write {len(view)} bytes ({exc.strerror})") from None
        if written <= 0:
            raise StoreError(path, pos, f"room to write {len(view)} bytes (wrote none)")
        view = view[written:]
        pos += written


def _pread_exact(fd: int, size: int, pos: int, path: Path) -> bytes:
    data = os.pread(fd, size, pos)
    if len(data) != size:
        raise StoreError(path, pos + len(data), f"{size} bytes of index file, found {len(data)}")
    return data


def _check_geometry(hash_slot_num: int, index_num: int) -> None:
    if hash_slot_num < 1 or index_num < 2:
        raise UsageError(f"maxHashSlotNum of at least 1 and maxIndexNum of at least 2 (a file holds maxIndexNum - 1 "
                         f"entries), found {hash_slot_num} and {index_num}")
    if index_file_size(hash_slot_num, index_num) > 0x7FFFFFFF:
        raise UsageError(f"an index file the broker can map (below 2 GiB: IndexFile's size is an int), found "
                         f"{index_file_size(hash_slot_num, index_num)} bytes for maxHashSlotNum={hash_slot_num}, "
                         f"maxIndexNum={index_num}")


@dataclass(slots=True)
class IndexRecovery:
    """What opening the index found and finished."""

    repairedSlots: int = 0  # slots that pointed at entries a crash left uncounted
    indexed: int = 0  # records indexed on open (the commit log ran ahead of the index)


class _FileWriter:
    """The newest index file, open for appending: its header and slots in memory (the slots
    read on first use)."""

    def __init__(self, path: Path, fd: int, hash_slot_num: int, index_num: int, header: IndexHeader,
                 slots: np.ndarray | None = None) -> None:
        self.path = path
        self.fd = fd
        self.hashSlotNum = hash_slot_num
        self.indexNum = index_num
        self.header = header
        self._slots = slots
        self._changed: list[np.ndarray] = []
        self._changed_count = 0
        self.uncommitted = False  # entries or slots written that the header on disk does not count
        self.repaired = 0  # slots repaired when they were read

    @property
    def slots(self) -> np.ndarray:
        if self._slots is None:
            slots = np.empty(self.hashSlotNum, dtype=SLOT_DTYPE)
            view = memoryview(slots).cast("B")
            done = 0
            while done < len(view):
                got = os.preadv(self.fd, [view[done:]], INDEX_HEADER_SIZE + done)
                if got <= 0:
                    raise StoreError(self.path, INDEX_HEADER_SIZE + done, f"{len(view)} bytes of hash slots")
                done += got
            self._slots = slots
            self.repaired = self._repair_slots()
        return self._slots

    @classmethod
    def open(cls, path: Path, hash_slot_num: int, index_num: int) -> "_FileWriter":
        fd = os.open(path, os.O_RDWR)
        try:
            if os.fstat(fd).st_size != index_file_size(hash_slot_num, index_num):
                raise StoreError(path, None, f"an index file of {index_file_size(hash_slot_num, index_num)} bytes")
            header = parse_index_header(_pread_exact(fd, INDEX_HEADER_SIZE, 0, path))
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, hash_slot_num, index_num, header)

    @classmethod
    def create(cls, path: Path, hash_slot_num: int, index_num: int, header: IndexHeader) -> "_FileWriter":
        """A new file, sparse like the broker's (RandomAccessFile.setLength), with the header
        IndexFile's constructor leaves (begin = end = the previous file's end, counts 0)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise StoreError(path, None, f"a new index file ({exc.strerror})") from None
        try:
            os.ftruncate(fd, index_file_size(hash_slot_num, index_num))
            pwrite_all(fd, build_index_header(header), 0, path)
            os.fsync(fd)
        except OSError as exc:
            os.close(fd)
            raise StoreError(path, None, f"a new index file ({exc.strerror})") from None
        except BaseException:
            os.close(fd)
            raise
        fsync_dir(path.parent)
        return cls(path, fd, hash_slot_num, index_num, header,
                   np.zeros(hash_slot_num, dtype=SLOT_DTYPE))

    @property
    def full(self) -> bool:
        return self.header.count >= self.indexNum

    def read_entries(self, first: int, stop: int) -> np.ndarray:
        size = (stop - first) * INDEX_ENTRY_SIZE
        data = _pread_exact(self.fd, size, entry_position(self.hashSlotNum, first), self.path) if size > 0 else b""
        return np.frombuffer(data, dtype=ENTRY_DTYPE)

    def _repair_slots(self) -> int:
        """Slots that point at or past indexCount (set by a batch whose header was never
        written) get back the newest counted entry of their slot: found by following the
        uncounted entries' prevIndex down below indexCount, or, when those entries do not
        hold together (a power loss kept the slots but not them), from every counted entry."""
        count = self.header.count
        damaged = np.flatnonzero((self._slots < 0) | (self._slots >= count))
        if not len(damaged):
            return 0
        heads = self._heads_by_walking(damaged)
        if heads is None:
            heads = self._heads_by_scanning(damaged)
        self._slots[damaged] = heads
        self._changed.append(damaged)
        self.commit(sync=True)
        return len(damaged)

    def _heads_by_walking(self, damaged: np.ndarray) -> np.ndarray | None:
        count = self.header.count
        values = self._slots[damaged].astype(np.int64)
        if (values < 0).any() or (values >= self.indexNum).any():
            return None
        top = int(values.max()) + 1
        uncounted = self.read_entries(count, top)
        hashes = uncounted["keyHash"].astype(np.int64)
        prevs = uncounted["prevIndex"].astype(np.int64)
        heads = np.empty(len(damaged), dtype=np.int64)
        for i, (slot, value) in enumerate(zip(damaged.tolist(), values.tolist())):
            while value >= count:
                j = value - count
                if hashes[j] < 0 or hashes[j] % self.hashSlotNum != slot or not 0 <= prevs[j] < value:
                    return None
                value = int(prevs[j])
            heads[i] = value
        return heads

    def _heads_by_scanning(self, damaged: np.ndarray) -> np.ndarray:
        count = self.header.count
        heads = np.zeros(self.hashSlotNum, dtype=np.int64)
        chunk = 1 << 20
        for first in range(1, count, chunk):
            stop = min(first + chunk, count)
            slot_of = self.read_entries(first, stop)["keyHash"].astype(np.int64) % self.hashSlotNum
            np.maximum.at(heads, slot_of, np.arange(first, stop, dtype=np.int64))
        return heads[damaged]

    def trailing(self, phy_offset: int) -> tuple[int, bool]:
        """How many of the newest counted entries point at ``phy_offset``, and whether that
        run reaches the first entry."""
        found = 0
        stop = self.header.count
        while stop > 1:
            first = max(1, stop - 256)
            offsets = self.read_entries(first, stop)["phyOffset"][::-1]
            same = offsets == phy_offset
            run = len(same) if same.all() else int(np.argmin(same))
            found += run
            if run < len(same):
                return found, False
            stop = first
        return found, True

    def put(self, hashes: np.ndarray, offsets: np.ndarray, timestamps: np.ndarray) -> int:
        """Write entries for as many keys as fit (not yet committed); returns how many."""
        first = self.header.count
        entries, changed = append_entries(self.header, self.slots, hashes, offsets, timestamps, self.indexNum)
        if len(entries):
            self.uncommitted = True
            pwrite_all(self.fd, entries, entry_position(self.hashSlotNum, first), self.path)
            self._changed.append(changed)
            self._changed_count += len(changed)
            if self._changed_count > 2 * self.hashSlotNum:  # a long run without a commit
                self._changed = [self._changed_slots()]
                self._changed_count = len(self._changed[0])
        return len(entries)

    def commit(self, sync: bool) -> None:
        """Slots, [fsync], then the header: from here the new entries count."""
        self.write_slots()
        if sync:
            os.fsync(self.fd)
        pwrite_all(self.fd, build_index_header(self.header), 0, self.path)
        if sync:
            os.fsync(self.fd)
        self.uncommitted = False

    def write_slots(self) -> None:
        """The slots changed since the last commit, in runs of nearby slots."""
        if not self._changed:
            return
        changed = self._changed_slots()
        self._changed.clear()
        self._changed_count = 0
        breaks = np.flatnonzero(np.diff(changed) > _SLOT_RUN_GAP) + 1
        for run in np.split(changed, breaks):
            lo, hi = int(run[0]), int(run[-1]) + 1
            pwrite_all(self.fd, self.slots[lo:hi], slots_position(lo), self.path)

    def _changed_slots(self) -> np.ndarray:
        """The slots changed since the last commit, sorted, each once."""
        changed = np.concatenate(self._changed)
        if len(changed) < self.hashSlotNum // 8:
            # A sort and a look at neighbours: numpy's unique (hash-based) takes 30 times longer
            # on a few hundred thousand slots.
            changed = np.sort(changed)
            return changed[np.concatenate(([True], changed[1:] != changed[:-1]))] if len(changed) else changed
        seen = np.zeros(self.hashSlotNum, dtype=bool)  # many: a mask, not a sort
        seen[changed] = True
        return np.flatnonzero(seen)

    def close(self) -> None:
        os.close(self.fd)


class MessageIndexer:
    """Index entries for records as they are appended; ``flush`` writes them. Holds the
    newest index file open; the files before it are never written again."""

    def __init__(self, directory: Path, settings: IndexSettings | None = None, *, sync: bool = True) -> None:
        self.directory = directory
        self.settings = settings or IndexSettings()
        self.sync = sync
        self.recovery = IndexRecovery()
        self._keys: list[str] = []
        self._records: list[tuple[int, int, int]] = []  # (offset, store time, keys) of each record queued
        self._appended: list[tuple[int, int, str, str | None, str | None]] = []  # add()ed, keys not built yet
        # Entries queued before the keys above, hashed: (key hashes, offsets, store times) arrays.
        self._hashed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._file: _FileWriter | None = None
        self._names = [p.name for p in list_index_files(directory)]
        self._previous: IndexHeader | None = None  # the header of the file before the open one
        self.hashSlotNum, self.indexNum = self.settings.geometry
        _check_geometry(self.hashSlotNum, self.indexNum)
        self.resume_offset = -1  # no record at a lower offset is indexed (buildIndex's rule)
        self._resume_done = 0  # keys of the record at resume_offset already in the index
        self.end_timestamp = 0  # endTimestamp of the newest committed entry
        if self._names:
            self._open_existing()

    # -- open ------------------------------------------------------------------------------
    def _open_existing(self) -> None:
        paths = [self.directory / n for n in self._names]
        readers: list[IndexFileReader] = []
        try:
            for path in paths:
                try:
                    readers.append(IndexFileReader(path, self.settings))
                except StoreError:
                    if path != paths[-1] or not readers:
                        raise
                    readers.append(None)  # an empty newest file: takes the geometry of the others
            last = readers[-1]
            geometry = (last.hashSlotNum, last.indexNum) if last is not None else \
                (readers[-2].hashSlotNum, readers[-2].indexNum)
            if self.settings.explicit and geometry != self.settings.geometry:
                raise UsageError(f"{paths[-1]}: written with maxHashSlotNum={geometry[0]}, maxIndexNum="
                                 f"{geometry[1]}; the broker config says {self.settings.geometry[0]} and "
                                 f"{self.settings.geometry[1]}")
            self.hashSlotNum, self.indexNum = geometry
            headers = [r.header if r is not None else None for r in readers]
        finally:
            for r in readers:
                if r is not None:
                    r.close()
        self._file = _FileWriter.open(paths[-1], self.hashSlotNum, self.indexNum)
        # The 20 MB of slots (default size) are read now, not at the first delivery's flush,
        # and repaired if a kill left them pointing past indexCount.
        self._file.slots
        self.recovery.repairedSlots = self._file.repaired
        if len(paths) > 1:
            self._previous = headers[-2]
        header = self._file.header
        if header.count <= 1 and header == IndexHeader() and self._previous is not None:
            # Created by a roll that was cut short before its header went in.
            self._file.header = new_file_header(self._previous)
        # Where indexing resumes: the record of the newest entry, less its keys already there.
        for i in range(len(paths) - 1, -1, -1):
            h = self._file.header if i == len(paths) - 1 else headers[i]
            if h is None or h.count <= 1:
                continue
            self.resume_offset = h.endPhyOffset
            self.end_timestamp = h.endTimestamp
            self._resume_done = self._trailing(paths, headers, i, h.endPhyOffset)
            break
        else:
            self.resume_offset = max(self._file.header.endPhyOffset, 0)

    def _trailing(self, paths: list[Path], headers: list, i: int, phy: int) -> int:
        done = 0
        while i >= 0:
            h = self._file.header if i == len(paths) - 1 else headers[i]
            if h is None or h.count <= 1 or h.endPhyOffset != phy:
                break
            f = self._file if i == len(paths) - 1 else _FileWriter.open(paths[i], self.hashSlotNum, self.indexNum)
            try:
                found, whole = f.trailing(phy)
            finally:
                if f is not self._file:
                    f.close()
            done += found
            if not whole:
                break
            i -= 1
        return done

    # -- adding ----------------------------------------------------------------------------
    def add(self, phy_offset: int, store_timestamp: int, topic: str, keys: str | None, uniq_key: str | None,
            sys_flag: int) -> None:
        """buildIndex for one appended record: its KEYS and UNIQ_KEY as the broker reads them
        from the stored properties."""
        if phy_offset <= self.resume_offset:
            if phy_offset == self.resume_offset and indexed_by_broker(sys_flag):
                self.add_keys(phy_offset, store_timestamp, message_index_keys(topic, keys, uniq_key))
            return
        if (keys or uniq_key is not None) and indexed_by_broker(sys_flag):
            # Keys are built at flush, for a whole batch: put() stays a tuple append.
            self._appended.append((phy_offset, store_timestamp, topic, keys, uniq_key))

    def add_hashed(self, hashes: np.ndarray, offsets: np.ndarray, store_timestamps: np.ndarray) -> None:
        """``add`` for many records at once, their keys already hashed (IndexFile.indexKeyHashMethod
        of each ``topic#key``, in buildIndex's order), one entry a row: the physical offset
        and store timestamp of its record. The records are new ones, from the resume point on:
        of a record at the resume point (written again where a crash tore one), the keys the
        index already holds are left out, as ``add_keys`` leaves them out."""
        if not len(hashes):
            return
        first = int(offsets[0])
        if first <= self.resume_offset:
            if first < self.resume_offset:
                raise UsageError(f"index entries of records at {first}, not after the index's last "
                                 f"record at {self.resume_offset}")
            skip = min(self._resume_done, int(np.searchsorted(offsets, first, "right")))
            hashes, offsets, store_timestamps = hashes[skip:], offsets[skip:], store_timestamps[skip:]
            self._resume_done = 0
            self.resume_offset = -1
            if not len(hashes):
                return
        self._settle()
        self._hashed.append((hashes, offsets, store_timestamps))

    def _settle(self) -> None:
        """The keys queued so far, hashed, after the entries hashed before them."""
        self._expand()
        if not self._keys:
            return
        records = np.array(self._records, dtype=np.int64).reshape(-1, 3)
        self._hashed.append((key_hashes(self._keys), np.repeat(records[:, 0], records[:, 2]),
                             np.repeat(records[:, 1], records[:, 2])))
        self._keys.clear()
        self._records.clear()

    def add_stored(self, phy_offset: int, store_timestamp: int, topic: str, properties_raw: str,
                   sys_flag: int) -> None:
        """``add`` for a record whose properties are at hand only as stored."""
        self.add(phy_offset, store_timestamp, topic, property_value(properties_raw, PROPERTY_KEYS),
                 property_value(properties_raw, PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), sys_flag)

    def add_keys(self, phy_offset: int, store_timestamp: int, keys: list[str]) -> int:
        """Queue the keys of one record; returns how many (fewer for the record at the resume
        point, whose first keys a crash left in the index)."""
        self._expand()
        if phy_offset == self.resume_offset and self._resume_done:
            keys = keys[self._resume_done:]
        self._resume_done = 0
        self.resume_offset = -1
        if keys:
            self._keys.extend(keys)
            self._records.append((phy_offset, store_timestamp, len(keys)))
        return len(keys)

    def _expand(self) -> None:
        """The keys of the records ``add`` queued, in order."""
        if not self._appended:
            return
        keys_out, records = self._keys, self._records
        for phy, ts, topic, keys, uniq in self._appended:
            found = message_index_keys(topic, keys, uniq)
            if found:
                keys_out.extend(found)
                records.append((phy, ts, len(found)))
        self._appended.clear()

    @property
    def pending(self) -> int:
        return len(self._keys) + len(self._appended) + sum(len(h) for h, _, _ in self._hashed)

    def catch_up(self, commitlog: CommitLog, stop: int) -> int:
        """Index the records of [resume point, stop) that the index lacks; returns how many."""
        start = max(self.resume_offset, commitlog.min_offset)
        before = self.pending
        records = 0
        for batch in index_columns(commitlog, start, stop):
            for phy, ts, _, keys in batch:
                records += self.add_keys(phy, ts, keys) > 0
            if self.pending - before >= 1 << 16:
                self.flush()
                self._commit()
                before = self.pending
        self.flush()
        self._commit()
        self.recovery.indexed += records
        return records

    # -- writing ---------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the pending entries and their slots. They count (the header is written) at
        once when ``sync``, else at ``sync_to_disk``/``close``: a header never counts entries
        that are not on disk before it. A file that fills up is committed before the next."""
        self._settle()
        if not self._hashed:
            return
        hashed = self._hashed
        if len(hashed) == 1:
            hashes, offsets, timestamps = hashed[0]
        else:
            hashes, offsets, timestamps = (np.concatenate(column) for column in zip(*hashed))
        hashed.clear()
        done = 0
        while done < len(hashes):
            f = self._writable(int(timestamps[done]))
            done += f.put(hashes[done:], offsets[done:], timestamps[done:])
            if f.full:
                self._commit()
        if self.sync:
            self._commit()

    def _commit(self) -> None:
        f = self._file
        if f is not None and f.uncommitted:
            f.commit(sync=True)
            self.end_timestamp = f.header.endTimestamp

    def _writable(self, store_timestamp: int) -> _FileWriter:
        """The newest file, or a new one when it is full or there is none (getAndCreateLastIndexFile)."""
        f = self._file
        if f is not None and not f.full:
            return f
        if not self.directory.exists():
            self.directory.mkdir(parents=True)
            fsync_dir(self.directory.parent)
        name = index_file_name(store_timestamp, self._names[-1] if self._names else None)
        previous = f.header if f is not None else None
        new = _FileWriter.create(self.directory / name, self.hashSlotNum, self.indexNum, new_file_header(previous))
        if f is not None:
            f.close()  # committed when it filled up
        self._names.append(name)
        self._previous = previous
        self._file = new
        return new

    def sync_to_disk(self) -> None:
        self.flush()
        self._commit()

    def close(self) -> None:
        self.flush()
        self._commit()
        if self._file is not None:
            self._file.close()
            self._file = None

    def abandon(self) -> None:
        """Close without writing another byte (the writer stopped on an error): entries not
        committed are indexed again from the commit log on the next open."""
        self._keys.clear()
        self._records.clear()
        self._hashed.clear()
        if self._file is not None:
            self._file.close()
            self._file = None


# -- the commit log, as buildIndex sees it ------------------------------------------------------

# Below this many bytes a gap is read record by record: the columnar scan (pyarrow) costs
# more to start than it saves.
_SMALL_GAP = 1 << 20


def index_columns(commitlog: CommitLog, start: int, stop: int) -> Iterator[list[tuple[int, int, str, list[str]]]]:
    """(physical offset, store time, topic, index keys) of every record in [start, stop), in
    batches; the keys are those buildIndex puts (none for a rollback). ``start`` need not be
    a record boundary (records before it are passed over)."""
    index = commitlog.file_index(start)
    if index < 0:
        return
    if stop - start < _SMALL_GAP and _is_message_at(commitlog, start):
        rows = []
        for msg in commitlog.records(start):
            if msg.commitLogOffset >= stop:
                break
            props = msg.properties
            keys = []
            if indexed_by_broker(msg.sysFlag):
                keys = message_index_keys(msg.topic, props.get(PROPERTY_KEYS),
                                          props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX))
            rows.append((msg.commitLogOffset, msg.storeTimestamp, msg.topic, keys))
        if rows:
            yield rows
        return
    for i in range(index, len(commitlog.files)):
        if commitlog.files[i].start >= stop:
            return
        yield from file_index_rows(commitlog, i, start, stop)


# What buildIndex reads of a message (the rest of a record, its body and properties, not copied).
_INDEX_COLUMNS = ("commitlog_offset", "store_timestamp", "sys_flag", "topic", "keys", "uniq_key")
_INDEX_BATCH_ROWS = 1 << 16


def file_index_rows(commitlog: CommitLog, i: int, start: int, stop: int) -> Iterator[list[tuple[int, int, str, list[str]]]]:
    """``index_columns`` over one commit log file; a bad record raises StoreError after the
    rows before it."""
    from rmqdelay.formats.scan import decode_records  # pyarrow: only for a long read

    mf = commitlog.files[i]
    pos = max(start - mf.start - mf.header, 0)  # a record's offset, or in a DLedger file its entry's
    if pos and not _is_message_at(commitlog, mf.start + pos + mf.header):
        pos = 0  # not a record boundary: walk the file from its start
    view = None
    try:
        view = commitlog.view(i)
        for batch in decode_records(view, store="", file=mf.path.name, start=pos, limit=mf.limit,
                                    header=mf.header, columns=_INDEX_COLUMNS, batch_rows=_INDEX_BATCH_ROWS):
            offsets = batch.column("commitlog_offset").to_numpy()
            keep = ((offsets >= start) & (offsets < stop)).tolist()
            columns = zip(offsets.tolist(), batch.column("store_timestamp").to_numpy().tolist(),
                          batch.column("sys_flag").to_numpy().tolist(), batch.column("topic").to_pylist(),
                          batch.column("keys").to_pylist(), batch.column("uniq_key").to_pylist(), keep)
            rows = [(phy, ts, topic, message_index_keys(topic, keys, uniq) if indexed_by_broker(flag) else [])
                    for phy, ts, flag, topic, keys, uniq, wanted in columns if wanted]
            # What the rows need is copied out of the map: the pages passed leave this
            # process (the page cache keeps them), so a reader of the whole log holds a
            # batch of it, not all of it -- nor the tail of each file it has passed.
            release_pages(view, int(offsets[-1]) - mf.start)
            if rows:
                yield rows
            if offsets[-1] >= stop:
                return
    except FormatError as exc:
        raise StoreError(mf.path, exc.offset, exc.expected) from None
    finally:
        if view is not None:
            release_pages(view, mf.size)


def _is_message_at(commitlog: CommitLog, offset: int) -> bool:
    try:
        return isinstance(commitlog.read_record(offset), Message)
    except StoreError:
        return False


def rebuild_index(commitlog: CommitLog, directory: Path, settings: IndexSettings | None = None,
                  *, sync: bool = False) -> MessageIndexer:
    """Index a whole commit log into an empty ``directory``, as a broker dispatching it from
    the start would have (tests hold it to the broker's own files)."""
    if list_index_files(directory):
        raise UsageError(f"{directory}: already holds index files; rebuild into an empty directory")
    indexer = MessageIndexer(directory, settings, sync=sync)
    try:
        indexer.catch_up(commitlog, commitlog.files[-1].end if commitlog.files else 0)
    finally:
        indexer.close()
    return indexer
