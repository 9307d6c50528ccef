"""`rmqdelay inspect timer` on a timer log of millions of units, beside the raw read of the
same bytes, measured in one run:

- raw read: the timer log files and the wheel read from the page cache (a warm-up pass
  first), 1 MiB reads: the floor for anything that looks at every byte;
- ``inspect timer STORE --json`` as a user runs it (a new process: start-up and imports
  included), wall time;
- ``timer_status`` in this process (the same work without the start-up).

Rounds alternate the three (``--rounds``, best of each), so the figures are side by side
even on a shared machine. The aim: the command in at most 10 s for 10 M units.

    python3 benchmarks/bench_timer.py [--units 10000000] [--dir DIR] [--rounds 3] [--verify] [--profile]

With ``--dir`` the store is kept there and a later run with the same ``--units`` reuses it.

The store: the packed 5.3.3 sample timer-fresh, unpacked, whose timer log is replaced by
``--units`` copies of its message units (each still pointing at its real record in the
commit log, in the slot of that record's TIMER_OUT_MS or roll target, so topics resolve and
slot times hold as on a broker) written in 100 MiB files as the broker writes them (units,
then the BLANK); every unit's prevPos chains it to the previous unit of its slot and the
wheel is rewritten to match (firstPos, lastPos, num of every slot), so the command reads a
consistent wheel and does its real work. The build checks that: pending units counted from
the log equal the wheel's count of the live slots; ``--verify`` also runs
``inspect timer --verify`` on it (slow: it follows every chain).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rmqdelay.formats.constants import (
    BLANK_MAGIC_CODE,
    DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG,
    TIMER_MAGIC_DELETE,
)
from rmqdelay.formats.timercheck import TimerCheckpoint, build_timer_checkpoint
from rmqdelay.formats.timerlog import UNIT_DTYPE, UNIT_SIZE, units_per_file
from rmqdelay.formats.timerwheel import SLOT_DTYPE, WHEEL_SLOTS

from rmqdelay.samples.pack import samples_dir, unpack
from rmqdelay.store import Store
from rmqdelay.store.fileio import ftruncate, open_for_write, write_all
from rmqdelay.timer.status import timer_status
from rmqdelay.timer.store import TimerStore

PRECISION_MS = 1000


def build_store(store: Path, count: int, file_size: int) -> dict:
    """timer-fresh with a timer log of ``count`` units and a wheel that matches it."""
    unpack(samples_dir() / "timer-fresh" / "store.tar.xz", store)
    with Store(store) as s, TimerStore(s) as ts:
        templates = ts.log.units()
        cp = ts.checkpoint()
    templates = templates[(templates["magic"] & TIMER_MAGIC_DELETE) == 0]
    read_ms = cp.lastReadTimeMs
    pick = templates[np.arange(count) % len(templates)]
    # Each copy keeps its template's write clock and slot: a unit's slot must be its record's
    # TIMER_OUT_MS (or its roll target), which --verify checks record by record.
    write_ms = pick["currWriteTime"].astype(np.int64)
    slot_ms = write_ms + pick["delayedTime"].astype(np.int64)
    per_file = units_per_file(file_size)
    index = np.arange(count, dtype=np.int64)
    offset = (index // per_file) * file_size + (index % per_file) * UNIT_SIZE
    # prevPos: the unit before it in its slot (append order), -1 for the first.
    order = np.lexsort((offset, slot_ms))
    same = slot_ms[order][1:] == slot_ms[order][:-1]
    prev = np.full(count, -1, dtype=np.int64)
    prev[order[1:]] = np.where(same, offset[order][:-1], -1)

    units = np.zeros(count, dtype=UNIT_DTYPE)
    units["size"] = UNIT_SIZE
    units["prevPos"] = prev
    units["magic"] = pick["magic"]
    units["currWriteTime"] = write_ms
    units["delayedTime"] = slot_ms - write_ms
    units["offsetPy"] = pick["offsetPy"]
    units["sizePy"] = pick["sizePy"]
    units["hashCodeOfRealTopic"] = pick["hashCodeOfRealTopic"]

    log_dir = store / "timerlog"
    for old in log_dir.iterdir():
        old.unlink()
    files = -(-count // per_file)
    for f in range(files):
        part = units[f * per_file:(f + 1) * per_file]
        path = log_dir / f"{f * file_size:020d}"
        fd, _ = open_for_write(path)
        try:
            data = part.tobytes()
            write_all(fd, data, 0, path)
            if len(part) == per_file:  # a full file ends with the BLANK TimerLog.append writes
                blank = np.array([file_size - len(data), 0, BLANK_MAGIC_CODE], dtype=">i4")
                tail = blank[:1].tobytes() + np.zeros(1, ">i8").tobytes() + blank[2:].tobytes()
                write_all(fd, tail, len(data), path)
            ftruncate(fd, file_size, path)
        finally:
            os.close(fd)
    log_end = (files - 1) * file_size + (count - (files - 1) * per_file) * UNIT_SIZE

    # The wheel: one slot per distinct slot time, its chain's first and last unit and count.
    slots, first_index, num = np.unique(slot_ms[order], return_index=True, return_counts=True)
    last_index = first_index + num - 1
    wheel = np.zeros(WHEEL_SLOTS, dtype=SLOT_DTYPE)
    at = (slots // PRECISION_MS) % WHEEL_SLOTS
    assert len(np.unique(at)) == len(at), "two slot times in one wheel slot"
    wheel["timeSlot"][at] = slots // PRECISION_MS
    wheel["firstPos"][at] = offset[order][first_index]
    wheel["lastPos"][at] = offset[order][last_index]
    wheel["num"][at] = num
    path = store / "timerwheel"
    fd, _ = open_for_write(path)
    try:
        write_all(fd, wheel.tobytes(), 0, path)
    finally:
        os.close(fd)
    # The checkpoint: the read position kept, the log flushed to its end.
    path = store / "config" / "timercheck"
    fd, _ = open_for_write(path)
    try:
        write_all(fd, build_timer_checkpoint(TimerCheckpoint(read_ms, log_end, cp.lastTimerQueueOffset,
                                                             cp.masterTimerQueueOffset, cp.dataVersion)), 0, path)
    finally:
        os.close(fd)
    return {"units": count, "files": files, "read_ms": read_ms, "slots": len(slots),
            "pending": int((slot_ms >= read_ms).sum()), "log_bytes": files * file_size}


def data_files(store: Path) -> list[Path]:
    return sorted((store / "timerlog").iterdir()) + [store / "timerwheel"]


def raw_read(files: list[Path]) -> tuple[float, int]:
    buf = bytearray(1 << 20)
    view = memoryview(buf)
    total = 0
    start = time.perf_counter()
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return time.perf_counter() - start, total


def status_in_process(store: Path, now_ms: int):
    start = time.perf_counter()
    with Store(store) as s, TimerStore(s) as ts:
        status = timer_status(ts, now_ms)
    return time.perf_counter() - start, status


def command(store: Path, now_ms: int) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rmqdelay", "inspect", "timer", str(store), "--now", str(now_ms),
                           "--json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"inspect timer failed ({done.returncode}): {done.stderr.strip()}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--units", type=int, default=10_000_000)
    parser.add_argument("--file-size", type=int, default=DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG,
                        help="timer log file size (mappedFileSizeTimerLog; default the broker's 100 MiB)")
    parser.add_argument("--dir", type=Path, help="build the store here (kept); default a temporary directory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--verify", action="store_true", help="also run inspect timer --verify on the store")
    parser.add_argument("--profile", action="store_true", help="profile one in-process timer_status")
    args = parser.parse_args()

    tmp = None
    if args.dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-timer-")
        args.dir = Path(tmp.name)
    store = args.dir / "store"
    start = time.perf_counter()
    record = args.dir / "built.json"
    if record.exists() and json.loads(record.read_text())["units"] == args.units:
        built = json.loads(record.read_text())  # the store a previous run built in --dir
        how = f"reused {store}"
    else:
        built = build_store(store, args.units, args.file_size)
        record.write_text(json.dumps(built))
        how = f"built in {time.perf_counter() - start:.1f} s"
    print(f"{built['units']:,} units in {built['files']} timer log files ({built['log_bytes'] / 1e6:,.0f} MB), "
          f"{built['slots']:,} slots, {built['pending']:,} pending: {how}")
    now_ms = built["read_ms"] + 60_000

    # The wheel and the log agree: the command counts pending units from the log and the
    # live slots' num from the wheel, independently.
    _, status = status_in_process(store, now_ms)
    assert status.timerLog["units"] == built["units"], status.timerLog
    assert status.pending.units == built["pending"] == status.dequeue["behindMessages"], \
        (status.pending.units, built["pending"], status.dequeue)
    if args.verify:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "rmqdelay", "inspect", "timer", str(store), "--verify"],
                              capture_output=True, text=True)
        print(f"inspect timer --verify: exit {done.returncode} in {time.perf_counter() - start:.1f} s "
              f"{done.stdout.strip().splitlines()[-1:] if done.stdout.strip() else ''}")
        if done.returncode != 0:
            print(done.stdout[-2000:], done.stderr[-2000:])

    files = data_files(store)
    raw_read(files)  # warm the page cache
    best = {"raw": float("inf"), "command": float("inf"), "status": float("inf")}
    size = 0
    for r in range(args.rounds):
        t_raw, size = raw_read(files)
        t_cmd = command(store, now_ms)
        t_status, _ = status_in_process(store, now_ms)
        best = {"raw": min(best["raw"], t_raw), "command": min(best["command"], t_cmd),
                "status": min(best["status"], t_status)}
        print(f"round {r + 1}: raw read {t_raw:.2f} s | inspect timer {t_cmd:.2f} s | timer_status {t_status:.2f} s")

    units = built["units"]
    print()
    print(f"timer log + wheel: {size / 1e6:,.0f} MB, {units:,} units (best of {args.rounds} rounds)")
    print(f"raw read                 {best['raw']:7.2f} s  {size / best['raw'] / 1e6:9,.0f} MB/s")
    print(f"inspect timer (command)  {best['command']:7.2f} s  {size / best['command'] / 1e6:9,.0f} MB/s  "
          f"{units / best['command'] / 1e6:6.2f} M units/s")
    print(f"timer_status (in-proc.)  {best['status']:7.2f} s  {size / best['status'] / 1e6:9,.0f} MB/s  "
          f"{units / best['status'] / 1e6:6.2f} M units/s")
    print(f"inspect timer / raw read: {best['command'] / best['raw']:.1f}x the time; "
          f"aim: <= 10 s for 10 M units: {'met' if best['command'] <= 10 * units / 10_000_000 else 'NOT met'}")

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        status_in_process(store, now_ms)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(25)
        print(out.getvalue())
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
