"""put() for many messages at once: putMessage's rewrites per message (``PutEncoder.prepare``,
the same as put()), then the records laid out, placed and sealed by compiled loops
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

import numpy as np

from rmqdelay.formats import putloops
from rmqdelay.formats.msgid import create_message_id
from rmqdelay.formats.propcrc import CRC32_RESERVED_LEN, crc_digits
from rmqdelay.store.encode import PutEncoder, PutResult

_CRC_DIGITS_LEN = 10


@dataclass(slots=True)
class Gathered:
    """A batch of messages as putMessage stores them, in columns, not yet placed."""

    topics: list[str]
    queue_ids: list[int]
    queue_index: np.ndarray  # int64: which of ``queues`` each message's queue is
    queues: list[tuple[str, int]]  # the distinct (topic, queueId) of the batch
    dispatch: np.ndarray  # bool: gets a unit and a queue offset
    fields: np.ndarray  # (n, putloops.FIELDS) int64; queue and physical offsets still 0
    hosts: np.ndarray
    host_at: np.ndarray
    bodies: np.ndarray
    body_at: np.ndarray
    topic_bytes: np.ndarray
    topic_at: np.ndarray
    props: np.ndarray
    props_at: np.ndarray
    props_raw: list[str]  # as stored, the CRC digits (when sealed) still reserved
    tags_codes: np.ndarray  # int64, of the units
    keys: list[str | None]  # KEYS and UNIQ_KEY as the index reads them
    uniqs: list[str | None]
    store_hosts: list[tuple[bytes, int]]
    sealed: bool  # the records end with a reserved __CRC32#

    def __len__(self) -> int:
        return len(self.topics)

    @property
    def sizes(self) -> np.ndarray:
        return self.fields[:, putloops.SIZE]

    @property
    def store_timestamps(self) -> np.ndarray:
        return self.fields[:, putloops.STORE_TS]


def _buffer(parts: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The parts back to back, and where each starts (one more entry: the end)."""
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=at[1:])
    return np.frombuffer(b"".join(parts), dtype=np.uint8), at


def gather(encoder: PutEncoder, news: Sequence) -> Gathered:
    """putMessage's rewrites of every message (NewMessage), as put() does them, in columns. A
    message put() would refuse refuses the batch here, before anything is placed."""
    prepare = encoder.prepare
    n = len(news)
    values: list[int] = []
    hosts: list[bytes] = []
    bodies, topic_bytes, props = [], [], []
    topics, queue_ids, props_raw, codes, keys, uniqs, store_hosts = [], [], [], [], [], [], []
    dispatch = np.zeros(n, dtype=np.bool_)
    queue_index = np.zeros(n, dtype=np.int64)
    queues: dict[tuple[str, int], int] = {}
    crc32 = zlib.crc32
    for i, new in enumerate(news):
        p = prepare(new)
        born, store = new.bornHost, new.storeHost
        values += (p.size, p.magic, crc32(new.body) & 0x7FFFFFFF, p.queue_id, new.flag, 0, 0, p.sys_flag,
                   new.bornTimestamp, born[1], p.store_ts, store[1], new.reconsumeTimes,
                   new.preparedTransactionOffset)
        hosts += (born[0], store[0])
        bodies.append(new.body)
        topic_bytes.append(p.topic_bytes)
        props.append(p.props_bytes)
        topics.append(p.topic)
        queue_ids.append(p.queue_id)
        props_raw.append(p.props_raw)
        codes.append(p.tags_code)
        keys.append(p.keys)
        uniqs.append(p.uniq)
        store_hosts.append(store)
        if p.dispatch:
            dispatch[i] = True
            key = (p.topic, p.queue_id)
            index = queues.get(key)
            if index is None:
                index = queues[key] = len(queues)
            queue_index[i] = index
    fields = np.array(values, dtype=np.int64).reshape(n, putloops.FIELDS)
    host_buf, host_at = _buffer(hosts)
    body_buf, body_at = _buffer(bodies)
    topic_buf, topic_at = _buffer(topic_bytes)
    props_buf, props_at = _buffer(props)
    return Gathered(topics, queue_ids, queue_index, list(queues), dispatch, fields, host_buf, host_at[::2].copy(),
                    body_buf, body_at, topic_buf, topic_at, props_buf, props_at, props_raw,
                    np.array(codes, dtype=np.int64), keys, uniqs, store_hosts, encoder.write_format.propCrc)


def lay_out(g: Gathered, first: int, stop: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The records ``first`` to ``stop`` of ``g`` back to back (their queue and physical
    offsets already in ``g.fields``), sealed when the broker appends the CRC property; and
    their CRCs (None when not sealed)."""
    fields = g.fields[first:stop]
    sizes = fields[:, putloops.SIZE]
    ends = np.cumsum(sizes)
    out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    putloops.encode_records(out, ends - sizes, fields, g.hosts, g.host_at[first:stop], g.bodies,
                            g.body_at[first:stop + 1], g.topic_bytes, g.topic_at[first:stop + 1], g.props,
                            g.props_at[first:stop + 1])
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
        return [create_message_id(host[0], host[1], offset)
                for host, offset in zip(self._g.store_hosts, self.commit_log_offsets.tolist())]

    def properties_raw(self, i: int) -> str:
        """The properties string message ``i`` was stored with (its CRC digits filled in)."""
        raw = self._g.props_raw[i]
        if not self._g.sealed:
            return raw
        return raw[:-_CRC_DIGITS_LEN - 1] + crc_digits(int(self.crcs[i])) + raw[-1]

    def result(self, i: int) -> PutResult:
        """put()'s PutResult for message ``i``."""
        g = self._g
        offset = int(self.commit_log_offsets[i])
        host = g.store_hosts[i]
        return PutResult(g.topics[i], g.queue_ids[i], int(self.queue_offsets[i]), offset, int(g.sizes[i]),
                         int(g.store_timestamps[i]), int(g.tags_codes[i]), create_message_id(host[0], host[1], offset),
                         self.properties_raw(i))

    def results(self) -> list:
        """One PutResult per message, as put() returns it."""
        return [self.result(i) for i in range(len(self))]
