"""What the timer engine reads a message at a time, the cheap way: the rmq_sys_wheel_timer
records of a batch of queue entries (or of a slot's chain) read straight from the mapped
commit log files, the file looked up once for a run of them.

A record that does not read as a whole message of its entry's size (outside the files,
another record there, a damaged one) is left out: ``CommitLog.read_message`` reads it when
it is wanted and says exactly why it cannot.
"""

from __future__ import annotations

from rmqdelay.formats.commitlog import Message, decode_message
from rmqdelay.formats.errors import FormatError
from rmqdelay.store.commitlog import CommitLog


def read_ahead(log: CommitLog, offsets: list[int], sizes: list[int], into: dict[int, Message]) -> None:
    """The messages at ``offsets`` (of ``sizes`` bytes) into ``into``, by commit log offset:
    what ``log.read_message(offset, size)`` returns for each that reads as a whole message."""
    for offset, (view, pos, limit, _) in zip(offsets, log.message_spots(offsets, sizes)):
        if view is None:
            continue
        try:
            into[offset] = decode_message(view, pos, limit)
        except FormatError:
            continue

