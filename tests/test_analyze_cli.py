"""`rmqdelay analyze` as a user runs it: JSON lines, Parquet, the HTML report, bad input."""

from __future__ import annotations

import re

import pyarrow.parquet as pq
from clirun import run_cli
from conftest import SAMPLES, load_expected
from test_analysis import corrupt

from rmqdelay.analysis import StoreRef, analyze
from rmqdelay.analysis.names import public_table

RETRY = SAMPLES / "retry" / "store"
PARTIAL = SAMPLES / "delay-partial" / "store"
AT = str(max(m["storeTimestamp"] for m in load_expected("retry")["msg"]) + 5_000)


def test_json_lines_carry_every_row_of_every_table(capsys):
    result = run_cli(capsys, "analyze", "retries", f"r={RETRY}", "--now", AT, "--json")
    assert result.code == 0, result.err
    rows = result.json_lines()
    groups = [r for r in rows if r["table"] == "groups"]
    assert groups == [{"analysis": "retries", "table": "groups", "store": "r", "group": "GID_ORDER",
                       **{k: v for k, v in groups[0].items() if k not in ("analysis", "table", "store", "group")}}]
    assert (groups[0]["messages"], groups[0]["dlq"], groups[0]["pending"]) == (90, 10, 20)
    attempts = {r["attempts"]: r["chains"] for r in rows if r["table"] == "attempts"}
    assert attempts[16] == 10 and sum(attempts.values()) == 90


def test_output_writes_each_table_and_the_messages_as_parquet(tmp_path, capsys):
    out = tmp_path / "out"
    result = run_cli(capsys, "analyze", "all", str(RETRY), str(PARTIAL), "--now", AT, "--output", out)
    assert result.code == 0, result.err
    expected = analyze("backlog", [StoreRef("retry", RETRY), StoreRef("delay-partial", PARTIAL)], int(AT))
    # The engines' tables under the names docs/cli.md gives them (analysis/names.py).
    assert pq.read_table(out / "backlog_levels.parquet").equals(public_table(expected.tables["levels"]))
    assert pq.read_table(out / "backlog_messages.parquet").equals(public_table(expected.messages))
    assert pq.read_table(out / "backlog_levels.parquet").column_names[:5] == ["store", "level", "delayMs", "offset",
                                                                             "maxOffset"]
    names = sorted(p.name for p in out.iterdir())
    assert names == sorted(["backlog_drain.parquet", "backlog_levels.parquet", "backlog_messages.parquet",
                            "backlog_retryLag.parquet", "lateness_levels.parquet", "lateness_messages.parquet",
                            "lateness_topics.parquet", "retries_anomalies.parquet", "retries_attempts.parquet",
                            "retries_groups.parquet", "retries_messages.parquet",
                            # 4.x stores: the timer tables are there, empty.
                            "backlog_timer.parquet", "backlog_timerDrain.parquet", "backlog_timer_messages.parquet",
                            "lateness_timerCancellations.parquet", "lateness_timer_messages.parquet",
                            "lateness_timerRolls.parquet", "lateness_timerTopics.parquet"])
    assert pq.read_table(out / "backlog_timer.parquet").num_rows == 0
    # The rich tables name the stores by the directory above `store`.
    assert "delay-partial" in result.out and "GID_ORDER" in result.out


def test_report_is_one_self_contained_page_with_the_three_charts(tmp_path, capsys):
    page = tmp_path / "report.html"
    result = run_cli(capsys, "analyze", "all", str(RETRY), str(PARTIAL), "--now", AT, "--report", page)
    assert result.code == 0, result.err
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text)
    assert "<script" not in text and "<link" not in text and "@import" not in text
    for heading in ("Lateness per level", "Backlog drain", "Retry funnel"):
        assert heading in text
    # Two stores: the charts of both together, then each store's own (no chain of delay-partial
    # entered the retry path: no funnel in its section).
    assert text.count("<svg") == 3 + 3 + 2 and 'id="store-retry"' in text and 'id="store-delay-partial"' in text
    # The funnel: every one of the 90 chains reached attempt 1, 10 reached attempt 16 and the DLQ.
    assert re.search(r">attempt 1</text>.*?>90</text>", text)
    assert re.search(r">attempt 16</text>.*?>10</text>", text)
    assert re.search(r">DLQ</text>.*?>10</text>", text)


def test_a_corrupt_file_is_one_line_and_keep_going_says_what_it_skipped(store_copy, capsys):
    path = store_copy("retry")
    target, offset = corrupt(path, 1, 5)
    failed = run_cli(capsys, "analyze", "lateness", str(PARTIAL), f"bad={path}", "--now", AT)
    assert failed.code == 2 and failed.out == ""
    assert failed.err.strip() == failed.err.strip().splitlines()[0]
    assert f"{target} at byte {offset}" in failed.err and "Traceback" not in failed.err
    kept = run_cli(capsys, "analyze", "lateness", str(PARTIAL), f"bad={path}", "--now", AT, "--keep-going", "--json")
    assert kept.code == 1
    size = target.stat().st_size
    assert f"skipped {size - offset} bytes in 1 file(s)" in kept.err
    assert f"{target} at byte {offset}" in kept.err
    assert {r["store"] for r in kept.json_lines()} == {"delay-partial", "bad"}


def test_missing_stores_and_clashing_names_are_usage_errors(tmp_path, capsys):
    missing = run_cli(capsys, "analyze", "backlog", str(tmp_path / "nope"))
    assert missing.code == 2 and "does not exist" in missing.err and len(missing.err.strip().splitlines()) == 1
    clash = run_cli(capsys, "analyze", "backlog", f"a={RETRY}", f"a={PARTIAL}")
    assert clash.code == 2 and "two stores named 'a'" in clash.err


def test_timer_tables_of_a_5x_store_in_json_parquet_and_the_report(tmp_path, capsys, sample_store):
    store = sample_store("timer-partial")
    at = str(max(m["storeTimestamp"] for m in load_expected("timer-partial")["msg"]))
    out, page = tmp_path / "out", tmp_path / "report.html"
    result = run_cli(capsys, "analyze", "all", f"partial={store}", "--now", at, "--json", "--output", out,
                     "--report", page)
    assert result.code == 0, result.err
    rows = result.json_lines()
    timer = [r for r in rows if r["table"] == "timer"]
    assert len(timer) == 1 and timer[0]["analysis"] == "backlog" and timer[0]["lastReadTimeMs"] == 1795450329000
    topics = [r for r in rows if r["table"] == "timerTopics"]
    assert sorted(r["realTopic"] for r in topics) == ["OrderTopic", "TimerTopic", "TopicTest"]
    assert sum(r["delivered"] for r in topics) == 317
    embedded = analyze("lateness", [StoreRef("partial", store)], int(at))
    assert pq.read_table(out / "lateness_timer_messages.parquet").equals(public_table(embedded.timer_messages))
    assert pq.read_table(out / "lateness_timerTopics.parquet").equals(public_table(embedded.tables["timerTopics"]))
    text = page.read_text(encoding="utf-8")
    assert re.search(r"<h2[^>]*>Timer messages</h2>", text) and "lateness: timerCancellations" in text
    for chart in ("lateness-chart", "timer-lateness-chart", "timer-outcomes", "drain-chart", "retry-funnel"):
        assert f'<svg id="{chart}"' in text
    assert '<div class="card" data-store="partial">' in text  # the summary band
    assert re.search(r">cancel honoured</text>.*?>15</text>", text)


def test_the_headline_counts_what_a_restart_would_skip_and_the_warning_leads(capsys, monkeypatch, sample_store):
    from rmqdelay.commands import common

    monkeypatch.setattr(common.console.made(), "width", 80)
    store = sample_store("timer-partial")
    later = str(1795450329969 + 10 * 86_400_000)  # the wheel's read time more than 7 days behind
    result = run_cli(capsys, "analyze", "backlog", f"tp={store}", "--now", later)
    assert result.code == 0, result.err
    first, second, *_ = result.out.splitlines()
    assert first.startswith("backlog: ")
    assert "a restart now skips 828 timer message(s)" in " ".join(result.out.split()[:40])
    lines = result.out.splitlines()
    warning = next(i for i, line in enumerate(lines) if line.startswith("warning: a broker of tp"))
    assert "SKIPS 828" in lines[warning] and warning <= 3  # right under the headline, before the tables
    assert f"rmqdelay inspect timer {store}" in " ".join(" ".join(lines[warning:warning + 4]).split())
    clean = run_cli(capsys, "analyze", "retries", f"tp={store}", "--now", "1795450329969")
    assert "skip" not in clean.out.lower() and "warning" not in clean.out
