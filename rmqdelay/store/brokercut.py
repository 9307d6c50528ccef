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
from rmqdelay.formats.commitlog import Message
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


def broker_cut(store, end: int, *, check_crc: bool = CHECK_CRC) -> BrokerCut | None:
    """The first record before ``end`` (where rmqdelay finds the data to end: a torn tail after
    it is cut by both alike) that the broker's recovery would stop at, or None."""
    commitlog = store.commitlog
    files = commitlog.files
    if not files:
        return None
    index = _recovery_start(store)
    while index < len(files):
        mf = files[index]
        if mf.start >= end:
            return None
        view = commitlog.view(index)
        pos = 0
        while mf.start + pos < end:
            why = None
            byte = pos
            try:
                record = commitlog._decode_at(mf, view, pos, False)
            except StoreError as exc:
                why, byte = exc.expected, exc.offset if exc.offset is not None else pos
                record = None
            if isinstance(record, Blank):
                break
            if isinstance(record, End):
                if index == len(files) - 1:
                    return None
                why = "zeros where the file should end in a BLANK record"
            elif record is not None:
                why = _bad(record, check_crc)
            if why is not None:
                return BrokerCut(mf.path, byte, mf.start + pos, why, _units_from(store, mf.start + pos))
            pos += record.storeSize
        index += 1
    return None


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
