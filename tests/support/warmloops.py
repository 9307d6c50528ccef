"""Compile the project's numba loops into their cache (``cache=True``: ``__pycache__`` beside
each module) before the test processes start, by running the commands that use them on a small
sample:

    python tests/support/warmloops.py write    # run: the put and re-put loops
    python tests/support/warmloops.py scan     # analyze: the commit log scan, the key hash and codes

In a new checkout nothing is compiled yet, and every process that meets a loop before one of
them has written it to the cache compiles it again: each pytest-xdist worker, the CLI children
the fault and kill tests start, each Python worker of a Spark session - seconds of CPU each.
conftest.py runs the two halves side by side, once per test run, when a loops module has no
cache newer than its source (``stale``). What is not warmed here is compiled on first use, as
before: the warm-up changes no result, only who pays the compile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "delay-partial" / "store"
FAR = "4102444800000"  # 2100-01-01: every delay message is due
# The modules holding compiled loops, and where numba caches them.
LOOP_MODULES = [ROOT / "formats" / "putloops.py", ROOT / "formats" / "reputloops.py",
                ROOT / "formats" / "scanloops.py", ROOT / "rmqdelay" / "analysis" / "keycodes.py"]


def stale() -> bool:
    """Whether a loops module has no numba cache index newer than its source (or the cache
    is elsewhere: NUMBA_CACHE_DIR)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    for module in LOOP_MODULES:
        cached = module.parent / "__pycache__"
        built = [p.stat().st_mtime for p in cached.glob(f"{module.stem}.*.nbi")] if cached.is_dir() else []
        if not built or max(built) < module.stat().st_mtime:
            return True
    return False


def start() -> list[subprocess.Popen]:
    """Both halves, side by side, output discarded: the processes to wait for."""
    return [subprocess.Popen([sys.executable, __file__, half], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for half in ("write", "scan")]


def _rmqdelay(*args: str) -> None:
    from rmqdelay.commands import entry

    saved = sys.argv
    sys.argv = ["rmqdelay", *args]
    try:
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            entry.main()
    except SystemExit:
        pass
    finally:
        sys.argv = saved


def main(half: str) -> None:
    if half == "write":
        with tempfile.TemporaryDirectory(prefix="rmqdelay-warm-") as tmp:
            store = Path(tmp) / "store"
            shutil.copytree(SAMPLE, store)
            _rmqdelay("run", str(store), "--until-empty", "--now", FAR, "--json")
    elif half == "scan":
        import pyarrow as pa

        from rmqdelay.analysis import keycodes

        _rmqdelay("analyze", "lateness", str(SAMPLE), "--now", FAR, "--json")
        keycodes.key_hash(pa.array(["warm", "loops"]))
    else:
        raise SystemExit(f"warmloops.py: write or scan, not {half!r}")


if __name__ == "__main__":
    main(sys.argv[1])
