"""Fault injection at the system-call boundary, for the fault tests and the soak.

    python tests/support/faultinject.py SPEC rmqdelay-args...

runs the `rmqdelay` command in this process after wrapping os.open (and open()), os.pwrite
(and os.pwritev, as a pwrite of its buffers joined), os.write, os.fsync, os.ftruncate and
os.replace so that chosen calls fail with an errno (ENOSPC, EIO, EMFILE, EACCES, ...) or
write short, as a full disk, a failing device or a file that cannot be read would make them. rmqdelay's own code is not changed: it meets the faults
where it would meet the real ones. SPEC is JSON, a list of rules:

    {"op": "pwrite", "path": "commitlog/", "nth": 3, "errno": "ENOSPC", "short": 100, "count": 1}

- op: open (with "mode": "read" | "write" | "create" to narrow it), pwrite, write, fsync,
  ftruncate, replace;
- path: a substring of the file's path (for fd calls, the path it was opened with); a
  trailing "$" makes it the end of the path;
- nth: the first matching call that fails (1-based); count: how many matching calls fail
  from there (default: every later one - a disk stays full);
- short: instead of failing, the nth call writes only this many bytes (a short write);
  the calls after it fail with errno, as when the device fills up. Under an ENOSPC rule a
  write of zeros still succeeds: overwriting bytes already written needs no new space.
- kill: true: the nth call is made for real, then the process is stopped by SIGKILL (what
  it wrote stays in the page cache, as after a kill -9); for pwrite, write and fsync;
- after: only calls made once a write (pwrite or write) to a path holding this text is done
  count ("/commitlog/": once the run has put its first message);
- contains: only writes whose data holds this text count (a record with a given property);
  contains_hex: the same for bytes given in hex ("cbd43194": a BLANK record's magic code, the
  write that ends a commit log file).

Faults that need no wrapping are made for real by the tests: RLIMIT_FSIZE and
RLIMIT_NOFILE in a child, a small tmpfs, FIFOs, directories where files belong.
"""

from __future__ import annotations

import builtins
import errno as errno_module
import io
import json
import os
import signal
import sys
from dataclasses import dataclass


@dataclass
class Rule:
    op: str
    path: str = ""
    nth: int = 1
    count: int | None = None
    errno: str = "EIO"
    short: int | None = None
    mode: str | None = None
    kill: bool = False
    contains: str | None = None
    contains_hex: str | None = None
    after: str | None = None
    seen: int = 0
    armed: bool = False

    def matches(self, path: str) -> bool:
        if self.path.endswith("$"):
            return path.endswith(self.path[:-1])
        return self.path in path

    def hit(self, op: str, path: str, mode: str | None = None, data=None) -> bool:
        if op != self.op or not self.matches(path):
            return False
        if self.after is not None and not self.armed:
            return False
        if self.contains is not None and (data is None or self.contains.encode() not in bytes(data)):
            return False
        if self.contains_hex is not None and (data is None or bytes.fromhex(self.contains_hex) not in bytes(data)):
            return False
        if self.mode is not None and mode != self.mode:
            return False
        self.seen += 1
        if self.seen < self.nth:
            return False
        return self.count is None or self.seen < self.nth + self.count

    def error(self, path: str) -> OSError:
        code = getattr(errno_module, self.errno)
        return OSError(code, os.strerror(code), path)


def install(rules: list[Rule]) -> None:
    paths: dict[int, str] = {}
    real_open, real_close = os.open, os.close
    real_pwrite, real_write, real_fsync = os.pwrite, os.write, os.fsync
    real_ftruncate, real_replace = os.ftruncate, os.replace

    def first_hit(op: str, path: str, mode: str | None = None, data=None) -> Rule | None:
        for rule in rules:
            if rule.hit(op, path, mode, data):
                return rule
        return None

    def fake_open(path, flags, mode=0o777, *, dir_fd=None):
        name = os.fspath(path)
        if isinstance(name, bytes):
            name = name.decode(errors="replace")
        kind = "create" if flags & os.O_CREAT and not os.path.exists(name) else (
            "read" if flags & os.O_ACCMODE == os.O_RDONLY else "write")
        rule = first_hit("open", name, kind)
        if rule is None and kind == "create":
            rule = first_hit("open", name, "write")
        if rule is not None:
            raise rule.error(name)
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        paths[fd] = name
        return fd

    def fake_close(fd):
        paths.pop(fd, None)
        return real_close(fd)

    def writer(real, op):
        def fake(fd, data, *rest):
            name = paths.get(fd, "")
            if not any(memoryview(data).cast("B")) and any(r.op == op and r.errno == "ENOSPC" for r in rules):
                # Zeros over bytes just written need no new blocks: a full disk still takes
                # them (what undoing a short write does).
                return real(fd, data, *rest)
            rule = first_hit(op, name, data=data)
            if rule is not None:
                if rule.kill:
                    done = real(fd, data, *rest)
                    os.kill(os.getpid(), signal.SIGKILL)
                    return done
                if rule.short is not None and rule.seen == rule.nth:
                    size = min(rule.short, len(data))
                    return real(fd, memoryview(data)[:size], *rest) if size else 0
                raise rule.error(name)
            done = real(fd, data, *rest)
            for waiting in rules:
                if waiting.after is not None and waiting.after in name:
                    waiting.armed = True
            return done
        return fake

    def fake_fsync(fd):
        rule = first_hit("fsync", paths.get(fd, ""))
        if rule is not None:
            if rule.kill:
                real_fsync(fd)
                os.kill(os.getpid(), signal.SIGKILL)
            raise rule.error(paths.get(fd, ""))
        return real_fsync(fd)

    def fake_ftruncate(fd, length):
        rule = first_hit("ftruncate", paths.get(fd, ""))
        if rule is not None:
            raise rule.error(paths.get(fd, ""))
        return real_ftruncate(fd, length)

    def fake_replace(src, dst, **kw):
        rule = first_hit("replace", os.fspath(dst))
        if rule is not None:
            raise rule.error(os.fspath(dst))
        return real_replace(src, dst, **kw)

    real_builtin_open = builtins.open

    def fake_builtin_open(file, mode="r", *args, **kwargs):
        # Path.read_bytes and open(): the same rules as os.open.
        if isinstance(file, (str, bytes, os.PathLike)):
            name = os.fsdecode(file)
            writing = any(c in mode for c in "wax+")
            kind = "create" if writing and not os.path.exists(name) else ("write" if writing else "read")
            rule = first_hit("open", name, kind) or (first_hit("open", name, "write") if kind == "create" else None)
            if rule is not None:
                raise rule.error(name)
        return real_builtin_open(file, mode, *args, **kwargs)

    builtins.open = fake_builtin_open
    io.open = fake_builtin_open
    os.open = fake_open
    os.close = fake_close
    os.pwrite = fake_pwrite = writer(real_pwrite, "pwrite")
    # A pwritev is a pwrite of its buffers joined, to the rules (op "pwrite").
    os.pwritev = lambda fd, buffers, offset, *flags: fake_pwrite(fd, b"".join(buffers), offset)
    os.write = writer(real_write, "write")
    os.fsync = fake_fsync
    os.ftruncate = fake_ftruncate
    os.replace = fake_replace


def parse(spec: str) -> list[Rule]:
    return [Rule(**rule) for rule in json.loads(spec)]


def main(argv: list[str]) -> None:
    install(parse(argv[0]))
    from rmqdelay.commands.main import main as rmqdelay_main

    sys.argv = ["rmqdelay", *argv[1:]]
    rmqdelay_main()


if __name__ == "__main__":
    main(sys.argv[1:])
