"""Counting what the generator wrote, for plan.json and config/consumerOffset.json: the times
of each queue's messages (kept for the last half hour only) and lateness histograms."""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, deque


class Arrivals:
    """Non-decreasing times (of storing, or of consuming) of one queue's messages; counts
    those up to a limit at the end while keeping only the last half hour in memory: what
    lies further back than that from the simulated now is below any limit asked for."""

    __slots__ = ("old", "recent")
    KEEP_MS = 1_800_000

    def __init__(self) -> None:
        self.old = 0
        self.recent: deque[int] = deque()

    def add(self, t: int, now: int) -> None:
        recent = self.recent
        recent.append(t)
        if len(recent) > 4096:
            cut = now - self.KEEP_MS
            while recent[0] < cut:
                recent.popleft()
                self.old += 1

    def count_upto(self, limit: int) -> int:
        return self.old + bisect_right(list(self.recent), limit)


def _percentile(counts: Counter, n: int, num: int, den: int) -> int:
    """Nearest rank over a histogram: the value at sorted position ceil(num/den * n) - 1."""
    rank = -(-num * n // den)
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return value
    raise ValueError("empty")


def lateness_summary(counts: Counter) -> dict | None:
    n = sum(counts.values())
    if n == 0:
        return None
    return {
        "count": n,
        "min": min(counts),
        "max": max(counts),
        "p50": _percentile(counts, n, 1, 2),
        "p90": _percentile(counts, n, 9, 10),
        "p99": _percentile(counts, n, 99, 100),
        "early": sum(c for v, c in counts.items() if v < 0),
    }
