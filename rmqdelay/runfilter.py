"""A rescue that can be steered: which messages a `run` delivers (``--topics``, ``--until``,
``--limit``) and how fast (``--rate``).

A broker resumes a delay level at its offset in delayOffset.json and the timer wheel at its
read clock (timercheck), so a filter can only stop early, never skip: a level stops at the
first message held back (its offset stays there), the wheel at the first slot that holds one
(its read clock stays there) and its enqueue at the first entry it would put at once. Anything
delivered past them would be delivered again by the broker. What was held, and why, is an
event (``Held``, ``TimerHeld``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class RunFilter:
    topics: frozenset[str] | None = None  # only messages for these real topics
    until_ms: int | None = None  # only messages due at or before this instant
    limit: int | None = None  # at most this many deliveries (levels and wheel together)
    rate: float | None = None  # at most this many deliveries a second
    delivered: int = 0
    # How the engine sleeps (its waker: a stop ends the sleep); True when woken.
    sleep: Callable[[float], bool] = field(default=lambda seconds: bool(time.sleep(seconds)))
    _next_ns: int = 0

    @property
    def holds_any(self) -> bool:
        return self.topics is not None or self.until_ms is not None or self.limit is not None

    def held_by_time(self, deliver_ms: int | None) -> str | None:
        if self.until_ms is not None and deliver_ms is not None and deliver_ms > self.until_ms:
            return f"due at {_iso(deliver_ms)}, after --until {_iso(self.until_ms)}"
        return None

    def held_by_topic(self, topic: str | None) -> str | None:
        if self.topics is not None and topic not in self.topics:
            return f"for {topic}, not one of --topics"
        return None

    def held_by_limit(self, count: int = 1) -> str | None:
        if self.limit is not None and self.delivered + count > self.limit:
            return f"--limit {self.limit} reached" if count == 1 or self.delivered >= self.limit else \
                f"the slot holds {count} deliveries, more than --limit {self.limit} leaves ({self.limit - self.delivered})"
        return None

    def holds(self, topic: str | None, deliver_ms: int | None) -> str | None:
        """Why one message is held back, or None: it may be delivered."""
        return self.held_by_time(deliver_ms) or self.held_by_topic(topic) or self.held_by_limit()

    def pace(self) -> bool:
        """Wait for the next delivery's turn under ``--rate``; True when woken (stop)."""
        if not self.rate:
            return False
        now = time.monotonic_ns()
        step = int(1e9 / self.rate)
        if self._next_ns > now:
            if self.sleep((self._next_ns - now) / 1e9):
                return True
            now = time.monotonic_ns()
        self._next_ns = max(self._next_ns + step, now)
        return False


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"
