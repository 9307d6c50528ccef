"""Loaded (through PYTHONPATH) by the processes the tests start - console scripts, the fault
injector, writer children - so that they meet what the test set up:

- RMQDELAY_TEST_UNREADABLE: listing these directories fails with EACCES, as it would for a
  user without read permission. The tests run as root, and root reads every directory, so
  the refusal is made here, at os.scandir, where rmqdelay lists directories.
- RMQDELAY_TEST_CLOCK_OFFSET_NS: the wall clock runs this far from the real one (time.time,
  time.time_ns), the same offset as in the test that started the process (tests/wallclock.py),
  so parent and child agree on "now" whatever the date the suite runs on.
"""

import errno
import os

_unreadable = {p for p in os.environ.get("RMQDELAY_TEST_UNREADABLE", "").split(os.pathsep) if p}

if _unreadable:
    _scandir = os.scandir

    def _refusing_scandir(path="."):
        if os.path.abspath(os.fspath(path)) in _unreadable:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return _scandir(path)

    os.scandir = _refusing_scandir

_offset = os.environ.get("RMQDELAY_TEST_CLOCK_OFFSET_NS")

if _offset:
    import time

    _offset_ns = int(_offset)
    _time_ns = time.time_ns

    def _shifted_time_ns() -> int:
        return _time_ns() + _offset_ns

    def _shifted_time() -> float:
        return _shifted_time_ns() / 1e9

    time.time_ns = _shifted_time_ns
    time.time = _shifted_time
