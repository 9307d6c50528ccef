"""`inspect delay --format prometheus`: valid text exposition for node_exporter's textfile
collector (checked with the Prometheus client's own parser), one sample per level and metric,
the same figures as --json."""

from __future__ import annotations

import json

from clirun import console
from conftest import SAMPLES
from prometheus_client.parser import text_string_to_metric_families
from rmqdelay.commands.prometheus import Family, exposition

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
        "rmqdelay_reading_timestamp_seconds"])
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
