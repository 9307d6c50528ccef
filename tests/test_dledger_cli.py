"""Every read command on the real DLedger stores (samples/dledger-clean, dledger-leader and a
follower's copy of the leader), through the CLI, against the real code's dumps field by
field; the store is the same bytes after all of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from clirun import console
from conftest import load_expected
from test_dledger import sparse_copy
from test_unwritable_layouts import snapshot

NOW = "2026-12-07T16:40:00Z"  # after every delivery, before the level-16 messages are due


def run_json(*args) -> list[dict]:
    result = console(*args)
    assert result.returncode == 0, (result.stdout[-800:], result.stderr)
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def clean(sample_store):
    return sample_store("dledger-clean"), load_expected("dledger-clean")


@pytest.fixture(scope="module")
def follower(tmp_path_factory, sample_store) -> Path:
    """A follower's store as the 3-node run left n1's (fixtures-dledger/dledger-3node/README):
    the same data and index bytes and consume queues as the leader, in dledger-n1/; a
    currterm naming no leader; the compact delayOffset.json SlaveSynchronize writes."""
    path = tmp_path_factory.mktemp("follower") / "n1"
    sparse_copy(sample_store("dledger-leader"), path)
    (path / "dledger-n0").rename(path / "dledger-n1")
    (path / "dledger-n1" / "currterm").write_text("voteLeader=\ncurrTerm=1\n")
    (path / "dledger-n1" / "currterm.bak").write_text("voteLeader=n1\ncurrTerm=0\n")
    (path / "config" / "delayOffset.json").write_text('{"offsetTable":{2:50,3:50}}')
    conf = path / "broker.conf"
    conf.write_text(conf.read_text().replace("dLegerSelfId=n0", "dLegerSelfId=n1"))
    return path


def test_inspect_store_names_the_layout_and_its_facts(clean):
    path, expected = clean
    meta = expected["meta"][0]
    info = run_json("inspect", "store", path, "--json")[0]
    layout = info["layout"]
    assert (layout["name"], layout["log"], layout["selfId"]) == ("DLedger", "dledger", "n0")
    dl = layout["dledger"]
    assert (dl["committedIndex"], dl["endIndex"], dl["currTerm"], dl["committedPosition"]) == (499, 499, 0, 564538)
    assert [f["file"] for f in dl["dataFiles"]] == [f["name"] for f in meta["dledgerDataFiles"]]
    assert (info["minPhysicalOffset"], info["maxPhysicalOffset"]) == (meta["minPhyOffset"], meta["maxPhyOffset"])
    queues = {(q["topic"], q["queueId"]): q for q in info["queues"]}
    for q in expected["queue"]:
        if (q["topic"], q["queueId"]) in queues:
            got = queues[(q["topic"], q["queueId"])]
            assert (got["minOffset"], got["maxOffset"], got["maxPhysicalOffset"]) == \
                (q["minOffset"], q["maxOffset"], q["maxPhysicOffset"])
    screen = console("inspect", "store", path).stdout
    assert "layout: DLedger (enableDLegerCommitLog): node n0" in screen and "committed index 499" in screen


def test_inspect_commitlog_lists_every_message_as_the_dump(clean):
    path, expected = clean
    got = run_json("inspect", "commitlog", path, "--json")
    fields = ["msgId", "topic", "queueId", "queueOffset", "commitLogOffset", "storeSize", "bornTimestamp",
              "storeTimestamp", "bornHost", "storeHost", "reconsumeTimes", "bodyCRC", "properties"]
    assert [{k: m[k] for k in fields} for m in got] == [{k: m[k] for k in fields} for m in expected["msg"]]
    second = expected["msg"][200]
    page = run_json("inspect", "commitlog", path, "--json", "--offset", second["commitLogOffset"], "--limit", 2)
    assert [m["msgId"] for m in page] == [m["msgId"] for m in expected["msg"][200:202]]


def test_inspect_commitlog_verify_checks_entries_and_records(clean):
    path, expected = clean
    lines = run_json("inspect", "commitlog", path, "--verify", "--json")
    summary = lines[-1]
    assert summary["problems"] == 0
    assert summary["checked"]["messages"] == 500 and summary["checked"]["units"] == 500
    assert summary["checked"]["dledger"]["entries"] == 500
    assert summary["checked"]["dledger"]["uncommitted"] is None


def test_inspect_cq_and_message_by_every_id(clean):
    path, expected = clean
    units = run_json("inspect", "cq", path, "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", 15, "--json", "--now", NOW)
    want = sorted((u for u in expected["cq"] if u["topic"] == "SCHEDULE_TOPIC_XXXX" and u["queueId"] == 15),
                  key=lambda u: u["cqOffset"])
    assert [(u["cqOffset"], u["commitLogOffset"], u["size"], u["tagsCode"]) for u in units] == \
        [(u["cqOffset"], u["phyOffset"], u["size"], u["tagsCode"]) for u in want]
    msg = next(m for m in expected["msg"] if m["commitLogOffset"] == want[3]["phyOffset"])
    for ident in (msg["commitLogOffset"], msg["msgId"], msg["uniqKey"]):
        got = run_json("inspect", "message", path, ident, "--json")
        assert any(g["msgId"] == msg["msgId"] and g["properties"] == msg["properties"] for g in got), ident


def test_inspect_delay_and_its_prometheus_families(clean):
    path, expected = clean
    levels = {r["level"]: r for r in run_json("inspect", "delay", path, "--json", "--now", NOW)}
    table = expected["delayOffsets"][0]["loadedTable"]
    queues = {q["queueId"] + 1: q for q in expected["queue"] if q["topic"] == "SCHEDULE_TOPIC_XXXX"}
    for level, q in queues.items():
        assert (levels[level]["minOffset"], levels[level]["maxOffset"]) == (q["minOffset"], q["maxOffset"])
        assert levels[level]["storedOffset"] == table.get(str(level))
    assert levels[16]["pending"] == 20 and levels[16]["dueNow"] == 0
    text = console("inspect", "delay", path, "--format", "prometheus", "--now", NOW, "--store-name", "n0").stdout
    assert 'rmqdelay_delay_level_pending_messages{store="n0",level="16"} 20' in text


def test_index_consumers_dlq_and_trace(clean):
    path, expected = clean
    by_key = [m for m in expected["msg"] if m["properties"].get("KEYS") == "D3-7"]
    found = run_json("inspect", "index", path, "--key", "D3-7", "--json")
    assert sorted(m["commitLogOffset"] for m in found if "commitLogOffset" in m) == \
        sorted(m["commitLogOffset"] for m in by_key)
    # fastjson writes the queue ids unquoted.
    text = re.sub(r'([{,]\s*)(\d+):', r'\1"\2":', (path / "config" / "consumerOffset.json").read_text())
    offsets = json.loads(text)["offsetTable"]
    rows = run_json("inspect", "consumers", path, "--json")
    queues = {(q["topic"], q["queueId"]): q["maxOffset"] for q in expected["queue"]}
    for row in rows:
        if row.get("kind") == "topic" and "queueId" in row and row["queueId"] is not None:
            stored = offsets[f"{row['topic']}@{row['group']}"][str(row["queueId"])]
            assert (row["consumerOffset"], row["maxOffset"]) == (stored, queues.get((row["topic"], row["queueId"]), 0))
    dlq = run_json("inspect", "dlq", path, "--json")
    want = [m for m in expected["msg"] if m["topic"] == "%DLQ%GID_DL_FAIL"]
    assert sorted((d["commitLogOffset"], d["uniqKey"], d["reconsumeTimes"]) for d in dlq) == \
        sorted((m["commitLogOffset"], m["uniqKey"], m["reconsumeTimes"]) for m in want)
    chain = want[0]["uniqKey"]
    trace = run_json("trace", path, chain, "--json")
    assert [(t["stage"], t["commitLogOffset"]) for t in trace if "stage" in t] == \
        [(s, m["commitLogOffset"]) for s, m in zip(["sent", "sendBack", "redelivered", "sendBack", "redelivered", "dlq"],
                                                    [m for m in expected["msg"] if m["uniqKey"] == chain])]


@pytest.mark.parametrize("name", ["dledger-clean", "dledger-leader"])
def test_index_verify_reads_the_records_inside_the_entries(sample_store, name):
    """Every index entry is at a record (entry pos + 48) with one of its keys: the verify walks
    the DLedger framing, not the data files as plain records."""
    *problems, summary = run_json("inspect", "index", sample_store(name), "--verify", "--json")
    expected = load_expected(name)["msg"]
    assert problems == [] and summary["problems"] == 0
    assert summary["checked"]["messages"] == len(expected)


def test_analyze_embedded(clean):
    path, expected = clean
    rows = run_json("analyze", "all", path, "--json", "--now", NOW)
    late = {r["realTopic"]: r for r in rows if r["analysis"] == "lateness" and r["table"] == "topics"}
    # The client check: 200 delivered on TopicDL, none early, none twice.
    assert (late["TopicDL"]["delivered"], late["TopicDL"]["early"], late["TopicDL"]["duplicates"]) == (200, 0, 0)
    groups = {r["group"]: r for r in rows if r["analysis"] == "retries" and r["table"] == "groups"}
    assert (groups["GID_DL_FAIL"]["messages"], groups["GID_DL_FAIL"]["dlq"]) == (5, 5)
    drain = [r for r in rows if r["analysis"] == "backlog" and r["table"] == "drain"]
    assert sum(r["due"] for r in drain) == 20


def test_timer_commands_say_a_4x_store_has_no_timer(clean):
    path, _ = clean
    result = console("inspect", "timer", path)
    assert result.returncode == 2 and "found none" in result.stderr and len(result.stderr.splitlines()) == 1


def test_a_followers_store_reads_like_the_leaders(follower, sample_store):
    leader = sample_store("dledger-leader")
    expected = load_expected("dledger-leader")
    info = run_json("inspect", "store", follower, "--json")[0]
    assert info["layout"]["selfId"] == "n1"
    assert (info["layout"]["dledger"]["voteLeader"], info["layout"]["dledger"]["committedIndex"]) == ("", 199)
    assert info["delayOffsets"] == {"2": 50, "3": 50}
    assert run_json("inspect", "commitlog", follower, "--json") == run_json("inspect", "commitlog", leader, "--json")
    assert run_json("inspect", "commitlog", follower, "--verify", "--json")[-1]["problems"] == 0
    levels = {r["level"]: r for r in run_json("inspect", "delay", follower, "--json", "--now", NOW)}
    assert (levels[2]["offset"], levels[3]["offset"], levels[2]["pending"]) == (50, 50, 0)
    assert len(expected["msg"]) == 200


def test_reading_changes_no_byte(clean):
    path, _ = clean
    before = snapshot(path)
    for args in (("inspect", "store", path), ("inspect", "commitlog", path, "--verify"),
                 ("inspect", "delay", path, "--now", NOW), ("trace", path, "--key", "F-1"),
                 ("analyze", "retries", path, "--now", NOW), ("run", path, "--dry-run", "--once", "--now", NOW)):
        assert console(*args).returncode in (0, 1), args
    assert snapshot(path) == before
