"""StoreWriter's flush: what makes appended records durable, in order.

Order of every flush: commit log records are written (and fsynced), then their consume
queue units, then the checkpoint - records durable, then units (and, later, the index),
then the checkpoint. A flush that fails part way is undone (``FlushJournal``): its records
and units go, and the store is as it was before it. With ``sync=False`` nothing is fsynced
by ``flush`` and the checkpoint waits for ``sync_to_disk``: it may only name records that
are durable.
"""

from __future__ import annotations

import os
from pathlib import Path

from rmqdelay.errors import StoreWriteError
from rmqdelay.formats.checkpoint import CHECKPOINT_FILE_SIZE, build_checkpoint
from rmqdelay.store import fileio
from rmqdelay.store.writefiles import FlushJournal, unlink_quietly


class Flush:
    """StoreWriter's flushing and syncing. A part of StoreWriter (whose state it works on), not
    used alone."""

    def flush(self) -> None:
        """Write pending records (fsync), then their units (fsync), then the checkpoint.
        With ``sync=False`` nothing is fsynced here and the checkpoint waits for
        ``sync_to_disk``: it may only name records that are durable."""
        self._check_usable()
        journal = FlushJournal()
        try:
            if self._pending:
                self._flush_records(journal)
            if self._pending_units:
                self._flush_units(journal)
                self._checkpoint_due = True
        except StoreWriteError as exc:
            # The records of this flush and their units go as they came: the store is as it
            # was before the flush (nothing of it was published), and it verifies clean.
            journal.undo()
            raise self._fail(exc) from None
        # Only now are the records and their units written: until here they stay pending
        # (dropped with the writer on an error), never counted as stored.
        self._pending.clear()
        self._pending_bytes = 0
        self._pending_units.clear()
        if self._indexer is not None:
            self._indexer_call(self._indexer.flush)  # records durable -> units -> index -> checkpoint
        try:
            if self.sync and self._checkpoint_due:
                self._write_checkpoint()
        except StoreWriteError as exc:
            raise self._fail(exc) from None

    def _flush_records(self, journal: FlushJournal) -> None:
        parts = self._pending  # written as they are, one pwritev a file: not joined into one copy
        start = self._pending_start
        # The log end once these are written: a BLANK closing a file is only its 8-byte head
        # in the pending parts, but the end is then the file's end (where recovery finds it);
        # and the dispatch floor: the first record whose unit this flush writes.
        units = self._pending_units
        self._abort.mark(self._end, int.from_bytes(units[0][3][:8], "big") if units else start)
        while parts:
            file_start = start - start % self._commitlog_file_size
            room = file_start + self._commitlog_file_size - start
            chunk, parts = _split(parts, room)
            size = sum(map(len, chunk))
            fd = self._commitlog_fd(file_start, journal)
            path = self._commitlog_path(file_start)
            self._wrote = True
            fileio.write_parts(fd, chunk, start - file_start, path, zero_on_failure=True)
            journal.ranges.append((path, start - file_start, size))
            self._unsynced_files.add(file_start)
            start += size
        if self.sync:
            self._sync_records()

    def _flush_units(self, journal: FlushJournal) -> None:
        # One write per queue file region: the units of each queue, in order, joined. A kill -9
        # part way may leave one queue's units past another's; the abort mark's dispatch floor
        # (written before the records, abortmark.py) has recovery redispatch from this flush's
        # first record, so none is left without its unit. Without a mark of its own (a
        # broker's abort, never touched) the writer writes them in commit log order instead
        # (consecutive units of one queue in one write): a kill -9 part way then leaves a
        # prefix of the records dispatched, which is what the broker's reput start assumes.
        self._wrote = True
        queues = self._queues
        grouped = self._abort.owned
        runs: dict[tuple[str, int, int], tuple[int, list[bytes]]] = {}  # (queue, run) -> first unit, units
        serial, last = 0, None
        for topic, qid, first, unit in self._pending_units:
            if not grouped and (topic, qid) != last:
                serial, last = serial + 1, (topic, qid)
            run = runs.get((topic, qid, serial))
            if run is None:
                runs[(topic, qid, serial)] = (first, [unit])
            else:
                run[1].append(unit)
        for (topic, qid, _), (first, parts) in runs.items():
            q = queues.get((topic, qid)) or self._queue(topic, qid)
            q.write(first, parts[0] if len(parts) == 1 else b"".join(parts), journal=journal)
        if self.sync:
            self._sync_units()

    def sync_to_disk(self) -> None:
        """fsync what flush() wrote with sync=False (commit log, then queues, then the
        checkpoint): after this, everything flushed so far survives a power loss."""
        self.flush()
        try:
            self._sync_records()
            self._sync_units()
        except StoreWriteError as exc:
            raise self._fail(exc) from None
        if self._indexer is not None:
            self._indexer_call(self._indexer.sync_to_disk)
            self._checkpoint_due = True
        try:
            if self._checkpoint_due:
                self._write_checkpoint()
        except StoreWriteError as exc:
            raise self._fail(exc) from None

    def _sync_records(self) -> None:
        for file_start in sorted(self._unsynced_files):
            path = self._commitlog_path(file_start)
            if file_start == self._cl_file_start and self._cl_fd is not None:
                fileio.fsync(self._cl_fd, path)
            else:
                fileio.fsync_path(path)
        self._unsynced_files.clear()

    def _sync_units(self) -> None:
        for path in sorted(self._dirty_queue_files):
            fd = self._queue_fds.get(path)
            if fd is not None:
                fileio.fsync(fd, path)
            else:
                fileio.fsync_path(path)
        self._dirty_queue_files.clear()

    def _commitlog_path(self, file_start: int) -> Path:
        return self.path / "commitlog" / f"{file_start:020d}"

    def _commitlog_fd(self, file_start: int, journal: FlushJournal | None = None) -> int:
        if self._cl_file_start != file_start:
            if self._cl_fd is not None:
                os.close(self._cl_fd)
                self._cl_fd, self._cl_file_start = None, -1
            path = self._commitlog_path(file_start)
            fd, created = fileio.open_for_write(path)
            try:
                if os.fstat(fd).st_size < self._commitlog_file_size:
                    fileio.ftruncate(fd, self._commitlog_file_size, path)  # preallocated, zero-filled
                if created:
                    fileio.fsync_dir(path.parent)
            except BaseException:
                os.close(fd)
                if created:
                    unlink_quietly(path)  # no file of the wrong size left behind
                raise
            if created and journal is not None:
                journal.created.append(path)
            self._cl_fd, self._cl_file_start = fd, file_start
        return self._cl_fd

    def _write_checkpoint(self) -> None:
        """Once the records and units are durable: the checkpoint's timestamps (and fsync)."""
        self._checkpoint_due = False
        cp = self._checkpoint
        # indexMsgTimestamp: index files that end by then are whole (IndexService.load keeps
        # them after a crash); the indexer moves it only past entries it has committed.
        index_ts = self._indexer.end_timestamp if self._indexer is not None else 0
        if self._last_store_ts <= 0 and index_ts <= cp.indexMsgTimestamp:
            return
        cp.physicMsgTimestamp = max(cp.physicMsgTimestamp, self._last_store_ts)
        cp.logicsMsgTimestamp = max(cp.logicsMsgTimestamp, self._last_store_ts)
        cp.indexMsgTimestamp = max(cp.indexMsgTimestamp, index_ts)
        path = self.path / "checkpoint"
        if self._cp_fd is None:
            self._cp_fd, created = fileio.open_for_write(path)
            if created:
                fileio.ftruncate(self._cp_fd, CHECKPOINT_FILE_SIZE, path)
        fileio.write_all(self._cp_fd, build_checkpoint(cp)[:24], 0, path)
        fileio.fsync(self._cp_fd, path)


def _split(parts: list, size: int) -> tuple[list, list]:
    """The buffers holding the first ``size`` bytes of ``parts`` (the last one cut there), and
    the buffers of the rest."""
    at = 0
    for i, part in enumerate(parts):
        if at + len(part) > size:
            view = memoryview(part).cast("B")
            head = [*parts[:i], view[:size - at]] if size > at else parts[:i]
            return head, [view[size - at:], *parts[i + 1:]]
        at += len(part)
    return parts, []
