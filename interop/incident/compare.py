"""What a real consumer received after the real broker restarted on a store rmqdelay left,
against what rmqdelay's dry run promised.

    python interop/incident/compare.py reset  STORE DRY.jsonl CONSUMED.jsonl
    python interop/incident/compare.py resend STORE DRY.jsonl CONSUMED.jsonl FIRST_SEEN.jsonl[.gz]

STORE is the store as rmqdelay left it (before the broker ran on it, or a copy of that);
DRY.jsonl the dry run's --json lines (`consumers reset` or `dlq resend`); CONSUMED.jsonl what
`client.sh consume` printed; FIRST_SEEN what the group's consumer received the first time
(samples/broker-e2e/consumed.fail.jsonl.gz: the deliveries with reconsumeTimes 0).

reset: the promise is every unit of each queue from the dry run's `after` up to the queue's
end (the messages consumed again and any lag there already was); the consumer must receive
each of them once (queue id, queue offset, UNIQ_KEY, keys) and nothing else.
resend: each dead letter the dry run listed (`resend: true`) must arrive once, as the message
first seen (topic, keys, tags, body, born time, UNIQ_KEY, the properties the producer set),
and nothing else.

Prints one JSON object (the check's `promised`, `received` and `match`); exit 1 when it does
not match. Needs rmqdelay importable (run from the repository's root).
"""

from __future__ import annotations

import base64
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

from rmqdelay.store import Store

# Properties the broker or the client sets per delivery (not the message's own): left out of
# the comparison with the first delivery. RESENT_FROM_DLQ is rmqdelay's mark on a resent copy;
# ORIGIN_MESSAGE_ID, RETRY_TOPIC, REAL_TOPIC, REAL_QID, WAIT are what the broker's own retry
# copies carry (the consumer of a broker retry sees them too).
DELIVERY_PROPERTIES = {"CONSUME_START_TIME", "MAX_OFFSET", "MIN_OFFSET"}
RETRY_PATH_PROPERTIES = {"ORIGIN_MESSAGE_ID", "RETRY_TOPIC", "REAL_TOPIC", "REAL_QID", "WAIT", "DELAY",
                         "RESENT_FROM_DLQ"}


def _lines(path: str | Path) -> list[dict]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def promised_reset(store_path: str | Path, dry: list[dict]) -> list[dict]:
    """The messages a consumer of the group gets after the reset: per queue of the dry run,
    the units from `after` to the queue's end, oldest first."""
    out = []
    with Store(store_path) as s:
        for row in dry:
            cq = s.consume_queue(row["topic"], int(row["queueId"]))
            for offset, unit in zip(range(int(row["after"]), cq.max_offset),
                                    cq.units(int(row["after"]), cq.max_offset)):
                msg = s.commitlog.read_message(int(unit["commitLogOffset"]), int(unit["size"]))
                out.append({"topic": row["topic"], "queueId": int(row["queueId"]), "queueOffset": offset,
                            "uniqKey": msg.properties.get("UNIQ_KEY"), "keys": msg.properties.get("KEYS")})
    return out


def received_reset(consumed: list[dict]) -> list[dict]:
    return [{"topic": c["topic"], "queueId": c["queueId"], "queueOffset": c["queueOffset"], "uniqKey": c["msgId"],
             "keys": c["keys"]} for c in consumed]


def _key(row: dict) -> str:
    return json.dumps(row, sort_keys=True)


def _match(promised: list[dict], received: list[dict]) -> dict:
    want, got = Counter(map(_key, promised)), Counter(map(_key, received))
    return {"match": want == got and max(got.values(), default=1) == 1,
            "missing": [json.loads(k) for k in sorted((want - got).elements())],
            "unexpected": [json.loads(k) for k in sorted((got - want).elements())],
            "duplicates": sorted(k for k, n in got.items() if n > 1)}


def check_reset(store_path: str | Path, dry_path: str | Path, consumed_path: str | Path) -> dict:
    dry = _lines(dry_path)
    promised = promised_reset(store_path, dry)
    received = received_reset(_lines(consumed_path))
    by_queue: dict[str, int] = Counter(f"{r['topic']}:{r['queueId']}" for r in received)
    return {"kind": "consumers reset", "dryRun": dry, "promised": promised, "promisedCount": len(promised),
            "received": sorted(received, key=lambda r: (r["topic"], r["queueId"], r["queueOffset"])),
            "receivedCount": len(received), "receivedPerQueue": dict(sorted(by_queue.items())),
            **_match(promised, received)}


def message_view(topic: str, keys: str | None, tags: str | None, uniq_key: str, born: int, body_b64: str | None,
                 properties: dict) -> dict:
    own = {k: v for k, v in properties.items() if k not in DELIVERY_PROPERTIES | RETRY_PATH_PROPERTIES}
    return {"topic": topic, "keys": keys, "tags": tags, "uniqKey": uniq_key, "bornTimestamp": born,
            "body": body_b64, "properties": dict(sorted(own.items()))}


def check_resend(store_path: str | Path, dry_path: str | Path, consumed_path: str | Path,
                 first_seen_path: str | Path) -> dict:
    dry = _lines(dry_path)
    first = {}
    for c in _lines(first_seen_path):
        if c["reconsumeTimes"] == 0:
            first.setdefault(c["msgId"], c)
    bodies = {}
    with Store(store_path) as s:  # the dead letter's body, as the DLQ record holds it (the offset msgId ends in its offset)
        for row in dry:
            msg = s.commitlog.read_message(int(row["msgId"][-16:], 16))
            bodies[row["uniqKey"]] = base64.b64encode(msg.body).decode()
    promised = []
    for row in dry:
        if not row["resend"]:
            continue
        f = first[row["uniqKey"]]
        promised.append(message_view(f["topic"], f["keys"], f["tags"], f["msgId"], f["bornTimestamp"],
                                     bodies[row["uniqKey"]], f["properties"]))
    consumed = _lines(consumed_path)
    received = [message_view(c["topic"], c["keys"], c["tags"], c["msgId"], c["bornTimestamp"], c.get("body"),
                             c["properties"]) for c in consumed]
    extra = sorted({k for c in consumed for k in c["properties"]} - {k for f in first.values() for k in f["properties"]})
    return {"kind": "dlq resend", "dryRun": dry, "promised": promised, "promisedCount": len(promised),
            "received": received, "receivedCount": len(received),
            "receivedReconsumeTimes": sorted(Counter(c["reconsumeTimes"] for c in consumed).items()),
            "propertiesAddedOnDelivery": extra, **_match(promised, received)}


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "reset":
        out = check_reset(*argv[1:4])
    elif len(argv) >= 5 and argv[0] == "resend":
        out = check_resend(*argv[1:5])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(json.dumps(out, indent=1))
    return 0 if out["match"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
