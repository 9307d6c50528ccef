"""What the level scheduler keeps of each delay level while it runs: where it is, what it
delivered and skipped, when it is next due, and its recent lateness."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LATENCY_WINDOW = 1 << 16  # lateness samples kept per level for p50/p99


@dataclass(slots=True)
class LevelState:
    level: int
    delayMs: int
    offset: int
    minOffset: int
    maxOffset: int
    delivered: int = 0
    skipped: int = 0
    nextDueTimestamp: int | None = None
    held: str | None = None  # a run filter stopped the level here (rmqdelay/runfilter.py)
    _lateness: np.ndarray = field(default_factory=lambda: np.zeros(LATENCY_WINDOW, dtype=np.int64))
    _samples: int = 0

    @property
    def pending(self) -> int:
        return max(self.maxOffset - self.offset, 0)

    def record_lateness(self, values: list[int]) -> None:
        for start in range(0, len(values), LATENCY_WINDOW):
            chunk = values[start:start + LATENCY_WINDOW]
            pos = self._samples % LATENCY_WINDOW
            first = min(len(chunk), LATENCY_WINDOW - pos)
            self._lateness[pos:pos + first] = chunk[:first]
            self._lateness[:len(chunk) - first] = chunk[first:]
            self._samples += len(chunk)

    def lateness_percentiles(self) -> tuple[float, float, int] | None:
        """p50, p99 and max of the recent lateness samples (ms)."""
        n = min(self._samples, LATENCY_WINDOW)
        if not n:
            return None
        window = self._lateness[:n]
        p50, p99 = np.percentile(window, [50, 99])
        return float(p50), float(p99), int(window.max())
