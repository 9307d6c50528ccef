"""Peak memory of the embedded engine and of the verifies against the size of the store:
`rmqdelay analyze KIND STORE --json` (and `rmqdelay inspect commitlog|index STORE --verify
--json` for the kinds ``commitlog-verify``, ``index-verify``) run as a child process each,
under ``/usr/bin/time`` (its maximum resident set size, and the wall time), on stores of
growing size made by `rmqdelay samples generate`.

    python3 benchmarks/bench_memory.py --messages 1100000 --messages 4400000 [--dir DIR] [--keep]
                                       [--kinds backlog,lateness,retries,commitlog-verify,index-verify]
                                       [--memory 256M]

~1.1 M generated messages make ~1 GB of commit log, ~4.4 M ~4 GB. A store already in DIR
(``DIR/m<messages>``, seeds 1, 2, ... in the order given) is reused, so a second run of another version measures the same files.
``--memory`` sets RMQDELAY_ANALYZE_MEMORY for the children (the engine's budget for rows
held at once). The stores take their size in disk: check ``df -h`` first; they are removed
afterwards unless ``--keep`` or ``--dir``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_analyze import store_bytes


def make_store(path: Path, messages: int, seed: int) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rmqdelay", "samples", "generate", str(path), "--messages", str(messages),
                    "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


# The verifies measured beside the analyses: kind -> `rmqdelay inspect WHAT STORE --verify --json`.
VERIFIES = {"commitlog-verify": "commitlog", "index-verify": "index"}


def command(kind: str, store: Path, at_ms: int) -> list[str]:
    if kind in VERIFIES:
        return ["inspect", VERIFIES[kind], str(store), "--verify", "--json"]
    return ["analyze", kind, str(store), "--now", str(at_ms), "--json"]


def measure(kind: str, store: Path, at_ms: int, env: dict[str, str]) -> tuple[int, float]:
    """(peak RSS in kB, wall seconds) of one child running ``command(kind, ...)`` (a verify
    that finds problems exits 1: measured all the same)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as stats:
        started = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", stats.name, sys.executable, "-m", "rmqdelay",
                               *command(kind, store, at_ms)], stdout=subprocess.DEVNULL, env=env)
        if done.returncode not in (0, 1) or (done.returncode and kind not in VERIFIES):
            raise SystemExit(f"{kind} on {store} exited {done.returncode}")
        seconds = time.perf_counter() - started
        return int(stats.read().split()[-1]), seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, action="append", required=True,
                        help="messages of one store (repeat for several stores)")
    parser.add_argument("--kinds", default="backlog,lateness,retries")
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--memory", default=None, help="RMQDELAY_ANALYZE_MEMORY for the children")
    args = parser.parse_args()

    root = args.dir or Path(tempfile.mkdtemp(prefix="rmqdelay-memory-"))
    env = dict(os.environ)
    if args.memory is not None:
        env["RMQDELAY_ANALYZE_MEMORY"] = args.memory
    rows = []
    try:
        for seed, messages in enumerate(args.messages, 1):
            store = root / f"m{messages}"
            if not (store / "commitlog").is_dir():
                print(f"generating {messages:,} messages in {store}: {make_store(store, messages, seed):.0f} s", flush=True)
            at_ms = json.loads((store / "plan.json").read_text())["atMs"]
            size = store_bytes(store)
            for kind in args.kinds.split(","):
                peak_kb, seconds = measure(kind, store, at_ms, env)
                rows.append((kind, size, peak_kb, seconds))
                print(f"{kind:16} {size / 1e9:5.2f} GB  peak RSS {peak_kb / 1024:7,.0f} MB  {seconds:6.1f} s", flush=True)
    finally:
        if not args.keep and args.dir is None:
            shutil.rmtree(root, ignore_errors=True)
    sizes = sorted({size for _, size, _, _ in rows})
    if len(sizes) > 1:
        for kind in args.kinds.split(","):
            small = next(r for r in rows if r[0] == kind and r[1] == sizes[0])
            large = next(r for r in rows if r[0] == kind and r[1] == sizes[-1])
            print(f"{kind}: {large[1] / small[1]:.1f}x the commit log, {large[2] / small[2]:.2f}x the peak RSS, "
                  f"{large[3] / small[3]:.1f}x the time")
    print(f"load: {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f}")


if __name__ == "__main__":
    main()
