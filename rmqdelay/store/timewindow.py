"""Where a window of store time starts in the commit log, found without reading the log from
its start: store times rise along the log (the broker stamps each record as it appends it),
so the start is found by bisection.

1. Over the files: the first record of each file is read (one record per probe), and the
   window starts in the last file whose first record was stored before it.
2. Inside that file: the index files (``index/``) hold an entry per indexed key of most
   records, in log order, each with its record's physical offset and its store time in whole
   seconds from the index file's beginTimestamp; the last entry of the file stored surely
   before the window (its second ends before it) is a record boundary close to the start, found
   by bisection over the entries' times. Its record is read to check it (a stale or foreign
   index is not trusted: the file's start is used instead).
3. From there the records are read one by one to the first one stored at or after the instant:
   at most the records of about a second, and those no index entry names.

A store whose clock went back (store times that fall along the log) can hide records of the
window before the point found; the listing says nothing of those.
"""

from __future__ import annotations

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.store.directory import Store


def _first_time(store: Store, index: int) -> int | None:
    f = store.commitlog.files[index]
    try:
        for record in store.commitlog.records(f.start):
            return record.storeTimestamp
    except StoreError:
        return None
    return None


def file_to_start_in(store: Store, instant: int) -> int:
    """The index of the last commit log file whose first record was stored before
    ``instant`` (0 when none was)."""
    lo, hi = 0, len(store.commitlog.files) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        t = _first_time(store, mid)
        if t is not None and t < instant:
            lo = mid
        else:
            hi = mid - 1
    return lo


def index_jump(store: Store, start: int, end: int, instant: int) -> int | None:
    """A record boundary in ``[start, end)`` whose record was stored before ``instant``, as
    close to it as the index knows (None when the index knows none)."""
    from rmqdelay.store.index import StoreIndex

    best = None
    try:
        with StoreIndex(store.path) as index:
            for f in index.files:
                h = f.header
                if f.entry_count == 0 or h.endPhyOffset < start or h.beginPhyOffset >= end or h.beginTimestamp > instant:
                    continue
                entries = f.entries()  # a view of the mapped file: the bisection touches log2(n) of them
                times, offsets = entries["timeDiff"], entries["phyOffset"]
                # The last entry whose second ends before the instant: its record was stored before it.
                lo, hi = 0, len(entries)
                while lo < hi:
                    mid = (lo + hi) // 2
                    if h.beginTimestamp + int(times[mid]) * 1000 + 999 < instant:
                        lo = mid + 1
                    else:
                        hi = mid
                k = lo - 1
                while k >= 0:
                    offset = int(offsets[k])
                    if start <= offset < end:
                        best = offset if best is None else max(best, offset)
                        break
                    if offset < start:
                        break
                    k -= 1
    except StoreError:
        return None
    if best is None:
        return None
    try:
        record = store.commitlog.read_record(best)
    except StoreError:
        return None
    if not isinstance(record, Message) or record.storeTimestamp >= instant:
        return None
    return best


def first_at_or_after(store: Store, instant: int) -> int | None:
    """The physical offset of the first record stored at or after ``instant``; None when the
    log holds none. Counts of what it read: ``probe`` (records read to find it)."""
    log = store.commitlog
    if not log.files:
        return None
    i = file_to_start_in(store, instant)
    f = log.files[i]
    begin = index_jump(store, f.start, f.end, instant)
    for record in log.records(f.start if begin is None else begin):
        if record.storeTimestamp >= instant:
            return record.commitLogOffset
    return None
