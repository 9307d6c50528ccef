"""`analyze --spark` as an operator meets it: what Spark needs and cannot have (Java, a master)
is one line and exit 2 before any JVM; on a real standalone cluster (a master and a worker
from pyspark's own launcher, loopback only) the store paths a user types reach the executors
whole, the JVM says nothing on the terminal, and a bad record an executor meets comes back
naming its file and byte; spark-submit, pointed at that master, gives the embedded engine's
rows."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, assert_one_line, console
from conftest import SAMPLES
from test_analysis import corrupt

pytest.importorskip("pyspark")

from rmqdelay.spark import submit  # noqa: E402
from rmqdelay.spark.cluster import standalone_cluster  # noqa: E402

STORE = SAMPLES / "delay-partial" / "store"
REPO = SAMPLES.parent
NOW = "1795450329969"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


def test_a_master_url_spark_does_not_take_is_one_line_before_any_work():
    assert_one_line(console("analyze", "lateness", STORE, "--spark", "--master", "bogus://x"), 2,
                    "rmqdelay: analyze lateness: --master: a Spark master URL", "found 'bogus://x'")


def test_a_master_that_does_not_answer_is_one_line():
    port = _closed_port()
    assert_one_line(console("analyze", "lateness", STORE, "--spark", "--master", f"spark://127.0.0.1:{port}"), 2,
                    f"no Spark master answers at 127.0.0.1:{port}")


def test_no_java_is_one_line_saying_which_java_and_how_to_point_java_home(tmp_path):
    missing = console("analyze", "lateness", STORE, "--spark", env={"JAVA_HOME": str(tmp_path / "nonexistent")})
    assert_one_line(missing, 2, f"JAVA_HOME={tmp_path / 'nonexistent'} has no bin/java", "Java 17 or later",
                    "set JAVA_HOME")
    old = tmp_path / "jdk8"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "java").write_text('#!/bin/sh\necho \'java version "1.8.0_392"\' >&2\n')
    (old / "bin" / "java").chmod(0o755)
    assert_one_line(console("analyze", "lateness", STORE, "--spark", env={"JAVA_HOME": str(old)}), 2,
                    f"JAVA_HOME={old} is 'java version \"1.8.0_392\"'", "Java 17 or later")
    no_path = console("analyze", "lateness", STORE, "--spark", env={"JAVA_HOME": "", "PATH": str(tmp_path)})
    assert_one_line(no_path, 2, "no Java (JAVA_HOME is not set and no java is on PATH)")


# The CLI's executor, a short-lived JVM too (the launcher's arguments reach spark-submit).
_SHORT_LIVED_EXECUTOR = \
    f"--conf \"spark.executor.extraJavaOptions={os.environ['SPARK_SUBMIT_OPTS']}\" pyspark-shell"


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.long
def test_a_standalone_cluster_gives_the_embedded_result_for_store_paths_as_typed(tmp_path, monkeypatch):
    """Two applications on one cluster: the CLI and spark-submit. The bad store rides along
    with --keep-going, so the problem a task meets on an executor comes back to the driver
    naming its file and byte; the one line and exit 2 without --keep-going is the same code
    on any master (test_spark.py, local mode)."""
    bad = tmp_path / "bad" / "store"
    shutil.copytree(SAMPLES / "retry" / "store", bad)
    target, offset = corrupt(bad, 1, 5)
    # Relative to the user's directory, which no executor shares (a worker has its own). One
    # worker: a second adds a JVM and an executor for each application, and nothing this test
    # checks; benchmarks/bench_analyze.py --standalone runs two.
    monkeypatch.chdir(REPO)
    stores = ["a=samples/delay-partial/store", "b=samples/retry/store", f"bad={bad}"]
    embedded = console("analyze", "lateness", *stores, "--now", NOW, "--json", "--keep-going")
    assert embedded.returncode == 1 and f"{target} at byte {offset}" in embedded.stderr, embedded.stderr
    retries = console("analyze", "retries", stores[1], "--now", NOW, "--json")
    assert retries.returncode == 0, retries.stderr
    with standalone_cluster(tmp_path / "cluster", workers=1) as master:
        on_spark = subprocess.run([CONSOLE_SCRIPT, "analyze", "lateness", *stores, "--now", NOW, "--json",
                                   "--keep-going", "--spark", "--master", master], capture_output=True, text=True,
                                  cwd=REPO, timeout=900, env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1",
                                                                  PYSPARK_SUBMIT_ARGS=_SHORT_LIVED_EXECUTOR))
        # The JVM says nothing on the terminal: stderr is the embedded engine's, the skipped bytes.
        assert (on_spark.returncode, on_spark.stderr) == (embedded.returncode, embedded.stderr), on_spark.stderr[-3000:]
        assert [json.loads(x) for x in on_spark.stdout.splitlines()] == \
            [json.loads(x) for x in embedded.stdout.splitlines()]
        # spark-submit picks the master and runs the same jobs: the rows are the embedded engine's.
        submitted = subprocess.run([str(Path(sys.executable).parent / "spark-submit"), "--master", master,
                                    "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.host=127.0.0.1",
                                    # a short-lived executor JVM, as conftest.py sets for the drivers
                                    "--conf", f"spark.executor.extraJavaOptions={os.environ['SPARK_SUBMIT_OPTS']}",
                                    submit.__file__, "retries", stores[1], "--now", NOW, "--json"],
                                   capture_output=True, text=True, cwd=REPO, timeout=900,
                                   env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                                            PYSPARK_DRIVER_PYTHON=sys.executable))
        assert submitted.returncode == 0, submitted.stderr[-3000:]
        assert [json.loads(x) for x in submitted.stdout.splitlines() if x.startswith("{")] == \
            [json.loads(x) for x in retries.stdout.splitlines()]
