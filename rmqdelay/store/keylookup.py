"""Messages by key, offline: through the index (as queryMessage finds them) and by scanning
the parts of the commit log the index does not claim.

``query_messages`` answers what the broker's queryMessage answers, then what the client
keeps of it (MQAdminImpl.queryMessage): for a key, messages of the topic whose KEYS hold it;
for a unique key, messages whose UNIQ_KEY is it (other keys of the same hash dropped).

``find_by_key`` is `inspect message --key`: every message whose UNIQ_KEY is the key or whose
KEYS hold it. The index answers for the span of the log it covers, from its oldest file's
beginPhyOffset to its newest file's endPhyOffset; the log before and after that span is
scanned (an index that stops short of the log, e.g. records appended by an older rmqdelay,
must not hide them). A hole inside that span (a broker that ran with messageIndexEnable=false
for a while) is not seen: `inspect index --verify` reports one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.index import LONG_MAX
from rmqdelay.formats.msgid import decode_message_id
from rmqdelay.store.directory import Store
from rmqdelay.store.index import IndexSettings, StoreIndex

_ALL = 0x7FFFFFFF  # no maxNum: every entry of the key


@dataclass(slots=True)
class QueryAnswer:
    topic: str
    messages: list[Message] = field(default_factory=list)
    entries: int = 0  # offsets the index gave (hash collisions and the key's other topics included)
    indexLastUpdateTimestamp: int = 0
    indexLastUpdatePhyoffset: int = 0


def _has_key(msg: Message, key: str) -> bool:
    return key in msg.properties.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR)


def _has_uniq_key(msg: Message, key: str) -> bool:
    return msg.properties.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key


def by_offset_msg_id(store: Store, msg_id: str | None) -> Message | None:
    """The record an offset msgId (what the broker returns; ORIGIN_MESSAGE_ID) names, when it
    is a record of this store stored by the host the id names; else None (another broker's
    id, a record retention removed, not an offset msgId at all)."""
    if not msg_id:
        return None
    try:
        _, _, offset = decode_message_id(msg_id)
        msg = store.message_at(offset)
    except (StoreError, FormatError):
        return None
    return msg if msg.msgId == msg_id.upper() else None


def query_topics(store: Store, topic: str | None) -> list[str]:
    """The topics a look-up goes through: the one given, else every topic with a consume
    queue directory (the index keys are topic#key: a topic must be named to look up)."""
    return [topic] if topic is not None else sorted(store.topics())


def query_messages(store: Store, index: StoreIndex, topic: str, key: str, *, unique: bool = False,
                   max_num: int = 64, begin: int = 0, end: int = LONG_MAX) -> QueryAnswer:
    """DefaultMessageStore.queryMessage for one topic, then the client's filter."""
    result = index.query_offsets(topic, key, max_num, begin, end)
    answer = QueryAnswer(topic, entries=len(result.phyOffsets),
                         indexLastUpdateTimestamp=result.indexLastUpdateTimestamp,
                         indexLastUpdatePhyoffset=result.indexLastUpdatePhyoffset)
    wanted = _has_uniq_key if unique else _has_key
    for offset in sorted(result.phyOffsets):
        try:
            msg = store.message_at(offset)
        except StoreError:
            continue  # an entry past the log (queryMessage skips what it cannot read, too)
        if msg.topic == topic and wanted(msg, key):
            answer.messages.append(msg)
    return answer


@dataclass(slots=True)
class KeyLookup:
    messages: list[Message]
    indexed: bool  # the index answered for the span it covers
    scanned: list[tuple[int, int]]  # [start, end) of the log read record by record


def find_by_key(store: Store, key: str, topic: str | None = None, settings: IndexSettings | None = None,
                advance: Callable[[int], None] | None = None, *, unique: bool = False) -> KeyLookup:
    """Every message whose UNIQ_KEY is ``key`` or whose KEYS hold it (of ``topic`` only,
    when given), in commit log order; ``unique``: only those whose UNIQ_KEY it is."""
    advance = advance or (lambda n: None)
    matches = _has_uniq_key if unique else (lambda msg, k: _has_uniq_key(msg, k) or _has_key(msg, k))
    log = store.commitlog
    log_start = log.min_offset
    log_end = store.end_offset()
    with StoreIndex(store.path, settings) as index:
        coverage = index.coverage
        found: dict[int, Message] = {}
        if coverage is None:
            return KeyLookup(list(_scan(store, key, topic, log_start, log_end, advance, matches)), False,
                             [(log_start, log_end)] if log_end > log_start else [])
        first, last = coverage
        for name in query_topics(store, topic):
            for offset in index.query_offsets(name, key, _ALL).phyOffsets:
                if offset in found:
                    continue
                try:
                    msg = store.message_at(offset)
                except StoreError:
                    continue
                if msg.topic == name and matches(msg, key):
                    found[offset] = msg
    scanned = []
    if log_start < first and _first_record(store, log_start) < first:
        scanned.append((log_start, first))
    tail = _after(store, last)
    if tail is not None and tail < log_end:
        scanned.append((tail, log_end))
    for start, stop in scanned:
        for msg in _scan(store, key, topic, start, stop, advance, matches):
            found[msg.commitLogOffset] = msg
    return KeyLookup([found[o] for o in sorted(found)], True, scanned)


def _first_record(store: Store, start: int) -> int:
    """The offset of the log's first record from ``start``: ``start`` itself in a plain log,
    48 bytes on (behind its entry's header) in a DLedger one."""
    for msg in store.commitlog.records(start):
        return msg.commitLogOffset
    return start


def _after(store: Store, offset: int) -> int | None:
    """The offset of the record after the one at ``offset`` (the index's last)."""
    try:
        msg = store.message_at(offset)
    except StoreError:
        return None  # the index ends past the log: nothing after it to scan
    return msg.commitLogOffset + msg.storeSize


def _scan(store: Store, key: str, topic: str | None, start: int, stop: int,
          advance: Callable[[int], None], matches: Callable[[Message, str], bool]) -> Iterator[Message]:
    done = start
    for msg in store.commitlog.records(start):
        if msg.commitLogOffset >= stop:
            break
        advance(msg.commitLogOffset - done)
        done = msg.commitLogOffset
        if (topic is None or msg.topic == topic) and matches(msg, key):
            yield msg
