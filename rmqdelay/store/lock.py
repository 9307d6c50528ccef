"""STORE/lock: the broker holds an fcntl (POSIX record) lock on byte 0 while it runs.

Java's FileChannel.tryLock(0, 1, false) is a POSIX lock, so it is tested with F_GETLK
and taken with lockf; flock() would not see it on Linux.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreLockedError
from rmqdelay.store import fileio
from rmqdelay.store.layout import refuse_unwritable

# struct flock on Linux: short l_type, short l_whence, off_t l_start, off_t l_len, pid_t l_pid
_FLOCK = "hhqqi4x"


def lock_holder(path: Path) -> int | None:
    """The pid of another process holding the lock, or None. Takes no lock, writes nothing."""
    fd = fileio.open_for_read(path)
    if fd is None:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 1, 0)
        l_type, _, _, _, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
        return None if l_type == fcntl.F_UNLCK else pid
    finally:
        os.close(fd)


@dataclass(slots=True, frozen=True)
class Holder:
    """Who holds STORE/lock, as far as /proc tells."""

    pid: int | None
    kind: str  # "broker" | "rmqdelay" | "process"
    command: str | None  # its command line, when /proc shows it

    @property
    def text(self) -> str:
        what = {"broker": "a RocketMQ broker", "rmqdelay": "another rmqdelay"}.get(self.kind, "a process")
        if self.pid is None:
            return f"{what} (its pid is not visible from here)"
        return f"{what} (pid {self.pid}" + (f": {self.command})" if self.command else ")")

    @property
    def advice(self) -> str:
        if self.kind == "rmqdelay":
            return "wait for it to finish, or stop it, before writing to this store"
        if self.kind == "broker":
            return "stop the broker before writing to this store"
        return "stop it before writing to this store (a running broker holds this lock)"


def describe_holder(pid: int | None, proc: Path = Path("/proc")) -> Holder:
    """Name the process holding the lock from its command line: the broker (java running
    BrokerStartup, or any java), another rmqdelay, or some other process."""
    if not pid:  # 0: the holder lives in another pid namespace (a container)
        return Holder(None, "process", None)
    try:
        argv = (proc / str(pid) / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    except OSError:
        return Holder(pid, "process", None)
    words = [os.fsdecode(a) for a in argv if a]
    command = " ".join(words)
    if len(command) > 200:
        command = command[:200] + "..."
    names = [Path(w).name for w in words[:3]]
    if names and names[0] == "java" or any(w.endswith("BrokerStartup") for w in words):
        kind = "broker"
    elif "rmqdelay" in names or any(w.startswith("rmqdelay") for w in words[1:3]):
        kind = "rmqdelay"
    else:
        kind = "process"
    return Holder(pid, kind, command or None)


class BrokerLock:
    """Hold STORE/lock exactly as the broker does, for as long as this object is open."""

    def __init__(self, store_dir: Path) -> None:
        self.path = Path(store_dir) / "lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        # Every writer takes the lock first: the door where a layout no offline writer may
        # append to is refused (layout.py), before the lock file is created or written.
        refuse_unwritable(self.path.parent)
        # A read-only file system, a FIFO or a directory here: one line (StoreWriteError).
        fd, _ = fileio.open_for_write(self.path)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except OSError:
            os.close(fd)
            holder = describe_holder(lock_holder(self.path))
            raise StoreLockedError(self.path, holder.text, holder.advice) from None
        try:
            if os.fstat(fd).st_size == 0:
                # What the broker leaves in the file (DefaultMessageStore.start).
                fileio.write_all(fd, b"lock", 0, self.path)
                fileio.fsync(fd, self.path)
        except BaseException:
            os.close(fd)
            raise
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
