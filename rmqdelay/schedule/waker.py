"""How the scheduler sleeps: a self-pipe that stop() (from a signal handler or another thread)
writes to, so any sleep ends at once."""

from __future__ import annotations

import os
import select


class Waker:
    """A self-pipe: stop() from a signal handler or another thread ends any sleep at once."""

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)

    def wake(self) -> None:
        try:
            os.write(self._w, b"x")
        except (BlockingIOError, OSError):
            pass

    def wait(self, seconds: float | None) -> bool:
        """Sleep up to ``seconds`` (None: until woken); True when woken."""
        ready, _, _ = select.select([self._r], [], [], None if seconds is None else max(seconds, 0.0))
        if ready:
            try:
                while os.read(self._r, 4096):
                    pass
            except BlockingIOError:
                pass
            return True
        return False

    def close(self) -> None:
        os.close(self._r)
        os.close(self._w)
