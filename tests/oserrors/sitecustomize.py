"""Loaded (through PYTHONPATH) by the console scripts the tests start: makes listing the
directories named in RMQDELAY_TEST_UNREADABLE fail with EACCES, as it would for a user without
read permission. The tests run as root, and root reads every directory, so the refusal is
made here, at os.scandir, where rmqdelay lists directories."""

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
