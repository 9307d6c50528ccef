"""What the timer engine reads a message at a time, the cheap way: the rmq_sys_wheel_timer
records of a batch of queue entries (or of a slot's chain) read straight from the mapped
commit log files, the file looked up once for a run of them, and TIMER_* numbers parsed
without Long.parseLong's general path when they are plain ASCII digits.

A record that does not read as a whole message of its entry's size (outside the files,
another record there, a damaged one) is left out: ``CommitLog.read_message`` reads it when
it is wanted and says exactly why it cannot.
"""

from __future__ import annotations

from rmqdelay.formats.commitlog import RECORD_HEAD, Message, decode_message
from rmqdelay.formats.constants import MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.store.commitlog import CommitLog

_MAGICS = (MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2)


def read_ahead(log: CommitLog, offsets: list[int], sizes: list[int], into: dict[int, Message]) -> None:
    """The messages at ``offsets`` (of ``sizes`` bytes) into ``into``, by commit log offset:
    what ``log.read_message(offset, size)`` returns for each that reads as a whole message."""
    file_start = file_end = limit = -1
    view = None
    for offset, size in zip(offsets, sizes):
        if not file_start <= offset < file_end:
            index = log.file_index(offset)
            if index < 0:
                continue
            mf = log.files[index]
            file_start, file_end, limit, view = mf.start, mf.end, mf.size, log.view(index)
        pos = offset - file_start
        if pos + 8 > limit:
            continue
        total, magic = RECORD_HEAD.unpack_from(view, pos)
        if total != size or magic not in _MAGICS:
            continue
        try:
            into[offset] = decode_message(view, pos, limit)
        except FormatError:
            continue


def parse_long(text: str | None) -> int | None:
    """``java_parse_long(text or "")``: up to 18 ASCII digits straight, anything else by the
    Java rules (signs, other digits, overflow)."""
    if text is None:
        return None
    if len(text) <= 18 and text.isascii() and text.isdigit():
        return int(text)
    return java_parse_long(text)
