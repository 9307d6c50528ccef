"""Spark's failures as rmqdelay says every failure: one line naming what was wrong and what
to do, exit 2 (docs/cli.md, "Spark"). What is checked before the JVM starts (Java, the
master URL, a standalone master that answers) fails with its own line; what fails after
(the JVM that did not start, a task on an executor) is read out of the exception or of the
JVM's log, which is where the JVM's own output goes (session.py), never the terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

from rmqdelay.errors import EXIT_BAD_INPUT, RmqDelayError, UsageError

JAVA_MIN = 17  # PySpark 4 runs on Java 17 or later
_JDK_DIRS = ("/usr/lib/jvm", "/usr/java", "/opt/java", "/Library/Java/JavaVirtualMachines")


class SparkFailure(RmqDelayError):
    """A failure of Spark or of what it needs: said as the command's own (main.py)."""

    exit_code = EXIT_BAD_INPUT
    in_command = True


# -- before the JVM -----------------------------------------------------------------------------
def _jdks() -> list[str]:
    """JDK homes found in the usual places: what JAVA_HOME could point at."""
    found = []
    for root in _JDK_DIRS:
        try:
            names = sorted(os.listdir(root))
        except OSError:
            continue
        for name in names:
            home = os.path.join(root, name)
            if not os.path.islink(home) and os.access(os.path.join(home, "bin", "java"), os.X_OK):
                found.append(home)
    return found


def _where_to_point() -> str:
    homes = _jdks()
    return (f"set JAVA_HOME to a JDK {JAVA_MIN} or later (found here: {', '.join(homes)})" if homes
            else f"install a JDK {JAVA_MIN} or later and set JAVA_HOME to it")


def java_major(version_output: str) -> int | None:
    """The major version in `java -version`'s text: "1.8.0_392" is 8, "17.0.15" is 17."""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_output)
    if match is None:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def check_java() -> None:
    """The Java spark-submit would run (JAVA_HOME/bin/java, else java on PATH), and that it is
    recent enough, or one line saying which Java was found and how to point JAVA_HOME."""
    home = os.environ.get("JAVA_HOME")
    if home:
        java = os.path.join(home, "bin", "java")
        if not os.access(java, os.X_OK):
            raise SparkFailure(f"--spark: JAVA_HOME={home} has no bin/java; Spark needs Java {JAVA_MIN} or later: "
                               f"{_where_to_point()}")
        what = f"JAVA_HOME={home}"
    else:
        java = shutil.which("java")
        if java is None:
            raise SparkFailure(f"--spark: no Java (JAVA_HOME is not set and no java is on PATH); Spark needs Java "
                               f"{JAVA_MIN} or later: {_where_to_point()}")
        what = f"java on PATH ({java})"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
        text = out.stderr + out.stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkFailure(f"--spark: {what} does not run ({exc}); {_where_to_point()}") from None
    major = java_major(text)
    if major is None or major < JAVA_MIN:
        found = text.strip().splitlines()[0] if text.strip() else "no version"
        raise SparkFailure(f"--spark: {what} is {found!r}; Spark needs Java {JAVA_MIN} or later: "
                           f"{_where_to_point()}")


_LOCAL = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$")
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\d+,\d+,\d+\]$")
_STANDALONE = re.compile(r"^spark://([^,/]+:\d+)(,[^,/]+:\d+)*$")


def check_master_url(master: str | None) -> None:
    """A master URL Spark takes, checked before any work."""
    if master is None or _LOCAL.match(master) or _LOCAL_CLUSTER.match(master) or master == "yarn" \
            or master.startswith("k8s://") or _STANDALONE.match(master):
        return
    raise UsageError(f"--master: a Spark master URL: local[N], local-cluster[W,C,MB], spark://HOST:PORT, yarn "
                     f"or k8s://URL, found {master!r}")


def check_master(master: str | None, timeout_s: float = 3.0) -> None:
    """A master URL Spark takes; for a standalone master (spark://HOST:PORT), that something
    answers there, so a wrong address fails at once and not after Spark's minute of retries."""
    check_master_url(master)
    if master is None or not _STANDALONE.match(master):
        return
    reasons = []
    for address in master[len("spark://"):].split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                return
        except OSError as exc:
            reasons.append(f"{address} ({exc.strerror or exc})")
    raise SparkFailure(f"--master {master}: no Spark master answers at {', '.join(reasons)}; start one "
                       "(spark-class org.apache.spark.deploy.master.Master) or give its address")


# -- after --------------------------------------------------------------------------------------
_RMQDELAY_ERROR = re.compile(r"rmqdelay\.errors\.(\w+): (.+)")
_MAIN_EXCEPTION = re.compile(r'Exception in thread "main" [\w.$]+: (.+)')
_JVM_ERROR = re.compile(r"^(?:Error|ERROR)[: ]\s*(.+)$", re.M)


def _log_tail(log: Path | None, size: int = 64 * 1024) -> str:
    if log is None:
        return ""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(os.path.getsize(log) - size, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def describe(exc: BaseException, log: Path | None) -> str:
    """One line for a Spark failure: an rmqdelay error raised in a task (it names the file and
    the byte), a JVM that did not start (why, from its log), or the first line of what Spark
    said; with where the JVM's log is."""
    text = str(exc)
    where = f" (Spark's log: {log})" if log is not None else ""
    found = _RMQDELAY_ERROR.findall(text)
    if found:
        return f"--spark: a task failed on an executor: {found[-1][1].strip()}"
    if "JAVA_GATEWAY_EXITED" in text or "Java gateway process exited" in text:
        tail = _log_tail(log)
        why = _MAIN_EXCEPTION.search(tail) or _JVM_ERROR.search(tail)
        return f"--spark: Spark did not start: {why.group(1).strip() if why else 'its JVM exited'}{where}"
    if "All masters are unresponsive" in text or "Master removed our application" in text:
        return f"--spark: the Spark master stopped answering or refused the application{where}"
    first = next((line.strip() for line in text.splitlines() if line.strip()), type(exc).__name__)
    if len(first) > 300:
        first = first[:300] + "..."
    return f"--spark: {first}{where}"


def _is_spark_error(exc: BaseException) -> bool:
    module = type(exc).__module__ or ""
    return module.startswith(("pyspark", "py4j")) or "Py4J" in type(exc).__name__


@contextlib.contextmanager
def one_line_errors(log: Path | None) -> Iterator[None]:
    """Spark's and Py4J's exceptions as SparkFailure (one line, exit 2); rmqdelay's own as
    they are."""
    try:
        yield
    except RmqDelayError:
        raise
    except Exception as exc:
        if not _is_spark_error(exc):
            raise
        raise SparkFailure(describe(exc, log)) from None
