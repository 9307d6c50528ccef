"""`rmqdelay send`: put messages into a store as a producer and the broker's putMessage would.

The store is created when the directory does not exist (an operator making a test store);
an existing non-empty directory without ``commitlog/`` is refused, so a typo cannot turn
some other directory into a store. After the messages are written and flushed, every real
topic gets an entry in config/topics.json (as auto-creation would give it), so a broker
started on the store serves the topic.

Into a 5.x store a message is what a 5.3.3 broker stores: WAIT kept, the properties string of
the broker's 128-bucket map, and a timer message (``TIMER_DELIVER_MS`` / ``TIMER_DELAY_SEC`` /
``TIMER_DELAY_MS``) parked in ``rmq_sys_wheel_timer`` by the put hook (rmqdelay.timer.transform),
the hook's clock being the record's store time. A cancellation is a recall of a parked
message found by its UNIQ_KEY. A 4.x store has no timer wheel: timer sends are refused.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from rmqdelay.errors import StoreError, StoreWriteError, UsageError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    DEFAULT_PRODUCER_GROUP,
    PROPERTY_TIMER_DEL_UNIQKEY,
    PROPERTY_TIMER_DELAY_MS,
    PROPERTY_TIMER_DELAY_SEC,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)
from rmqdelay.formats.javanum import INT_MAX
from rmqdelay.formats.timerprops import DELIVERED, DELIVERED_NEVER_ENQUEUED, timer_info
from rmqdelay.producer import DEFAULT_CLUSTER, broker_message, client_properties
from rmqdelay.store.brokerconfig import (
    DEFAULT_TOPIC_QUEUE_NUMS,
    add_topics,
    read_topic_table,
    write_queue_nums,
)
from rmqdelay.store.directory import Store
from rmqdelay.store.keylookup import find_by_key
from rmqdelay.store.kind import store_features, timer_files_present, timer_paths
from rmqdelay.store.topics import validate_topic
from rmqdelay.store.writer import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    PutResult,
    StoreWriter,
)
from rmqdelay.timer.config import TimerConfig, read_broker_config, timer_config
from rmqdelay.timer.store import TimerStore
from rmqdelay.timer.transform import (
    DEFAULT_MAP_CAPACITY,
    TimerPut,
    recall_message,
    recall_timestamp,
    transform_timer_message,
)
from rmqdelay.timer.wheel import TimerWheel
from rmqdelay.uniqkey import UniqKeyFactory

# TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET: the broker refuses a producer's send to these.
NOT_ALLOWED_SEND_TOPICS = frozenset({
    RMQ_SYS_SCHEDULE_TOPIC, "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})
DEFAULT_STORE_HOST = (bytes([127, 0, 0, 1]), 10911)
# The client's setters of a timer message, by the option that sets them.
TIMER_OPTIONS = {"--deliver-at": PROPERTY_TIMER_DELIVER_MS, "--delay-sec": PROPERTY_TIMER_DELAY_SEC,
                 "--delay-ms": PROPERTY_TIMER_DELAY_MS}


@dataclass(slots=True)
class SendRequest:
    topic: str | None  # None only for a cancellation: the topic of the message it cancels
    body: bytes
    queue_id: int | None = None  # None: round robin over the topic's write queues
    tags: str | None = None
    keys: str | None = None
    delay_level: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    count: int = 1
    store_host: tuple[bytes, int] | None = DEFAULT_STORE_HOST  # None: the store's own broker's (store_host_of)
    # (option, property, value): --deliver-at / --delay-sec / --delay-ms as the client sets it.
    timer: tuple[str, str, str] | None = None
    cancel: str | None = None  # UNIQ_KEY of a parked timer message to cancel (a recall)
    producer_group: str = DEFAULT_PRODUCER_GROUP
    broker_config: Path | None = None


@dataclass(slots=True, frozen=True)
class Sent:
    uniqKey: str
    bornTimestamp: int
    realTopic: str
    realQueueId: int
    delayLevel: int
    result: PutResult
    timer: TimerPut | None = None  # what the put hook made of a timer message (5.x)
    cancels: str | None = None  # a cancellation: TIMER_DEL_UNIQKEY


@dataclass(slots=True, frozen=True)
class TimerTarget:
    """What a timer send found about the store: its broker's timer settings and what shows
    it is a 5.x store (said to the operator)."""

    config: TimerConfig
    detected: str


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_request(req: SendRequest) -> None:
    """Everything the client and the broker would refuse, before anything is written."""
    if req.topic is None:
        if req.cancel is None:
            raise UsageError("--topic: required")
    else:
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
    if req.timer is not None and req.delay_level:
        raise UsageError(f"{req.timer[0]} and --delay-level: a message has a deliver time or a delay level, "
                         "give one of them")
    if req.cancel is not None:
        if req.timer is not None or req.delay_level:
            what = req.timer[0] if req.timer is not None else "--delay-level"
            raise UsageError(f"--cancel and {what}: a cancellation takes its time from the message it cancels")
        if req.count != 1:
            raise UsageError(f"--cancel: one cancellation per message, found --count {req.count}")
        if not req.cancel or any(c in req.cancel for c in "\x01\x02+ "):
            raise UsageError(f"--cancel: the UNIQ_KEY of a parked timer message, found {req.cancel!r}")


def store_host_of(path: Path) -> tuple[bytes, int]:
    """The storeHost of the store's broker, as its newest commit log file's first record
    holds it (the broker stamps its own address on every record); the default for a new or
    empty store."""
    if not (path / "commitlog").is_dir():
        return DEFAULT_STORE_HOST
    with Store(path) as store:
        for mf in reversed(store.commitlog.files):
            try:
                record = store.commitlog.read_record(mf.start)
            except StoreError:
                continue
            if isinstance(record, Message):
                return record.storeHostAddress, record.storePort
    return DEFAULT_STORE_HOST


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
    target = timer_target(path, req) if req.timer is not None or req.cancel is not None else None
    if req.store_host is None:
        req = replace(req, store_host=store_host_of(path))
    with StoreWriter(path, delay_levels=delay_levels, commitlog_file_size=commitlog_file_size,
                     cq_file_size=cq_file_size, clock=clock, create=True,
                     broker_config=req.broker_config) as writer:
        for note in writer.recovery.notices if on_notice else ():
            on_notice(f"recovery: {note}")
        if req.cancel is not None:
            sent = [_put_cancel(writer, path, req, target.config, clock)]
            writer.flush()
            if on_notice is not None:
                on_notice(target.detected)
            return sent
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
        config = target.config if target is not None else \
            _timer_settings(path, req.broker_config) if writer.write_format.is5x else None
        wheel = _congestion_wheel(path, config)
        try:
            _put_all(writer, req, queue_nums, born_host, uniq, clock, sent, on_progress, config,
                     None if wheel is None else (lambda time_ms: wheel.slot(time_ms).num))
            writer.flush()
        except StoreWriteError as exc:
            stored = sum(1 for s in sent if s.result.commitLogOffset < writer.flushed_end)
            raise StoreWriteError(exc.path, exc.offset, f"{exc.what}; {stored} of {req.count} messages were "
                                                        f"stored before it, the others were not") from None
        finally:
            if wheel is not None:
                wheel.close()
        used = max(s.realQueueId for s in sent) + 1
        add_topics(path, {req.topic: max(used, queue_nums)}, clock())
    if target is not None and on_notice is not None:
        on_notice(target.detected)
    return sent


def _put_all(writer: StoreWriter, req: SendRequest, queue_nums: int, born_host: tuple[bytes, int],
             uniq: UniqKeyFactory, clock: Callable[[], int], sent: list[Sent],
             on_progress: Callable[[int], None] | None, config: TimerConfig | None,
             slot_num: Callable[[int], int] | None) -> None:
    broker5x = writer.write_format.is5x
    cluster = _cluster_name(req.broker_config)
    timer = req.timer[1:] if req.timer is not None else None
    for i in range(req.count):
        queue_id = req.queue_id if req.queue_id is not None else i % max(queue_nums, 1)
        born = clock()
        props = client_properties(req.tags, req.keys, req.properties, req.delay_level, uniq.create(born), timer)
        hook: TimerPut | None = None
        if broker5x:
            now = clock()  # the broker's clock at the put hook, and the record's store time
            message = broker_message(req.topic, queue_id, req.body, props, born_timestamp=born,
                                     born_host=born_host, store_host=req.store_host, cluster=cluster,
                                     store_timestamp=now, broker5x=True)
            hook = transform_timer_message(message, config, now, slot_num=slot_num)
            message = hook.message
            if hook.deliverMs is None and not hook.parked:
                hook = None  # not a timer message
        else:
            message = broker_message(req.topic, queue_id, req.body, props, born_timestamp=born,
                                     born_host=born_host, store_host=req.store_host, cluster=cluster)
        result = writer.put(message)
        sent.append(Sent(props[PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX], born, req.topic, queue_id,
                         min(req.delay_level, writer.max_level), result, hook))
        if on_progress is not None:
            on_progress(1)


def _cluster_name(broker_config: Path | None) -> str:
    """BrokerConfig.brokerClusterName: the CLUSTER property SendMessageProcessor adds."""
    if broker_config is None:
        return DEFAULT_CLUSTER
    return read_broker_config(broker_config).get("brokerClusterName", DEFAULT_CLUSTER)


def _congestion_wheel(path: Path, config: TimerConfig | None) -> TimerWheel | None:
    """The wheel whose slot counts TimerMessageStore.isReject weighs, when the broker sets
    timerCongestNumEachSlot (off by default)."""
    wheel_path = timer_paths(path)["timerwheel"]
    if config is None or config.congestNumEachSlot >= INT_MAX or not wheel_path.is_file():
        return None
    return TimerWheel(wheel_path, config.precisionMs)


def _timer_settings(path: Path, broker_config: Path | None) -> TimerConfig:
    """The timer settings of the store's broker: broker.conf, then what the timer files say
    (the precision), then the 5.3.3 defaults."""
    if timer_files_present(path):
        with Store(path) as store, TimerStore(store, broker_config) as ts:
            return ts.config
    return timer_config(broker_config)


def timer_target(path: Path, req: SendRequest) -> TimerTarget:
    """Refuses (UsageError) a store that is not a 5.x one, saying what was found; else the
    timer settings and what shows 5.x. Reads only."""
    option = req.timer[0] if req.timer is not None else "--cancel"
    if not (path / "commitlog").is_dir():
        raise UsageError(f"{path}: no store here; {option} goes into an existing 5.x store (a store that send "
                         "creates is a 4.9.4 one, and a 4.9.4 broker has no timer wheel)")
    with Store(path) as store:
        features = store_features(store)
    if features.version != "5.x":
        raise UsageError(f"{path}: a 4.x store (no timer files, no V2 records, no __CRC32#, no delayOffset.json "
                         f"dataVersion, no 5.x checkpoint fields): a 4.9.4 broker has no timer wheel, so "
                         f"{option} cannot be sent to it (--delay-level can)")
    config = _timer_settings(path, req.broker_config)
    settings = ", ".join(f"{name} {value} ({config.source(name)})" for name, value in (
        ("timerPrecisionMs", config.precisionMs), ("timerMaxDelaySec", config.maxDelaySec)))
    return TimerTarget(config, f"{path}: a 5.x store (" + "; ".join(features.signs) + f"); timer: {settings}, "
                               f"timerWheelEnable {str(config.timerWheelEnable).lower()}")


def cancel_target(store: Store, uniq_key: str) -> tuple[str, int]:
    """(realTopic, TIMER_OUT_MS) of the parked timer message ``uniq_key`` names (its newest
    copy: a roll re-puts it with the same TIMER_OUT_MS). UsageError when there is none, or
    when it was delivered already."""
    parked = None
    for msg in find_by_key(store, uniq_key).messages:
        if msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) != uniq_key:
            continue  # a message whose KEYS hold it
        info = timer_info(msg.topic, msg.properties)
        if info is None or info.isCancel:
            continue
        if info.stage in (DELIVERED, DELIVERED_NEVER_ENQUEUED):
            raise UsageError(f"--cancel {uniq_key}: already delivered to {msg.topic} queue {msg.queueId} "
                             f"(commitLogOffset {msg.commitLogOffset}); nothing left to cancel")
        if msg.topic == RMQ_SYS_WHEEL_TIMER_TOPIC and info.realTopic and info.outMs is not None:
            parked = (info.realTopic, info.outMs)
    if parked is None:
        raise UsageError(f"--cancel {uniq_key}: no timer message parked in {RMQ_SYS_WHEEL_TIMER_TOPIC} has this "
                         "UNIQ_KEY")
    return parked


def _put_cancel(writer: StoreWriter, path: Path, req: SendRequest, config: TimerConfig,
                clock: Callable[[], int]) -> Sent:
    """RecallMessageProcessor: the marker for the parked message, parked in the same slot."""
    with Store(path) as store:
        topic, out_ms = cancel_target(store, req.cancel)
    if req.topic is not None and req.topic != topic:
        raise UsageError(f"--cancel {req.cancel}: the message was sent to {topic}, not to --topic {req.topic}")
    now = clock()
    born_host = (bytes([127, 0, 0, 1]), 30000 + os.getpid() % 30000)
    marker = recall_message(topic, req.cancel, recall_timestamp(out_ms), req.producer_group, now,
                            born_host=born_host, store_host=req.store_host, config=config)
    hook = transform_timer_message(marker, config, now, map_capacity=DEFAULT_MAP_CAPACITY)
    result = writer.put(hook.message)
    return Sent(req.cancel, now, topic, 0, 0, result, hook, hook.message.properties.get(PROPERTY_TIMER_DEL_UNIQKEY))
