"""`inspect store`'s retention: when the broker's CleanCommitLogService deletes each commit log
file (fileReservedTime, deleteWhen, diskMaxUsedSpaceRatio), and the unconsumed, delay and
timer messages that go with them."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest
from clirun import run_cli
from prometheus_client.parser import text_string_to_metric_families

from rmqdelay.groups import retention as retention_module

pytestmark = pytest.mark.clock
HOUR = 3_600_000
NOW = int(datetime(2026, 11, 27, 12, 0, tzinfo=timezone.utc).timestamp() * 1000)


def _age(store, hours_ago):
    files = sorted((store / "commitlog").iterdir())
    for n, f in enumerate(files):
        t = (NOW - (hours_ago - n) * HOUR) / 1000
        os.utime(f, (t, t))
    return files


def _retention(capsys, store, *args):
    result = run_cli(capsys, "inspect", "store", store, "--json", "--now", str(NOW), *args)
    assert result.code == 0, result.err
    return result.json_lines()[0]["retention"]


def test_each_file_goes_at_the_first_delete_hour_after_its_reserved_time(store_copy, capsys, local_time_zone):
    local_time_zone("UTC")
    store = store_copy("generated-small")
    files = _age(store, 100)  # the first file modified 100 h ago, one more hour for each next
    kept = _retention(capsys, store)
    assert kept["settings"]["fileReservedTime"] == 72 and kept["settings"]["sources"]["deleteWhen"] == "default"
    fates = kept["files"]
    assert [f["file"] for f in fates] == [f.name for f in files]
    assert fates[-1]["deleteTimestamp"] is None and fates[-1]["why"] == "current"
    for f in fates[:-1]:
        expire = f["lastModifiedTimestamp"] + 72 * HOUR
        assert f["expireTimestamp"] == expire
        when = datetime.fromtimestamp(f["deleteTimestamp"] / 1000, timezone.utc)
        assert when.hour == 4 and f["deleteTimestamp"] >= max(expire, NOW) and \
            f["deleteTimestamp"] - max(expire, NOW) < 24 * HOUR
    deletes = [f["deleteTimestamp"] for f in fates[:-1]]
    assert deletes == sorted(deletes)


def test_a_full_disk_deletes_what_expired_at_once_and_from_85_percent_everything(store_copy, capsys, monkeypatch):
    store = store_copy("generated-small")
    _age(store, 100)
    monkeypatch.setattr(retention_module, "disk_used_ratio", lambda path: 0.80)
    fates = _retention(capsys, store)["files"][:-1]
    expired = [f for f in fates if f["expireTimestamp"] <= NOW]
    assert expired and all(f["deleteTimestamp"] == NOW and f["why"] == "diskFull" for f in expired)
    monkeypatch.setattr(retention_module, "disk_used_ratio", lambda path: 0.90)
    assert {(f["deleteTimestamp"], f["why"]) for f in _retention(capsys, store)["files"][:-1]} == {(NOW, "forcibly")}


def test_unconsumed_and_parked_messages_in_files_that_go(store_copy, capsys, tmp_path):
    store = store_copy("generated-small")
    _age(store, 10)
    conf = tmp_path / "broker.conf"
    conf.write_text("fileReservedTime=0\ndeleteWhen=" + ";".join(f"{h:02d}" for h in range(24))
                    + "\ndiskMaxUsedSpaceRatio=95\n")
    # Every group back to the start of its queues: what it has not consumed lives in the old files.
    lags = run_cli(capsys, "inspect", "consumers", store, "--json").json_lines()
    group = lags[0]["group"]
    assert run_cli(capsys, "consumers", "reset", store, "--group", group, "--all-topics", "--to-earliest",
                   "--execute").code == 0
    kept = _retention(capsys, store, "--broker-config", conf)
    assert kept["settings"]["sources"] == {k: "brokerConfig" for k in kept["settings"]["sources"]}
    assert all(f["deleteTimestamp"] == NOW for f in kept["files"][:-1])
    last = kept["files"][-1]["file"]
    by = {g["group"]: g for g in kept["consumers"]}
    # Expected: the group's unconsumed units whose message lies before the last file.
    from rmqdelay.store import Store

    start_of_last = int(last)
    with Store(store) as s:
        expected = 0
        for r in run_cli(capsys, "inspect", "consumers", store, "--json", "--group", group).json_lines():
            if r["kind"] == "dlq" or not r["lag"]:
                continue
            units = s.consume_queue(r["topic"], r["queueId"]).units(r["maxOffset"] - r["lag"], r["maxOffset"])
            expected += int((units["commitLogOffset"] < start_of_last).sum())
        pending = 0
        for level in run_cli(capsys, "offsets", "show", store, "--json").json_lines():
            units = s.schedule_queue(level["level"]).units(level["offset"], level["maxOffset"])
            pending += int(((units["commitLogOffset"] < start_of_last) & (units["tagsCode"] > NOW)).sum())
    assert by[group]["messages"] == expected > 0 and by[group]["firstDeleteTimestamp"] == NOW
    assert kept["delay"]["messages"] == pending
    text = run_cli(capsys, "inspect", "store", store, "--now", str(NOW), "--broker-config", conf).out
    assert f"group {group}: {expected} message(s) not consumed yet" in text
    prom = run_cli(capsys, "inspect", "store", store, "--now", str(NOW), "--broker-config", conf, "--format",
                   "prometheus")
    assert prom.code == 0
    families = {f.name: f for f in text_string_to_metric_families(prom.out)}
    samples = {s.labels["group"]: s.value for s in families["rmqdelay_retention_unconsumed_messages"].samples}
    assert samples[group] == expected


def test_the_5x_timer_messages_in_files_that_go(sample_store, capsys):
    kept = _retention(capsys, sample_store("broker5-e2e"))
    assert kept["timer"] is not None and kept["timer"]["messages"] >= 0
