"""The SparkSession the analyses run in: local by default, any master URL Spark takes. The
JVM's own output (its start-up warnings, log4j, the Python workers' stderr) goes to a log
file, never to the terminal: rmqdelay says what went wrong in one line (errors.py)."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from pyspark.sql import SparkSession

DEFAULT_MASTER = "local[*]"

# The JVM's own logging: errors only, to stderr. Spark otherwise prints its start-up chatter
# before any setLogLevel call can reach it.
_LOG4J2 = """\
rootLogger.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
"""


def under_spark_submit() -> bool:
    """spark-submit starts Python with the gateway of the JVM it launched."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def log_path() -> Path:
    """Where the JVM's output goes: a file of this process in the temporary directory."""
    return Path(tempfile.gettempdir()) / f"rmqdelay-spark-{os.getpid()}.log"


@contextlib.contextmanager
def _output_to(log: Path | None) -> Iterator[None]:
    """The process's stdout and stderr (file descriptors 1 and 2) into ``log`` while the JVM
    is launched: it inherits them, and so do the Python workers it starts."""
    if log is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(target, 1)
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, target):
            os.close(fd)


def get_session(master: str | None = None, log: Path | None = None) -> SparkSession:
    """A session for ``master`` (``local[*]``, ``local[2]``, ``local-cluster[2,1,1024]``,
    ``spark://host:port``); ``None``: the master spark-submit gave, else ``local[*]``.
    ``log``: where the JVM's output goes (None: this process's stdout and stderr).

    Java and the master are checked first (errors.check_java, check_master). Executors run
    this interpreter, so they import the same rmqdelay; the UI is off and the driver binds to
    loopback unless the master says otherwise.
    """
    from .errors import check_java, check_master

    if not under_spark_submit():
        check_java()
        check_master(master)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("rmqdelay analyze")
    if master is None and not under_spark_submit():
        master = DEFAULT_MASTER
    if master is not None:
        builder = builder.master(master)
    if master is None or master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    if master is not None and master.startswith("local"):
        # A shuffle for one machine: a task per core (Spark's 200 are for clusters), and its
        # files uncompressed (they never cross a network; compressing them costs a local run
        # of lateness ~8 % of its time). On a cluster both are left to spark-submit's --conf.
        builder = (builder.config("spark.sql.shuffle.partitions", str(local_cores(master)))
                   .config("spark.shuffle.compress", "false"))
    with tempfile.TemporaryDirectory(prefix="rmqdelay-spark-") as tmp:
        # Read once by the JVM as it starts (inside getOrCreate), so the file can go after.
        log_config = os.path.join(tmp, "log4j2.properties")
        with open(log_config, "w") as fh:
            fh.write(_LOG4J2)
        with _output_to(log):
            session = _configured(builder, log_config).getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def local_cores(master: str) -> int:
    """The task slots of a local master: ``local`` 1, ``local[N]`` / ``local[N,F]`` N,
    ``local[*]`` the machine's cores, ``local-cluster[E,C,M]`` E·C."""
    inside = master[master.find("[") + 1:master.rfind("]")] if "[" in master else "1"
    numbers = [part.strip() for part in inside.split(",")]
    try:
        if master.startswith("local-cluster"):
            return max(int(numbers[0]) * int(numbers[1]), 1)
        return (os.cpu_count() or 1) if numbers[0] == "*" else max(int(numbers[0]), 1)
    except (ValueError, IndexError):
        return 1


def _configured(builder: SparkSession.Builder, log_config: str) -> SparkSession.Builder:
    return (builder
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={log_config}")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.execution.arrow.pyspark.enabled", "true")
            .config("spark.python.worker.reuse", "true"))
