"""How far a Spark job is: its tasks done out of those started, read from the SparkContext's
status tracker by a thread while the job runs (the commands draw it as a progress bar; a
task is a commit log file, a timer log file or a partition of the matched rows)."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator

from pyspark.sql import SparkSession

JOB_GROUP = "rmqdelay-analyze"
_runs = itertools.count(1)


def _tasks(spark: SparkSession, group: str) -> tuple[int, int]:
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        for stage in info.stageIds if info is not None else ():
            s = tracker.getStageInfo(stage)
            if s is not None:
                total += s.numTasks
                done += s.numCompletedTasks
    return done, total


@contextlib.contextmanager
def task_progress(spark: SparkSession, update: Callable[[int, int], None], every_s: float = 0.25) -> Iterator[None]:
    """Call ``update(done, total)`` with the tasks of the jobs run inside, until they end. The
    jobs run under a group of their own: the tracker keeps the jobs of earlier groups, and
    they are not this bar's."""
    group = f"{JOB_GROUP}-{next(_runs)}"
    spark.sparkContext.setJobGroup(group, "rmqdelay analyze")
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every_s):
            try:
                update(*_tasks(spark, group))
            except Exception:  # the JVM going away ends the job, and the job says why
                return

    thread = threading.Thread(target=watch, name="rmqdelay-spark-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
