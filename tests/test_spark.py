"""The Spark engine gives the embedded engine's tables, to the row, on every sample; bad
input is named and skipped the same way; the CLI runs on Spark."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from clirun import run_cli
from conftest import SAMPLES, load_expected
from rmqdelay.analysis import KINDS, StoreRef, analyze
from rmqdelay.errors import StoreError
from rmqdelay.redelivery import consumer_send_back
from rmqdelay.store import Store
from rmqdelay.writer import StoreWriter
from test_analysis import corrupt

pytest.importorskip("pyspark")
from rmqdelay.spark.jobs import analyze as spark_analyze  # noqa: E402
from rmqdelay.spark.session import get_session  # noqa: E402

pytestmark = pytest.mark.spark

SAMPLE_NAMES = sorted(p.name for p in SAMPLES.iterdir() if (p / "store").is_dir())


@pytest.fixture(scope="module")
def spark():
    session = get_session("local[2]")
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


@pytest.mark.parametrize("kind", KINDS)
def test_spark_and_embedded_agree_on_every_sample_in_one_job(spark, kind):
    stores = [StoreRef(name, SAMPLES / name / "store") for name in SAMPLE_NAMES]
    at_ms = at_end_of("retry") + 5_000
    embedded = analyze(kind, stores, at_ms)
    assert sum(t.num_rows for t in embedded.tables.values()) > 0
    assert_same(embedded, spark_analyze(kind, stores, at_ms, spark=spark))


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
    assert kinds == ["early_dlq", "level_mismatch"]
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


def test_cli_on_spark_writes_parquet_from_the_executors(spark, tmp_path, capsys):
    out = tmp_path / "out"
    store = SAMPLES / "delay-partial" / "store"
    at = str(at_end_of("delay-partial"))
    on_spark = run_cli(capsys, "analyze", "lateness", str(store), "--at", at, "--spark", "--master", "local[2]",
                       "--output", out, "--json", "--report", tmp_path / "r.html")
    embedded = run_cli(capsys, "analyze", "lateness", str(store), "--at", at, "--json")
    assert on_spark.code == embedded.code == 0
    assert on_spark.json_lines() == embedded.json_lines()
    messages = pq.read_table(out / "lateness_messages.parquet")
    assert messages.num_rows == analyze("lateness", [StoreRef("delay-partial", store)], int(at)).messages.num_rows
    assert "<svg" in (tmp_path / "r.html").read_text()
