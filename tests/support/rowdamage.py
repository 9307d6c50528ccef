"""The damage an operator brings to rmqdelay in an incident, one kind at a time, for the kill -9
soaks' --damage (kill9_soak.py, kill9_timer_soak.py): injected between two stops, then the store
goes on. Each kind is one the writers either rebuild from the commit log (the next run mends it
and delivers) or refuse in one line without changing a byte; a refusal is checked here (exit 2,
one line, every file as it was) and the way out taken (the file put back, `timer repair`).

    REBUILT: a unit zeroed in the middle of a SCHEDULE_TOPIC_XXXX or real topic queue file,
             a real topic queue file cut short, config/rmqdelay.scheduler.json deleted or a
             symlink to nothing, delayOffset.json deleted with its .bak
    REFUSED: the last commit log file moved away (put back), a record's size field zeroed in
             the middle of the log (put back), a pending timer log unit's prevPos overwritten
             (`timer repair --execute`)
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
from pathlib import Path

REBUILT = ["schedule-unit-zeroed", "topic-unit-zeroed", "scheduler-state-deleted", "scheduler-state-dangling",
           "delay-offsets-deleted"]
# Not in the soak's draw: a queue's last file cut short makes a later run refuse for good (the
# next file made at the wrong offset: "a file starting at 160 ... found one starting at 320").
KNOWN_OPEN = ["topic-queue-truncated"]
REFUSED = ["last-log-moved", "record-size-zeroed"]
TIMER_REFUSED = ["timer-prevpos-overwritten"]


def _files(path: Path) -> dict[str, str]:
    out = {}
    for root, _, names in os.walk(path):
        for name in names:
            p = Path(root) / name
            if p.is_symlink() or not p.is_file():
                out[str(p)] = "link" if p.is_symlink() else "other"
                continue
            out[str(p)] = hashlib.sha1(p.read_bytes()).hexdigest()
    return out


def _queue_files(path: Path, schedule: bool) -> list[Path]:
    root = path / "consumequeue"
    found = []
    for topic in sorted(root.iterdir()) if root.is_dir() else []:
        if (topic.name == "SCHEDULE_TOPIC_XXXX") != schedule or topic.name.startswith("rmq_sys"):
            continue
        for queue in sorted(topic.iterdir()):
            found += [f for f in sorted(queue.iterdir()) if f.stat().st_size >= 20 * 8]
    return found


def _written_units(f: Path) -> int:
    data = f.read_bytes()
    n = 0
    while n * 20 + 20 <= len(data) and any(data[n * 20:n * 20 + 20]):
        n += 1
    return n


def _zero_unit(path: Path, rng: random.Random, schedule: bool) -> str | None:
    files = [f for f in _queue_files(path, schedule) if _written_units(f) >= 4]
    if not files:
        return None
    f = rng.choice(files)
    n = _written_units(f)
    i = rng.randrange(1, n - 1)  # written units after it: a hole, not an end
    with open(f, "r+b") as fh:
        fh.seek(i * 20)
        fh.write(bytes(20))
    return f"{f.relative_to(path)} unit {i}"


def inject(path: Path, kind: str, rng: random.Random, *, run: list[str], env: dict,
           repair: list[str] | None = None) -> str | None:
    """Damage ``path`` as ``kind`` says; for a REFUSED kind, run ``run`` (must refuse: exit 2,
    one line, nothing changed), then take the way out. What was damaged, or None when the
    store has nothing of that kind to damage."""
    config = path / "config"
    if kind == "schedule-unit-zeroed":
        return _zero_unit(path, rng, True)
    if kind == "topic-unit-zeroed":
        return _zero_unit(path, rng, False)
    if kind == "topic-queue-truncated":
        lasts = {f.parent: f for f in sorted((path / "consumequeue").glob("*/*/*"))
                 if not f.parent.parent.name.startswith(("rmq_sys", "SCHEDULE"))}
        files = [f for f in lasts.values() if _written_units(f) >= 4]
        if not files:
            return None
        f = rng.choice(sorted(files))  # a queue's last file
        n = _written_units(f)
        keep = rng.randrange(1, n)
        os.truncate(f, keep * 20)
        return f"{f.relative_to(path)} cut to {keep} units of {n}"
    if kind in ("scheduler-state-deleted", "scheduler-state-dangling"):
        f = config / "rmqdelay.scheduler.json"
        if not f.exists():
            return None
        f.unlink()
        if kind == "scheduler-state-dangling":
            os.symlink(path / "nowhere", f)
        return str(f.relative_to(path))
    if kind == "delay-offsets-deleted":
        f = config / "delayOffset.json"
        if not f.exists():
            return None
        f.unlink()
        (config / "delayOffset.json.bak").unlink(missing_ok=True)
        return str(f.relative_to(path))
    if kind == "last-log-moved":
        files = sorted((path / "commitlog").iterdir())
        if len(files) < 2:
            return None
        last, aside = files[-1], path.parent / "moved-aside"
        with open(last, "rb") as fh:
            if not any(fh.read(8)):
                return None  # made ahead, nothing in it yet: a run without it loses nothing
        os.rename(last, aside)
        try:
            _must_refuse(path, run, env, kind)
        finally:
            os.rename(aside, last)
        return str(last.relative_to(path))
    if kind == "record-size-zeroed":
        from rmqdelay.store import Store
        with Store(path) as store:
            mf = store.commitlog.files[-1]
            offsets = [r.commitLogOffset for r in store.commitlog.records(mf.start)][:-1]
        if len(offsets) < 2:
            return None
        at = rng.choice(offsets[:-1]) - mf.start
        with open(mf.path, "r+b") as fh:
            fh.seek(at)
            saved = fh.read(4)
            fh.seek(at)
            fh.write(bytes(4))
        try:
            _must_refuse(path, run, env, kind)
        finally:
            with open(mf.path, "r+b") as fh:
                fh.seek(at)
                fh.write(saved)
        return f"{mf.path.name} at {at}"
    if kind == "timer-prevpos-overwritten":
        return _prevpos(path, rng, run, env, repair)
    raise ValueError(kind)


def _prevpos(path: Path, rng: random.Random, run: list[str], env: dict, repair: list[str] | None) -> str | None:
    """A pending unit (its slot not read yet, by timercheck) with a prevPos: overwritten with -1."""
    import struct

    from rmqdelay.store import Store
    from rmqdelay.timer import TimerStore

    from rmqdelay.timer.runstate import read_timer_state

    with Store(path) as store, TimerStore(store) as ts:
        cp = ts.checkpoint()
        file_size = ts.log.file_size or ts.config.timerLogFileSize
    state = read_timer_state(path)
    read_ms = max(cp.lastReadTimeMs if cp is not None else 0, (state.readTimeMs or 0) if state else 0)
    end = state.timerLogEnd if state else 0  # past it: a killed run's units, adopted, not checked
    candidates = []
    for f in sorted((path / "timerlog").iterdir()):
        data = f.read_bytes()
        for at in range(0, len(data) - 52 + 1, 52):
            size, prev, magic, write, delayed = struct.unpack_from(">iqiqi", data, at)
            if size == 52 and prev >= 0 and write + delayed >= read_ms + 60_000 and not magic & 4 \
                    and int(f.name) + at + 52 <= end:
                candidates.append((f, at, prev))
    if not candidates:
        return None
    f, at, prev = rng.choice(candidates)
    with open(f, "r+b") as fh:
        fh.seek(at + 4)
        fh.write(struct.pack(">q", -1))
    del file_size
    result = subprocess.run(run, capture_output=True, env=env)
    if result.returncode == 0:
        raise RuntimeError(f"run after a pending unit's prevPos overwritten ({f.name} at {at}): not refused")
    _check_refusal(result, "timer-prevpos-overwritten")
    fixed = subprocess.run(repair, capture_output=True, env=env)
    if fixed.returncode != 0:
        raise RuntimeError(f"timer repair after a prevPos overwritten failed ({fixed.returncode}): "
                           f"{fixed.stderr.decode()[-2000:]}")
    return f"{f.name} at {at}: prevPos {prev} -> -1, refused, repaired"


def _check_refusal(result: subprocess.CompletedProcess, kind: str) -> None:
    err = result.stderr.decode(errors="replace")
    lines = [line for line in err.splitlines() if line.strip()]
    if result.returncode != 2 or len(lines) != 1 or "Traceback" in err:
        raise RuntimeError(f"run after {kind}: exit {result.returncode}, stderr {err[-2000:]}")


def _must_refuse(path: Path, run: list[str], env: dict, kind: str) -> None:
    before = _files(path)
    result = subprocess.run(run, capture_output=True, env=env)
    _check_refusal(result, kind)
    after = _files(path)
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        raise RuntimeError(f"run after {kind} refused but changed {changed[:5]}")

