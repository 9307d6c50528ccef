"""STORE/lock: the broker holds an fcntl (POSIX record) lock on byte 0 while it runs.

Java's FileChannel.tryLock(0, 1, false) is a POSIX lock, so it is tested with F_GETLK
and taken with lockf; flock() would not see it on Linux.
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from rmqdelay.errors import StoreLockedError

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi4x"


def lock_holder(path: Path) -> int | None:
    """The pid of another process holding the lock, or None. Takes no lock, writes nothing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if l_type == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)


class BrokerLock:
    """Hold STORE/lock exactly as the broker does, for as long as this object is open."""

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            os.close(fd)
            pid = lock_holder(self.path)
            raise StoreLockedError(self.path, f"process {pid}" if pid else "another process") from None
        if os.fstat(fd).st_size == 0:
            # What the broker leaves in the file (DefaultMessageStore.start).
            os.pwrite(fd, b"lock", 0)
            os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the POSIX lock
            self._fd = None

    def __enter__(self) -> "BrokerLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
