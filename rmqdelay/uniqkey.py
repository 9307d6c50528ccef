"""UNIQ_KEY as a real client makes it (MessageClientIDSetter.createUniqID, 4.9.4).

32 upper-case hex digits for an IPv4 client: IP (4 bytes), pid (2), the class loader's
hash code (4), milliseconds since the start of the current month (4, a Java int, so it
wraps after 24.8 days), a per-process counter (2).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone, tzinfo


class UniqKeyFactory:
    """One producer process: a fixed prefix and a counter, like the client's statics."""

    def __init__(self, ip: bytes, pid: int, classloader_hash: int, tz: tzinfo = timezone.utc) -> None:
        self.prefix = (ip + (pid & 0xFFFF).to_bytes(2, "big")
                       + (classloader_hash & 0xFFFFFFFF).to_bytes(4, "big")).hex().upper()
        self.counter = 0
        self.tz = tz
        self._start = 0
        self._next_start: int | None = None

    def _set_start_time(self, now_ms: int) -> None:
        # Calendar in the client's time zone: day 1, 00:00:00.000 of this month and the next.
        now = datetime.fromtimestamp(now_ms / 1000, tz=self.tz)
        start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + timedelta(days=32)).replace(day=1)
        self._start = int(start.timestamp() * 1000)
        self._next_start = int(nxt.timestamp() * 1000)

    def create(self, now_ms: int) -> str:
        if self._next_start is None or now_ms >= self._next_start:
            self._set_start_time(now_ms)
        diff = (now_ms - self._start) & 0xFFFFFFFF  # Java's (int) cast
        if diff >= 0x80000000 and diff - 0x100000000 > -1_000_000:
            diff = 0  # a clock stepped back a little (NTP): the client writes 0
        counter = self.counter & 0xFFFF
        self.counter += 1
        return f"{self.prefix}{diff:08X}{counter:04X}"
