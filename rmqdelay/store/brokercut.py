"""Where the real broker's recovery would end the commit log, read before anything is written.

CommitLog.recoverNormally (4.9.4 and 5.3.3) checks the records of the last three files, and
recoverAbnormally (after a crash: ``abort`` left) those from the last file whose first
record was stored before the checkpoint's timestamps (StoreCheckpoint.getMinTimestamp: the
physic and logics timestamps less 3 s, the index one too when the index is on). Each record
goes through checkMessageAndReturnSize with checkCRCOnRecover (true by default): the first
that fails - a head that does not frame (a zeroed size field, a bad magic code), a body whose
CRC is not its bodyCRC, zeros where a file before the last should end in a BLANK - ends the
log there: the files
after it are deleted and every queue unit past it dropped. A writer appending after such a
record would see its deliveries vanish at the broker's next start, so rmqdelay takes the
earlier of the two starts and refuses to append past the cut; ``inspect store`` and
``inspect delay`` say where it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import RECORD_HEAD, Message
from rmqdelay.formats.constants import BLANK_MAGIC_CODE
from rmqdelay.store.commitlog import Blank, End

NORMAL_FILES = 3  # recoverNormally: index = mappedFiles.size() - 3
_MIN_TIMESTAMP_SLACK_MS = 3000  # StoreCheckpoint.getMinTimestamp


@dataclass(slots=True, frozen=True)
class BrokerCut:
    """The first record the broker's recovery would stop at."""

    path: Path  # the commit log file holding it
    byte: int  # its position in that file
    offset: int  # its commit log offset
    why: str
    dropped: int  # queue units (dispatched records) at or after it: what the broker would drop

    def as_json(self) -> dict:
        return {"file": str(self.path), "offset": self.byte, "physicalOffset": self.offset, "reason": self.why,
                "droppedRecords": self.dropped}

    def describe(self) -> str:
        return (f"a broker starting now would cut the log at {self.path}:{self.byte} ({self.why}) and drop "
                f"{self.dropped} records")


def _recovery_start(store) -> int:
    """The index of the first file either recovery checks: the earlier of recoverNormally's
    and recoverAbnormally's (the last file whose first record is stored at or before the
    checkpoint's minimum timestamp; the first file when none is, or there is no checkpoint)."""
    files = store.commitlog.files
    normal = max(0, len(files) - NORMAL_FILES)
    cp = store.checkpoint()
    if cp is None:
        return 0
    floor = min(cp.physicMsgTimestamp, cp.logicsMsgTimestamp) - _MIN_TIMESTAMP_SLACK_MS
    if cp.indexMsgTimestamp > 0:
        floor = min(floor, cp.indexMsgTimestamp)
    for index in range(len(files) - 1, -1, -1):
        try:
            record = store.commitlog._decode_at(files[index], store.commitlog.view(index), 0, False)
        except StoreError:
            continue
        if isinstance(record, Message) and 0 < record.storeTimestamp <= floor:
            return min(index, normal)
    return 0


def _bad(msg: Message, check_crc: bool) -> str | None:
    # A SCHEDULE_TOPIC_XXXX record whose DELAY does not parse is left to recovery.py (not
    # dispatched, said), as it was before this check.
    if check_crc and not msg.bodyCrcOk:
        return "its body does not match its bodyCRC (checkCRCOnRecover)"
    return None


# A body CRC mismatch is reported by recovery.py and dispatched, as it was: whether to refuse it
# too (checkCRCOnRecover) is open; only records that do not frame cut the log here.
CHECK_CRC = False


# From this many bytes to check on, the records are framed by the compiled scan (formats/scan.py:
# the same checks and the same FormatError as decode_message, some 50x faster); below it, one
# by one here, which keeps the compiled scan and Arrow out of a small store's `inspect`.
FAST_FROM_BYTES = 32 << 20


def broker_cut(store, end: int, *, check_crc: bool = CHECK_CRC, fast: bool | None = None) -> BrokerCut | None:
    """The first record before ``end`` (where rmqdelay finds the data to end: a torn tail after
    it is cut by both alike) that the broker's recovery would stop at, or None. ``fast``: frame
    with the compiled scan (None: when there are FAST_FROM_BYTES to check or more; a body CRC
    check is always made one record at a time)."""
    commitlog = store.commitlog
    files = commitlog.files
    if not files:
        return None
    first = _recovery_start(store)
    checked = [(index, files[index]) for index in range(first, len(files)) if files[index].start < end]
    if fast is None:
        fast = sum(min(mf.size, end - mf.start) for _, mf in checked) >= FAST_FROM_BYTES
    walk = _framed_fast if fast and not check_crc else _framed
    for index, mf in checked:
        view = commitlog.view(index)
        limit = min(mf.size, end - mf.start)
        pos, bad = walk(commitlog, mf, view, limit, check_crc)
        if bad is None:
            if index == len(files) - 1:
                return None  # the data's end (or zeros after it, a torn tail) in the last file
            if pos + 8 <= mf.size and RECORD_HEAD.unpack_from(view, pos)[1] == BLANK_MAGIC_CODE:
                continue  # the BLANK closing the file (its size checked by the walk)
            bad = ("zeros where the file should end in a BLANK record", pos)
        why, byte = bad
        return BrokerCut(mf.path, byte, mf.start + pos, why, _units_from(store, mf.start + pos))
    return None


def _framed(commitlog, mf, view, limit: int, check_crc: bool) -> tuple[int, tuple[str, int] | None]:
    """Walk the records of one file from its start to ``limit``, one at a time: where the walk
    stopped (a BLANK, zeros, ``limit``) and None, or the start of the first bad record and
    (what is wrong, the byte it was found at)."""
    pos = 0
    while pos < limit:
        try:
            record = commitlog._decode_at(mf, view, pos, False)
        except StoreError as exc:
            return pos, (exc.expected, exc.offset if exc.offset is not None else pos)
        if isinstance(record, (Blank, End)):
            return pos, None
        why = _bad(record, check_crc)
        if why is not None:
            return pos, (why, pos)
        pos += record.storeSize
    return pos, None


def _framed_fast(commitlog, mf, view, limit: int, check_crc: bool) -> tuple[int, tuple[str, int] | None]:
    """``_framed`` through the compiled scan: only the record sizes are taken out."""
    from rmqdelay.formats.errors import FormatError
    from rmqdelay.formats.scan import decode_records

    pos = 0
    try:
        for batch in decode_records(view, store="", file=mf.path.name, limit=limit, columns=("store_size",)):
            pos += int(batch.column(0).to_numpy().sum(dtype="int64"))  # the records lie end to end
    except FormatError as exc:
        return pos, (exc.expected, exc.offset if exc.offset is not None else pos)
    return pos, None


def _units_from(store, offset: int) -> int:
    """The units, over every queue, of records at or after ``offset`` (a queue's units follow
    the log's order: a suffix of each)."""
    total = 0
    for info in store.queue_infos():
        if info.maxPhysicOffset <= offset or info.maxOffset <= info.minOffset:
            continue
        cq = store.consume_queue(info.topic, info.queueId)
        lo, hi = info.minOffset, info.maxOffset
        while lo < hi:  # the first unit whose record ends after ``offset``
            mid = (lo + hi) // 2
            unit = cq.unit(mid)
            if unit is not None and unit.commitLogOffset + unit.size <= offset:
                lo = mid + 1
            else:
                hi = mid
        total += info.maxOffset - lo
    return total
