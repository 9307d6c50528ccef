"""`rmqdelay samples generate`: a deterministic, realistic broker store, and the plan behind it.

The store is a broker's life replayed on a simulated clock that starts at a fixed instant
(the seed moves it, never the wall clock), so one seed always gives the same bytes:

- producers put messages on a few topics (4 queues each) over six hours: plain ones, delay
  messages on all 18 levels, and messages consumer group ``GID_<TOPIC>`` fails;
- a due delay message is delivered (ScheduleMessageService.messageTimeup, through the one
  writer) at its deliver time plus a small lateness, in queue order per level;
- a failed message goes the consumer retry path: send-back to ``%RETRY%GROUP`` (delayed at
  level 3 + reconsume times), its delivery, the next failure ... and after 16 retries the
  ``%DLQ%GROUP``;
- whatever is due after the end stays pending; ``config/delayOffset.json`` holds the offsets
  of what was delivered, ``config/consumerOffset.json`` the consumers' offsets (some lag on
  the retry queues).

Records reach the commit log in store-time order, as on a broker. Memory grows with what is
in flight (delay and retry messages not yet delivered), not with the number of messages.

``plan.json`` holds what the generator knows by construction, for checking analyses:

- ``seed``, ``messages`` (records written), ``start_ms``, ``at_ms`` (the end of the clock:
  the figures below hold at that instant);
- ``levels``: per level (string key "1".."18"): ``put`` (schedule records, retry send-backs
  included), ``delivered``, ``pending``, ``delay_offset`` (= delivered), and ``lateness``
  (store time of the delivered copy − deliver time of its unit, over the delivered):
  ``count``, ``min``, ``max``, ``p50``, ``p90``, ``p99`` (nearest rank);
- ``groups``: per consumer group: ``chains`` (messages with a send-back or a DLQ record),
  ``attempts`` ({"n": chains whose last send-back had reconsume times n}), ``dlq``,
  ``pending`` (chains whose last send-back is not delivered yet);
- ``retry_queues``: per ``%RETRY%GROUP`` topic and queue id: ``max_offset`` and
  ``consumer_offset``.
"""

from __future__ import annotations

import heapq
import json
import random
from array import array
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.formats.commitlog import Message, body_crc
from rmqdelay.formats.constants import (
    DEFAULT_MAX_RECONSUME_TIMES,
    DLQ_GROUP_TOPIC_PREFIX,
    MESSAGE_MAGIC_CODE,
    PROPERTY_CLUSTER,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    PROPERTY_WAIT_STORE_MSG_OK,
    RETRY_GROUP_TOPIC_PREFIX,
)
from rmqdelay.formats.delayoffset import DelayOffsets, format_consumer_offsets, format_delay_offsets
from rmqdelay.formats.properties import parse_properties

from .levels import parse_delay_levels
from .offsetstore import atomic_write
from .redelivery import consumer_send_back, message_timeup
from .writer import NewMessage, PutResult, StoreWriter

START_MS = 1_790_000_000_000  # 2026-09-21T14:13:20Z
SPAN_MS = 6 * 3_600_000  # longer than the 16 retries take (about 4 h 46 min)
TOPICS = ["TopicOrder", "TopicPay", "TopicShip", "TopicNotify"]
QUEUES = 4
STORE_HOST = (bytes([10, 10, 0, 5]), 10911)
WORDS = ["order", "payment", "shipment", "refund", "coupon", "invoice", "delay", "retry", "rocketmq",
         "queue", "broker", "consumer", "producer", "offset", "订单", "支付", "延迟"]

# Shares of the produced messages; the rest are plain.
DELAY_SHARE = 0.30
FAILING_SHARE = 0.08


@dataclass
class _LevelPlan:
    put: int = 0
    delivered: int = 0
    lateness: array = field(default_factory=lambda: array("q"))
    last_delivery_ms: int = 0


@dataclass
class _GroupPlan:
    chains: int = 0
    attempts: dict[int, int] = field(default_factory=dict)
    dlq: int = 0
    pending: int = 0

    def ended(self, attempts: int) -> None:
        self.attempts[attempts] = self.attempts.get(attempts, 0) + 1


@dataclass(slots=True)
class _Retry:
    """Where a failing message stands on its retry path."""

    group: str
    failures_left: int  # how many more times the group fails it


def unique_key(born_ms: int, counter: int, pid: int, loader_hash: int) -> str:
    """MessageClientIDSetter's layout: IP, pid, class loader hash, ms since the month began
    (here: since the start of the simulated clock), counter."""
    since = (born_ms - START_MS) & 0xFFFFFFFF
    return f"7F000001{pid & 0xFFFF:04X}{loader_hash & 0xFFFFFFFF:08X}{since:08X}{counter & 0xFFFF:04X}"


def stored_message(new: NewMessage, put: PutResult) -> Message:
    """The record ``put`` wrote for ``new``, as a reader decodes it."""
    return Message(put.storeSize, MESSAGE_MAGIC_CODE, body_crc(new.body), put.queueId, new.flag, put.queueOffset,
                   put.commitLogOffset, new.sysFlag, new.bornTimestamp, new.bornHost[0], new.bornHost[1],
                   put.storeTimestamp, new.storeHost[0], new.storeHost[1], new.reconsumeTimes, 0, new.body,
                   put.topic, put.propertiesRaw, parse_properties(put.propertiesRaw))


def nearest_rank(values, num: int, den: int) -> int | None:
    """value[ceil(num/den · n) − 1] of the sorted values."""
    if not len(values):
        return None
    return sorted(values)[-(-num * len(values) // den) - 1]


class Generator:
    # Event kinds; at one instant a delivery goes before a consumption.
    DELIVER, CONSUME = 0, 1

    def __init__(self, path: Path, messages: int, seed: int, *, commitlog_file_size: int,
                 cq_file_size: int) -> None:
        self.path = Path(path)
        self.target = messages
        self.seed = seed
        self.rng = random.Random(seed)
        self.levels = parse_delay_levels()
        self.start_ms = START_MS + seed % 1000 * 1000
        self.now = self.start_ms
        self.writer = StoreWriter(self.path, create=True, commitlog_file_size=commitlog_file_size,
                                  cq_file_size=cq_file_size, clock=lambda: self.now, sync=False)
        self.written = 0
        self.events: list[tuple] = []
        self.seq = 0
        self.level_plans = {level: _LevelPlan() for level in self.levels}
        self.group_plans = {"GID_" + t[5:].upper(): _GroupPlan() for t in TOPICS}
        self.pid = self.rng.randrange(1 << 16)
        self.loader_hash = self.rng.randrange(1 << 32)
        self.bodies = [self._body(i) for i in range(256)]

    def _body(self, i: int) -> bytes:
        words = [self.rng.choice(WORDS) for _ in range(self.rng.randint(8, 70))]
        return f"msg-{i}: {' '.join(words)}".encode()

    def _later(self, at_ms: int, kind: int, payload: tuple) -> None:
        self.seq += 1
        heapq.heappush(self.events, (at_ms, kind, self.seq, payload))

    def _put(self, new: NewMessage, at_ms: int) -> PutResult:
        self.now = max(self.now, at_ms)
        self.written += 1
        return self.writer.put(new)

    def run(self) -> dict:
        """Write the store; return the plan."""
        produced = 0
        end_ms = self.start_ms + SPAN_MS
        # Deliveries and send-backs count towards the target too: producers put about
        # target / (1 + what each one brings along) messages, spread over the span.
        step = SPAN_MS / max(self.target, 1) * (1 + DELAY_SHARE + FAILING_SHARE * 6)
        next_produce = float(self.start_ms)
        with self.writer:
            while self.written < self.target:
                if self.events and self.events[0][0] <= next_produce:
                    at_ms, kind, _, payload = heapq.heappop(self.events)
                    (self._deliver if kind == self.DELIVER else self._consume)(at_ms, *payload)
                    continue
                if next_produce > end_ms:
                    break
                self._produce(produced, int(next_produce))
                produced += 1
                next_produce += step * (0.5 + self.rng.random())
            self.writer.flush()
            self._write_config()
        return self._plan()

    def _produce(self, i: int, at_ms: int) -> None:
        rng = self.rng
        topic = TOPICS[i % len(TOPICS)]
        born = at_ms - rng.randint(0, 30)
        props = {PROPERTY_KEYS: f"{topic[5:].lower()}-{i}", PROPERTY_TAGS: ("TagA", "TagB", "TagC")[i % 3],
                 PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX: unique_key(born, i, self.pid, self.loader_hash),
                 PROPERTY_CLUSTER: "DefaultCluster", PROPERTY_WAIT_STORE_MSG_OK: "true"}
        roll = rng.random()
        level = 1 + rng.randrange(len(self.levels)) if roll < DELAY_SHARE else 0
        if level:
            props[PROPERTY_DELAY_TIME_LEVEL] = str(level)
        new = NewMessage(topic=topic, queueId=rng.randrange(QUEUES), body=self.bodies[i % len(self.bodies)],
                         properties=props, bornTimestamp=born, storeHost=STORE_HOST)
        put = self._put(new, at_ms)
        if level:
            self._schedule(new, put, level, None)
        elif roll < DELAY_SHARE + FAILING_SHARE:
            # How often the group fails it: 1..16 retries, 17 = into the DLQ after the 16th.
            failures = (DEFAULT_MAX_RECONSUME_TIMES + 1 if rng.random() < 0.1
                        else min(1 + int(rng.expovariate(0.4)), DEFAULT_MAX_RECONSUME_TIMES))
            group = "GID_" + topic[5:].upper()
            self._later(at_ms + rng.randint(5, 200), self.CONSUME, (stored_message(new, put), _Retry(group, failures)))

    def _schedule(self, new: NewMessage, put: PutResult, level: int, retry: _Retry | None) -> None:
        plan = self.level_plans[level]
        plan.put += 1
        lateness = self.rng.randint(0, 4) if self.rng.random() < 0.98 else self.rng.randint(50, 3000)
        # A level is delivered in queue order: never before the unit ahead of it.
        deliver_at = max(put.tagsCode + lateness, plan.last_delivery_ms)
        plan.last_delivery_ms = deliver_at
        self._later(deliver_at, self.DELIVER, (stored_message(new, put), level, put.tagsCode, retry))

    def _deliver(self, at_ms: int, record: Message, level: int, deliver_ms: int, retry: _Retry | None) -> None:
        copy = message_timeup(record)
        put = self._put(copy, at_ms)
        plan = self.level_plans[level]
        plan.delivered += 1
        plan.lateness.append(put.storeTimestamp - deliver_ms)
        if retry is not None:
            self._later(at_ms + self.rng.randint(5, 200), self.CONSUME, (stored_message(copy, put), retry))

    def _consume(self, at_ms: int, msg: Message, retry: _Retry) -> None:
        plan = self.group_plans[retry.group]
        if retry.failures_left == 0:
            plan.ended(msg.reconsumeTimes)  # consumed at last
            return
        if msg.reconsumeTimes == 0:
            plan.chains += 1
        back = consumer_send_back(msg, retry.group)
        put = self._put(back, at_ms)
        if put.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            plan.dlq += 1
            plan.ended(msg.reconsumeTimes)
            return
        level = int(back.properties[PROPERTY_DELAY_TIME_LEVEL])
        self._schedule(back, put, level, _Retry(retry.group, retry.failures_left - 1))

    # -- the end ---------------------------------------------------------------------------
    def _write_config(self) -> None:
        delivered = {level: p.delivered for level, p in self.level_plans.items() if p.put}
        config = self.path / "config"
        atomic_write(config / "delayOffset.json", format_delay_offsets(DelayOffsets(delivered)).encode(), keep_bak=True)
        table: dict[str, dict[int, int]] = {}
        for topic in TOPICS:
            group = "GID_" + topic[5:].upper()
            table[f"{topic}@{group}"] = {q: self.writer.next_queue_offset(topic, q) for q in range(QUEUES)}
            retry_topic = RETRY_GROUP_TOPIC_PREFIX + group
            max_offset = self.writer.next_queue_offset(retry_topic, 0)
            if max_offset:
                table[f"{retry_topic}@{group}"] = {0: max(0, max_offset - self.rng.randint(0, 3))}
        self.consumer_offsets = table
        atomic_write(config / "consumerOffset.json", format_consumer_offsets(table).encode(), keep_bak=True)

    def _plan(self) -> dict:
        # What is still in flight: a send-back not delivered is a pending chain; a delivered
        # retry not consumed yet has its attempts settled.
        for _, kind, _, payload in self.events:
            retry = payload[-1]
            reconsume = payload[0].reconsumeTimes
            if retry is None or reconsume == 0:
                continue  # a delay message, or an original not consumed yet: no chain
            plan = self.group_plans[retry.group]
            plan.ended(reconsume)
            plan.pending += kind == self.DELIVER
        levels = {}
        for level, p in self.level_plans.items():
            levels[str(level)] = {
                "put": p.put, "delivered": p.delivered, "pending": p.put - p.delivered, "delay_offset": p.delivered,
                "lateness": {"count": len(p.lateness), "min": min(p.lateness, default=None),
                             "max": max(p.lateness, default=None), "p50": nearest_rank(p.lateness, 1, 2),
                             "p90": nearest_rank(p.lateness, 9, 10), "p99": nearest_rank(p.lateness, 99, 100)},
            }
        groups = {}
        for group, g in self.group_plans.items():
            attempts = {str(a): n for a, n in sorted(g.attempts.items())}
            groups[group] = {"chains": g.chains, "attempts": attempts, "dlq": g.dlq, "pending": g.pending}
        retry_queues = {}
        for key, queues in self.consumer_offsets.items():
            topic, _, _ = key.rpartition("@")
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                retry_queues[topic] = {str(q): {"max_offset": self.writer.next_queue_offset(topic, q),
                                                "consumer_offset": offset} for q, offset in queues.items()}
        return {"seed": self.seed, "messages": self.written, "start_ms": self.start_ms, "at_ms": self.now,
                "levels": levels, "groups": groups, "retry_queues": retry_queues}


def generate(path: Path, messages: int, seed: int = 1, *, commitlog_file_size: int = 1 << 30,
             cq_file_size: int = 300_000 * 20) -> dict:
    """Write a store of ``messages`` records into ``path`` (new) and ``plan.json`` beside it."""
    plan = Generator(path, messages, seed, commitlog_file_size=commitlog_file_size, cq_file_size=cq_file_size).run()
    atomic_write(Path(path) / "plan.json", (json.dumps(plan, indent=1, ensure_ascii=False) + "\n").encode())
    return plan
