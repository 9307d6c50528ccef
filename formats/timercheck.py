"""config/timercheck (TimerCheckpoint): seven longs at the start of a 4096-byte mapped file.

TimerCheckpoint.flush writes them at 0..48; the rest of the page stays zero.
``TimerCheckpoint.encode`` gives the same first 56 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass

from construct import Int64sb, Struct

from .delayoffset import DataVersion
from .errors import FormatError

TIMER_CHECKPOINT = Struct(
    "lastReadTimeMs" / Int64sb,  # the next slot the dequeue reads
    "lastTimerLogFlushPos" / Int64sb,  # the timer log's flushed position before the last flush (lags)
    "lastTimerQueueOffset" / Int64sb,  # min(commitQueueOffset, masterTimerQueueOffset)
    "masterTimerQueueOffset" / Int64sb,  # the next rmq_sys_wheel_timer CQ offset to enqueue
    "stateVersion" / Int64sb,
    "timestamp" / Int64sb,
    "counter" / Int64sb,
)
TIMER_CHECKPOINT_SIZE = TIMER_CHECKPOINT.sizeof()  # 56, TimerCheckpoint.encode
TIMER_CHECKPOINT_FILE_SIZE = 4096  # DefaultMappedFile.OS_PAGE_SIZE


@dataclass(slots=True, frozen=True)
class TimerCheckpoint:
    lastReadTimeMs: int
    lastTimerLogFlushPos: int
    lastTimerQueueOffset: int
    masterTimerQueueOffset: int
    dataVersion: DataVersion

    def as_json(self) -> dict:
        return {"lastReadTimeMs": self.lastReadTimeMs, "lastTimerLogFlushPos": self.lastTimerLogFlushPos,
                "lastTimerQueueOffset": self.lastTimerQueueOffset,
                "masterTimerQueueOffset": self.masterTimerQueueOffset,
                "dataVersion": {"stateVersion": self.dataVersion.stateVersion,
                                "timestamp": self.dataVersion.timestamp,
                                "counter": self.dataVersion.counter}}


def parse_timer_checkpoint(data) -> TimerCheckpoint:
    if len(data) < TIMER_CHECKPOINT_SIZE:
        raise FormatError(len(data), f"{TIMER_CHECKPOINT_SIZE} bytes of timer checkpoint (7 longs), "
                                     f"found {len(data)}")
    p = TIMER_CHECKPOINT.parse(bytes(data[:TIMER_CHECKPOINT_SIZE]))
    return TimerCheckpoint(p.lastReadTimeMs, p.lastTimerLogFlushPos, p.lastTimerQueueOffset,
                           p.masterTimerQueueOffset, DataVersion(counter=p.counter, stateVersion=p.stateVersion,
                                                                 timestamp=p.timestamp))


def encode_timer_checkpoint(cp: TimerCheckpoint) -> bytes:
    """TimerCheckpoint.encode: the 56 bytes."""
    dv = cp.dataVersion
    return TIMER_CHECKPOINT.build(dict(
        lastReadTimeMs=cp.lastReadTimeMs, lastTimerLogFlushPos=cp.lastTimerLogFlushPos,
        lastTimerQueueOffset=cp.lastTimerQueueOffset, masterTimerQueueOffset=cp.masterTimerQueueOffset,
        stateVersion=dv.stateVersion, timestamp=dv.timestamp, counter=dv.counter))


def build_timer_checkpoint(cp: TimerCheckpoint) -> bytes:
    """The whole file as TimerCheckpoint.flush leaves a new one: 56 bytes, then zeros to 4096."""
    head = encode_timer_checkpoint(cp)
    return head + bytes(TIMER_CHECKPOINT_FILE_SIZE - len(head))
