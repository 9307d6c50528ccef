"""`inspect delay --format prometheus`: valid text exposition for node_exporter's textfile
collector (checked with the Prometheus client's own parser), one sample per level and metric,
the same figures as --json."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from clirun import console
from conftest import SAMPLES
from prometheus_client.parser import text_string_to_metric_families
from rmqdelay.commands.prometheus import Family, exposition
from wallclock import PINNED_MS

STORE = SAMPLES / "delay-partial" / "store"
NOW = 1795349830000  # level 4 (30s) is partly due, the longer levels wait


def test_per_level_metrics_match_the_json_view():
    proc = console("inspect", "delay", STORE, "--format", "prometheus", "--now", NOW)
    assert proc.returncode == 0 and proc.stderr == ""
    families = {f.name: f for f in text_string_to_metric_families(proc.stdout)}
    assert sorted(families) == sorted([
        "rmqdelay_delay_level_pending_messages", "rmqdelay_delay_level_due_messages",
        "rmqdelay_delay_level_oldest_due_age_seconds", "rmqdelay_delay_level_offset",
        "rmqdelay_delay_level_max_offset", "rmqdelay_delay_level_delay_seconds",
        "rmqdelay_broker_cut_records", "rmqdelay_problems", "rmqdelay_reading_timestamp_seconds"])
    [cut] = families.pop("rmqdelay_broker_cut_records").samples
    assert cut.value == 0 and cut.labels == {"store": "delay-partial"}
    [problems] = families.pop("rmqdelay_problems").samples
    assert problems.value == 0 and problems.labels == {"store": "delay-partial", "source": "delay"}
    [reading] = families.pop("rmqdelay_reading_timestamp_seconds").samples
    assert reading.value == NOW / 1000 and reading.labels == {"store": "delay-partial", "source": "delay"}
    assert all(f.type == "gauge" and f.documentation for f in families.values())
    rows = {r["level"]: r for r in map(json.loads, console("inspect", "delay", STORE, "--json", "--now", NOW)
                                         .stdout.splitlines())}

    def value(name: str, level: int) -> float:
        [sample] = [s for s in families[name].samples if s.labels == {"store": "delay-partial", "level": str(level)}]
        return sample.value

    assert {len(f.samples) for f in families.values()} == {18}
    for level, row in rows.items():
        assert value("rmqdelay_delay_level_pending_messages", level) == row["pending"]
        assert value("rmqdelay_delay_level_due_messages", level) == row["dueNow"]
        assert value("rmqdelay_delay_level_offset", level) == row["offset"]
        assert value("rmqdelay_delay_level_max_offset", level) == row["maxOffset"]
        assert value("rmqdelay_delay_level_delay_seconds", level) == row["delayMs"] / 1000
        head = row["nextDueTimestamp"]
        age = (NOW - head) / 1000 if head is not None and head <= NOW else 0
        assert value("rmqdelay_delay_level_oldest_due_age_seconds", level) == age
    assert any(r["dueNow"] for r in rows.values()) and any(r["pending"] > r["dueNow"] for r in rows.values())
    # HELP and TYPE precede each family; no sample carries a timestamp (the collector refuses them).
    lines = proc.stdout.splitlines()
    for name in families:
        assert lines.index(f"# TYPE {name} gauge") == lines.index(next(x for x in lines if x.startswith(f"# HELP {name} "))) + 1
    assert all(len(line.split(" ")) == 2 for line in lines if not line.startswith("#"))
    assert proc.stdout.endswith("\n")


def test_store_label_and_escaping():
    proc = console("inspect", "delay", STORE, "--format", "prometheus", "--store-name", 'broker "a"\\1\nx')
    [family] = [f for f in text_string_to_metric_families(proc.stdout) if f.name.endswith("_max_offset")]
    assert {s.labels["store"] for s in family.samples} == {'broker "a"\\1\nx'}
    text = exposition([Family("rmqdelay_timer_example", "help with \\ and\nnewline", samples=[({}, float("nan"))])])
    [parsed] = text_string_to_metric_families(text)
    assert parsed.name == "rmqdelay_timer_example" and parsed.documentation == "help with \\ and\nnewline"


def test_json_and_prometheus_at_once_are_refused():
    proc = console("inspect", "delay", STORE, "--json", "--format", "prometheus")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and proc.stdout == ""


# -- the textfile loop of docs/metrics.md ------------------------------------------------------
METRICS_DOC = SAMPLES.parent / "docs" / "metrics.md"
SKIPPING_AT = PINNED_MS + 10 * 86_400_000  # timer-partial's read clock more than 7 days behind: a restart skips


def textfile_loop(store, directory, commands: str) -> subprocess.CompletedProcess:
    """docs/metrics.md's cron line, as it is written there, for ``store`` into ``directory``."""
    [line] = [x for x in METRICS_DOC.read_text(encoding="utf-8").splitlines() if x.startswith("* * * * * for c in")]
    loop = line.removeprefix("* * * * * ").replace("/data/broker-a/store", str(store))
    loop = re.sub(r"for c in [a-z ]+;", f"for c in {commands};", loop)
    env = dict(os.environ, PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])
    return subprocess.run(["bash", "-c", f"D={directory}; {loop}"], capture_output=True, text=True, env=env,
                          timeout=120)


def read_prom(path) -> dict:
    text = path.read_text(encoding="utf-8")
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package; absent here it is the client's parser alone
        assert subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True,
                              timeout=60).returncode == 0, text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families and all(f.documentation for f in families.values()), text
    return families


def test_the_textfile_loop_writes_every_file_on_a_damaged_store(store_copy, tmp_path):
    store = store_copy("delay-partial")
    queue = store / "consumequeue" / "SCHEDULE_TOPIC_XXXX" / "3"  # level 4's queue: a file now
    shutil.rmtree(queue)
    queue.write_bytes(b"x")
    (store / "config" / "consumerOffset.json").write_text("{bad")
    out = tmp_path / "textfile"
    out.mkdir()
    proc = textfile_loop(store, out, "delay consumers dlq")  # (timer left out on a 4.x store, as the docs say)
    assert sorted(p.name for p in out.iterdir()) == [f"rmqdelay_broker-a_{c}.prom" for c in ("consumers", "delay", "dlq")]
    # Each problem is one line on stderr (the cron mail), and a metric.
    assert proc.stderr.count("\n") == 2 and "SCHEDULE_TOPIC_XXXX/3" in proc.stderr, proc.stderr
    delay = read_prom(out / "rmqdelay_broker-a_delay.prom")
    [problems] = delay["rmqdelay_problems"].samples
    assert problems.value == 1 and problems.labels == {"store": "delay-partial", "source": "delay"}
    levels = {s.labels["level"] for s in delay["rmqdelay_delay_level_pending_messages"].samples}
    assert levels == {str(n) for n in range(1, 19)} - {"4"}  # every level it can read
    consumers = read_prom(out / "rmqdelay_broker-a_consumers.prom")
    assert [s.value for s in consumers["rmqdelay_problems"].samples] == [1]
    assert [s.value for s in read_prom(out / "rmqdelay_broker-a_dlq.prom")["rmqdelay_problems"].samples] == [0]


@pytest.mark.clock(at_ms=SKIPPING_AT)
def test_the_textfile_loop_writes_every_file_when_a_restart_would_skip(sample_store, tmp_path):
    store = sample_store("timer-partial")
    out = tmp_path / "textfile"
    out.mkdir()
    proc = textfile_loop(store, out, "delay timer consumers dlq")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert sorted(p.name for p in out.iterdir()) == [f"rmqdelay_broker-a_{c}.prom"
                                                     for c in ("consumers", "delay", "dlq", "timer")]
    timer = read_prom(out / "rmqdelay_broker-a_timer.prom")
    [skipped] = timer["rmqdelay_timer_skipped_messages"].samples
    assert skipped.value == 828
    assert [s.value for s in timer["rmqdelay_problems"].samples] == [0]
    [reading] = timer["rmqdelay_reading_timestamp_seconds"].samples
    assert abs(reading.value - SKIPPING_AT / 1000) < 120
    # The command itself still warns and exits 1 there; a threshold given with the metrics still pages.
    assert console("inspect", "timer", store).returncode == 1
    paged = console("inspect", "timer", store, "--format", "prometheus", "--fail-if-overdue", "1m")
    assert paged.returncode == 1 and "rmqdelay_timer_skipped_messages" in paged.stdout
    assert paged.stderr.startswith("rmqdelay: inspect timer --fail-if-overdue 1m: ")
