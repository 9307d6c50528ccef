"""`dlq export` and `dlq resend` on stores written end to end by real 4.9.4 and 5.3.3 brokers
(samples/broker-e2e, samples/broker5-e2e: GID_FAIL's 8 messages in %DLQ%GID_FAIL after their
consumer's 2 retries): every dead letter whole, and put back into the group's %RETRY% queue
as the message its consumer first saw, exactly once - also after a kill -9 or a write fault in
the middle."""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from clirun import CONSOLE_SCRIPT, broker_holding_lock, run_cli
from conftest import SAMPLES

from rmqdelay.groups.deadletters import PROPERTY_RESENT_FROM_DLQ
from rmqdelay.store import Store

BROKERS = ["broker-e2e", "broker5-e2e"]
FAULTINJECT = str(Path(__file__).resolve().parent / "support" / "faultinject.py")
NOW = "2026-11-27T12:00:00Z"


def _produced(name: str) -> dict[str, dict]:
    with gzip.open(SAMPLES / name / "produced.fail.jsonl.gz", "rt") as fh:
        return {m["msgId"]: m for m in map(json.loads, fh) if m}


def _retry_copies(store: Path) -> list:
    with Store(store) as s:
        cq = s.consume_queue("%RETRY%GID_FAIL", 0)
        msgs = [s.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"]))
                for u in cq.units(cq.min_offset, cq.max_offset)]
    return [m for m in msgs if PROPERTY_RESENT_FROM_DLQ in m.properties]


@pytest.mark.parametrize("name", BROKERS)
def test_export_writes_every_dead_letter_whole_as_jsonl_and_parquet(sample_store, capsys, tmp_path, name):
    import pyarrow.parquet as pq

    store = sample_store(name)
    listed = run_cli(capsys, "inspect", "dlq", store, "--json", "--now", NOW).json_lines()
    out = tmp_path / "dead.jsonl"
    result = run_cli(capsys, "dlq", "export", store, "--group", "GID_FAIL", "--output", out, "--now", NOW)
    assert result.code == 0 and "exported 8 dead letter(s)" in result.out, result.err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [{k: r[k] for k in listed[0]} for r in rows] == listed  # what inspect dlq names, in its order
    produced = _produced(name)
    with Store(store) as s:
        for r in rows:
            msg = s.commitlog.read_message(r["commitLogOffset"])
            assert base64.b64decode(r["body"]) == msg.body and r["properties"] == dict(msg.properties)
            assert r["keys"] == produced[r["uniqKey"]]["keys"] and r["originalTopic"] == "TopicFail"
    table = pq.read_table(_export(capsys, store, tmp_path / "dead.parquet"))
    assert table.num_rows == 8
    back = table.to_pylist()
    for r, p in zip(rows, back):
        assert base64.b64encode(p["body"]).decode() == r["body"] and dict(p["properties"]) == r["properties"]
        assert {k: p[k] for k in ("msgId", "uniqKey", "reason", "dlqTimestamp")} == \
            {k: r[k] for k in ("msgId", "uniqKey", "reason", "dlqTimestamp")}
    # analyze retries counts the same dead letters.
    groups = [g for g in run_cli(capsys, "analyze", "retries", store, "--json", "--now", NOW).json_lines()
              if g.get("table") == "groups" and g["group"] == "GID_FAIL"]
    assert groups[0]["dlq"] == 8


def _export(capsys, store, path, *args):
    assert run_cli(capsys, "dlq", "export", store, "--output", path, *args).code == 0
    return path


def test_export_filters(sample_store, capsys, tmp_path):
    store = sample_store("broker-e2e")
    rows = run_cli(capsys, "dlq", "export", store, "--output", "-").json_lines()
    assert len(rows) == 8
    one = rows[3]
    assert [r["msgId"] for r in run_cli(capsys, "dlq", "export", store, "--output", "-", "--uniq-key",
                                        one["uniqKey"]).json_lines()] == [one["msgId"]]
    assert [r["msgId"] for r in run_cli(capsys, "dlq", "export", store, "--output", "-", "--key",
                                        one["keys"]).json_lines()] == [one["msgId"]]
    assert len(run_cli(capsys, "dlq", "export", store, "--output", "-", "--limit", "2").json_lines()) == 2
    later = run_cli(capsys, "dlq", "export", store, "--output", "-", "--since", str(one["dlqTimestamp"])).json_lines()
    assert all(r["dlqTimestamp"] >= one["dlqTimestamp"] for r in later) and one["msgId"] in {r["msgId"] for r in later}
    assert not run_cli(capsys, "dlq", "export", store, "--output", "-", "--until", str(rows[0]["dlqTimestamp"])).json_lines()


@pytest.mark.parametrize("name", BROKERS)
def test_resend_puts_each_back_once_as_its_consumer_first_saw_it(store_copy, capsys, name):
    store = store_copy(name)
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    dry = run_cli(capsys, "dlq", "resend", store, "--group", "GID_FAIL", "--json")
    assert dry.code == 0 and [r["resend"] for r in dry.json_lines()] == [True] * 8
    assert {p: p.read_bytes() for p in store.rglob("*") if p.is_file()} == before  # a dry run writes nothing
    done = run_cli(capsys, "dlq", "resend", store, "--group", "GID_FAIL", "--execute", "--json").json_lines()
    assert [(r["resend"], r["queueOffset"]) for r in done] == [(True, 16 + n) for n in range(8)]
    produced = _produced(name)
    copies = _retry_copies(store)
    assert sorted(m.properties["UNIQ_KEY"] for m in copies) == sorted(produced)
    with Store(store) as s:
        dead = {r["msgId"]: s.commitlog.read_message(r["commitLogOffset"]) for r in
                run_cli(capsys, "inspect", "dlq", store, "--json").json_lines()}
    for m in copies:
        first = produced[m.properties["UNIQ_KEY"]]
        # What the client makes of a %RETRY% message: its RETRY_TOPIC, keys, tags, body, UNIQ_KEY.
        assert m.topic == "%RETRY%GID_FAIL" and m.properties["RETRY_TOPIC"] == first["topic"] == "TopicFail"
        assert m.properties["KEYS"] == first["keys"] and m.properties["TAGS"] == first["tags"]
        assert m.bornTimestamp == first["bornTimestamp"] and m.reconsumeTimes == 0
        letter = dead[m.properties[PROPERTY_RESENT_FROM_DLQ]]
        assert m.body == letter.body and "DELAY" not in m.properties
    # Again: nothing, unless --again.
    second = run_cli(capsys, "dlq", "resend", store, "--group", "GID_FAIL", "--execute", "--json").json_lines()
    assert [(r["resend"], r["copies"]) for r in second] == [(False, 1)] * 8 and len(_retry_copies(store)) == 8
    third = run_cli(capsys, "dlq", "resend", store, "--group", "GID_FAIL", "--execute", "--again", "--limit", "1")
    assert third.code == 0 and len(_retry_copies(store)) == 9
    verify = run_cli(capsys, "inspect", "commitlog", store, "--verify", "--json")
    assert verify.code == 0, verify.out
    # The consumers' committed offset is where they stop: the resent copies are what they read next.
    lag = [r for r in run_cli(capsys, "inspect", "consumers", store, "--json", "--topic", "%RETRY%GID_FAIL").json_lines()]
    assert lag[0]["consumerOffset"] == 16 and lag[0]["lag"] == 9


def test_resend_refused_while_a_broker_holds_the_store(store_copy, capsys):
    store = store_copy("broker-e2e")
    with broker_holding_lock(store):
        result = run_cli(capsys, "dlq", "resend", store, "--group", "GID_FAIL", "--execute")
    assert result.code == 3 and len(result.err.strip().splitlines()) == 1
    assert not _retry_copies(store)


@pytest.mark.slow
@pytest.mark.parametrize("fault", [
    {"op": "pwrite", "path": "commitlog/", "nth": 1, "kill": True},  # the copies written, nothing else
    {"op": "pwrite", "path": "consumequeue/%RETRY%GID_FAIL", "nth": 1, "kill": True},  # no unit yet
    {"op": "pwrite", "path": "commitlog/", "nth": 1, "errno": "ENOSPC"},  # a full disk
], ids=["kill-after-records", "kill-before-units", "enospc"])
def test_a_kill_or_a_fault_mid_resend_then_a_rerun_puts_each_back_exactly_once(store_copy, fault):
    store = store_copy("broker-e2e")
    args = ["dlq", "resend", str(store), "--group", "GID_FAIL", "--execute"]
    proc = subprocess.run([sys.executable, FAULTINJECT, json.dumps([fault]), *args], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode != 0
    if "errno" in fault:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("rmqdelay: ") and "Traceback" not in proc.stderr
    rerun = subprocess.run([CONSOLE_SCRIPT, *args, "--json"], capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    copies = _retry_copies(store)
    assert sorted(m.properties[PROPERTY_RESENT_FROM_DLQ] for m in copies) == \
        sorted(r["msgId"] for r in map(json.loads, rerun.stdout.splitlines()))  # one copy of each, no more
    assert len(copies) == 8
    verify = subprocess.run([CONSOLE_SCRIPT, "inspect", "commitlog", str(store), "--verify"], capture_output=True,
                            text=True, timeout=120)
    assert verify.returncode == 0, verify.stdout
