"""System calls on store files, every result checked.

- Opens refuse at once anything but a regular file where a regular file belongs (a FIFO,
  a directory, a device): O_NONBLOCK, so opening a FIFO never waits for a writer, then fstat.
- Writes loop over short writes; a write that makes no progress is an error (what a full
  device does), and every OSError becomes one ``StoreWriteError`` naming the file and byte.
- Read maps cover only the data extents of a file. Its holes read as zeros from an
  anonymous mapping: reading a sparse file on a full tmpfs cannot end in SIGBUS (a fault in
  a shared map of a tmpfs hole must allocate a page), and a map holds no file descriptor,
  so the number of maps a reader keeps does not count against the fd limit. A file of more
  than a few dozen extents is read into private memory instead (one map over its holes is
  what a full tmpfs answers with SIGBUS), and so is a file that writers rewrite in place
  while it is read (``read_snapshot``: the timer wheel), so that a reader sees one state.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import stat
import sys
import weakref
from pathlib import Path

import numpy as np

from rmqdelay.errors import NotRegularFileError, StoreReadError, StoreWriteError

_IOV_MAX = os.sysconf("SC_IOV_MAX") if "SC_IOV_MAX" in os.sysconf_names else 16  # buffers one pwritev takes
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def file_kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def not_regular(path: Path | str) -> str | None:
    """What stands where a regular file belongs, found without opening it (a FIFO would block
    an open for reading): None for a regular file, a symlink to one, or nothing at all; else
    "a FIFO", "a directory", "a symlink to nothing (TARGET)", ..."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if not os.path.islink(path):
            return None
        return f"a symlink to nothing ({os.readlink(path)})"
    except OSError as exc:
        return f"an unreadable entry ({exc.strerror})"
    return None if stat.S_ISREG(st.st_mode) else file_kind(st.st_mode)


def _check_regular(fd: int, path: Path | str) -> os.stat_result:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise _NotRegular(file_kind(st.st_mode))
    return st


class _NotRegular(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


# -- reading ---------------------------------------------------------------------------------
def open_for_read(path: Path | str) -> int | None:
    """A read-only fd of a regular file; None when it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        _check_regular(fd, path)
    except FileNotFoundError:
        return None
    except _NotRegular as exc:
        raise NotRegularFileError(path, None, f"a regular file, found {exc.kind}") from None
    except OSError as exc:
        # A symbolic link loop is no file at all, as for the broker's File: a config file's
        # reader then takes the .bak, as ConfigManager.load does.
        raise StoreReadError(path, None, f"a readable file ({exc.strerror})") from None
    return fd


def read_file(path: Path | str) -> bytes | None:
    """The whole content of a small regular file (a config file, the checkpoint); None
    when it does not exist."""
    fd = open_for_read(path)
    if fd is None:
        return None
    try:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
    except OSError as exc:
        raise StoreReadError(path, None, f"a readable file ({exc.strerror})") from None
    finally:
        os.close(fd)


def data_extents(fd: int, size: int) -> list[tuple[int, int]]:
    """[start, end) of the parts of a file that hold data (SEEK_DATA / SEEK_HOLE), page
    aligned and merged. A file system that cannot tell gives one extent: all of it."""
    page = mmap.PAGESIZE
    found: list[tuple[int, int]] = []
    pos = 0
    try:
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    break  # only a hole from here on
                raise
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
            start -= start % page
            end = min(-(-end // page) * page, -(-size // page) * page)
            if found and start <= found[-1][1]:
                found[-1] = (found[-1][0], max(found[-1][1], end))
            else:
                found.append((start, end))
            pos = end
    except (OSError, AttributeError):
        return [(0, size)] if size else []
    return found


_MAX_MAPS = 64  # extents of one file mapped one by one; a file with more is read instead


class _Libc:
    """mmap/munmap through ctypes: Python's mmap cannot place a map at a fixed address."""

    MAP_FIXED = 0x10
    MAP_NORESERVE = 0x4000

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self.mmap = libc.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        self.munmap = libc.munmap
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.madvise = libc.madvise
        self.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.failed = ctypes.c_void_p(-1).value


def _libc() -> _Libc | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return _Libc()
    except (OSError, AttributeError):
        return None


_LIBC = _libc()


def _map_extents(fd: int, size: int, extents: list[tuple[int, int]]) -> memoryview:
    libc = _LIBC
    base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | libc.MAP_NORESERVE, -1, 0)
    if base in (None, libc.failed):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    try:
        for start, end in extents:
            got = libc.mmap(base + start, end - start, mmap.PROT_READ, mmap.MAP_SHARED | libc.MAP_FIXED, fd, start)
            if got != base + start:
                err = ctypes.get_errno()
                raise OSError(err, os.strerror(err))
    except BaseException:
        libc.munmap(base, size)
        raise
    owner = (ctypes.c_ubyte * size).from_address(base)
    # Unmapped when the last view of it is gone (numpy arrays over it keep it alive).
    weakref.finalize(owner, libc.munmap, base, size)
    array = np.frombuffer(owner, dtype=np.uint8)
    array.flags.writeable = False
    return memoryview(array)


def _read_extents(fd: int, size: int) -> memoryview:
    """The data extents of a file read into private memory (its holes stay zero pages that
    were never touched): the bytes as they were when read, whatever a writer does next."""
    buffer = np.zeros(size, dtype=np.uint8)
    for start, end in data_extents(fd, size):
        pos = start
        while pos < end:
            got = os.preadv(fd, [memoryview(buffer)[pos:end]], pos)
            if got <= 0:
                break  # the file shrank under us: the rest reads as zeros
            pos += got
    buffer.flags.writeable = False
    return memoryview(buffer)


def read_snapshot(path: Path | str) -> memoryview:
    """A private copy of a whole regular file, its holes left as zeros (empty for an empty
    file): for a file a writer rewrites in place while it is read (the timer wheel), so a
    reader sees one state of it, and nothing of it is mapped."""
    fd = open_for_read(path)
    if fd is None:
        raise StoreReadError(path, None, "a readable file (No such file or directory)")
    try:
        size = os.fstat(fd).st_size
        return memoryview(b"") if size == 0 else _read_extents(fd, size)
    except OSError as exc:
        raise StoreReadError(path, None, f"a readable file ({exc.strerror})") from None
    finally:
        os.close(fd)


def release_pages(view: memoryview, end: int) -> None:
    """Let go of the pages of a view from ``map_for_read`` before byte ``end`` (whole pages): a
    scan that has passed them keeps its resident memory to what it reads now, not the whole
    file. The bytes stay the same (the map is of the file, read-only; the page cache keeps
    them), a later read faults them in again. Nothing happens where madvise cannot be had, nor
    for a view of private memory (a file read, not mapped: ``_read_extents``), whose pages
    dropped would read as zeros."""
    if _LIBC is None or end < mmap.PAGESIZE or not len(view) or not _is_file_map(view):
        return
    base = np.frombuffer(view, dtype=np.uint8).ctypes.data
    first = -(-base // mmap.PAGESIZE) * mmap.PAGESIZE
    stop = (base + min(end, len(view))) // mmap.PAGESIZE * mmap.PAGESIZE
    if stop > first:
        _LIBC.madvise(first, stop - first, mmap.MADV_DONTNEED)


def _is_file_map(view: memoryview) -> bool:
    """Whether ``view`` is over a map of a file (``map_for_read``'s maps), not private memory."""
    owner = view.obj
    if isinstance(owner, mmap.mmap):
        return True
    return isinstance(owner, np.ndarray) and isinstance(owner.base, ctypes.Array)


def map_for_read(path: Path | str) -> memoryview:
    """A read-only view of a whole regular file (empty for an empty file)."""
    fd = open_for_read(path)
    if fd is None:
        raise StoreReadError(path, None, "a readable file (No such file or directory)")
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return memoryview(b"")
        if _LIBC is not None:
            extents = data_extents(fd, size)
            if len(extents) > _MAX_MAPS:
                # Many small extents: read, not mapped -- one map over them all would take
                # in their holes, which a full tmpfs cannot fault in (SIGBUS).
                return _read_extents(fd, size)
            return _map_extents(fd, size, extents)
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
    except OSError as exc:
        raise StoreReadError(path, None, f"a readable file ({exc.strerror})") from None
    finally:
        os.close(fd)


# -- writing ---------------------------------------------------------------------------------
def _write_error(path: Path | str, offset: int | None, what: str, exc: OSError) -> StoreWriteError:
    return StoreWriteError(path, offset, f"{what} failed: {exc.strerror or exc}")


def open_for_write(path: Path | str, *, create: bool = True, mode: int = 0o644) -> tuple[int, bool]:
    """(fd, created) of a regular file opened read-write, made when missing."""
    fd = None
    created = False
    try:
        if create:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
                created = True
            except FileExistsError:
                pass
        if fd is None:
            fd = os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            _check_regular(fd, path)
    except _NotRegular as exc:
        raise StoreWriteError(path, None, f"a regular file to write, found {exc.kind}") from None
    except OSError as exc:
        raise _write_error(path, None, "open for writing", exc) from None
    return fd, created


def write_parts(fd: int, parts: list, offset: int, path: Path | str, *, zero_on_failure: bool = False) -> None:
    """``write_all`` of the buffers ``parts`` back to back (bytes-like, one byte an item),
    without joining them: one pwritev; the rest of a short one is written as write_all
    writes it. More buffers than one pwritev takes are joined first."""
    if len(parts) > _IOV_MAX:
        parts = [b"".join(parts)]
    if len(parts) == 1:
        write_all(fd, parts[0], offset, path, zero_on_failure=zero_on_failure)
        return
    total = sum(map(len, parts))
    try:
        done = os.pwritev(fd, parts, offset)
    except OSError as exc:
        raise _write_error(path, offset, "write", exc) from None
    if done < total:
        write_all(fd, b"".join(parts), offset, path, zero_on_failure=zero_on_failure, done=done)


def write_all(fd: int, data, offset: int, path: Path | str, *, zero_on_failure: bool = False, done: int = 0) -> None:
    """pwrite every byte of ``data`` at ``offset``. A short write is continued; one that
    writes nothing is an error. ``zero_on_failure``: the bytes this call did write are
    zeroed again (best effort) before the error is raised, for appends into zeros.
    ``done``: the first bytes are written already (counted as this call's)."""
    total = len(data)
    view = None if not done else memoryview(data).cast("B")  # made only for a short write: the usual case is one call
    while total > done:
        try:
            n = os.pwrite(fd, data if view is None else view[done:], offset + done)
        except OSError as exc:
            error = _write_error(path, offset + done, "write", exc)
            if done:
                error = StoreWriteError(path, offset + done, f"{error.what} (wrote {done} of {total} bytes)")
            break
        if n <= 0:
            error = StoreWriteError(path, offset + done, f"write made no progress (wrote {done} of {total} bytes; "
                                                         f"is the device full?)")
            break
        done += n
        if done >= total:
            return
        if view is None:
            view = memoryview(data).cast("B")
    else:
        return
    if zero_on_failure and done:
        try:
            os.pwrite(fd, bytes(done), offset)
        except OSError:
            pass  # recovery wipes a torn tail; units past the log are dropped on open
    raise error


def fsync(fd: int, path: Path | str) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        raise _write_error(path, None, "fsync", exc) from None


def fsync_path(path: Path | str) -> None:
    """fsync a file by name (one no longer open here)."""
    fd, _ = open_for_write(path, create=False)
    try:
        fsync(fd, path)
    finally:
        os.close(fd)


def fsync_dir(path: Path | str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _write_error(path, None, "open of the directory for fsync", exc) from None
    try:
        fsync(fd, path)
    finally:
        os.close(fd)


def ftruncate(fd: int, size: int, path: Path | str) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        raise _write_error(path, size, "setting the file size", exc) from None


def make_dirs(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StoreWriteError(path, None, "a directory, found a file") from None
    except OSError as exc:
        raise _write_error(path, None, "creating the directory", exc) from None


def replace(src: Path, dst: Path) -> None:
    try:
        os.replace(src, dst)
    except OSError as exc:
        raise _write_error(dst, None, f"rename of {src.name}", exc) from None


def unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _write_error(path, None, "removing the file", exc) from None


def link(src: Path, dst: Path) -> None:
    """A second name for a file (a backup that costs no copy and keeps its holes)."""
    try:
        os.link(src, dst, follow_symlinks=False)  # a symlink's backup is the symlink
    except OSError as exc:
        raise _write_error(dst, None, f"link to {src.name}", exc) from None


def remove_dir(path: Path) -> None:
    """Remove an empty directory (gone already is fine)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise _write_error(path, None, "removing the directory", exc) from None
