"""Damage to a 5.x timer store's files, as the damage matrix (tests/test_timer_damage.py) and
the kill -9 soak with damage (kill9_timer_soak.py --damage) inflict it: one timer file (the
first, a middle or the last timer log file, timerwheel, config/timercheck,
config/timermetrics) deleted, truncated at the start / middle / end, zeroed, overwritten with
random bytes in a slot or unit, or given the wrong size."""

from __future__ import annotations

import os
import random
from pathlib import Path

FILES = ("log-first", "log-mid", "log-last", "timerwheel", "config/timercheck", "config/timermetrics")
DAMAGES = ("deleted", "truncated-start", "truncated-middle", "truncated-end", "zeroed", "random", "wrong-size")


def target(store: Path, name: str) -> Path | None:
    """The file ``name`` stands for in ``store`` (None: no timer log file left)."""
    if name.startswith("log-"):
        logs = sorted((store / "timerlog").iterdir())
        if not logs:
            return None
        return {"log-first": logs[0], "log-mid": logs[len(logs) // 2], "log-last": logs[-1]}[name]
    return store / name


def damage(path: Path, how: str, rng: random.Random) -> None:
    data = path.read_bytes()
    n = len(data)
    if how == "deleted":
        path.unlink()
    elif how == "truncated-start":
        os.truncate(path, min(10, n))
    elif how == "truncated-middle":
        os.truncate(path, n // 2 + 7)  # not on a unit or slot boundary
    elif how == "truncated-end":
        os.truncate(path, max(n - 20, 0))
    elif how == "zeroed":
        path.write_bytes(bytes(n))
    elif how == "random":
        # 32 random bytes over a slot or a unit: somewhere that held data.
        held = [i for i in range(0, n, 32) if any(data[i:i + 32])] or [0]
        at = rng.choice(held)
        changed = bytearray(data)
        changed[at:at + 32] = rng.randbytes(32)[:len(changed[at:at + 32])]
        path.write_bytes(bytes(changed))
    elif how == "wrong-size":
        with open(path, "ab") as fh:
            fh.write(bytes(1000))
    else:
        raise ValueError(how)


def damage_store(store: Path, name: str, how: str, rng: random.Random) -> Path | None:
    """Damage one timer file of ``store``; the file, or None when there was none."""
    path = target(store, name)
    if path is None or not path.exists():
        return None
    damage(path, how, rng)
    return path
