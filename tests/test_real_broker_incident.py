"""`consumers reset` and `dlq resend` promise what the real broker delivered.

samples/NAME/real-broker-incident.json holds what a real broker of the sample's release,
restarted on a copy of the sample's store that rmqdelay had left, gave the group's real
consumer (interop/incident/run.sh, run by hand; interop/incident/README.md). Here, without a
broker: the same dry runs on the same sample still promise exactly that - the same queues
moved the same way, so the same messages (queue offset, UNIQ_KEY, keys) consumed again; the
same dead letters put back, each as the message the consumer received (topic, keys, tags,
UNIQ_KEY, born time, body, the producer's properties)."""

from __future__ import annotations

import base64
import json

import pytest
from clirun import run_cli
from conftest import SAMPLES

from rmqdelay.groups.deadletters import resend_message
from rmqdelay.store import Store
from rmqdelay.store.deadletter import dead_letters

REFERENCES = sorted(p.parent.name for p in SAMPLES.glob("*/real-broker-incident.json"))
# What the broker or the client adds per delivery, and what the retry path carries (the broker's
# own retry copies too): not the message's own. RESENT_FROM_DLQ is the resend's mark.
NOT_OWN = {"CONSUME_START_TIME", "MAX_OFFSET", "MIN_OFFSET", "ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "REAL_TOPIC",
           "REAL_QID", "WAIT", "DELAY", "RESENT_FROM_DLQ"}


def _reference(name: str) -> dict:
    return json.loads((SAMPLES / name / "real-broker-incident.json").read_text())


def _checks(kind: str):
    return [pytest.param(name, check, id=f"{name}-{check['name']}")
            for name in REFERENCES for check in _reference(name)["checks"] if check["kind"] == kind]


def _dry_run_args(check: dict) -> list[str]:
    """The dry run's arguments after STORE (the reference's first command, without --json)."""
    words = check["commands"][0].split()
    return [w for w in words[4:] if w != "--json"]


def test_every_real_broker_sample_has_its_reference():
    assert {"broker-e2e", "broker5-e2e"} >= set(REFERENCES) >= {"broker-e2e"}
    for name in REFERENCES:
        ref = _reference(name)
        assert ref["sample"] == name
        assert all(c.get("match", True) for c in ref["checks"]), "the reference records a mismatch"


@pytest.mark.parametrize(("name", "check"), _checks("consumers reset"))
def test_consumers_reset_promises_what_the_real_broker_delivered(sample_store, capsys, name, check):
    store = sample_store(name)
    args = _dry_run_args(check)
    assert args[:1] == ["--group"]
    rows = run_cli(capsys, "consumers", "reset", store, *args, "--json").json_lines()
    assert rows == check["dryRun"]
    promised = []
    with Store(store) as s:
        for row in rows:
            cq = s.consume_queue(row["topic"], row["queueId"])
            for offset, unit in zip(range(row["after"], cq.max_offset), cq.units(row["after"], cq.max_offset)):
                msg = s.commitlog.read_message(int(unit["commitLogOffset"]), int(unit["size"]))
                promised.append({"topic": row["topic"], "queueId": row["queueId"], "queueOffset": offset,
                                 "uniqKey": msg.properties.get("UNIQ_KEY"), "keys": msg.properties.get("KEYS")})
    received = check["received"]
    assert len(received) == check["receivedCount"] == check["promisedCount"]
    key = lambda r: (r["topic"], r["queueId"], r["queueOffset"])  # noqa: E731
    assert sorted(promised, key=key) == sorted(received, key=key)
    assert sum(r["consumedAgain"] for r in rows) <= len(received)


@pytest.mark.parametrize(("name", "check"), _checks("dlq resend"))
def test_dlq_resend_promises_what_the_real_broker_delivered(sample_store, capsys, name, check):
    store = sample_store(name)
    args = _dry_run_args(check)
    rows = run_cli(capsys, "dlq", "resend", store, *args, "--json").json_lines()
    assert rows == check["dryRun"]
    group = args[args.index("--group") + 1]
    chosen = {r["msgId"] for r in rows if r["resend"]}
    copies = []
    with Store(store) as s:
        for d in dead_letters(s, 0, group):
            if d.msgId not in chosen:
                continue
            new = resend_message(d, s.commitlog.read_message(d.commitLogOffset))
            assert new.topic == "%RETRY%" + group and new.reconsumeTimes == 0
            p = new.properties
            copies.append({"topic": p["RETRY_TOPIC"], "keys": p.get("KEYS"), "tags": p.get("TAGS"),
                           "uniqKey": p["UNIQ_KEY"], "bornTimestamp": new.bornTimestamp,
                           "body": base64.b64encode(new.body).decode(),
                           "properties": dict(sorted((k, v) for k, v in p.items() if k not in NOT_OWN))})
    assert check["receivedCount"] == check["promisedCount"] == len(copies)
    assert sorted(copies, key=lambda c: c["uniqKey"]) == sorted(check["received"], key=lambda c: c["uniqKey"])
    assert check["receivedReconsumeTimes"] == [[0, len(copies)]]


@pytest.mark.parametrize("name", [n for n in REFERENCES if "toDatetimeLookups" in _reference(n)])
def test_to_datetime_lands_where_the_reference_says_and_where_5x_searchoffset_does(sample_store, capsys, name):
    """--to-datetime is the 5.x lookup (BoundaryType.LOWER): on the 5.3.3 sample rmqdelay lands
    where the real broker's searchOffset did; on 4.9.4, whose search takes the nearest message,
    it lands where it did when the reference was made (the broker's answers kept beside)."""
    store = sample_store(name)
    lookups = _reference(name)["toDatetimeLookups"]
    for look in lookups:
        rows = run_cli(capsys, "consumers", "reset", store, "--group", look["group"], "--topic", look["topic"],
                       "--to-datetime", str(look["toDatetime"]), "--json").json_lines()
        assert [r["after"] for r in rows] == look["rmqdelayAfter"], look
    if name == "broker5-e2e":
        assert all(look["same"] for look in lookups)
