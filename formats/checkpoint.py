"""STORE/checkpoint (StoreCheckpoint): three int64 timestamps at the start of a 4 KiB file."""

from __future__ import annotations

from dataclasses import dataclass

from construct import Int64sb, Struct

from .errors import FormatError

CHECKPOINT = Struct(
    "physicMsgTimestamp" / Int64sb,
    "logicsMsgTimestamp" / Int64sb,
    "indexMsgTimestamp" / Int64sb,
)
CHECKPOINT_FILE_SIZE = 4096  # OS_PAGE_SIZE, mapped and flushed whole by the broker


@dataclass(slots=True)
class Checkpoint:
    physicMsgTimestamp: int
    logicsMsgTimestamp: int
    indexMsgTimestamp: int

    @property
    def min_timestamp(self) -> int:
        """StoreCheckpoint.getMinTimestamp (index ignored): where abnormal recovery starts, minus 3 s."""
        low = min(self.physicMsgTimestamp, self.logicsMsgTimestamp) - 3000
        return max(low, 0)


def parse_checkpoint(data: bytes) -> Checkpoint:
    if len(data) < CHECKPOINT.sizeof():
        raise FormatError(len(data), f"{CHECKPOINT.sizeof()} bytes of checkpoint timestamps, found {len(data)}")
    parsed = CHECKPOINT.parse(data)
    return Checkpoint(parsed.physicMsgTimestamp, parsed.logicsMsgTimestamp, parsed.indexMsgTimestamp)


def build_checkpoint(cp: Checkpoint) -> bytes:
    head = CHECKPOINT.build(dict(physicMsgTimestamp=cp.physicMsgTimestamp,
                                 logicsMsgTimestamp=cp.logicsMsgTimestamp,
                                 indexMsgTimestamp=cp.indexMsgTimestamp))
    return head + bytes(CHECKPOINT_FILE_SIZE - len(head))
