"""STORE/checkpoint (StoreCheckpoint): int64s at the start of a 4 KiB file.

4.x writes three timestamps; 5.x adds masterFlushedOffset and confirmPhyOffset after them (a
4.x file reads as 0 there, as the 5.x broker reads it).
"""

from __future__ import annotations

from dataclasses import dataclass

from construct import Int64sb, Struct

from .errors import FormatError

CHECKPOINT = Struct(
    "physicMsgTimestamp" / Int64sb,
    "logicsMsgTimestamp" / Int64sb,
    "indexMsgTimestamp" / Int64sb,
    "masterFlushedOffset" / Int64sb,  # 5.x
    "confirmPhyOffset" / Int64sb,  # 5.x
)
CHECKPOINT_4X_SIZE = 24  # the three timestamps of a 4.x broker
CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE, mapped and flushed whole by the broker


@dataclass(slots=True)
class Checkpoint:
    physicMsgTimestamp: int
    logicsMsgTimestamp: int
    indexMsgTimestamp: int
    masterFlushedOffset: int = 0
    confirmPhyOffset: int = 0

    @property
    def min_timestamp(self) -> int:
        """StoreCheckpoint.getMinTimestamp (index ignored): where abnormal recovery starts, minus 3 s."""
        low = min(self.physicMsgTimestamp, self.logicsMsgTimestamp) - 3000
        return max(low, 0)


def parse_checkpoint(data: bytes) -> Checkpoint:
    """The checkpoint at the start of ``data``: at least the three 4.x timestamps; the 5.x
    fields read as 0 when ``data`` ends before them."""
    if len(data) < CHECKPOINT_4X_SIZE:
        raise FormatError(len(data), f"{CHECKPOINT_4X_SIZE} bytes of checkpoint timestamps, found {len(data)}")
    head = bytes(data[:CHECKPOINT.sizeof()])
    parsed = CHECKPOINT.parse(head + bytes(CHECKPOINT.sizeof() - len(head)))
    return Checkpoint(parsed.physicMsgTimestamp, parsed.logicsMsgTimestamp, parsed.indexMsgTimestamp,
                      parsed.masterFlushedOffset, parsed.confirmPhyOffset)


def build_checkpoint(cp: Checkpoint) -> bytes:
    head = CHECKPOINT.build(dict(physicMsgTimestamp=cp.physicMsgTimestamp,
                                 logicsMsgTimestamp=cp.logicsMsgTimestamp,
                                 indexMsgTimestamp=cp.indexMsgTimestamp,
                                 masterFlushedOffset=cp.masterFlushedOffset,
                                 confirmPhyOffset=cp.confirmPhyOffset))
    return head + bytes(CHECKPOINT_FILE_SIZE - len(head))
