"""`rmqdelay send`: put messages into a store as a producer and the broker's putMessage would.

The store is created when the directory does not exist (an operator making a test store);
an existing non-empty directory without ``commitlog/`` is refused, so a typo cannot turn
some other directory into a store. After the messages are written and flushed, every real
topic gets an entry in config/topics.json (as auto-creation would give it), so a broker
started on the store serves the topic.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from rmqdelay.errors import StoreError, StoreWriteError, UsageError
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.javanum import INT_MAX
from rmqdelay.producer import broker_message, client_properties
from rmqdelay.store.brokerconfig import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    add_topics,
    read_topic_table,
    write_queue_nums,
)
from rmqdelay.store.topics import validate_topic
from rmqdelay.store.writer import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    PutResult,
    StoreWriter,
)
from rmqdelay.uniqkey import UniqKeyFactory

# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: the broker refuses a producer's send to these.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    RMQ_SYS_SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})
DEFAULT_STORE_HOST = (bytes([127, 0, 0, 1]), 10911)


@dataclass(slots=True)
class SendRequest:
    topic: str
    body: bytes
    queue_id: int | None = None  # None: round robin over the topic's write queues
    tags: str | None = None
    keys: str | None = None
    delay_level: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    count: int = 1
    store_host: tuple[bytes, int] = DEFAULT_STORE_HOST


@dataclass(slots=True, frozen=True)
class Sent:
    uniqKey: str
    bornTimestamp: int
    realTopic: str
    realQueueId: int
    delayLevel: int
    result: PutResult


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_request(req: SendRequest) -> None:
    """Everything the client and the broker would refuse, before anything is written."""
    validate_topic(req.topic)
    if req.topic in NOT_ALLOWED_SEND_TOPICS:
        raise UsageError(f"--topic {req.topic}: a system topic the broker does not let producers send to")
    if req.count < 1:
        raise UsageError(f"--count: at least 1, found {req.count}")
    if req.queue_id is not None and not 0 <= req.queue_id <= INT_MAX:
        raise UsageError(f"--queue: a queue id from 0 to {INT_MAX} (a Java int), found {req.queue_id}")
    if not 0 <= req.delay_level <= INT_MAX:
        raise UsageError(f"--delay-level: 0 (none) or a level from 1 to {INT_MAX}, found {req.delay_level}")
    if not req.body:
        raise UsageError("the message body is empty; a producer refuses to send an empty body")


def _check_store_dir(path: Path) -> None:
    if path.exists() and not path.is_dir():
        raise StoreError(path, None, "a broker store directory (this is a file, not a directory)")
    if path.is_dir() and not (path / "commitlog").is_dir() and any(path.iterdir()):
        raise StoreError(path, None, "a broker store directory (it has no commitlog/ and is not empty)")


def send_messages(store_path: Path | str, req: SendRequest, *,
                  commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE,
                  cq_file_size: int = DEFAULT_CQ_FILE_SIZE,
                  delay_levels: dict[int, int] | None = None,
                  clock: Callable[[], int] = _now_ms,
                  on_progress: Callable[[int], None] | None = None,
                  on_notice: Callable[[str], None] | None = None) -> list[Sent]:
    """Write ``req.count`` messages, flush, then publish the topic config. Returns what was put.
    ``on_progress(1)`` after each message is put; ``on_notice`` hears what the writer's
    recovery found on open (one line each)."""
    path = Path(store_path)
    check_request(req)
    _check_store_dir(path)
    with StoreWriter(path, delay_levels=delay_levels, commitlog_file_size=commitlog_file_size,
                     cq_file_size=cq_file_size, clock=clock, create=True) as writer:
        for note in writer.recovery.notices if on_notice else ():
            on_notice(f"recovery: {note}")
        entry = read_topic_table(path).get(req.topic)
        queue_nums = write_queue_nums(entry) if entry is not None else DEFAULT_TOPIC_QUEUE_NUMS
        if req.queue_id is not None and entry is not None and req.queue_id >= queue_nums:
            raise UsageError(f"--queue {req.queue_id}: {req.topic} has {queue_nums} write queues in "
                             f"config/topics.json (queue ids 0..{queue_nums - 1})")
        born_host = (bytes([127, 0, 0, 1]), 30000 + os.getpid() % 30000)
        # The client's Calendar works in its local time zone.
        uniq = UniqKeyFactory(born_host[0], os.getpid(), random.getrandbits(32),
                              datetime.now().astimezone().tzinfo)
        sent: list[Sent] = []
        try:
            _put_all(writer, req, queue_nums, born_host, uniq, clock, sent, on_progress)
            writer.flush()
        except StoreWriteError as exc:
            stored = sum(1 for s in sent if s.result.commitLogOffset < writer.flushed_end)
            raise StoreWriteError(exc.path, exc.offset, f"{exc.what}; {stored} of {req.count} messages were "
                                                        f"stored before it, the others were not") from None
        used = max(s.realQueueId for s in sent) + 1
        add_topics(path, {req.topic: max(used, queue_nums)}, clock())
    return sent


def _put_all(writer: StoreWriter, req: SendRequest, queue_nums: int, born_host: tuple[bytes, int],
             uniq: UniqKeyFactory, clock: Callable[[], int], sent: list[Sent],
             on_progress: Callable[[int], None] | None) -> None:
    for i in range(req.count):
        queue_id = req.queue_id if req.queue_id is not None else i % max(queue_nums, 1)
        born = clock()
        props = client_properties(req.tags, req.keys, req.properties, req.delay_level, uniq.create(born))
        message = broker_message(req.topic, queue_id, req.body, props, born_timestamp=born,
                                 born_host=born_host, store_host=req.store_host)
        result = writer.put(message)
        sent.append(Sent(props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX], born, req.topic, queue_id,
                         min(req.delay_level, writer.max_level), result))
        if on_progress is not None:
            on_progress(1)
