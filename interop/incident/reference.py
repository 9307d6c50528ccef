"""The reference file of a run of interop/incident/run.sh: for each check, the rmqdelay
commands, what the dry run promised and what the real consumer received.

    python interop/incident/reference.py WORK BROKER_VERSION SAMPLE > samples/SAMPLE/real-broker-incident.json

WORK is run.sh's directory (its *.check.json, *.dry.jsonl, commands.log, the second resend's
lines, search-offset.jsonl: the broker's searchOffset answers; rmqdelay on PATH).
tests/test_real_broker_incident.py runs the same dry runs on the sample and compares.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def commands(work: Path, name: str) -> list[str]:
    out = []
    for line in (work / "commands.log").read_text().splitlines():
        if line.startswith("$ ") and (f"/{name} " in line + " " or f" {name}." in line or f" {name}-second." in line):
            out.append(line[2:])
    starts = [i for i, c in enumerate(out) if c == out[0] and "-second" not in " ".join(out[i + 1:i + 4])]
    return out[starts[-1]:] if starts else out  # the last run of the check only


def datetime_lookups(work: Path, answers: list[dict]) -> list[dict]:
    """Per instant: the offset of each queue the running broker's searchOffset answered (what
    mqadmin resetOffsetByTime sets) and the `after` of rmqdelay's --to-datetime dry run."""
    out = []
    for t in sorted({a["timestamp"] for a in answers}):
        dry = subprocess.run(["rmqdelay", "consumers", "reset", str(work / "pristine"), "--group", "GID_ORDERS",
                              "--topic", "TopicOrders", "--to-datetime", str(t), "--json"],
                             check=True, capture_output=True, text=True).stdout
        mine = [json.loads(line)["after"] for line in dry.splitlines()]
        broker = [a["offset"] for a in sorted((a for a in answers if a["timestamp"] == t), key=lambda a: a["queueId"])]
        out.append({"toDatetime": t, "topic": "TopicOrders", "group": "GID_ORDERS", "brokerSearchOffset": broker,
                    "rmqdelayAfter": mine, "same": broker == mine})
    return out


def main(work_dir: str, version: str, sample: str) -> dict:
    work = Path(work_dir).resolve()
    ref = {"broker": f"Apache RocketMQ {version} (name server, broker, DefaultMQPushConsumer of the same release)",
           "sample": sample, "rerun": "interop/incident/README.md", "checks": []}
    for name in ("reset-offset", "reset-datetime", "resend"):
        path = work / f"{name}.check.json"
        if not path.exists():
            continue
        check = json.loads(path.read_text())
        entry = {"name": name, "kind": check["kind"], "commands": commands(work, name),
                 "dryRun": check["dryRun"], "promisedCount": check["promisedCount"],
                 "receivedCount": check["receivedCount"], "match": check["match"],
                 "missing": check["missing"], "unexpected": check["unexpected"], "duplicates": check["duplicates"]}
        if check["kind"] == "consumers reset":
            entry["receivedPerQueue"] = check["receivedPerQueue"]
        else:
            entry["receivedReconsumeTimes"] = check["receivedReconsumeTimes"]
            entry["propertiesAddedOnDelivery"] = check["propertiesAddedOnDelivery"]
        entry["received"] = check["received"]
        ref["checks"].append(entry)
    lookups = work / "search-offset.jsonl"
    if lookups.exists():
        ref["toDatetimeLookups"] = datetime_lookups(work, _lines(lookups))
    second = work / "resend.second-execute.jsonl"
    if second.exists():
        rows = _lines(second)
        consumed = work / "resend-second.consumed.jsonl"
        ref["checks"].append({"name": "resend-second", "kind": "dlq resend (again, without --again)",
                              "commands": [c for c in commands(work, "resend") if "dlq resend" in c or "-second" in c][2:],
                              "putBack": sum(1 for r in rows if r["resend"]), "alreadyResent": len(rows),
                              "receivedCount": len(_lines(consumed)) if consumed.exists() else None})
    return ref


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(json.dumps(main(*sys.argv[1:]), indent=1, ensure_ascii=False))
