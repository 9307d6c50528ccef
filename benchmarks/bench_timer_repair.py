"""`timer repair` on a large timer log, against `inspect timer --verify` on the same store, in
one run (ratios, not absolute times: the machine is shared).

    python benchmarks/bench_timer_repair.py [--units 2000000] [--keep DIR]

The store is timer-partial with its timer log replaced by ``--units`` units in files of the
default mappedFileSizeTimerLog (100 MiB): its own 1,238 units repeated, so every unit points
at a real timer message, but each copy's prevPos points at the previous copy's unit - chains
that all need relinking, so --execute rewrites every file and every slot (the worst case).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rmqdelay.formats.timerlog import UNIT_DTYPE, UNIT_SIZE, build_blank, units_per_file  # noqa: E402

from rmqdelay.samples.pack import ARCHIVE_NAME, unpack  # noqa: E402

FILE_SIZE = 100 * 1024 * 1024
CLI = str(Path(sys.executable).parent / "rmqdelay")


def build(store: Path, count: int) -> None:
    log = store / "timerlog"
    raw = b"".join(p.read_bytes()[:16328] for p in sorted(log.iterdir()))
    units = np.frombuffer(raw, dtype=UNIT_DTYPE)
    units = units[units["size"] == UNIT_SIZE]
    shutil.rmtree(log)
    log.mkdir()
    one = units.tobytes()
    tiled = (one * -(-count // len(units)))[:count * UNIT_SIZE]  # bytes: np.resize would not keep big-endian
    per = units_per_file(FILE_SIZE)
    for start in range(0, count, per):
        chunk = tiled[start * UNIT_SIZE:(start + per) * UNIT_SIZE]
        data = chunk + (build_blank(FILE_SIZE - len(chunk)) if start + per < count else b"")
        path = log / f"{(start // per) * FILE_SIZE:020d}"
        with open(path, "wb") as fh:
            fh.write(data)
            fh.truncate(FILE_SIZE)


def timed(*args: str) -> tuple[float, int]:
    start = time.perf_counter()
    done = subprocess.run([CLI, *args], capture_output=True, text=True)
    return time.perf_counter() - start, done.returncode


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--units", type=int, default=2_000_000)
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args()
    where = Path(args.keep or tempfile.mkdtemp(prefix="bench-timer-repair-"))
    store = where / "store"
    if store.exists():
        shutil.rmtree(store)
    unpack(ROOT / "samples" / "timer-partial" / ARCHIVE_NAME, store)
    build(store, args.units)
    now = "1795450330000"
    broken, bcode = timed("inspect", "timer", str(store), "--verify", "--json", "--now", now)
    dry, dcode = timed("timer", "repair", str(store), "--json", "--now", now)
    execute, ecode = timed("timer", "repair", str(store), "--execute", "--json", "--now", now)
    verify, vcode = timed("inspect", "timer", str(store), "--verify", "--json", "--now", now)
    again, acode = timed("timer", "repair", str(store), "--json", "--now", now)
    print(f"{args.units} units in {len(list((store / 'timerlog').iterdir()))} timer log file(s); ratios against "
          "--verify of the repaired store")
    print(f"inspect timer --verify, before   {broken:7.1f} s (exit {bcode}; one problem line per unit)")
    print(f"timer repair (dry run)           {dry:7.1f} s (exit {dcode})  {dry / verify:.2f} x")
    print(f"timer repair --execute           {execute:7.1f} s (exit {ecode})  {execute / verify:.2f} x")
    print(f"inspect timer --verify, after    {verify:7.1f} s (exit {vcode})  1.00 x")
    print(f"timer repair on the result       {again:7.1f} s (exit {acode})  {again / verify:.2f} x")
    print(f"wheel on disk: {(store / 'timerwheel').stat().st_blocks * 512 // 1024} KiB of 37800 KiB")
    if args.keep is None:
        shutil.rmtree(where)


if __name__ == "__main__":
    main()
