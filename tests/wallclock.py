"""The wall clock of the clock-sensitive tests.

The samples are dated: the 5.x stores were written on 2026-11-23 (their timer messages are due
over the following days), and what `run`, `inspect timer` or a broker's recovery says of a
store depends on how old it is - slots read ahead of the wall clock, the 7-day recovery
horizon, what is overdue. A test marked ``clock`` (conftest.py) runs with the wall clock at
PINNED_MS plus the time elapsed since the test started: in this process (``time.time``,
``time.time_ns``) and in every Python process it starts (childhooks/sitecustomize.py, through
PYTHONPATH and RMQDELAY_TEST_CLOCK_OFFSET_NS). Its outcome is then the same on every day of
the year; ``faketime '+400 days' pytest -m clock`` shows it (README, "Tests").

A test of the live clock itself (sleeping until a slot is due) takes ``clock(real=True)``:
it is still listed as clock-sensitive, and runs on the real clock.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

# 2026-11-24T12:00:00Z: a day after the 5.x samples' own clock (2026-11-23T16:11:27Z), when
# part of their timer messages are due and part are still ahead.
PINNED_MS = 1_795_521_600_000
CHILD_HOOKS = str(Path(__file__).resolve().parent / "childhooks")
OFFSET_ENV = "RMQDELAY_TEST_CLOCK_OFFSET_NS"


def with_child_hooks(env: dict[str, str]) -> dict[str, str]:
    """``env`` with childhooks/ first on PYTHONPATH, so that a Python child loads its
    sitecustomize (an unreadable directory, a shifted clock)."""
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != CHILD_HOOKS]
    return dict(env, PYTHONPATH=os.pathsep.join([CHILD_HOOKS, *paths]))


def pin_wall_clock(monkeypatch: pytest.MonkeyPatch, at_ms: int = PINNED_MS) -> int:
    """Run the rest of the test with the wall clock at ``at_ms`` now, advancing in real time,
    here and in the processes the test starts. Returns ``at_ms``."""
    real_time_ns = time.time_ns
    offset_ns = at_ms * 1_000_000 - real_time_ns()
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + offset_ns)
    monkeypatch.setattr(time, "time", lambda: (real_time_ns() + offset_ns) / 1e9)
    monkeypatch.setenv(OFFSET_ENV, str(offset_ns))
    monkeypatch.setenv("PYTHONPATH", with_child_hooks(dict(os.environ))["PYTHONPATH"])
    return at_ms
