"""How fast the CLI answers: `rmqdelay --version`, `--help` of the root and of every command
and sub-command, and `inspect delay` / `inspect store` on a sample store, each beside a bare
`python -c pass` of the same interpreter.

Each case runs N times (default 10) as a user runs it, through the console script next to the
interpreter, in a new process each time, after one untimed round: Python caches the bytecode
of rmqdelay's modules as it does for a user (PYTHONDONTWRITEBYTECODE, which some shells and
CI set, is dropped), so no case pays for compiling the source. Printed per case: the wall
time (min and median), the CPU time of the process (user + system, min: what the machine's
other work disturbs least), the min wall time as a ratio to the bare interpreter's, the peak
RSS, and the target it is held to. Nothing is asserted: tests/test_startup.py proves what
each case imports.

    .venv/bin/python benchmarks/bench_startup.py [--runs N] [--python PATH] [--against PATH] [--store DIR]

``--python`` times the console script beside another interpreter (default: this one);
``--against`` times a second one in the same rounds, the venv of another checkout (say the
version before a change), and adds how many times faster the first is.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STORE = ROOT / "samples" / "delay-partial" / "store"

# Every command and sub-command whose --help a user may ask for.
HELP_OF = [
    "run", "analyze", "send", "trace",
    "inspect", "inspect store", "inspect cq", "inspect commitlog", "inspect message", "inspect delay",
    "inspect index", "inspect timer", "inspect consumers", "inspect dlq",
    "offsets", "offsets show", "offsets reset",
    "samples", "samples generate", "samples unpack",
    "timer", "timer repair",
]
HELP_TARGET_S = 0.2
READ_TARGET_S = 0.5


@dataclass
class Case:
    name: str
    argv: list[str]
    target_s: float | None


@dataclass
class Timing:
    wall: list[float]
    cpu: list[float]
    rss_kb: list[int]


# As a user's shell runs it: compiled modules are cached in __pycache__ and read back.
ENV = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> tuple[float, float, int]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (KiB) of one process (wait4:
    the rusage of that child alone)."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = code = os.waitstatus_to_exitcode(status)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if code not in (0, 1) or "Traceback" in text:  # inspect store exits 1 when it lists problems
        raise SystemExit(f"{' '.join(argv)}: exit {code}\n{text}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def cases(python: str, store: Path) -> list[Case]:
    cli = str(Path(python).parent / "rmqdelay")
    found = [Case("python -c pass", [python, "-c", "pass"], None),
             Case("--version", [cli, "--version"], HELP_TARGET_S),
             Case("--help", [cli, "--help"], HELP_TARGET_S)]
    found += [Case(f"{path} --help", [cli, *path.split(), "--help"], HELP_TARGET_S) for path in HELP_OF]
    found += [Case(f"inspect {what} STORE", [cli, "inspect", what, str(store)], READ_TARGET_S)
              for what in ("delay", "store")]
    return found


def measure(interpreters: list[str], store: Path, runs: int) -> dict[str, dict[str, Timing]]:
    """Per interpreter, per case: every run. Round robin over the cases and interpreters, so
    a burst of load elsewhere on the machine falls on all of them alike; one untimed round
    first (bytecode written, files in the page cache)."""
    todo = {python: cases(python, store) for python in interpreters}
    for found in todo.values():
        for case in found:
            run_once(case.argv)
    timings = {python: {case.name: Timing([], [], []) for case in found} for python, found in todo.items()}
    for _ in range(runs):
        for python, found in todo.items():
            for case in found:
                wall, cpu, rss = run_once(case.argv)
                t = timings[python][case.name]
                t.wall.append(wall)
                t.cpu.append(cpu)
                t.rss_kb.append(rss)
    return timings


def report(python: str, found: list[Case], timings: dict[str, Timing], against: dict[str, Timing] | None) -> None:
    bare = min(timings[found[0].name].wall)
    width = max(len(case.name) for case in found)
    print(f"\n{python}")
    print(f"{'case':<{width}}  {'min s':>6}  {'median s':>8}  {'cpu s':>6}  {'x bare':>6}  {'RSS MB':>6}  "
          f"{'target':<10}" + ("  x faster" if against else ""))
    for case in found:
        t = timings[case.name]
        best = min(t.wall)
        target = "" if case.target_s is None else (
            f"{case.target_s:.1f} s " + ("ok" if best <= case.target_s else "OVER"))
        faster = f"  {min(against[case.name].wall) / best:8.1f}" if against and case.target_s else ""
        print(f"{case.name:<{width}}  {best:6.3f}  {statistics.median(t.wall):8.3f}  {min(t.cpu):6.3f}  "
              f"{best / bare:6.1f}  {statistics.median(t.rss_kb) / 1024:6.1f}  {target:<10}{faster}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each case (default 10)")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose venv's console script to time (default: this one)")
    parser.add_argument("--against", help="a second interpreter to time in the same rounds (another checkout's venv)")
    parser.add_argument("--store", type=Path, default=STORE, help="the store inspect reads (default: %(default)s)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs: at least 1")
    interpreters = [args.python] + ([args.against] if args.against else [])
    for python in interpreters:
        if not (Path(python).parent / "rmqdelay").exists():
            parser.error(f"{python}: no rmqdelay console script beside it")

    timings = measure(interpreters, args.store, args.runs)
    print(f"{args.runs} runs per case, in rounds; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} CPUs. min s, median s: wall time; cpu s: user + system, min; x bare: min s "
          f"over python -c pass's; RSS: peak, median")
    found = cases(args.python, args.store)
    report(args.python, found, timings[args.python], timings.get(args.against))
    if args.against:
        report(args.against, found, timings[args.against], None)


if __name__ == "__main__":
    main()
