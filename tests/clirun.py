"""Run the `rmqdelay` entry point as the console script does (same error handling and exit
codes), capturing what it writes: in this process, unless the test is about the process
itself (its environment, what it may read, a time limit), then as a child process."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.commands import entry as cli_entry
from wallclock import with_child_hooks

# The console script installed with the interpreter running the tests, never one found on PATH.
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "rmqdelay")


def console(*args, env: dict[str, str] | None = None, unreadable: list[Path] = (),
            timeout: float | None = None) -> subprocess.CompletedProcess:
    """What a user running ``rmqdelay ARGS`` sees: exit code, stdout, stderr. With ``env``,
    ``unreadable`` (directories it may not list) or ``timeout`` the console script runs as a
    child process; otherwise the same entry point runs in this process, which is what most
    tests need and much faster (no interpreter and imports per call)."""
    args = [str(a) for a in args]
    if env is None and not unreadable and timeout is None:
        code, out, err = in_process(args)
        return subprocess.CompletedProcess([CONSOLE_SCRIPT, *args], code, out, err)
    full_env = dict(os.environ, **(env or {}))
    if unreadable:
        full_env = with_child_hooks(full_env)
        full_env["RMQDELAY_TEST_UNREADABLE"] = os.pathsep.join(os.path.abspath(p) for p in unreadable)
    return subprocess.run([CONSOLE_SCRIPT, *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout or 120, errors="surrogateescape")


def call_main(args) -> int:
    """``rmqdelay ARGS`` through the console script's entry point, in this process: its exit code."""
    saved = sys.argv
    sys.argv = ["rmqdelay", *map(str, args)]
    try:
        cli_entry.main()
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved


def in_process(args: list[str]) -> tuple[int, str, str]:
    """``rmqdelay ARGS`` through the console script's entry point in this process, its output
    captured as a pipe would take it (UTF-8, not a terminal): (exit code, stdout, stderr)."""
    out, err = (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict") for _ in range(2))
    with redirect_stdout(out), redirect_stderr(err):
        code = call_main(args)
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8", errors="surrogateescape"))
    return code, texts[0], texts[1]


def assert_one_line(proc: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    """Exit ``code``, no traceback, and stderr exactly one line "rmqdelay: ..." holding every fragment."""
    assert proc.returncode == code, (proc.returncode, proc.stderr, proc.stdout[-500:])
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stderr.startswith("rmqdelay: ") and proc.stderr.count("\n") == 1, proc.stderr
    for fragment in fragments:
        assert fragment in proc.stderr, (fragment, proc.stderr)


def problems_of(stdout: str) -> list[dict]:
    """The problems of a `--verify --json`: every line but the last, the summary, which must
    be there and count them (docs/cli.md: a clean store prints the summary alone)."""
    *problems, summary = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert summary["kind"] == "summary", summary
    assert summary["problems"] + summary["advisories"] == len(problems), summary
    return problems


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]

    def problems(self) -> list[dict]:
        return problems_of(self.out)


def run_cli(capsys, *args: str) -> CliResult:
    capsys.readouterr()  # drop anything written before
    code = call_main(args)
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
