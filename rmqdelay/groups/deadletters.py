"""A group's dead letters as an operator acts on them: chosen (``select``), written out whole
(``export_rows``, ``write_jsonl``, ``write_parquet``), and put back (``resend_plan``,
``resend``).

Putting back follows the broker's own retry path: each dead letter becomes a message of the
group's ``%RETRY%GROUP`` queue, the queue its consumers subscribe by themselves and only they
read, so no other group sees it again. It is the message the consumer first saw: the client
turns a retry message back into its RETRY_TOPIC (ConsumeMessageConcurrentlyService's
resetRetryAndNamespace), and keys, tags, body, user properties, born time and UNIQ_KEY (the
msgId the consumer reads) are the dead letter's; reconsumeTimes starts again at 0, so the
group's retry policy applies from the start. ``DELAY`` is left out (it would park the copy in
SCHEDULE_TOPIC_XXXX again).

Exactly once: each copy carries ``RESENT_FROM_DLQ`` = the dead letter's offset msgId. What was
resent is read back from the store itself (the %RETRY% queue's records with that property), so
a second resend, or one after a kill -9 in the middle, puts back only what is not there yet
(``--again`` puts back the chosen ones anyway). A copy the writer had not made durable when a
kill came is not in the store after recovery, and is put back by the next resend.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    KEY_SEPARATOR,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    RETRY_GROUP_TOPIC_PREFIX,
)
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.store import Store
from rmqdelay.store.deadletter import DeadLetter, retry_messages
from rmqdelay.store.writer import NewMessage

PROPERTY_RESENT_FROM_DLQ = "RESENT_FROM_DLQ"  # on a resent copy: the dead letter's offset msgId


def select(letters: Iterable[DeadLetter], *, uniq_keys: list[str] | None = None, keys: list[str] | None = None,
           since: int | None = None, until: int | None = None, limit: int | None = None) -> list[DeadLetter]:
    """The dead letters chosen: UNIQ_KEY in ``uniq_keys``, a KEYS token in ``keys``, put into
    the DLQ in ``[since, until)``, the first ``limit`` of them (by queue and offset)."""
    out = []
    for d in letters:
        if uniq_keys and d.uniqKey not in uniq_keys:
            continue
        if keys and not set(keys) & set((d.keys or "").split(KEY_SEPARATOR)):
            continue
        if since is not None and d.dlqTimestamp < since:
            continue
        if until is not None and d.dlqTimestamp >= until:
            continue
        out.append(d)
        if limit is not None and len(out) >= limit:
            break
    return out


# -- export ----------------------------------------------------------------------------------

def export_row(d: DeadLetter, msg: Message) -> dict:
    """One dead letter whole: what `inspect dlq` says of it, then the record's own fields, its
    properties and its body (bytes; base64 in JSON)."""
    row = d.as_json()
    row.update({"flag": msg.flag, "sysFlag": msg.sysFlag, "bornHost": msg.bornHost, "storeHost": msg.storeHost,
                "storeSize": msg.storeSize, "bodyCRC": msg.bodyCRC, "properties": dict(msg.properties),
                "body": msg.body})
    return row


def export_rows(store: Store, letters: Iterable[DeadLetter]) -> Iterator[dict]:
    for d in letters:
        yield export_row(d, store.commitlog.read_message(d.commitLogOffset))


def json_row(row: dict) -> dict:
    return {**row, "body": base64.b64encode(row["body"]).decode("ascii")}


def write_parquet(path: Path, rows: Iterable[dict]) -> int:
    """The rows as one Parquet file (``properties`` a map of strings, ``body`` binary)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    table = pa.Table.from_pylist(rows, schema=export_schema()) if rows else export_schema().empty_table()
    pq.write_table(table, path)
    return len(rows)


def export_schema():
    import pyarrow as pa

    i64, i32, s = pa.int64(), pa.int32(), pa.string()
    return pa.schema([
        ("group", s), ("topic", s), ("queueId", i32), ("queueOffset", i64), ("commitLogOffset", i64),
        ("msgId", s), ("uniqKey", s), ("originMsgId", s), ("originalTopic", s), ("keys", s), ("tags", s),
        ("reconsumeTimes", i32), ("bornTimestamp", i64), ("firstStoreTimestamp", i64),
        ("lastAttemptTimestamp", i64), ("dlqTimestamp", i64), ("inDlqMs", i64), ("bodySize", i32),
        ("reason", s), ("maxReconsumeTimes", i32), ("flag", i32), ("sysFlag", i32), ("bornHost", s),
        ("storeHost", s), ("storeSize", i32), ("bodyCRC", i32), ("properties", pa.map_(s, s)),
        ("body", pa.binary()),
    ])


# -- resend ----------------------------------------------------------------------------------

@dataclass(slots=True, frozen=True)
class Resend:
    letter: DeadLetter
    resent: int  # copies of it already in the %RETRY% queue (RESENT_FROM_DLQ)
    put: bool  # this run puts it back


def resent_copies(store: Store, group: str) -> dict[str, int]:
    """{dead letter's offset msgId: copies} of the group's %RETRY% queues: what was resent."""
    out: dict[str, int] = {}
    for msg in retry_messages(store, group):
        mark = msg.properties.get(PROPERTY_RESENT_FROM_DLQ)
        if mark:
            out[mark] = out.get(mark, 0) + 1
    return out


def resend_plan(store: Store, group: str, letters: list[DeadLetter], *, again: bool) -> list[Resend]:
    done = resent_copies(store, group)
    return [Resend(d, done.get(d.msgId, 0), again or not done.get(d.msgId)) for d in letters]


def resend_message(d: DeadLetter, msg: Message) -> NewMessage:
    """The copy of dead letter ``d`` (its record ``msg``) for the group's %RETRY% queue."""
    properties = {k: v for k, v in msg.properties.items() if k != PROPERTY_DELAY_TIME_LEVEL}
    topic = RETRY_GROUP_TOPIC_PREFIX + d.group
    properties[PROPERTY_REAL_TOPIC] = topic
    qid = java_parse_int(properties.get(PROPERTY_REAL_QUEUE_ID, "0")) or 0
    properties[PROPERTY_RESENT_FROM_DLQ] = d.msgId
    return NewMessage(topic=topic, queueId=max(qid, 0), body=msg.body, properties=properties, flag=msg.flag,
                      sysFlag=msg.sysFlag, bornTimestamp=msg.bornTimestamp,
                      bornHost=(msg.bornHostAddress, msg.bornPort), storeHost=(msg.storeHostAddress, msg.storePort),
                      reconsumeTimes=0)


@dataclass(slots=True, frozen=True)
class Resent:
    letter: DeadLetter
    topic: str
    queueId: int
    queueOffset: int
    commitLogOffset: int


def resend(writer, store: Store, plan: list[Resend], *, flush_every: int = 64) -> list[Resent]:
    """Put back every dead letter ``plan`` says to, through the one writer (``writer``, open on
    the store ``store`` reads); flushed every ``flush_every`` copies and at the end by the
    writer's close, so a kill loses at most the copies since the last flush - and the next
    resend puts those back."""
    retry_queues = {}
    out = []
    for r in plan:
        if not r.put:
            continue
        msg = store.commitlog.read_message(r.letter.commitLogOffset)
        new = resend_message(r.letter, msg)
        queues = retry_queues.setdefault(new.topic, set(store.topics().get(new.topic, [])) or {0})
        if new.queueId not in queues:
            new.queueId = min(queues)
        put = writer.put(new)
        out.append(Resent(r.letter, put.topic, put.queueId, put.queueOffset, put.commitLogOffset))
        if len(out) % flush_every == 0:
            writer.flush()
    return out
