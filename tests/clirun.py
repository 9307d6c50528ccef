"""Run the `rmqdelay` entry point in this process, exactly as the console script does
(same error handling and exit codes), capturing what it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.commands import main as cli_main

# The console script installed with the interpreter running the tests, never one found on PATH.
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "rmqdelay")


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def run_cli(capsys, *args: str) -> CliResult:
    capsys.readouterr()  # drop anything written before
    saved = sys.argv
    sys.argv = ["rmqdelay", *map(str, args)]
    try:
        cli_main.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    captured = capsys.readouterr()
    return CliResult(code, captured.out, captured.err)


@contextmanager
def broker_holding_lock(store):
    """Another process holding STORE/lock the way the broker does (lockf on its first byte)."""
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl,os,sys,time; fd=os.open(sys.argv[1], os.O_RDWR); "
        "fcntl.lockf(fd, fcntl.LOCK_EX|fcntl.LOCK_NB, 1, 0); print('locked', flush=True); time.sleep(60)"),
        str(store / "lock")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        holder.kill()
        holder.wait()
