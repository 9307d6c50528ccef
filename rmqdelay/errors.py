"""Errors the commands turn into one line and an exit code (docs/cli.md), and the one
warning they turn into one line. Light: the CLI imports it before parsing its arguments."""

from __future__ import annotations

from pathlib import Path

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_BAD_INPUT = 2
EXIT_LOCKED = 3


class RmqDelayError(Exception):
    exit_code = EXIT_BAD_INPUT


class StoreError(RmqDelayError):
    """Bad or unreadable input: names the file, the byte offset and what was expected."""

    def __init__(self, path: Path | str, offset: int | None, expected: str) -> None:
        where = f"{path}" if offset is None else f"{path} at byte {offset}"
        super().__init__(f"{where}: {expected}")
        self.path = Path(path)
        self.offset = offset
        self.expected = expected

    def __reduce__(self):  # an error crosses to another process whole (the writer process)
        return type(self), (self.path, self.offset, self.expected)


class StoreReadError(StoreError):
    """A store file that could not be read at all (the system said no: EACCES, EIO, EMFILE,
    a FIFO where a file belongs): not bad content. Whoever skips bad records must not skip
    these: the data is there, only out of reach for now."""


class NotRegularFileError(StoreReadError):
    """A FIFO, a directory or a device where a regular file belongs: refused at once (never
    waited on, never replaced by a ``.bak``)."""


class StoreWriteError(RmqDelayError):
    """A write to the store failed or came up short (ENOSPC, EIO, EFBIG, EROFS, ...). The
    writer stops at the first one and publishes nothing after it, so a rerun once the fault
    is gone finishes the work exactly once."""

    def __init__(self, path: Path | str, offset: int | None, what: str) -> None:
        where = f"{path}" if offset is None else f"{path} at byte {offset}"
        super().__init__(f"{where}: {what}")
        self.path = Path(path)
        self.offset = offset
        self.what = what

    def __reduce__(self):
        return type(self), (self.path, self.offset, self.what)


class StoreLockedError(RmqDelayError):
    exit_code = EXIT_LOCKED

    def __init__(self, path: Path | str, holder: str = "a running broker",
                 advice: str = "stop the broker before writing to this store") -> None:
        super().__init__(f"{path}: held by {holder}; {advice}")
        self.path = Path(path)
        self.holder = holder
        self.advice = advice

    def __reduce__(self):
        return type(self), (self.path, self.holder, self.advice)


class UsageError(RmqDelayError):
    exit_code = EXIT_BAD_INPUT


class UnwritableLayoutError(RmqDelayError):
    """A store laid out in a way no offline writer may append to (DLedger, RocksDB): refused
    at the writer's door, before anything is created or changed."""

    exit_code = EXIT_BAD_INPUT

    def __init__(self, path: Path | str, why: str) -> None:
        super().__init__(f"{path}: {why}")
        self.path = Path(path)
        self.why = why

    def __reduce__(self):
        return type(self), (self.path, self.why)


class ConfigFallbackWarning(UserWarning):
    """A broker config file was unusable and its ``.bak`` was read instead, as the broker's
    ConfigManager.load does: the command goes on, and says so in one line."""
