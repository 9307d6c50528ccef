"""The per-message strings of a batch of puts, made a column at a time (batchencode.py).

Stored properties: putMessage stores a message's properties in the iteration order of the
broker's HashMap, which depends on the key set alone. So every distinct key set of a batch
(its *shape*) gets one ``%`` template, its keys in that order (and, for a store whose broker
appends ``__CRC32#``, the reserved property at the end), and each message's string is that
template filled with its values: what ``format_java_order`` (put()'s way) makes of it,
checked by counting separators. A message that is not that simple (a delay rewrite, a
``propertiesRaw``, a value None or holding a separator) is left to put()'s own rewrite.

Index keys: IndexService.buildIndex's ``topic#key`` strings are never made; their
String.hashCode goes on from the hash of ``topic#`` over the key's bytes, in a compiled loop
(putloops.index_key_hashes), for ASCII keys; any other batch is hashed as the indexer does.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from operator import itemgetter

import numpy as np

from rmqdelay.formats.constants import (
    NAME_VALUE_SEPARATOR,
    PROPERTY_CRC32,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_SEPARATOR,
)
from rmqdelay.formats.index import key_hashes, message_index_keys
from rmqdelay.formats.javahash import java_string_hash
from rmqdelay.formats.properties import java_order
from rmqdelay.formats.propcrc import reserved_properties


class Shape:
    """The stored properties string of messages with one key set."""

    __slots__ = ("simple", "template", "values", "separators", "any_order")

    def __init__(self, keys: tuple, sealed: bool) -> None:
        # Not simple: DELAY (put() rewrites the message into SCHEDULE_TOPIC_XXXX), __CRC32#
        # (dropped before the broker reserves its own), keys that are no plain text.
        self.simple = all(type(k) is str and NAME_VALUE_SEPARATOR not in k and PROPERTY_SEPARATOR not in k
                          for k in keys) and PROPERTY_DELAY_TIME_LEVEL not in keys and PROPERTY_CRC32 not in keys
        order = tuple(java_order(dict.fromkeys(keys))) if self.simple else ()
        # No two keys in one HashMap bucket: the order is the same whatever order they came in.
        self.any_order = self.simple and order == tuple(java_order(dict.fromkeys(reversed(keys))))
        text = PROPERTY_SEPARATOR.join(f"{k.replace('%', '%%')}{NAME_VALUE_SEPARATOR}%s" for k in order)
        self.template = reserved_properties(text) if sealed else text
        # The values of a message, as a tuple for the template (itemgetter of one key is no tuple).
        self.values = itemgetter(*order) if len(order) > 1 else (lambda p, k=order: (p[k[0]],)) if order else None
        # Every string made from the template has these many of each separator, unless a value
        # held one (or was None, which put() leaves out).
        self.separators = (self.template.count(NAME_VALUE_SEPARATOR), self.template.count(PROPERTY_SEPARATOR))


@lru_cache(maxsize=1024)
def shape(keys: tuple, sealed: bool) -> Shape:
    return Shape(keys, sealed)


def shapes(props: Sequence[dict]) -> tuple[list[tuple], list | None]:
    """The key set of each message's properties (as a tuple, in the dict's order); and, when
    all messages have the first one's keys and its order cannot differ between them, their
    values in its template's order (found on the way: no tuple of keys made per message)."""
    n = len(props)
    if not n:
        return [], None
    first = tuple(props[0])
    s = shape(first, False)
    if s.any_order and list(map(len, props)).count(len(first)) == n:
        if s.values is None:
            return [first] * n, None
        try:
            return [first] * n, list(map(s.values, props))  # every key there, and no other
        except KeyError:
            pass
    return list(map(tuple, props)), None


def stored_properties(props: Sequence[dict], shapes: Sequence[tuple], rows: list[int] | None,
                      sealed: bool, values: list | None = None) -> tuple[list[str], list[int]]:
    """The stored properties strings of ``props[i]`` for the rows (all when None) whose shapes
    are simple, aligned with them; and the rows these strings are not right for (a value None
    or holding a separator): those get put()'s own rewrite instead, their strings here ''.
    ``values``: what ``shapes`` found, when it did."""
    if rows is None:
        groups = {shapes[0]: None} if values is not None or len(set(shapes)) == 1 \
            else _groups(shapes, range(len(shapes)))
        count = len(shapes)
    else:
        groups = _groups(shapes, rows)
        count = len(rows)
    if len(groups) == 1 and None in groups.values():
        keys = next(iter(groups))
        return _fill(shape(keys, sealed), props, values)
    out: list[str] = [""] * count
    demoted: list[int] = []
    position = {r: i for i, r in enumerate(rows)} if rows is not None else None
    for keys, members in groups.items():
        strings, bad = _fill(shape(keys, sealed), [props[r] for r in members])
        demoted.extend(members[b] for b in bad)
        for r, s in zip(members, strings):
            out[r if position is None else position[r]] = s
    return out, sorted(demoted)


def _groups(shapes: Sequence[tuple], rows) -> dict[tuple, list[int]]:
    groups: dict[tuple, list[int]] = {}
    for r in rows:
        members = groups.get(shapes[r])
        if members is None:
            groups[shapes[r]] = [r]
        else:
            members.append(r)
    return groups


def _fill(s: Shape, props: Sequence[dict], values: list | None = None) -> tuple[list[str], list[int]]:
    """The template filled for each of ``props``; and the positions of those it is not right for."""
    if s.values is None:
        return [s.template] * len(props), []
    if values is None:
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


def index_hashes(topics: Sequence[str], keys: Sequence[str | None], uniqs: Sequence[str | None],
                 indexed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """buildIndex's key hashes of the records ``indexed`` (not rolled back), in order, and
    the record each is of: ``topic#UNIQ_KEY`` (when there), then ``topic#k`` per KEYS token."""
    from rmqdelay.formats import putloops

    n = len(topics)
    names = list(dict.fromkeys(topics))
    key_text = [k or "" for k in keys]
    uniq_text = [u or "" for u in uniqs]
    joined_keys, joined_uniqs = "".join(key_text), "".join(uniq_text)
    if not (joined_keys.isascii() and joined_uniqs.isascii() and all(t.isascii() for t in names)):
        return _index_hashes_one_by_one(topics, keys, uniqs, indexed)
    seed_of = {t: java_string_hash(t + "#") & 0xFFFFFFFF for t in names}
    seeds = np.fromiter(map(seed_of.__getitem__, topics), dtype=np.int64, count=n)
    has_uniq = np.fromiter((u is not None for u in uniqs), dtype=np.bool_, count=n)
    uniq_buf, uniq_at = _ascii_buffer(joined_uniqs, uniq_text)
    key_buf, key_at = _ascii_buffer(joined_keys, key_text)
    bound = n + len(joined_keys) // 2 + n  # a UNIQ_KEY each, and at most one token per two bytes (+1) of KEYS
    records = np.empty(bound, dtype=np.int64)
    hashes = np.empty(bound, dtype=np.int64)
    count = putloops.index_key_hashes(indexed, seeds, uniq_buf, uniq_at, has_uniq, key_buf, key_at, records, hashes)
    return records[:count], hashes[:count]


def _ascii_buffer(joined: str, parts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    at = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=len(parts)), out=at[1:])
    return np.frombuffer(joined.encode("ascii"), dtype=np.uint8), at


def _index_hashes_one_by_one(topics, keys, uniqs, indexed) -> tuple[np.ndarray, np.ndarray]:
    """The same, key string by key string (keys that are not all ASCII)."""
    found: list[str] = []
    records: list[int] = []
    for i in np.flatnonzero(indexed).tolist():
        these = message_index_keys(topics[i], keys[i], uniqs[i])
        found += these
        records += [i] * len(these)
    return np.array(records, dtype=np.int64), key_hashes(found)
