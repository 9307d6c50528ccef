"""The per-message strings of a batch of puts, made a column at a time (batchencode.py).

Stored properties: putMessage stores a message's properties in the iteration order of the
broker's HashMap, which depends on the key set alone. So every distinct key set of a batch
(its *shape*) gets one ``%`` template, its keys in that order (and, for a store whose broker
appends ``__CRC32#``, the reserved property at the end), and each message's string is that
template filled with its values: what ``format_java_order`` (put()'s way) makes of it,
checked by counting separators. A message that is not that simple (a delay rewrite, a
``propertiesRaw``, a value None or holding a separator) is left to put()'s own rewrite.

Index keys and tags: KEYS, UNIQ_KEY (and TAGS of a message put with its stored string) are
found in the stored properties bytes by a compiled loop (putloops.property_spans), as the
broker parses them; IndexService.buildIndex's ``topic#key`` strings are never made: their
String.hashCode goes on from the hash of ``topic#`` over the key's bytes (ASCII keys; any
other batch is hashed as the indexer does).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import itemgetter

import numpy as np

from rmqdelay.formats.constants import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_CRC32,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_SEPARATOR,
    PROPERTY_TAGS,
)
from rmqdelay.formats.constants import PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX as PROPERTY_UNIQ
from rmqdelay.formats.index import key_hashes, message_index_keys
from rmqdelay.formats.javahash import java_string_hash, tags_code
from rmqdelay.formats.properties import java_order
from rmqdelay.formats.propcrc import reserved_properties


class Shape:
    """The stored properties string of messages with one key set."""

    __slots__ = ("simple", "order", "template", "pieces", "piece_bytes", "piece_at", "values", "separators",
                 "any_order")

    def __init__(self, keys: tuple, sealed: bool) -> None:
        # Not simple: DELAY (put() rewrites the message into SCHEDULE_TOPIC_XXXX), __CRC32#
        # (dropped before the broker reserves its own), keys that are no plain text.
        self.simple = all(type(k) is str and NAME_VALUE_SEPARATOR not in k and PROPERTY_SEPARATOR not in k
                          for k in keys) and PROPERTY_DELAY_TIME_LEVEL not in keys and PROPERTY_CRC32 not in keys
        order = self.order = tuple(java_order(dict.fromkeys(keys))) if self.simple else ()
        # No two keys in one HashMap bucket: the order is the same whatever order they came in.
        self.any_order = self.simple and order == tuple(java_order(dict.fromkeys(reversed(keys))))
        text = PROPERTY_SEPARATOR.join(f"{k.replace('%', '%%')}{NAME_VALUE_SEPARATOR}%s" for k in order)
        self.template = reserved_properties(text) if sealed else text
        # The text around the values: before the first, between two, after the last.
        self.pieces = tuple(piece.replace("%%", "%") for piece in self.template.split("%s")) if order else ()
        # The same in UTF-8, back to back, and where each starts (one more entry: the end).
        encoded = [piece.encode("utf-8") for piece in self.pieces]
        self.piece_bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.piece_at = np.cumsum([0, *map(len, encoded)], dtype=np.int64)
        # The values of a message, as a tuple for the template (itemgetter of one key is no tuple).
        self.values = itemgetter(*order) if len(order) > 1 else (lambda p, k=order: (p[k[0]],)) if order else None
        # Every string made from the template has these many of each separator, unless a value
        # held one (or was None, which put() leaves out).
        self.separators = (self.template.count(NAME_VALUE_SEPARATOR), self.template.count(PROPERTY_SEPARATOR))


@lru_cache(maxsize=1024)
def shape(keys: tuple, sealed: bool) -> Shape:
    return Shape(keys, sealed)


@dataclass(slots=True)
class StoredProperties:
    """The properties strings of a batch as stored, and the TAGS of each message (its unit's
    tagsCode). Messages in ``demoted`` are not done (put()'s own rewrite does them); their
    texts are ''."""

    texts: list[str] | None  # per message; or, when None, already encoded:
    data: np.ndarray | None  # every message's UTF-8 bytes back to back,
    at: np.ndarray | None  # where each starts (one more entry: the end)
    tags: Sequence
    demoted: list[int]
    # Where the values of TAGS, KEYS and UNIQ_KEY are in ``data`` (starts, ends; -1 where a
    # message has none), as property_spans finds them, when the strings were made knowing it.
    spans: dict[str, tuple[np.ndarray, np.ndarray]] | None = None


def stored_properties(props: Sequence[dict], rows: list[int] | None, sealed: bool) -> StoredProperties:
    """putMessage's properties strings of the messages ``rows`` (all when None): those of a
    simple key set made from its template, the others (and values no template makes) demoted."""
    n = len(props)
    if rows is None and n:
        done = _uniform(props, sealed)
        if done is not None:
            return done
    rows = range(n) if rows is None else rows
    shapes = list(map(tuple, props))
    texts = [""] * n
    demoted: list[int] = []
    for keys, members in _groups(shapes, rows).items():
        s = shape(keys, sealed)
        if not s.simple:
            demoted += members
            continue
        strings, bad = _fill(s, [props[r] for r in members])
        demoted += (members[b] for b in bad)
        for r, text in zip(members, strings):
            texts[r] = text
    return StoredProperties(texts, None, None, [p.get(PROPERTY_TAGS) for p in props], sorted(demoted))


def _uniform(props: Sequence[dict], sealed: bool) -> StoredProperties | None:
    """``stored_properties`` of messages that all have the first one's keys (in the same order
    when it matters: keys sharing a HashMap bucket) and text values: their values joined once,
    the strings made from the template by a compiled loop (putloops.fill_template), no string
    per message; where TAGS, KEYS and UNIQ_KEY land comes back with them. None for any other
    batch."""
    from rmqdelay.formats import putloops

    n = len(props)
    first = list(props[0])
    s = shape(tuple(first), sealed)
    if not s.simple:
        return None
    if s.values is None:
        if any(props):
            return None
        text = s.template.encode("utf-8")
        return StoredProperties(None, np.frombuffer(text * n, dtype=np.uint8),
                                np.arange(n + 1, dtype=np.int64) * len(text), [None] * n, [])
    k = len(first)
    try:
        if list(chain.from_iterable(props)) == first * n:  # the same keys in the same order (the usual batch)
            values = list(chain.from_iterable(map(dict.values, props)))
            order = np.array([first.index(key) for key in s.order], dtype=np.int64)
        elif list(map(len, props)).count(k) == n and (s.any_order or _same_order(props, tuple(first))):
            values = list(chain.from_iterable(map(s.values, props)))  # every key there (by the count, no other)
            order = np.arange(k, dtype=np.int64)
        else:
            return None
        joined = NAME_VALUE_SEPARATOR.join(values)
    except (KeyError, TypeError):  # another key set, no dict; a value that is no text (None: put() leaves it out)
        return None
    if PROPERTY_SEPARATOR in joined:
        return None
    encoded = np.frombuffer(joined.encode("utf-8", "surrogateescape"), dtype=np.uint8)
    bounds = np.empty(k * n + 1, dtype=np.int64)
    between = np.flatnonzero(encoded == ord(NAME_VALUE_SEPARATOR))
    if len(between) != k * n - 1:  # a value holds the separator
        return None
    bounds[0] = -1
    bounds[1:-1] = between
    bounds[-1] = len(encoded)
    data = np.empty(n * int(s.piece_at[-1]) + len(encoded) - len(between), dtype=np.uint8)
    at = np.empty(n + 1, dtype=np.int64)
    value_starts = np.empty(k * n, dtype=np.int64)
    putloops.fill_template(data, at, s.piece_bytes, s.piece_at, encoded, bounds, order, value_starts)
    lengths = np.diff(bounds) - 1
    spans = {}
    for key in (PROPERTY_TAGS, PROPERTY_KEYS, PROPERTY_UNIQ):
        if key in s.order:
            j = s.order.index(key)
            starts = value_starts[j::k]
            ends = starts + lengths[order[j]::k]
            # An empty value is no value to the broker's parse (properties.property_value).
            empty = starts == ends
            spans[key] = (np.where(empty, -1, starts), np.where(empty, -1, ends))
    tags = values[int(order[s.order.index(PROPERTY_TAGS)])::k] if PROPERTY_TAGS in s.order else [None] * n
    return StoredProperties(None, data, at, tags, [], spans)


def _same_order(props: Sequence[dict], first: tuple) -> bool:
    """Whether every message's keys come in the order ``first`` (of the same key set) does:
    asked once per distinct dict (a producer that sends one map many times)."""
    distinct = dict(zip(map(id, props), props))
    if len(distinct) * 2 > len(props):
        return list(map(tuple, props)).count(first) == len(props)
    return all(tuple(p) == first for p in distinct.values())


def _groups(shapes: Sequence[tuple], rows) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for r in rows:
        members = groups.get(shapes[r])
        if members is None:
            groups[shapes[r]] = [r]
        else:
            members.append(r)
    return groups


def _fill(s: Shape, props: Sequence[dict]) -> tuple[list[str], list[int]]:
    """The template filled for each of ``props``; and the positions of those it is not right for."""
    if s.values is None:
        return [s.template] * len(props), []
    values = list(map(s.values, props))
    strings = list(map(s.template.__mod__, values))
    joined = "".join(strings)
    ones, twos = s.separators
    bad: list[int] = []
    if joined.count(NAME_VALUE_SEPARATOR) != ones * len(strings) or joined.count(PROPERTY_SEPARATOR) != twos * len(strings):
        bad = [i for i, text in enumerate(strings)
               if text.count(NAME_VALUE_SEPARATOR) != ones or text.count(PROPERTY_SEPARATOR) != twos]
    if NAME_VALUE_SEPARATOR + "None" in joined and None in chain.from_iterable(values):
        bad = sorted({*bad, *(i for i, v in enumerate(values) if None in v)})
    return strings, bad


def stored_tags_codes(props: np.ndarray, props_at: np.ndarray, rows: list[int], codes: np.ndarray) -> None:
    """The unit's tagsCode of the messages ``rows`` from the TAGS of their stored properties
    (as put() reads a message it writes with its stored string), into ``codes``."""
    from rmqdelay.formats import putloops

    starts, ends = _spans(props, props_at, PROPERTY_TAGS)
    rows_v = np.array(rows, dtype=np.int64)
    if not putloops.tags_codes(props, starts, ends, rows_v, codes):
        for i in rows:  # a tag that is not ASCII
            codes[i] = tags_code(_text(props, starts[i], ends[i]))


def index_hashes(topics: Sequence[str], topic_index: np.ndarray, props: np.ndarray, props_at: np.ndarray,
                 indexed: np.ndarray, spans: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    """buildIndex's key hashes of the records ``indexed`` (not rolled back), in order, and
    the record each is of: ``topic#UNIQ_KEY`` (when there), then ``topic#k`` per KEYS token,
    read from each record's stored properties (``props[props_at[i]:props_at[i + 1]]``).
    ``topics``: the batch's distinct topics, ``topic_index``: each record's. ``spans``: where
    the values are, when known (StoredProperties.spans); found in the strings otherwise."""
    from rmqdelay.formats import putloops

    n = len(topic_index)
    uniq_starts, uniq_ends = _spans(props, props_at, PROPERTY_UNIQ, spans)
    keys_starts, keys_ends = _spans(props, props_at, PROPERTY_KEYS, spans)
    if all(t.isascii() for t in topics):
        seeds = np.array([java_string_hash(t + "#") & 0xFFFFFFFF for t in topics], dtype=np.int64)[topic_index]
        # a UNIQ_KEY each, and at most one token per two bytes (+1) of KEYS
        bound = 2 * n + int(np.maximum(keys_ends - keys_starts, 0).sum()) // 2
        records = np.empty(bound, dtype=np.int64)
        hashes = np.empty(bound, dtype=np.int64)
        count = putloops.index_key_hashes(indexed, seeds, props, uniq_starts, uniq_ends, keys_starts, keys_ends,
                                          records, hashes)
        if count >= 0:
            return records[:count], hashes[:count]
    # Keys that are not all ASCII: key string by key string, as the indexer hashes them.
    found: list[str] = []
    rows: list[int] = []
    for i in np.flatnonzero(indexed).tolist():
        these = message_index_keys(topics[topic_index[i]], _text(props, keys_starts[i], keys_ends[i]),
                                   _text(props, uniq_starts[i], uniq_ends[i]))
        found += these
        rows += [i] * len(these)
    return np.array(rows, dtype=np.int64), key_hashes(found)


def _spans(props: np.ndarray, props_at: np.ndarray, name: str, known: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
    from rmqdelay.formats import putloops

    n = len(props_at) - 1
    if known is not None:
        return known.get(name) or (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64))
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    needle = np.frombuffer((name + NAME_VALUE_SEPARATOR).encode("utf-8"), dtype=np.uint8)
    putloops.property_spans(props, props_at, needle, starts, ends)
    return starts, ends


def _text(props: np.ndarray, start: int, end: int) -> str | None:
    return None if start < 0 else props[start:end].tobytes().decode("utf-8", "surrogateescape")
