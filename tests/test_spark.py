"""The Spark engine gives the embedded engine's tables, to the row, on every sample; bad
input is named and skipped the same way; the CLI runs on Spark."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from clirun import assert_one_line, console, run_cli
from conftest import ALL_SAMPLES, SAMPLES, TIMER_SAMPLES, load_expected, load_plan
from test_analysis import corrupt

from rmqdelay.analysis import KINDS, StoreRef, analyze
from rmqdelay.analysis.names import public_name
from rmqdelay.errors import StoreError
from rmqdelay.schedule.redelivery import consumer_send_back
from rmqdelay.store import Store
from rmqdelay.store.scan import commitlog_files
from rmqdelay.store.writer import StoreWriter

pytest.importorskip("pyspark")
from rmqdelay.spark import source  # noqa: E402
from rmqdelay.spark.jobs import analyze as spark_analyze  # noqa: E402
from rmqdelay.spark.session import get_session  # noqa: E402

pytestmark = pytest.mark.spark

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "store").is_dir())


@pytest.fixture(scope="session")
def spark():
    """One session for the whole run: starting the JVM is most of a small job's time."""
    session = get_session("local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


def at_end_of(name: str) -> int:
    return max(m["storeTimestamp"] for m in load_expected(name)["msg"]) if (SAMPLES / name / "expected.jsonl.gz").exists() \
        else 1_900_000_000_000


def assert_same(embedded, on_spark) -> None:
    assert embedded.tables.keys() == on_spark.tables.keys()
    for name, table in embedded.tables.items():
        assert on_spark.tables[name].equals(table), name
    assert on_spark.messages.equals(embedded.messages)
    assert on_spark.skipped == embedded.skipped
    assert (on_spark.timer_messages is None) == (embedded.timer_messages is None)
    if embedded.timer_messages is not None:
        assert on_spark.timer_messages.equals(embedded.timer_messages)


@pytest.mark.parametrize("kind", KINDS)
def test_spark_and_embedded_agree_on_every_sample_in_one_job(spark, kind, sample_store):
    """Every sample, the 5.3.3 ones (unpacked) included."""
    stores = [StoreRef(name, sample_store(name)) for name in ALL_SAMPLES]
    at_ms = at_end_of("retry") + 5_000
    embedded = analyze(kind, stores, at_ms)
    assert sum(t.num_rows for t in embedded.tables.values()) > 0
    assert_same(embedded, spark_analyze(kind, stores, at_ms, spark=spark))


@pytest.mark.parametrize("kind", ["backlog", "lateness"])
@pytest.mark.parametrize("ahead_ms", [0, 600_000])
def test_timer_tables_agree_at_the_timer_samples_own_time(spark, kind, ahead_ms, sample_store):
    """Around the end of timer-partial every timer figure is non-trivial: messages delivered,
    rolled, cancellations honoured and pending, units due now, overdue and minutes ahead."""
    stores = [StoreRef(name, sample_store(name)) for name in TIMER_SAMPLES]
    at_ms = max(m["storeTimestamp"] for m in load_expected("timer-partial")["msg"]) + ahead_ms
    embedded = analyze(kind, stores, at_ms)
    timer_tables = {name: t for name, t in embedded.tables.items() if name.startswith("timer")}
    assert timer_tables and all(t.num_rows for t in timer_tables.values())
    assert embedded.timer_messages.num_rows
    assert_same(embedded, spark_analyze(kind, stores, at_ms, spark=spark))


def test_backlog_agrees_at_the_generated_samples_own_time(spark):
    """At plan.json's at_ms generated-small has units due now, overdue and due minutes ahead."""
    plan = load_plan(SAMPLES / "generated-small" / "store")
    stores = [StoreRef(name, SAMPLES / name / "store") for name in SAMPLE_NAMES]
    embedded = analyze("backlog", stores, plan["at_ms"])
    minutes = embedded.tables["drain"].column("minute").to_pylist()
    assert 0 in minutes and max(minutes) > 60
    assert_same(embedded, spark_analyze("backlog", stores, plan["at_ms"], spark=spark))


def test_one_task_per_commit_log_file_of_every_store(spark):
    stores = [StoreRef(name, SAMPLES / name / "store") for name in SAMPLE_NAMES]
    files = [p for ref in stores for p in commitlog_files(ref.path)]
    assert len(files) > len(stores)  # generated-small spreads over several files
    frame = source.messages(spark, stores, ["store", "file", "commitlog_offset"], None, source.Problems(spark))
    assert frame.rdd.getNumPartitions() == len(files)
    per_task = frame.rdd.mapPartitions(lambda rows: [sorted({(r.store, r.file) for r in rows})]).collect()
    assert all(len(task) <= 1 for task in per_task)
    assert sorted(t[0] for t in per_task if t) == sorted((ref.name, f.path.name) for ref in stores
                                                          for f in commitlog_files(ref.path) if f.size)


def test_rows_are_matched_in_the_shuffle_partitions_and_one_per_gib_of_commit_log(spark, tmp_path):
    from rmqdelay.spark.jobs import _partitions

    small = [StoreRef(name, SAMPLES / name / "store") for name in SAMPLE_NAMES]
    assert len([p for ref in small for p in commitlog_files(ref.path)]) > 2
    assert _partitions(spark, small) == 2  # the session's spark.sql.shuffle.partitions
    # Three commit log files of the broker's default size (sparse: nothing is written).
    log = tmp_path / "big" / "commitlog"
    log.mkdir(parents=True)
    for n in range(3):
        with open(log / f"{n << 30:020d}", "wb") as fh:
            fh.truncate(1 << 30)
    assert _partitions(spark, [*small, StoreRef("big", tmp_path / "big")]) == 4


@pytest.mark.parametrize("partitions", ["1", "3"])
@pytest.mark.parametrize("kind", ["lateness", "retries"])
def test_per_message_parquet_is_a_part_a_task_and_the_embedded_rows(spark, tmp_path, kind, partitions):
    """One partition: the files are decoded in the task that matches them (no shuffle);
    three: a shuffle. Either way each task writes its own sorted part, the parts hold the
    embedded engine's rows, and the tables are the same."""
    stores = [StoreRef(name, SAMPLES / name / "store") for name in SAMPLE_NAMES]
    at_ms = at_end_of("retry") + 5_000
    embedded = analyze(kind, stores, at_ms)
    out = tmp_path / "messages"
    out.mkdir()
    (out / "stale.parquet").write_bytes(b"from an earlier run")
    spark.conf.set("spark.sql.shuffle.partitions", partitions)
    try:
        written = spark_analyze(kind, stores, at_ms, spark=spark, messages_to=out)
        collected = spark_analyze(kind, stores, at_ms, spark=spark)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert_same(embedded, collected)
    for name, table in embedded.tables.items():
        assert written.tables[name].equals(table), name
    assert written.messages.num_rows == 0
    assert sorted(p.name for p in out.iterdir()) == ["_SUCCESS"] + [f"part-{i:05d}.parquet" for i in range(int(partitions))]
    from rmqdelay.analysis.common import sort_table
    from rmqdelay.analysis.names import public_table

    order = {"lateness": ["store", "level", "schedule_offset"], "retries": ["store", "group", "chain"]}[kind]
    parts = [pq.read_table(p) for p in sorted(out.glob("part-*.parquet"))]
    for part in parts:  # each part sorted on its own
        assert part.equals(sort_table(part, [public_name(c) for c in order]))
    import pyarrow as pa

    assert sort_table(pa.concat_tables(parts), [public_name(c) for c in order]).equals(public_table(embedded.messages))


def test_a_task_that_runs_again_replaces_its_part(tmp_path):
    from rmqdelay.analysis import lateness
    from rmqdelay.spark.jobs import _messages_part

    rows = analyze("lateness", [StoreRef("delay-partial", SAMPLES / "delay-partial" / "store")],
                   at_end_of("delay-partial")).messages
    for attempt in (rows.slice(0, 5), rows):
        assert list(_messages_part(3, attempt, tmp_path, lateness.MESSAGES_SCHEMA, lateness.MESSAGES_ORDER)) == []
    assert [p.name for p in tmp_path.iterdir()] == ["part-00003.parquet"]
    assert pq.read_table(tmp_path / "part-00003.parquet").num_rows == rows.num_rows


def test_anomalies_agree(spark, store_copy):
    """A send-back at a level the broker would not pick, and one sent straight to the DLQ."""
    path = store_copy("retry")
    with Store(path) as store:
        records = list(store.commitlog.records())
    retried = {m.properties.get("ORIGIN_MESSAGE_ID") for m in records}
    originals = [m for m in records if m.topic == "TopicPay" and m.msgId not in retried][:2]
    with StoreWriter(path) as writer:
        writer.put(consumer_send_back(originals[0], "GID_ORDER", delay_level=7))
        writer.put(consumer_send_back(originals[1], "GID_ORDER", delay_level=-1))
    stores = [StoreRef("odd", path)]
    at_ms = at_end_of("retry") + 5_000
    embedded = analyze("retries", stores, at_ms)
    kinds = sorted(embedded.tables["anomalies"].column("kind").to_pylist())
    assert kinds == ["earlyDlq", "levelMismatch"]
    assert_same(embedded, spark_analyze("retries", stores, at_ms, spark=spark))


@pytest.mark.parametrize("kind", ["lateness", "retries"])
def test_a_corrupt_file_is_named_and_skipped_as_the_embedded_engine_does(spark, store_copy, kind):
    path = store_copy("retry")
    target, offset = corrupt(path, 1, 5)
    stores = [StoreRef("delay-partial", SAMPLES / "delay-partial" / "store"), StoreRef("bad", path)]
    at_ms = at_end_of("retry")
    with pytest.raises(StoreError) as info:
        spark_analyze(kind, stores, at_ms, spark=spark)
    assert (info.value.path, info.value.offset) == (target, offset)
    assert_same(analyze(kind, stores, at_ms, keep_going=True),
                spark_analyze(kind, stores, at_ms, keep_going=True, spark=spark))


def test_a_bad_record_on_spark_is_one_line_naming_its_file_and_byte(spark, store_copy):
    path = store_copy("retry")
    target, offset = corrupt(path, 1, 5)
    assert_one_line(console("analyze", "lateness", f"bad={path}", "--now", str(at_end_of("retry")), "--spark",
                            "--master", "local[2]"), 2, f"{target} at byte {offset}")


def test_cli_on_spark_writes_parquet_from_the_executors(spark, tmp_path, capsys):
    out = tmp_path / "out"
    store = SAMPLES / "delay-partial" / "store"
    at = str(at_end_of("delay-partial"))
    on_spark = run_cli(capsys, "analyze", "lateness", str(store), "--now", at, "--spark", "--master", "local[2]",
                       "--output", out, "--json", "--report", tmp_path / "r.html")
    embedded = run_cli(capsys, "analyze", "lateness", str(store), "--now", at, "--json")
    assert on_spark.code == embedded.code == 0
    assert on_spark.json_lines() == embedded.json_lines()
    messages = pq.read_table(out / "lateness_messages.parquet")
    assert messages.num_rows == analyze("lateness", [StoreRef("delay-partial", store)], int(at)).messages.num_rows
    assert "<svg" in (tmp_path / "r.html").read_text()


def test_a_hole_in_the_log_stops_spark_where_it_stops_the_embedded_engine(spark, tmp_path):
    import shutil

    store = tmp_path / "s"
    shutil.copytree(SAMPLES / "delay-partial" / "store", store)
    with open(store / "commitlog" / "00000000000000000000", "r+b") as fh:
        fh.seek(400)
        fh.write(bytes(4096))  # the second record's head becomes zeros: "the end of the data"
    refs = [StoreRef("s", store)]
    for engine in (analyze, lambda *a, **k: spark_analyze(*a, spark=spark, **k)):
        with pytest.raises(StoreError) as info:
            engine("lateness", refs, 1_900_000_000_000)
        assert info.value.offset == 425 and "found zeros with more data after them" in info.value.expected
        kept = engine("lateness", refs, 1_900_000_000_000, keep_going=True)
        assert [(s.offset, s.bytes) for s in kept.skipped] == [(425, 262144 - 425)]


def test_an_error_raised_in_a_task_is_one_line_naming_the_file_and_byte(spark, tmp_path):
    from rmqdelay.spark.errors import SparkFailure, one_line_errors

    path = str(tmp_path / "commitlog" / "00000000000000000000")

    def fail(_):
        raise StoreError(path, 4096, "magic code 0xDAA320A7 or 0xCBD43194, found 0x00000000")

    with pytest.raises(SparkFailure) as info, one_line_errors(tmp_path / "spark.log"):
        spark.sparkContext.parallelize([1], 1).map(fail).collect()
    message = str(info.value)
    assert "\n" not in message and message.startswith("--spark: a task failed on an executor: ")
    assert f"{path} at byte 4096: magic code" in message


def test_the_progress_follows_the_tasks_of_the_job(spark):
    import time

    from rmqdelay.spark.progress import task_progress

    seen = []
    with task_progress(spark, lambda done, total: seen.append((done, total)), every_s=0.05):
        spark.sparkContext.parallelize(range(6), 6).map(lambda x: (time.sleep(0.3), x)[1]).collect()
        time.sleep(0.3)  # the last tick after the job
    assert seen and seen[-1] == (6, 6)
    assert all(done <= total for done, total in seen) and any(done < 6 for done, _ in seen)
