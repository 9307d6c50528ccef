"""A real Spark standalone cluster on this machine, for the tests and the benchmarks: a master
and workers started with pyspark's own launcher (bin/spark-class), bound to 127.0.0.1 only,
each worker with a working directory of its own (so an executor does not see the caller's
working directory), stopped when the ``with`` block ends, however it ends.

A driver that uses it must bind to loopback too: SPARK_LOCAL_IP=127.0.0.1 in its environment
(``LOOPBACK_ENV``) before its JVM starts."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path


LOOPBACK_ENV = {"SPARK_LOCAL_IP": "127.0.0.1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _wait_for(log: Path, text: str, count: int, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if log.exists() and log.read_text(errors="replace").count(text) >= count:
            return
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[2]} exited: {log.read_text(errors='replace')[-2000:]}")
        time.sleep(0.5)
    raise TimeoutError(f"no {text!r} x{count} in {log} within {timeout_s} s: {log.read_text(errors='replace')[-2000:]}")


@contextlib.contextmanager
def standalone_cluster(root: Path, workers: int = 2, timeout_s: float = 180, *, cores: int = 1,
                       memory: str = "1g") -> Iterator[str]:
    """Yields the master's URL (spark://127.0.0.1:PORT) once every worker (``cores`` cores and
    ``memory`` for executors each) has registered; the logs are in ``root``."""
    home = _spark_home()
    env = dict(os.environ, **LOOPBACK_ENV, SPARK_HOME=str(home), SPARK_MASTER_HOST="127.0.0.1",
               PYSPARK_PYTHON=sys.executable, SPARK_NO_DAEMONIZE="1")
    launcher = str(home / "bin" / "spark-class")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []

    def start(name: str, *args: str, cwd: Path) -> tuple[subprocess.Popen, Path]:
        log = root / f"{name}.log"
        cwd.mkdir(parents=True, exist_ok=True)
        with open(log, "wb") as out:
            # A process group of its own: stopping it stops the JVM spark-class execs into.
            proc = subprocess.Popen([launcher, *args], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                    start_new_session=True)
        started.append(proc)
        return proc, log

    try:
        master, master_log = start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                   "--port", str(port), "--webui-port", str(_free_port()), cwd=root / "master")
        _wait_for(master_log, "Starting Spark master", 1, master, timeout_s)
        for n in range(workers):
            start(f"worker{n}", "org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                  "--port", str(_free_port()), "--webui-port", str(_free_port()), "--cores", str(cores),
                  "--memory", memory, "--work-dir", str(root / f"worker{n}" / "work"), cwd=root / f"worker{n}")
        _wait_for(master_log, "Registering worker", workers, master, timeout_s)
        yield url
    finally:
        for proc in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(started):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
