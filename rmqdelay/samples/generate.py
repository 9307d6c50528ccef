"""`rmqdelay samples generate`: a deterministic, realistic broker store, written through the
one writer in store-time order, as a broker would have written it over a few hours.

What happens in it (every time comes from the seed, none from the wall clock):
- producers on several hosts send to four topics and their queues; a share of the messages
  asks for a delay level (1..18, all of them);
- the scheduler delivers each delay message when it is due, with a small lateness and a few
  early and late outliers; within a level delivery is in queue order, as the broker's one
  task per level does it, so one late message holds up the ones behind it
  (``message_timeup`` builds the delivered copy);
- consumer groups consume their topics; some plain messages fail and go round the retry path:
  send-back (``consumer_send_back``) -> SCHEDULE_TOPIC_XXXX level 2 + retry -> ``%RETRY%G``
  -> consumed again ... up to 16 retries, then ``%DLQ%G``;
- the run stops at the N-th record; whatever is due later stays pending. ``at_ms`` is the
  store time of that last record.

Events happen in (time, sequence) order. Most of them come in streams whose times never go
back (one level's deliveries, one group's first send-backs, one group's later ones): each
stream is a FIFO and only its first event waits in the heap, which so stays a few dozen
events long; other events wait in the heap itself. Memory holds what is in flight (delay
messages not yet due, retries not yet sent back: about the message rate times the longest
delay, 2 h) and a few minutes of each queue's times, never the records already written.

After the commit log: config/delayOffset.json (per level, the units delivered),
config/consumerOffset.json (each group's consumed offsets as last persisted: a 5 s tick),
config/topics.json (every topic written), and ``DIR/plan.json`` (see ``build_plan``; the
broker ignores the extra file).
"""

from __future__ import annotations

import gc
import heapq
import json
import random
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from math import log
from pathlib import Path

from rmqdelay.jsonnames import camel_keys
from rmqdelay.errors import StoreError, UsageError
from rmqdelay.formats.commitlog import body_crc
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    DEFAULT_MAX_RECONSUME_TIMES,
    DLQ_GROUP_TOPIC_PREFIX,
    MESSAGE_MAGIC_CODE,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    RETRY_GROUP_TOPIC_PREFIX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ,
)
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.formats.properties import parse_properties
from rmqdelay.producer import DEFAULT_CLUSTER, broker_message, client_properties
from rmqdelay.schedule.offsets import write_delay_offsets
from rmqdelay.schedule.redelivery import consumer_send_back
from rmqdelay.store.brokerconfig import add_topics, write_consumer_offsets
from rmqdelay.store.durable import atomic_write
from rmqdelay.store.index import IndexSettings
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.writer import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    NewMessage,
    PutResult,
    StoreWriter,
)
from rmqdelay.store.writerprocess import WriterProcess
from rmqdelay.uniqkey import UniqKeyFactory

from .records import HEAD_V4, HEAD_V6, Content, Layout, Rec, properties_part
from .tally import Arrivals, lateness_summary
from .traffic import (
    BASE_TIME_MS,
    CARRIERS,
    GROUPS,
    REGIONS,
    STORE_HOST,
    TOPICS,
    USER_KEYS,
    Producer,
    RetryChain,
    TopicSpec,
    body_pool,
)

OFFSET_PERSIST_MS = 5_000  # the consumer offsets a broker has persisted lag by up to this much
PROGRESS_STEP = 65_536

# Event kinds in the heap.
_DELIVER = 0
_SEND_BACK = 1


@dataclass
class GenerateOptions:
    messages: int
    seed: int = 1
    hours: float = 8.0  # roughly the store-time span: the 16 retries alone take 4 h 46 min
    delay_share: float = 0.4  # share of the producers' messages that ask for a delay level
    dlq_share: float = 0.3  # share of the failing messages that never succeed
    commitlog_file_size: int = DEFAULT_COMMITLOG_FILE_SIZE
    cq_file_size: int = DEFAULT_CQ_FILE_SIZE
    index: IndexSettings = IndexSettings()  # maxHashSlotNum / maxIndexNum of the broker to open it
    # The writer in a process of its own (the records are made on one core, written on the
    # other); False: in this process. The store is the same bytes either way.
    writer_process: bool = True


class SampleGenerator:
    """Writes one sample store; ``run()`` returns the plan (also written to plan.json)."""

    # The writer's WriteFormat (None: a 4.9.4 store) and whether messages are stored as a 5.x
    # broker stores them (WAIT kept, 128-bucket order): set by a 5.x generator.
    write_format = None
    broker5x = False

    def __init__(self, directory: Path | str, options: GenerateOptions,
                 on_put: Callable[[NewMessage, PutResult], None] | None = None,
                 on_progress: Callable[[int], None] | None = None) -> None:
        if options.messages < 1:
            raise UsageError(f"--messages: at least 1, found {options.messages}")
        self.dir = Path(directory)
        self.opt = options
        self.on_put = on_put  # sees every record put (tests compare the store with it)
        self.on_progress = on_progress  # told how many records were written, every so often
        self.rng = random.Random(options.seed)
        rng = self.rng
        self.start_ms = BASE_TIME_MS + rng.randrange(30 * 86_400_000)
        self.delays = parse_delay_levels()
        self.max_level = max(self.delays)
        self.bodies = body_pool(rng)
        self.producers = []
        for i in range(6):
            ip = bytes([192, 168, 1 + i // 3, 20 + i])
            port = 40000 + rng.randrange(20000)
            # One producer connects over IPv6; its UNIQ_KEY still carries its IPv4 address,
            # as UtilAll.getIP prefers one.
            host = (bytes(15) + b"\x01", port) if i == 5 else (ip, port)
            self.producers.append(Producer(host, UniqKeyFactory(ip, rng.randrange(1, 65536), rng.getrandbits(32))))
        total = sum(t.weight for t in TOPICS)
        self.topic_cumulative = [sum(t.weight for t in TOPICS[:i + 1]) / total for i in range(len(TOPICS) - 1)]
        self.topic_specs = {t.name: t for t in TOPICS}
        self.groups_of_topic: dict[str, list[int]] = {t.name: [] for t in TOPICS}
        for gi, g in enumerate(GROUPS):
            for topic in g.topics:
                self.groups_of_topic[topic].append(gi)
        self.arrivals = {(t.name, q): Arrivals() for t in TOPICS for q in range(t.queues)}
        self.retry_consumed = [Arrivals() for _ in GROUPS]
        self.retry_last_consume = [0] * len(GROUPS)
        self.retry_copies = [0] * len(GROUPS)
        self.dlq_records = [0] * len(GROUPS)
        self.sendback_records = [0] * len(GROUPS)
        self.level_put = [0] * (self.max_level + 1)
        self.level_delivered = [0] * (self.max_level + 1)
        self.level_last_actual = [0] * (self.max_level + 1)
        self.lateness = [Counter() for _ in range(self.max_level + 1)]
        self.group_chains = [0] * len(GROUPS)
        self.group_attempts = [Counter() for _ in GROUPS]
        self.group_dlq = [0] * len(GROUPS)
        self.group_pending = [0] * len(GROUPS)
        self.kinds = Counter()
        self.heap: list = []  # (time, seq, kind, arg, rec, chain, stream): each stream's first event, and others
        self.level_streams = [deque() for _ in range(self.max_level + 1)]  # deliveries, by level
        self.first_send_backs = [deque() for _ in GROUPS]  # of plain messages, by group
        self.later_send_backs = [deque() for _ in GROUPS]  # of %RETRY% copies, by group
        self.seq = 0
        self.serial = 0
        self.body_crcs = [body_crc(body) for body in self.bodies]
        self.heads = [HEAD_V6 if len(p.host[0]) == 16 else HEAD_V4 for p in self.producers]
        self.layouts = {(t.name, tagged, delayed): Layout(t.name, tagged, delayed, self.broker5x)
                        for t in TOPICS for tagged in (True, False) for delayed in (True, False)}
        self.tag_codes = {tag: tags_code(tag) for t in TOPICS for tag in t.tags}
        self.topic_parts: dict[str, bytes] = {}
        self.writer: StoreWriter | None = None
        self.put_encoded = None
        self.rnd = rng.random
        self.gap_rate = 0.0
        self.written = 0  # records written

    # -- the run -------------------------------------------------------------------------
    def run(self) -> dict:
        self._check_dir()
        opt = self.opt
        # About 1.6 records per producer message (deliveries, retries); spread N over `hours`.
        self.gap_rate = 1.0 / (opt.hours * 3_600_000 * 1.6 / opt.messages)  # producer messages per ms
        writer_class = WriterProcess if opt.writer_process else StoreWriter
        with writer_class(self.dir, delay_levels=self.delays, commitlog_file_size=opt.commitlog_file_size,
                         cq_file_size=opt.cq_file_size, sync=False, create=True, index=opt.index,
                         write_format=self.write_format) as writer:
            self.writer = writer
            self.put_encoded = writer.put_encoded
            # Hundreds of thousands of long-lived events wait, and nothing among them forms a
            # reference cycle: the cyclic collector would only rescan them, again and again.
            collecting = gc.isenabled()
            gc.disable()
            try:
                self._loop(opt.messages, self.start_ms)
            finally:
                if collecting:
                    gc.enable()
            writer.sync_to_disk()
            self._after_log()
            for item in self._pending_events():
                chain = item[5]
                if chain is not None:
                    self._fold(chain)
            self._write_config()
        self.writer = self.put_encoded = None
        plan = self.build_plan()
        # plan.json speaks docs/cli.md's names, as --json does; the plan returned keeps Python's.
        atomic_write(self.dir / "plan.json",
                     (json.dumps(camel_keys(plan), indent=1, ensure_ascii=False) + "\n").encode("utf-8"))
        return plan

    def _handlers(self) -> tuple:
        """The handler of each event kind in the heap, by kind."""
        return self._deliver, self._send_back

    def _after_log(self) -> None:
        """Called once the commit log is written and synced (a 5.x generator writes its timer
        store here)."""

    def _loop(self, n: int, next_original: int) -> None:
        """Write ``n`` records: at each step the earliest of the next producer message and the
        first event in the heap. (An event that writes several records at once, a timer
        slot's deliveries, may take the count a little past ``n``.)"""
        heap = self.heap
        heappop, heappush = heapq.heappop, heapq.heappush
        original = self._original
        handlers = self._handlers()
        last_t = next_original
        while self.written < n:
            start = self.written
            goal = start + min(PROGRESS_STEP, n - start)
            while self.written < goal:
                if heap and heap[0][0] <= next_original:
                    t, _seq, kind, arg, rec, chain, stream = heappop(heap)
                    if stream is not None:
                        stream.popleft()
                        if stream:
                            heappush(heap, stream[0])
                    handlers[kind](t, arg, rec, chain)
                else:
                    t = next_original
                    next_original = original(t)
                last_t = t
            if self.on_progress is not None:
                self.on_progress(self.written - start)
        self.at_ms = last_t

    def _check_dir(self) -> None:
        if self.dir.exists() and (not self.dir.is_dir() or any(self.dir.iterdir())):
            raise StoreError(self.dir, None, "a new or empty directory for the sample store")

    def _push(self, t: int, kind: int, arg: int, rec: Rec, chain: RetryChain | None,
              stream: deque | None = None) -> None:
        """An event at ``t``; in ``stream`` when ``t`` is not before its last event's."""
        self.seq += 1
        if stream is None or (stream and stream[-1][0] > t):
            heapq.heappush(self.heap, (t, self.seq, kind, arg, rec, chain, None))
            return
        item = (t, self.seq, kind, arg, rec, chain, stream)
        if not stream:
            heapq.heappush(self.heap, item)
        stream.append(item)

    def _pending_events(self):
        """Every event not handled yet (in no particular order)."""
        yield from (item for item in self.heap if item[6] is None)
        for streams in (self.level_streams, self.first_send_backs, self.later_send_backs):
            for stream in streams:
                yield from stream

    def _topic_part(self, topic: str) -> bytes:
        part = self.topic_parts.get(topic)
        if part is None:
            data = topic.encode("utf-8")
            part = self.topic_parts[topic] = bytes([len(data)]) + data
        return part

    def _append(self, c: Content, topic: str, queue_id: int, store_ts: int, code: int) -> tuple[int, int, int]:
        """Serialise ``c`` stored in ``topic``/``queue_id`` at ``store_ts`` (its unit's tagsCode
        ``code``) and append it through the writer: (queueOffset, physicalOffset, size)."""
        body = c.body
        head = c.head
        topic_part = self.topic_parts.get(topic) or self._topic_part(topic)
        props_part = c.props_part
        size = head.size + len(body) + len(topic_part) + len(props_part)
        record = bytearray().join((
            head.pack(size, MESSAGE_MAGIC_CODE, c.crc, queue_id, 0, 0, 0, c.sys_flag, c.born_ts, c.born_addr,
                      c.born_port, store_ts, STORE_HOST[0], STORE_HOST[1], c.reconsume, 0, len(body)),
            body, topic_part, props_part))
        self.written += 1
        return (*self.put_encoded(topic, queue_id, record, code, c.keys, c.uniq), size)

    def _report(self, new: NewMessage, rec: Rec, size: int, store_ts: int, code: int) -> None:
        """Tell ``on_put`` (tests) about a record written by ``_append``, as put() would."""
        self.on_put(new, PutResult(rec.topic, rec.queue_id, rec.queue_offset, rec.offset, size, store_ts, code,
                                   create_message_id(STORE_HOST[0], STORE_HOST[1], rec.offset), rec.content.raw))

    # -- producers -----------------------------------------------------------------------
    def _original(self, t: int) -> int:
        """A producer's message stored at ``t``; returns the time of the next one."""
        # random() scaled by hand: a third of the cost of randrange/choice on this hot path;
        # -log(1 - random()) / rate is random.expovariate's own formula, without the call.
        rnd = self.rnd
        spec = TOPICS[bisect_right(self.topic_cumulative, rnd())]
        queue_id = int(rnd() * spec.queues)
        pi = int(rnd() * len(self.producers))
        producer = self.producers[pi]
        born = t - 1 - int(-log(1.0 - rnd()) / 0.1)  # network and send path, ~10 ms
        self.serial += 1
        serial = self.serial
        user = self._user_values(spec, serial)
        level = 1 + int(rnd() * self.max_level) if rnd() < self.opt.delay_share else 0
        tag = spec.tags[int(rnd() * len(spec.tags))]
        keys = f"{spec.key_prefix}{serial}"
        uniq = producer.uniq.create(born)
        bi = int(rnd() * len(self.bodies))
        # What putMessage stores: the broker's map without WAIT; a delayed one gets WAIT back,
        # REAL_TOPIC and REAL_QID, and goes to its level's queue of SCHEDULE_TOPIC_XXXX.
        layout = self.layouts[(spec.name, tag is not None, level > 0)]
        raw = layout.template % layout.pick(
            (tag, keys, "true", *user, str(level), uniq, DEFAULT_CLUSTER, spec.name, str(queue_id)))
        head = self.heads[pi]
        tag_code = self.tag_codes[tag] if tag else 0
        c = Content(raw, properties_part(raw), self.bodies[bi], self.body_crcs[bi], head, born, *producer.host,
                     BORNHOST_V6_FLAG if head is HEAD_V6 else 0, 0, tag_code, keys, uniq)
        if level:
            code = t + self.delays[level]
            rec = Rec(c, RMQ_SYS_SCHEDULE_TOPIC, level - 1,
                       *self._append(c, RMQ_SYS_SCHEDULE_TOPIC, level - 1, t, code)[:2], spec.name, queue_id)
            self.kinds["delay"] += 1
        else:
            code = tag_code
            rec = Rec(c, spec.name, queue_id, *self._append(c, spec.name, queue_id, t, code)[:2])
            self.kinds["normal"] += 1
        if self.on_put is not None:
            client = client_properties(tag, keys, dict(zip(USER_KEYS[spec.name], user)), level, uniq)
            self._report(broker_message(spec.name, queue_id, c.body, client, born_timestamp=born,
                                        born_host=producer.host, store_host=STORE_HOST, store_timestamp=t),
                         rec, self.writer.end_offset - rec.offset, t, code)
        if level:
            self._scheduled(t, rec, code, None)
        else:
            self._landed(t, rec)
        return t + int(-log(1.0 - rnd()) / self.gap_rate)

    def _user_values(self, spec: TopicSpec, serial: int) -> tuple[str, ...]:
        """The values of the topic's USER_KEYS."""
        rng = self.rng
        if spec.name == "TopicOrder":
            return f"OID-{100000 + serial}", REGIONS[int(rng.random() * len(REGIONS))]
        if spec.name == "TopicPay":
            return str(100 + int(rng.random() * 99900)), f"订单-{serial}"
        if spec.name == "TopicLogistics":
            return (CARRIERS[int(rng.random() * len(CARRIERS))],)
        return ()

    # -- the scheduler -------------------------------------------------------------------
    def _scheduled(self, t: int, rec: Rec, due: int, chain: RetryChain | None) -> None:
        """A record just landed in SCHEDULE_TOPIC_XXXX (due at its unit's tagsCode): plan its
        delivery."""
        level = rec.queue_id + 1
        rng = self.rng
        roll = rng.random()
        if roll < 0.003:
            jitter = rng.randrange(1_000, 30_000)  # a stalled delivery (GC, disk)
        elif roll < 0.005:
            jitter = -rng.randrange(1, 800)  # a clock step: delivered before its time
        else:
            jitter = int(-log(1.0 - rng.random()) * 30)  # expovariate(1 / 30)
        actual = max(due + jitter, self.level_last_actual[level], t + 1)
        self.level_last_actual[level] = actual
        self.level_put[level] += 1
        self._push(actual, _DELIVER, due, rec, chain, self.level_streams[level])

    def _deliver(self, t: int, due: int, scheduled: Rec, chain: RetryChain | None) -> None:
        """messageTimeup: the copy keeps the schedule record's properties string (DELAY,
        REAL_TOPIC and REAL_QID included), on its real topic and queue."""
        c = scheduled.content
        topic, queue_id = scheduled.real_topic, scheduled.real_qid
        queue_offset, offset, size = self._append(c, topic, queue_id, t, c.tags_code)
        rec = Rec(c, topic, queue_id, queue_offset, offset)
        if self.on_put is not None:
            properties = parse_properties(c.raw)
            properties.pop(PROPERTY_DELAY_TIME_LEVEL, None)
            self._report(NewMessage(topic, queue_id, c.body, properties, c.raw, 0, c.sys_flag, c.born_ts,
                                    (c.born_addr, c.born_port), STORE_HOST, c.reconsume, 0, t),
                         rec, size, t, c.tags_code)
        level = scheduled.queue_id + 1
        self.level_delivered[level] += 1
        self.lateness[level][t - due] += 1
        if chain is None:
            self.kinds["delivered"] += 1
            self.arrivals[(topic, queue_id)].add(t, t)
            return
        self.kinds["retry"] += 1
        gi = chain.group
        chain.copied = c.reconsume
        self.retry_copies[gi] += 1
        group = GROUPS[gi]
        consume = max(t + group.lag_ms + int(self.rng.expovariate(1 / group.retry_lag_ms)),
                      self.retry_last_consume[gi])
        self.retry_last_consume[gi] = consume
        self.retry_consumed[gi].add(consume, t)
        if chain.sendbacks < chain.target:
            self._push(consume, _SEND_BACK, gi, rec, chain, self.later_send_backs[gi])
        else:
            self._fold(chain)  # consumed successfully at last

    # -- consumers -----------------------------------------------------------------------
    def _landed(self, t: int, rec: Rec) -> None:
        """A producer's plain message: each group of its topic consumes it; some fail and
        send it back. (Delivered delay copies are consumed without failing, and each topic
        has one group: so UNIQ_KEY + DELAY names one schedule record, which keeps the
        scheduler's exactly-once check on this sample simple.)"""
        self.arrivals[(rec.topic, rec.queue_id)].add(t, t)
        rng = self.rng
        for gi in self.groups_of_topic[rec.topic]:
            group = GROUPS[gi]
            if rng.random() < group.fail_rate:
                if rng.random() < self.opt.dlq_share:
                    target = DEFAULT_MAX_RECONSUME_TIMES + 1
                else:
                    target = min(1 + int(rng.expovariate(0.35)), DEFAULT_MAX_RECONSUME_TIMES)
                self._push(t + group.lag_ms, _SEND_BACK, gi, rec, RetryChain(gi, target), self.first_send_backs[gi])

    def _send_back(self, t: int, gi: int, consumed: Rec, chain: RetryChain) -> None:
        """The broker's send-back (a few in a hundred records): a retry goes to
        SCHEDULE_TOPIC_XXXX, the last one to the DLQ. Stored as the writer's putMessage stores
        it (``PutEncoder.rewrite``), appended as the other records are; with ``on_put`` (tests)
        through the writer's own put(), which writes the same bytes."""
        new = consumer_send_back(consumed.message(), GROUPS[gi].name)
        new.storeTimestamp = t
        was = consumed.content
        if self.on_put is None:
            put = self.writer.encoder.rewrite(new)
            topic, queue_id, raw, code = put.topic, put.queue_id, put.properties_raw, put.tags_code
        else:
            result = self.writer.put(new)
            self.written += 1
            self.on_put(new, result)
            topic, queue_id, raw, code = result.topic, result.queueId, result.propertiesRaw, result.tagsCode
        props = new.properties
        c = Content(raw, properties_part(raw), was.body, was.crc, was.head, was.born_ts, was.born_addr, was.born_port,
                     was.sys_flag, new.reconsumeTimes, tags_code(props.get(PROPERTY_TAGS)),
                     props.get(PROPERTY_KEYS) or None, props.get(PROPERTY_UNIQ) or None)
        if self.on_put is None:
            queue_offset, offset = self._append(c, topic, queue_id, t, code)[:2]
        else:
            queue_offset, offset = result.queueOffset, result.commitLogOffset
        if new.topic.startswith(DLQ_GROUP_TOPIC_PREFIX):
            self.kinds["dlq"] += 1
            self.dlq_records[gi] += 1
            chain.dlq = True
            self._fold(chain)
            return
        self.kinds["send_back"] += 1
        self.sendback_records[gi] += 1
        chain.sendbacks = new.reconsumeTimes
        rec = Rec(c, topic, queue_id, queue_offset, offset, new.topic, new.queueId)
        self._scheduled(t, rec, code, chain)

    def _fold(self, chain: RetryChain) -> None:
        """Count a chain in its group's figures once, when nothing more will happen to it
        (or the run ends). Chains without a written send-back or DLQ record are no chains."""
        if chain.folded or (chain.sendbacks == 0 and not chain.dlq):
            return
        chain.folded = True
        gi = chain.group
        self.group_chains[gi] += 1
        self.group_attempts[gi][chain.sendbacks] += 1
        if chain.dlq:
            self.group_dlq[gi] += 1
        elif chain.copied < chain.sendbacks:
            self.group_pending[gi] += 1

    # -- config files and the plan -------------------------------------------------------
    def _persisted_at(self) -> int:
        return self.at_ms - (self.at_ms - self.start_ms) % OFFSET_PERSIST_MS

    def consumer_offsets(self) -> dict[str, dict[int, int]]:
        persisted = self._persisted_at()
        table: dict[str, dict[int, int]] = {}
        for gi, group in enumerate(GROUPS):
            for topic in group.topics:
                spec = self.topic_specs[topic]
                table[f"{topic}@{group.name}"] = {
                    q: self.arrivals[(topic, q)].count_upto(persisted - group.lag_ms) for q in range(spec.queues)}
            if self.retry_copies[gi] or self.sendback_records[gi]:
                table[f"{RETRY_GROUP_TOPIC_PREFIX}{group.name}@{group.name}"] = {
                    0: self.retry_consumed[gi].count_upto(persisted)}
        return table

    def _delay_offsets_version(self):
        """delayOffset.json's dataVersion: none in a 4.9.4 store."""
        return None

    def _write_config(self) -> None:
        write_delay_offsets(self.dir, {level: self.level_delivered[level] for level in self.delays},
                            self._delay_offsets_version())
        write_consumer_offsets(self.dir, self.consumer_offsets())
        topics = {t.name: t.queues for t in TOPICS}
        for gi, group in enumerate(GROUPS):
            if self.sendback_records[gi]:
                topics[RETRY_GROUP_TOPIC_PREFIX + group.name] = 1
            if self.dlq_records[gi]:
                topics[DLQ_GROUP_TOPIC_PREFIX + group.name] = 1
        add_topics(self.dir, topics, self.at_ms)

    def build_plan(self) -> dict:
        """The figures known by construction; they hold at ``at_ms``.

        - ``seed``; ``messages`` (records written); ``start_ms`` (the first record's store
          time); ``at_ms`` (the last record's store time: run analyses ``--at`` this);
        - ``records``: records by kind: ``normal`` and ``delay`` (the producers' messages;
          delay ones sit in SCHEDULE_TOPIC_XXXX), ``delivered`` (copies of delay messages on
          their real topics), ``send_back`` (consumer send-backs, in SCHEDULE_TOPIC_XXXX),
          ``retry`` (copies delivered to %RETRY% topics), ``dlq`` (records in %DLQ% topics);
        - ``levels``: {"1".."18": ...}: ``delay_ms``; ``put`` (units of its schedule queue:
          delay messages and send-backs); ``delivered`` (units with a delivered copy, a
          prefix of the queue); ``pending`` (put - delivered); ``delay_offset`` (written to
          config/delayOffset.json, = delivered); ``lateness`` over the delivered units, in
          ms, store time of the copy - the unit's tagsCode: ``count``, ``min``, ``max``,
          ``p50``, ``p90``, ``p99`` (nearest rank: sorted[ceil(p*n) - 1]), ``early`` (how
          many below 0); min .. p99 are null when count is 0;
        - ``groups``: {GROUP: ...}: ``retry_topic``; ``chains`` (messages the group sent back
          at least once: with a send-back or DLQ record); ``attempts`` ({"k": chains whose
          largest send-back reconsumeTimes is k}); ``dlq`` (chains in the DLQ); ``pending``
          (chains not in the DLQ whose last send-back has no %RETRY% copy yet);
          ``send_backs``, ``retry_copies``, ``dlq_records`` (records of each kind);
        - ``retry_queues``: {"%RETRY%GROUP": {"0": {``max_offset``, ``consumer_offset``,
          ``lag``}}} (consumer offsets as in config/consumerOffset.json);
        - ``consumer_offsets``: the whole table written to config/consumerOffset.json.
        """
        levels = {}
        for level, delay in self.delays.items():
            late = lateness_summary(self.lateness[level])
            levels[str(level)] = {
                "delay_ms": delay, "put": self.level_put[level], "delivered": self.level_delivered[level],
                "pending": self.level_put[level] - self.level_delivered[level],
                "delay_offset": self.level_delivered[level],
                "lateness": late or {"count": 0, "min": None, "max": None, "p50": None, "p90": None,
                                     "p99": None, "early": 0},
            }
        offsets = self.consumer_offsets()
        groups = {}
        retry_queues = {}
        for gi, group in enumerate(GROUPS):
            retry_topic = RETRY_GROUP_TOPIC_PREFIX + group.name
            groups[group.name] = {
                "retry_topic": retry_topic, "chains": self.group_chains[gi],
                "attempts": {str(k): v for k, v in sorted(self.group_attempts[gi].items())},
                "dlq": self.group_dlq[gi], "pending": self.group_pending[gi],
                "send_backs": self.sendback_records[gi], "retry_copies": self.retry_copies[gi],
                "dlq_records": self.dlq_records[gi],
            }
            key = f"{retry_topic}@{group.name}"
            if key in offsets:
                consumed = offsets[key][0]
                retry_queues[retry_topic] = {"0": {"max_offset": self.retry_copies[gi], "consumer_offset": consumed,
                                                   "lag": self.retry_copies[gi] - consumed}}
        return {
            "seed": self.opt.seed, "messages": self.written, "start_ms": self.start_ms, "at_ms": self.at_ms,
            "records": {k: self.kinds[k] for k in ("normal", "delay", "delivered", "send_back", "retry", "dlq")},
            "levels": levels, "groups": groups, "retry_queues": retry_queues,
            "consumer_offsets": {key: {str(q): v for q, v in value.items()} for key, value in offsets.items()},
        }


def generate(directory: Path | str, options: GenerateOptions,
             on_put: Callable[[NewMessage, PutResult], None] | None = None,
             on_progress: Callable[[int], None] | None = None) -> dict:
    """Write a sample store into ``directory`` (new or empty); returns the plan."""
    return SampleGenerator(directory, options, on_put, on_progress).run()
