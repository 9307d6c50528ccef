"""The SparkSession the analyses run in: local by default, any master URL Spark takes."""

from __future__ import annotations

import os
import sys
import tempfile

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


def get_session(master: str | None = None) -> SparkSession:
    """A session for ``master`` (``local[*]``, ``local[2]``, ``local-cluster[2,1,1024]``,
    ``spark://host:port``); ``None``: the master spark-submit gave, else ``local[*]``.

    Executors run this interpreter, so they import the same rmqdelay; the UI is off and the
    driver binds to loopback unless the master says otherwise.
    """
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
