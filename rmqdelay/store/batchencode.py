"""put() for many messages at once: putMessage's rewrites a column at a time (batchprops.py
for the properties strings, tags and index keys; put()'s own ``PutEncoder.prepare`` only for
the messages it rewrites), then the records laid out, placed and sealed by compiled loops
(formats/putloops.py) a batch at a time instead of record by record in the interpreter.

``gather`` turns messages into columns (numbers, hosts, bodies, topics, properties, each
kind concatenated); ``lay_out`` makes the bytes of a run of them once the writer has given
them their queue offsets and physical offsets; ``PutBatch`` is what the writer gives back:
per message what put()'s PutResult says, as columns. ``StoreWriter.put_batch`` places them
(writer.py); a test holds the bytes to put()'s, message by message.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

import numpy as np

from rmqdelay.errors import UsageError
from rmqdelay.formats import putloops
from rmqdelay.formats.commitlog import message_size
from rmqdelay.formats.constants import (
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CRC32,
    PROPERTY_DELAY_TIME_LEVEL,
    RMQ_SYS_SCHEDULE_TOPIC,
    STOREHOSTADDRESS_V6_FLAG,
    TRANSACTION_PREPARED_TYPE,
    TRANSACTION_ROLLBACK_TYPE,
    TRANSACTION_TYPE_MASK,
)
from rmqdelay.formats.javahash import tags_code
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.formats.propcrc import CRC32_RESERVED_LEN, crc_digits, reserved_properties
from rmqdelay.formats.properties import delete_property
from rmqdelay.store import batchprops
from rmqdelay.store.encode import PutEncoder, PutResult, java_length

_CRC_DIGITS_LEN = 10
_HEX = np.array([b"%02X" % b for b in range(256)], dtype="S2")  # a byte's two upper-case hex digits


@dataclass(slots=True)
class Gathered:
    """A batch of messages as putMessage stores them, in columns, not yet placed."""

    topics: list[str]
    queue_ids: list[int]
    queue_index: np.ndarray  # int64: which of ``queues`` each message's queue is
    queues: list[tuple[str, int]]  # the distinct (topic, queueId) of the batch
    dispatch: np.ndarray  # bool: gets a unit and a queue offset
    fields: np.ndarray  # (n, putloops.FIELDS) int64; queue and physical offsets still 0
    born: np.ndarray  # the born addresses back to back, and where each message's starts
    born_at: np.ndarray
    stored: np.ndarray  # the store addresses, the same way
    stored_at: np.ndarray
    bodies: np.ndarray
    body_at: np.ndarray
    topic_bytes: np.ndarray  # the batch's distinct topics back to back
    topic_at: np.ndarray  # where each message's topic starts in it, and its length
    topic_len: np.ndarray
    props: np.ndarray
    props_at: np.ndarray
    tags_codes: np.ndarray  # int64, of the units
    index_records: np.ndarray  # int64: the message of each index key (ascending), and its hash
    index_hashes: np.ndarray
    sealed: bool  # the records end with a reserved __CRC32#

    def __len__(self) -> int:
        return len(self.topics)

    @property
    def sizes(self) -> np.ndarray:
        return self.fields[:, putloops.SIZE]

    @property
    def store_timestamps(self) -> np.ndarray:
        return self.fields[:, putloops.STORE_TS]


_BASE_SIZE = message_size(0, 0, 0, 0)  # IPv4 hosts, a one-byte topic length, nothing else
_V6_EXTRA = 12  # an IPv6 host's 16-byte address instead of 4
_first = itemgetter(0)
_second = itemgetter(1)


def _starts(parts: list) -> np.ndarray:
    """Where each of the parts starts when they are put back to back (one more entry: the end)."""
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=at[1:])
    return at


def _buffer(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """The parts back to back, and where each starts (``_starts``)."""
    return np.frombuffer(b"".join(parts), dtype=np.uint8), _starts(parts)


def _strings(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """``_buffer`` of the texts in UTF-8 (undecodable bytes kept as they came: surrogateescape)."""
    joined = "".join(texts)
    data = joined.encode("utf-8", "surrogateescape")
    if len(data) != len(joined):
        return _buffer([t.encode("utf-8", "surrogateescape") for t in texts])
    return np.frombuffer(data, dtype=np.uint8), _starts(texts)  # ASCII: a character is a byte


def _hosts(hosts: list[tuple[bytes, int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray | list[int]]:
    """The addresses back to back and where each starts (``_buffer``), and the ports."""
    n = len(hosts)
    if n and hosts.count(hosts[0]) == n:  # one host for all (a producer's batch, this broker)
        address, port = hosts[0]
        return (np.frombuffer(address * n, dtype=np.uint8), np.arange(n + 1, dtype=np.int64) * len(address),
                np.full(n, port, dtype=np.int64))
    return (*_buffer(list(map(_first, hosts))), list(map(_second, hosts)))


def _same(n: int, values):
    """``values`` as a column takes them: the one value, when a list of ``n`` holds only it
    (a batch's flags, reconsume times, prepared offsets: all 0, as a rule)."""
    return values[0] if type(values) is list and n and values.count(values[0]) == n else values


def _index_of(items: list) -> tuple[list, np.ndarray]:
    """The distinct items in order of appearance, and which of them each item is."""
    if items and items.count(items[0]) == len(items):
        return [items[0]], np.zeros(len(items), dtype=np.int64)
    distinct = list(dict.fromkeys(items))
    position = {item: i for i, item in enumerate(distinct)}
    return distinct, np.fromiter(map(position.__getitem__, items), dtype=np.int64, count=len(items))


def gather(encoder: PutEncoder, news: Sequence) -> Gathered:
    """putMessage's rewrites of every message (NewMessage), as put() does them, in columns. A
    message put() would refuse refuses the batch here, before anything is placed.

    A column at a time: the clock read for each message without a store timestamp, in order;
    the stored properties strings from one template per key set, or the stored string a
    message carries (``propertiesRaw``) as it is; the tagsCode once per distinct TAGS (read
    from the stored bytes for a stored string) and the index keys' hashes (batchprops.py);
    sizes, flags, hosts and magic codes as arrays. Messages put() rewrites (a DELAY in the
    map, SCHEDULE_TOPIC_XXXX itself, a value no template makes) go through put()'s own
    ``PutEncoder.prepare``, one by one."""
    n = len(news)
    fmt = encoder.write_format
    sealed = fmt.propCrc
    topics = [m.topic for m in news]
    queue_ids = [m.queueId for m in news]
    bodies = [m.body for m in news]
    props = [m.properties for m in news]
    raws = [m.propertiesRaw for m in news]
    born = [m.bornHost for m in news]
    store = [m.storeHost for m in news]
    given_ts = [m.storeTimestamp for m in news]
    for topic in set(topics):
        encoder.check_topic(topic)
    clock = encoder.clock
    store_ts = [t if t is not None else clock() for t in given_ts] if None in given_ts else given_ts

    slow: set[int] = set()
    raw_rows: list[int] = []  # put with the stored string they carry (messageTimeup's copies)
    if RMQ_SYS_SCHEDULE_TOPIC in topics:
        slow.update(i for i, t in enumerate(topics) if t == RMQ_SYS_SCHEDULE_TOPIC)
    if raws.count(None) != n:
        # written as it is, unless the map asks for a delay (put() then rewrites the message)
        slow.update(i for i, r in enumerate(raws) if r is not None and PROPERTY_DELAY_TIME_LEVEL in props[i])
        raw_rows = [i for i, r in enumerate(raws) if r is not None and i not in slow]
    if slow or raw_rows:
        others = slow.union(raw_rows)
        stored = batchprops.stored_properties(props, [i for i in range(n) if i not in others], sealed)
    else:
        stored = batchprops.stored_properties(props, None, sealed)
    slow.update(stored.demoted)
    code_of = {tags: tags_code(tags) for tags in dict.fromkeys(stored.tags)}  # a batch has a few tags
    codes = np.fromiter(map(code_of.__getitem__, stored.tags), dtype=np.int64, count=n)
    spans = None
    if stored.texts is None:  # one key set, made as one text: no message left to put()'s rewrite
        props_buf, props_at, spans = stored.data, stored.at, stored.spans
    else:
        texts = stored.texts
        for i in raw_rows:
            texts[i] = reserved_properties(delete_property(raws[i], PROPERTY_CRC32)) if sealed else raws[i]
        for i in sorted(slow):
            p = encoder.prepare(news[i], store_ts[i])
            topics[i], queue_ids[i], texts[i], codes[i] = p.topic, p.queue_id, p.props_raw, p.tags_code
        props_buf, props_at = _strings(texts)
        if raw_rows:
            batchprops.stored_tags_codes(props_buf, props_at, raw_rows, codes)

    body_buf, body_at = _buffer(bodies)
    body_crcs = np.fromiter(map(zlib.crc32, bodies), dtype=np.int64, count=n)
    return _assemble(fmt, topics, queue_ids, codes, props_buf, props_at, body_buf, body_at, body_crcs, _hosts(born),
                     _hosts(store), np.array([m.sysFlag for m in news], dtype=np.int64), [m.flag for m in news],
                     [m.bornTimestamp for m in news], store_ts, [m.reconsumeTimes for m in news],
                     [m.preparedTransactionOffset for m in news], spans)


@dataclass(slots=True)
class StoredCopies:
    """Messages to put with the stored properties string each carries (messageTimeup's copies
    of records read back), as columns: what ``NewMessage`` says of each, its properties
    string back to back with the others (``props[props_at[i]:props_at[i + 1]]``, put as it
    is, as put() puts a ``propertiesRaw``), its body the same way, its hosts' addresses too
    (4 bytes, 16 for IPv6; ``born[born_at[i]:born_at[i + 1]]``) with their ports. Its store
    timestamp is the writer's clock."""

    topics: list[str]
    queue_ids: list[int]
    flag: np.ndarray
    sys_flag: np.ndarray
    born_ts: np.ndarray
    born: np.ndarray
    born_at: np.ndarray
    born_ports: np.ndarray
    stored: np.ndarray
    stored_at: np.ndarray
    store_ports: np.ndarray
    reconsume: np.ndarray
    bodies: np.ndarray
    body_at: np.ndarray
    props: np.ndarray
    props_at: np.ndarray

    def __len__(self) -> int:
        return len(self.topics)

    def head(self, m: int) -> StoredCopies:
        """The first ``m`` messages (their buffers shared)."""
        return StoredCopies(self.topics[:m], self.queue_ids[:m], self.flag[:m], self.sys_flag[:m], self.born_ts[:m],
                            self.born, self.born_at[:m + 1], self.born_ports[:m], self.stored, self.stored_at[:m + 1],
                            self.store_ports[:m], self.reconsume[:m], self.bodies, self.body_at[:m + 1], self.props,
                            self.props_at[:m + 1])


def gather_stored(encoder: PutEncoder, s: StoredCopies) -> Gathered:
    """``gather`` of messages put with the stored properties string each carries (whose map
    asks for no delay): the string written as it is, the tagsCode read from its TAGS. A
    store whose broker appends the CRC property rewrites every string: such copies go
    through ``gather`` (a UsageError here)."""
    if encoder.write_format.propCrc:
        raise UsageError("stored copies put as columns on a store whose records carry __CRC32#")
    n = len(s)
    for topic in set(s.topics):
        encoder.check_topic(topic)
        if topic == RMQ_SYS_SCHEDULE_TOPIC:
            raise UsageError("stored copies put as columns into SCHEDULE_TOPIC_XXXX")
    clock = encoder.clock
    store_ts = [clock() for _ in range(n)]
    codes = np.zeros(n, dtype=np.int64)
    batchprops.stored_tags_codes(s.props, s.props_at, range(n), codes)
    bodies = memoryview(s.bodies)
    at = s.body_at.tolist()
    body_crcs = np.fromiter(map(zlib.crc32, map(bodies.__getitem__, map(slice, at, at[1:]))), dtype=np.int64, count=n)
    return _assemble(encoder.write_format, s.topics, s.queue_ids, codes, s.props, s.props_at, s.bodies, s.body_at,
                     body_crcs, (s.born, s.born_at, s.born_ports), (s.stored, s.stored_at, s.store_ports), s.sys_flag,
                     s.flag, s.born_ts, store_ts, s.reconsume, 0)


def _assemble(fmt, topics: list[str], queue_ids: list[int], codes: np.ndarray, props_buf: np.ndarray,
              props_at: np.ndarray, body_buf: np.ndarray, body_at: np.ndarray, body_crcs: np.ndarray, born: tuple,
              store: tuple, sys_flags: np.ndarray, flag, born_ts, store_ts, reconsume, prepared,
              spans: dict | None = None) -> Gathered:
    """The Gathered of a batch whose stored properties strings, bodies and hosts are known
    (``born``/``store``: addresses back to back, where each starts, the ports; ``spans``: where
    the index keys are in the strings, when known)."""
    n = len(topics)
    topic_names, topic_index = _index_of(topics)
    topic_buf, topic_starts = _buffer([t.encode("utf-8") for t in topic_names])
    topic_at = topic_starts[topic_index]
    topic_len = np.diff(topic_starts)[topic_index]
    v2 = np.array([fmt.autoMessageVersionOnTopicLen and java_length(t) > 127 for t in topic_names],
                  dtype=np.bool_)[topic_index]
    props_len = np.diff(props_at)
    if n and int(props_len.max()) > 32767:
        raise UsageError(f"properties of {int(props_len.max())} bytes; a record holds at most 32767")
    born_buf, born_at, born_ports = born
    stored_buf, stored_at, store_ports = store
    born_v6 = np.diff(born_at) == 16
    store_v6 = np.diff(stored_at) == 16
    flags_v = np.where(born_v6, sys_flags | BORNHOST_V6_FLAG, sys_flags & ~BORNHOST_V6_FLAG)
    flags_v = np.where(store_v6, flags_v | STOREHOSTADDRESS_V6_FLAG, flags_v & ~STOREHOSTADDRESS_V6_FLAG)
    tran = flags_v & TRANSACTION_TYPE_MASK
    dispatch = (tran != TRANSACTION_PREPARED_TYPE) & (tran != TRANSACTION_ROLLBACK_TYPE)

    fields = np.empty((n, putloops.FIELDS), dtype=np.int64)
    fields[:, putloops.SIZE] = (_BASE_SIZE + _V6_EXTRA * born_v6 + _V6_EXTRA * store_v6 + v2 + np.diff(body_at)
                                + topic_len + props_len)
    fields[:, putloops.MAGIC] = np.where(v2, MESSAGE_MAGIC_CODE_V2, MESSAGE_MAGIC_CODE)
    fields[:, putloops.BODY_CRC] = body_crcs & 0x7FFFFFFF
    fields[:, putloops.QUEUE_ID] = queue_ids
    fields[:, putloops.FLAG] = _same(n, flag)
    fields[:, putloops.QUEUE_OFFSET] = 0
    fields[:, putloops.PHYSICAL_OFFSET] = 0
    fields[:, putloops.SYS_FLAG] = flags_v
    fields[:, putloops.BORN_TS] = born_ts
    fields[:, putloops.BORN_PORT] = born_ports
    fields[:, putloops.STORE_TS] = store_ts
    fields[:, putloops.STORE_PORT] = store_ports
    fields[:, putloops.RECONSUME] = _same(n, reconsume)
    fields[:, putloops.PREPARED_OFFSET] = _same(n, prepared)

    # The distinct (topic, queueId) of the batch, and which each message's is.
    qids = fields[:, putloops.QUEUE_ID]
    low = int(qids.min()) if n else 0
    span = int(qids.max()) - low + 1 if n else 1
    keys = topic_index * span + (qids - low)
    if len(topic_names) * span <= 4 * n:  # a table of every key is no bigger than the batch: no sort
        seen = np.zeros(len(topic_names) * span, dtype=np.bool_)
        seen[keys] = True
        distinct = np.flatnonzero(seen)
        queue_index = (np.cumsum(seen) - 1)[keys]
    else:
        distinct, queue_index = np.unique(keys, return_inverse=True)
    queues = [(topic_names[q // span], q % span + low) for q in distinct.tolist()]
    index_records, index_hashes = batchprops.index_hashes(topic_names, topic_index, props_buf, props_at,
                                                          tran != TRANSACTION_ROLLBACK_TYPE, spans)
    return Gathered(topics, queue_ids, queue_index.astype(np.int64).reshape(-1), queues, dispatch, fields, born_buf,
                    born_at, stored_buf, stored_at, body_buf, body_at, topic_buf, topic_at, topic_len, props_buf,
                    props_at, codes, index_records, index_hashes, fmt.propCrc)


def lay_out(g: Gathered, first: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The records ``first`` to ``stop`` of ``g`` back to back (their queue and physical
    offsets already in ``g.fields``), sealed when the broker appends the CRC property; and
    their CRCs (None when not sealed)."""
    fields = g.fields[first:stop]
    sizes = fields[:, putloops.SIZE]
    ends = np.cumsum(sizes)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    putloops.encode_records(out, ends - sizes, fields, g.born, g.born_at[first:stop], g.stored,
                            g.stored_at[first:stop], g.bodies, g.body_at[first:stop + 1], g.topic_bytes,
                            g.topic_at[first:stop], g.topic_len[first:stop], g.props, g.props_at[first:stop + 1])
    if not g.sealed:
        return out, None
    # UtilAll.crc32 of each record but its reserved 20 bytes, once every other byte is final.
    view = memoryview(out)
    starts = (ends - sizes).tolist()
    crcs = np.fromiter((zlib.crc32(view[a:b - CRC32_RESERVED_LEN]) & 0x7FFFFFFF
                        for a, b in zip(starts, ends.tolist())), dtype=np.int64, count=len(starts))
    putloops.seal_crc_digits(out, ends, crcs)
    return out, crcs


def unit_bytes(offsets: np.ndarray, sizes: np.ndarray, tags_codes: np.ndarray) -> bytes:
    """The CqUnits of records, back to back."""
    out = np.empty(20 * len(offsets), dtype=np.uint8)
    putloops.units(out, offsets, sizes, tags_codes)
    return out.tobytes()


class PutBatch:
    """What put_batch did with each message, as columns: put()'s PutResult per message."""

    __slots__ = ("_g", "crcs", "queue_offsets", "commit_log_offsets")

    def __init__(self, gathered: Gathered) -> None:
        self._g = gathered
        self.crcs = np.zeros(len(gathered), dtype=np.int64)
        self.queue_offsets = gathered.fields[:, putloops.QUEUE_OFFSET]
        self.commit_log_offsets = gathered.fields[:, putloops.PHYSICAL_OFFSET]

    def __len__(self) -> int:
        return len(self._g)

    @property
    def topics(self) -> list[str]:
        return self._g.topics

    @property
    def queue_ids(self) -> list[int]:
        return self._g.queue_ids

    @property
    def sizes(self) -> np.ndarray:
        return self._g.sizes

    @property
    def store_timestamps(self) -> np.ndarray:
        return self._g.store_timestamps

    @property
    def tags_codes(self) -> np.ndarray:
        return self._g.tags_codes

    def msg_ids(self) -> list[str]:
        """MessageDecoder.createMessageId of each message (store host and physical offset)."""
        g = self._g
        n = len(g)
        if n and int(g.stored_at[-1]) == 4 * n:  # every store host IPv4: the ids made as one array
            raw = np.empty((n, 16), dtype=np.uint8)
            raw[:, :4] = g.stored[:4 * n].reshape(n, 4)
            raw[:, 4:8] = g.fields[:, putloops.STORE_PORT].astype(">i4").view(np.uint8).reshape(n, 4)
            raw[:, 8:] = self.commit_log_offsets.astype(">i8").view(np.uint8).reshape(n, 8)
            text = _HEX[raw].tobytes().decode("ascii")
            return [text[k:k + 32] for k in range(0, 32 * n, 32)]
        return [create_message_id(*self._store_host(i), offset)
                for i, offset in enumerate(self.commit_log_offsets.tolist())]

    def _store_host(self, i: int) -> tuple[bytes, int]:
        g = self._g
        return g.stored[g.stored_at[i]:g.stored_at[i + 1]].tobytes(), int(g.fields[i, putloops.STORE_PORT])

    def properties_raw(self, i: int) -> str:
        """The properties string message ``i`` was stored with (its CRC digits filled in)."""
        g = self._g
        raw = g.props[g.props_at[i]:g.props_at[i + 1]].tobytes().decode("utf-8", "surrogateescape")
        if not g.sealed:
            return raw
        return raw[:-_CRC_DIGITS_LEN - 1] + crc_digits(int(self.crcs[i])) + raw[-1]

    def result(self, i: int) -> PutResult:
        """put()'s PutResult for message ``i``."""
        g = self._g
        offset = int(self.commit_log_offsets[i])
        host = self._store_host(i)
        return PutResult(g.topics[i], g.queue_ids[i], int(self.queue_offsets[i]), offset, int(g.sizes[i]),
                         int(g.store_timestamps[i]), int(g.tags_codes[i]), create_message_id(host[0], host[1], offset),
                         self.properties_raw(i))

    def results(self) -> list:
        """One PutResult per message, as put() returns it."""
        return [self.result(i) for i in range(len(self))]
