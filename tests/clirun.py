"""Run the `rmqdelay` entry point in this process, exactly as the console script does
(same error handling and exit codes), capturing what it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.commands import main as cli_main
from wallclock import with_child_hooks

# The console script installed with the interpreter running the tests, never one found on PATH.
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "rmqdelay")


def console(*args, env: dict[str, str] | None = None, unreadable: list[Path] = (),
            timeout: float = 120) -> subprocess.CompletedProcess:
    """Run the console script as a user would; ``unreadable``: directories it may not list."""
    full_env = dict(os.environ, **(env or {}))
    if unreadable:
        full_env = with_child_hooks(full_env)
        full_env["RMQDELAY_TEST_UNREADABLE"] = os.pathsep.join(os.path.abspath(p) for p in unreadable)
    return subprocess.run([CONSOLE_SCRIPT, *map(str, args)], capture_output=True, text=True,
                          env=full_env, timeout=timeout, errors="surrogateescape")


def assert_one_line(proc: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    """Exit ``code``, no traceback, and stderr exactly one line "rmqdelay: ..." holding every fragment."""
    assert proc.returncode == code, (proc.returncode, proc.stderr, proc.stdout[-500:])
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("rmqdelay: ") and proc.stderr.count("\n") == 1, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


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
