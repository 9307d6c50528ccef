"""`rmqdelay samples generate --timer`: a 5.x store with timer traffic beside the ordinary and
delay-level traffic of the sample generator (generate.py), as a 5.3.3 broker would have left it.

What is added to the generator's timeline (every time from the seed):
- a share of the producers' messages are timer messages (``TIMER_DELIVER_MS``), parked by the
  put hook (timer/transform.py) in ``rmq_sys_wheel_timer`` queue 0 and enqueued at once by the
  timer (timerstore.TimerStoreBuilder: unit, slot, roll placement). Deliver times are near
  (seconds), minutes, hours, far (beyond the roll window, 2 days by default: ROLL units), a
  shared instant (many messages in one millisecond, so one slot) and exact seconds (a
  TIMER_OUT_MS one precision earlier);
- some are recalled a little later (the recall's cancellation marker, in the same slot);
- the timer reads each occupied slot once the write clock is past it (a second after the
  slot, plus a few ms): cancelled targets are dropped, ROLL units re-put to
  ``rmq_sys_wheel_timer`` with TIMER_ROLL_TIMES and enqueued again, the others delivered to
  their real topic and queue (timer/convert.py: TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS); the
  timer metrics follow each step;
- when the run stops, the timer store is written: timer log, wheel, timercheck (the read
  clock at the first slot not read yet) and timermetrics.

A slot's outputs are written together, so the count of records may end a little past N.
plan.json gets a ``timer`` section (see ``TimerSampleGenerator.timer_plan``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from math import log
from operator import itemgetter
from pathlib import Path

from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    NAME_VALUE_SEPARATOR,
    PROPERTY_CLUSTER,
    PROPERTY_KEYS,
    PROPERTY_REAL_QUEUE_ID,
    PROPERTY_REAL_TOPIC,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
    PROPERTY_TIMER_DELIVER_MS,
    PROPERTY_TIMER_DEQUEUE_MS,
    PROPERTY_TIMER_ENQUEUE_MS,
    PROPERTY_TIMER_OUT_MS,
    PROPERTY_WAIT_STORE_MSG_OK,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
    TIMER_MAGIC_DELETE,
    TIMER_MAGIC_ROLL,
)
from rmqdelay.formats.constants import (
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ,
)
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.properties import parse_properties
from rmqdelay.producer import DEFAULT_CLUSTER, broker_message, client_properties
from rmqdelay.store.brokerconfig import add_topics
from rmqdelay.store.writeformat import FORMAT_5X
from rmqdelay.store.writer import NewMessage, PutResult
from rmqdelay.timer.config import TimerConfig, timer_config
from rmqdelay.timer.convert import timer_output
from rmqdelay.timer.transform import (
    DEFAULT_MAP_CAPACITY,
    recall_message,
    recall_timestamp,
    timer_out_ms,
    transform_timer_message,
)

from .generate import GenerateOptions, SampleGenerator
from .records import HEAD_V6, Content, properties_part
from .timerstore import TimerStoreBuilder
from .traffic import STORE_HOST, TOPICS, USER_KEYS

# Event kinds in the heap, after the generator's own (deliver, send-back).
_TIMER_SLOT = 2
_RECALL = 3

PRODUCER_GROUP = "PID_TIMER_SAMPLES"
# Kinds of deliver time, by share of the timer messages: (name, share).
DELAY_KINDS = (("seconds", 0.30), ("minutes", 0.22), ("hours", 0.18), ("far", 0.12), ("shared_ms", 0.12),
               ("exact_second", 0.06))
_KIND_CUMULATIVE = [sum(share for _, share in DELAY_KINDS[:i + 1]) for i in range(len(DELAY_KINDS) - 1)]
SHARED_MAX = 40  # up to this many (and at least 2) shared_ms messages share one deliver millisecond


@dataclass
class TimerOptions:
    share: float = 0.4  # share of the producers' messages that are timer messages
    cancel_share: float = 0.06  # share of the timer messages recalled (those not rolled when sent)
    config: TimerConfig | None = None  # the broker's timer settings (default: 5.3.3's)


class _TimerLayout:
    """A producer's timer message of one topic, with or without TAGS: the stored properties of
    its parked record and of its delivered copy as %-templates over the message's values, in
    the order the 5.3.3 broker writes them. The orders come from running the put hook
    (transform.py) and the dequeue's convert (convert.py) once on stand-in values: a HashMap's
    order depends on its keys and their insertion order, never on the values."""

    __slots__ = ("parked", "pick_parked", "delivered", "pick_delivered")
    NAMES_TAIL = (PROPERTY_TIMER_DELIVER_MS, PROPERTY_UNIQ, PROPERTY_CLUSTER, PROPERTY_TIMER_OUT_MS,
                  PROPERTY_REAL_TOPIC, PROPERTY_REAL_QUEUE_ID, PROPERTY_TIMER_ENQUEUE_MS, PROPERTY_TIMER_DEQUEUE_MS)

    def __init__(self, topic: str, tagged: bool, config: TimerConfig) -> None:
        user = USER_KEYS[topic]
        names = (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_WAIT_STORE_MSG_OK, *user, *self.NAMES_TAIL)
        position = {name: i for i, name in enumerate(names)}
        client = client_properties(PROPERTY_TAGS if tagged else None, PROPERTY_KEYS, {k: k for k in user}, 0,
                                   PROPERTY_UNIQ, timer=(PROPERTY_TIMER_DELIVER_MS, str(config.precisionMs + 1)))
        new = broker_message(topic, 0, b"x", client, born_timestamp=0, born_host=STORE_HOST, store_host=STORE_HOST,
                             broker5x=True)
        parked = transform_timer_message(new, config, 0).message
        msg = Message(0, MESSAGE_MAGIC_CODE, 0, 0, 0, 0, 0, 0, 0, STORE_HOST[0], STORE_HOST[1], 0, STORE_HOST[0],
                      STORE_HOST[1], 0, 0, b"x", RMQ_SYS_WHEEL_TIMER_TOPIC, parked.propertiesRaw,
                      parse_properties(parked.propertiesRaw))
        delivered = timer_output(msg, 1, False, 2)
        for attr, raw in (("parked", parked.propertiesRaw), ("delivered", delivered.propertiesRaw)):
            order = tuple(parse_properties(raw))
            setattr(self, attr, "".join(f"{name}{NAME_VALUE_SEPARATOR}%s{PROPERTY_SEPARATOR}" for name in order))
            setattr(self, "pick_" + attr, itemgetter(*(position[name] for name in order)))


class _Parked:
    """A timer message in rmq_sys_wheel_timer (as parked, as re-put by a roll, or a recall's
    marker): what the dequeue needs to put its output. ``layout`` and ``values`` (a producer's
    message as parked) let the delivered copy be formatted from a template."""

    __slots__ = ("key", "topic", "qid", "c", "offset", "size", "store_ts", "write_ms", "out_ms", "layout", "values")

    def __init__(self, key: str, topic: str, qid: int, c: Content, offset: int, size: int, store_ts: int,
                 out_ms: int, layout: _TimerLayout | None = None, values: tuple | None = None) -> None:
        self.key = key
        self.topic = topic
        self.qid = qid
        self.c = c
        self.offset = offset
        self.size = size
        self.store_ts = store_ts
        self.write_ms = 0
        self.out_ms = out_ms
        self.layout = layout
        self.values = values

    def message(self) -> Message:
        """The record as the timer reads it back (convert.timer_output's input)."""
        c = self.c
        return Message(self.size, MESSAGE_MAGIC_CODE, c.crc, 0, 0, 0, self.offset, c.sys_flag, c.born_ts,
                       c.born_addr, c.born_port, self.store_ts, STORE_HOST[0], STORE_HOST[1], c.reconsume, 0, c.body,
                       RMQ_SYS_WHEEL_TIMER_TOPIC, c.raw, parse_properties(c.raw))


class TimerSampleGenerator(SampleGenerator):
    """The sample generator with a 5.x broker's timer: ``run()`` returns the plan."""

    write_format = FORMAT_5X
    broker5x = True

    def __init__(self, directory: Path | str, options: GenerateOptions, timer: TimerOptions | None = None,
                 on_put: Callable[[NewMessage, PutResult], None] | None = None,
                 on_progress: Callable[[int], None] | None = None) -> None:
        super().__init__(directory, options, on_put, on_progress)
        self.topt = timer or TimerOptions()
        self.tconfig = self.topt.config or timer_config()
        self.precision = self.tconfig.precisionMs
        self.window_ms = self.tconfig.rollWindowMs
        self.max_delay_ms = self.tconfig.maxDelaySec * 1000
        self.timer = TimerStoreBuilder(self.tconfig)
        self.slot_events: set[int] = set()  # slots with a read event in the heap
        self.timer_pending: dict[str, tuple[str, int, bool]] = {}  # key -> (topic, qid, rolled now)
        self.recalls_pending: set[str] = set()  # keys whose marker sits in the wheel, not read yet
        self.timer_counts: Counter[str] = Counter()
        self.shared: Counter[int] = Counter()  # deliver ms of the shared kind -> messages
        self.hot = (0, 0)  # the shared deliver millisecond, how many more take it
        self.timer_layouts = {(t.name, tagged): _TimerLayout(t.name, tagged, self.tconfig)
                              for t in TOPICS for tagged in (True, False)}

    # -- the timeline -------------------------------------------------------------------------
    def _handlers(self) -> tuple:
        return self._deliver, self._send_back, self._timer_slot, self._recall

    def _original(self, t: int) -> int:
        if self.rnd() < self.topt.share:
            return self._timer_original(t)
        return super()._original(t)

    def _put(self, new: NewMessage) -> PutResult:
        result = self.writer.put(new)
        self.written += 1
        if self.on_put is not None:
            self.on_put(new, result)
        return result

    def _deliver_ms(self, t: int) -> tuple[str, int]:
        """A kind of deliver time and the time, for a message stored at ``t``."""
        rnd = self.rnd
        kind = DELAY_KINDS[bisect_right(_KIND_CUMULATIVE, rnd())][0]
        if kind == "seconds":
            return kind, t + 1_000 + int(rnd() * 59_000)
        if kind == "minutes":
            return kind, t + 60_000 + int(rnd() * 3_540_000)
        if kind == "hours":
            return kind, t + 3_600_000 + int(rnd() * 11 * 3_600_000)
        if kind == "far":  # beyond the roll window, within timerMaxDelaySec
            low = self.window_ms + 3 * self.precision  # its re-put still ahead of the clock
            span = max(self.max_delay_ms - low - 60_000, 1)
            return kind, t + low + int(rnd() * span)
        if kind == "shared_ms":  # the next few of this kind share one deliver millisecond
            hot, left = self.hot
            if left <= 0 or hot - t < 2_000:
                hot, left = t + 20_000 + int(rnd() * 3 * 3_600_000), 2 + int(rnd() * SHARED_MAX)
            self.hot = (hot, left - 1)
            return kind, hot
        return kind, (t + 2_000 + int(rnd() * 600_000)) // 1000 * 1000  # exact_second

    def _timer_original(self, t: int) -> int:
        """A producer's timer message stored at ``t``, parked as the put hook parks it and
        enqueued by the timer; a recall planned for some. Returns the next message's time.

        The stored properties come from the layout's template; with ``on_put`` set (tests) the
        message goes through the put hook and the writer's put instead, the same bytes."""
        rnd = self.rnd
        spec = TOPICS[bisect_right(self.topic_cumulative, rnd())]
        queue_id = int(rnd() * spec.queues)
        pi = int(rnd() * len(self.producers))
        producer = self.producers[pi]
        born = t - 1 - int(-log(1.0 - rnd()) / 0.1)
        self.serial += 1
        serial = self.serial
        user = self._user_values(spec, serial)
        tag = spec.tags[int(rnd() * len(spec.tags))]
        keys = f"{spec.key_prefix}{serial}"
        uniq = producer.uniq.create(born)
        bi = int(rnd() * len(self.bodies))
        kind, deliver = self._deliver_ms(t)
        out = timer_out_ms(deliver, self.precision)
        layout = self.timer_layouts[(spec.name, tag is not None)]
        values = (tag, keys, "true", *user, str(deliver), uniq, DEFAULT_CLUSTER, str(out), spec.name, str(queue_id))
        head = self.heads[pi]
        tag_code = self.tag_codes[tag] if tag else 0
        body = self.bodies[bi]
        if self.on_put is None:
            raw = layout.parked % layout.pick_parked(values + ("", ""))
            c = Content(raw, properties_part(raw), body, self.body_crcs[bi], head, born, *producer.host,
                         BORNHOST_V6_FLAG if head is HEAD_V6 else 0, 0, tag_code, keys, uniq)
            _qoff, offset, size = self._append(c, RMQ_SYS_WHEEL_TIMER_TOPIC, 0, t, tag_code)
        else:
            client = client_properties(tag, keys, dict(zip(USER_KEYS[spec.name], user)), 0, uniq,
                                       timer=(PROPERTY_TIMER_DELIVER_MS, str(deliver)))
            new = broker_message(spec.name, queue_id, body, client, born_timestamp=born, born_host=producer.host,
                                 store_host=STORE_HOST, store_timestamp=t, broker5x=True)
            hook = transform_timer_message(new, self.tconfig, t)
            result = self._put(hook.message)
            c = Content(result.propertiesRaw, b"", body, self.body_crcs[bi], head, born, *producer.host,
                         BORNHOST_V6_FLAG if head is HEAD_V6 else 0, 0, tag_code, keys, uniq)
            offset, size = result.commitLogOffset, result.storeSize
        key = f"{spec.name}+{uniq}"
        parked = _Parked(key, spec.name, queue_id, c, offset, size, t, out, layout, values)
        rolled = self._enqueue(t, parked, False)
        self.timer_pending[key] = (spec.name, queue_id, rolled)
        self.timer_counts["parked"] += 1
        self.timer_counts[kind] += 1
        if kind == "shared_ms":
            self.shared[deliver] += 1
        if not rolled and deliver - t > 2_000 and rnd() < self.topt.cancel_share:
            # The recall reaches the broker before the slot is due: its marker goes to the same slot.
            recall_at = t + 1 + int(rnd() * min(out - t - 1_000, 600_000))
            self._push(recall_at, _RECALL, out, parked, None)
        return t + int(-log(1.0 - rnd()) / self.gap_rate)

    def _enqueue(self, t: int, parked: _Parked, delete: bool) -> bool:
        """doEnqueue at store time ``t`` (the write clock floored); plans the slot's read.
        Returns whether the unit is a ROLL unit."""
        write_ms = t - t % self.precision
        parked.write_ms = write_ms
        slot, magic = self.timer.enqueue(write_ms, parked.out_ms, parked.offset, parked.size, parked.topic, delete,
                                         parked)
        if slot not in self.slot_events:
            self.slot_events.add(slot)
            # Read once the write clock is past the slot: a second later, a few ms into it.
            self._push(slot + self.precision + int(self.rnd() * 40), _TIMER_SLOT, slot, None, None)
        return bool(magic & TIMER_MAGIC_ROLL)

    def _recall(self, t: int, out_ms: int, target: _Parked, _chain) -> None:
        """RecallMessageProcessor: the cancellation marker, parked in the target's slot."""
        host = (target.c.born_addr, target.c.born_port)
        marker = recall_message(target.topic, target.c.uniq, recall_timestamp(out_ms), PRODUCER_GROUP, t,
                                born_host=host, store_host=STORE_HOST, config=self.tconfig)
        hook = transform_timer_message(marker, self.tconfig, t, map_capacity=DEFAULT_MAP_CAPACITY)
        result = self._put(hook.message)
        c = target.c._replace(raw=result.propertiesRaw, props_part=b"", body=b"0", born_ts=t)
        parked = _Parked(target.key, target.topic, 0, c, result.commitLogOffset, result.storeSize, t, hook.timerOutMs)
        self._enqueue(t, parked, True)
        self.recalls_pending.add(target.key)
        self.timer_counts["recalls"] += 1

    def _timer_slot(self, t: int, slot: int, _rec, _chain) -> None:
        """The dequeue of one slot at ``t``: deletes first, then every other unit in append
        order: dropped (cancelled), re-put (ROLL) or delivered to its real topic and queue."""
        self.slot_events.discard(slot)
        units = self.timer.dequeue(slot)
        dead = {p.key for magic, p in units if magic & TIMER_MAGIC_DELETE}
        counts = self.timer_counts
        for magic, p in units:
            if magic & TIMER_MAGIC_DELETE:
                self.recalls_pending.discard(p.key)
                continue
            if p.key in dead:
                counts["cancelled"] += 1
                del self.timer_pending[p.key]
                continue
            self.timer.delivered(p.topic)
            if magic & TIMER_MAGIC_ROLL:
                new = timer_output(p.message(), p.write_ms, True, t)
                new.storeTimestamp = t
                result = self._put(new)
                counts["rolled"] += 1
                again = _Parked(p.key, p.topic, p.qid, p.c._replace(raw=result.propertiesRaw), result.commitLogOffset,
                                result.storeSize, t, p.out_ms)
                self.timer_pending[p.key] = (p.topic, p.qid, self._enqueue(t, again, False))
                continue
            if p.layout is not None and self.on_put is None:
                layout = p.layout
                raw = layout.delivered % layout.pick_delivered(p.values + (str(p.write_ms), str(t)))
                c = p.c._replace(raw=raw, props_part=properties_part(raw))
                self._append(c, p.topic, p.qid, t, c.tags_code)
            else:
                new = timer_output(p.message(), p.write_ms, False, t)
                new.storeTimestamp = t
                self._put(new)
            counts["delivered"] += 1
            del self.timer_pending[p.key]

    # -- the files ----------------------------------------------------------------------------
    def read_clock(self) -> int:
        """lastReadTimeMs: the first slot not read by ``at_ms`` (an occupied slot whose read is
        still ahead, else the write clock)."""
        now = self.at_ms - self.at_ms % self.precision
        due = [s for s in self.slot_events if s < now]
        return min(due) if due else now

    def _after_log(self) -> None:
        self.timer.write(self.dir, self.read_clock(), self.at_ms)

    def _delay_offsets_version(self) -> DataVersion:
        """5.x writes delayOffset.json with a dataVersion (counter: one step per 200 offset updates,
        delayOffsetUpdateVersionStep; one update per delivery here)."""
        delivered = sum(self.level_delivered)
        return DataVersion(delivered // 200, 0, self.at_ms)

    def _write_config(self) -> None:
        super()._write_config()
        add_topics(self.dir, {RMQ_SYS_WHEEL_TIMER_TOPIC: 1}, self.at_ms)

    def timer_plan(self) -> dict:
        """plan.json's ``timer``: what the timeline did to the timer messages, known by construction.

        - ``parked``: timer messages the producers sent (each parked once in rmq_sys_wheel_timer);
          ``kinds``: of their deliver times (seconds, minutes, hours, far: beyond the roll
          window, shared_ms: sharing one millisecond, exact_second);
        - ``delivered``: delivered to their real topic by the timer before ``at_ms``;
          ``cancelled``: dropped by the dequeue for a recall in their slot; ``recalls``:
          cancellation markers put; ``rolled``: ROLL re-puts written;
        - ``pending``: parked messages neither delivered nor cancelled yet (parked =
          delivered + cancelled + pending); ``pending_cancelled``: pending ones whose recall's
          marker waits in their slot (a run must skip them); ``pending_rolled``: pending ones
          whose unit now is a ROLL unit; ``expected_deliveries``: pending - pending_cancelled,
          and ``expected_by_queue`` {"topic": {"qid": n}}: what delivering everything puts;
        - ``shared_ms_max``: the most messages sharing one deliver millisecond;
        - ``read_ms`` (timercheck's lastReadTimeMs), ``units`` (timer log units),
          ``queue_entries`` (rmq_sys_wheel_timer queue 0 entries, all enqueued).
        """
        c = self.timer_counts
        pending_cancelled = sum(1 for key in self.timer_pending if key in self.recalls_pending)
        by_queue: dict[str, dict[str, int]] = {}
        for key, (topic, qid, _rolled) in self.timer_pending.items():
            if key not in self.recalls_pending:
                queues = by_queue.setdefault(topic, {})
                queues[str(qid)] = queues.get(str(qid), 0) + 1
        return {
            "parked": c["parked"], "kinds": {name: c[name] for name, _ in DELAY_KINDS},
            "delivered": c["delivered"], "cancelled": c["cancelled"], "recalls": c["recalls"], "rolled": c["rolled"],
            "pending": len(self.timer_pending), "pending_cancelled": pending_cancelled,
            "pending_rolled": sum(1 for _t, _q, rolled in self.timer_pending.values() if rolled),
            "expected_deliveries": len(self.timer_pending) - pending_cancelled,
            "expected_by_queue": {t: dict(sorted(q.items(), key=lambda kv: int(kv[0])))
                                  for t, q in sorted(by_queue.items())},
            "shared_ms_max": max(self.shared.values(), default=0),
            "read_ms": self.read_clock(), "units": self.timer.units, "queue_entries": self.timer.enqueued,
        }

    def build_plan(self) -> dict:
        plan = super().build_plan()
        plan["timer"] = self.timer_plan()
        return plan


def generate_timer(directory: Path | str, options: GenerateOptions, timer: TimerOptions | None = None,
                   on_put: Callable[[NewMessage, PutResult], None] | None = None,
                   on_progress: Callable[[int], None] | None = None) -> dict:
    """Write a 5.x sample store with timer traffic into ``directory`` (new or empty); returns the plan."""
    return TimerSampleGenerator(directory, options, timer, on_put, on_progress).run()


__all__ = ["TimerOptions", "TimerSampleGenerator", "generate_timer"]
