"""``config/consumerOffset.json`` as the broker's ConsumerOffsetManager writes it (4.9.4 and
5.3.3): fastjson's pretty text of the manager (``RemotingSerializable.toJson(this, true)``).

- 4.x: one field, ``offsetTable``: ``"TOPIC@GROUP":{QID:OFFSET,...}``.
- 5.x: the bean's getters in name order: ``dataVersion`` ({counter, stateVersion,
  timestamp}), ``groupTopicMap`` (getGroupTopicMap(): group -> its topics, derived from the
  offsetTable's keys into a ``new HashMap<>(128)`` of ``new HashSet<>(8)``, a set printed on one
  line), then ``offsetTable``.

The offsetTable is a ``ConcurrentHashMap`` the broker made with ``new ConcurrentHashMap<>(512)``
(1024 bins) and each queue map one of 32 (64 bins); fastjson lists them in bin order. A key
that is already in the file keeps its place (the map the broker printed), a new one goes where
that map puts it (``merge_in_bin_order``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.fastjson import format_fastjson_pretty
from rmqdelay.formats.javamaps import (
    concurrent_map_bins,
    hash_map_bins,
    hash_map_order,
    key_hash,
    merge_in_bin_order,
    spread,
)
from rmqdelay.formats.javanum import java_int_range, java_parse_int

TOPIC_GROUP_SEPARATOR = "@"  # ConsumerOffsetManager.TOPIC_GROUP_SEPARATOR
_OFFSET_TABLE_BINS = 1024  # new ConcurrentHashMap<>(512)
_QUEUE_MAP_BINS = 64  # new ConcurrentHashMap<>(32) in commitOffset


@dataclass(slots=True)
class ConsumerOffsetFile:
    """The document in the broker's order: ``table`` keyed ``TOPIC@GROUP`` as the file lists
    them (Python dicts keep their order), ``dataVersion`` and ``groupTopicMap`` present in a
    5.x file only."""

    table: dict[str, dict[int, int]]
    dataVersion: DataVersion | None = None
    hasGroupTopicMap: bool = False


def parse_consumer_offset_file(doc: dict) -> ConsumerOffsetFile:
    """The parsed JSON document (``parse_fastjson_object``) of a consumerOffset.json, in its
    order; FormatError for what the broker could not read."""
    table = doc.get("offsetTable", {})
    if not isinstance(table, dict):
        raise FormatError(0, 'an "offsetTable" object')
    out: dict[str, dict[int, int]] = {}
    for key, queues in table.items():
        if not isinstance(key, str) or TOPIC_GROUP_SEPARATOR not in key or not isinstance(queues, dict):
            raise FormatError(0, f'"TOPIC@GROUP": {{queueId: offset}} entries, found {key!r}')
        entry: dict[int, int] = {}
        for qid, offset in queues.items():
            queue_id = qid if isinstance(qid, int) and java_int_range(qid) else \
                java_parse_int(qid) if isinstance(qid, str) else None
            if queue_id is None or isinstance(offset, bool) or not isinstance(offset, int):
                raise FormatError(0, f"integer queue ids and offsets for {key}, found {qid!r}: {offset!r}")
            entry[queue_id] = offset
        out[key] = entry
    version = None
    dv = doc.get("dataVersion")
    if isinstance(dv, dict):
        fields = [dv.get(name, 0) for name in ("counter", "stateVersion", "timestamp")]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in fields):
            raise FormatError(0, f"integers in dataVersion, found {dv!r}")
        version = DataVersion(*fields)
    return ConsumerOffsetFile(out, version, "groupTopicMap" in doc or version is not None)


def _outer_bin_of(table: dict) -> callable:
    bins = concurrent_map_bins(_OFFSET_TABLE_BINS, len(table) + 1)
    return lambda key: spread(key_hash(key)) & (bins - 1)


def set_offsets(doc: ConsumerOffsetFile, topic: str, group: str, offsets: dict[int, int]) -> None:
    """Commit ``offsets`` ({queue id: offset}) of ``topic`` for ``group`` as the broker's
    commitOffset does: an existing key and queue keep their place, new ones go where the
    broker's maps put them."""
    key = f"{topic}{TOPIC_GROUP_SEPARATOR}{group}"
    if key not in doc.table:
        order = merge_in_bin_order(list(doc.table), [key], _outer_bin_of(doc.table))
        doc.table = {k: doc.table.get(k, {}) for k in order}
    queues = doc.table[key]
    new = [q for q in offsets if q not in queues]
    bins = max(_QUEUE_MAP_BINS, concurrent_map_bins(_QUEUE_MAP_BINS, len(queues) + len(new)))
    order = merge_in_bin_order(list(queues), sorted(new), lambda q: spread(key_hash(q)) & (bins - 1))
    doc.table[key] = {q: offsets.get(q, queues.get(q)) for q in order}


def group_topic_map(table: dict[str, dict[int, int]]) -> dict[str, list[str]]:
    """getGroupTopicMap(): the keys split at ``@`` (a key with another ``@`` is left out, as
    ``split`` gives more than two parts), in the HashMap's and HashSets' order."""
    groups: dict[str, list[str]] = {}
    for key in table:
        parts = key.split(TOPIC_GROUP_SEPARATOR)
        if len(parts) == 2 and parts[0] and parts[1]:
            topics = groups.setdefault(parts[1], [])
            if parts[0] not in topics:
                topics.append(parts[0])
    ordered = hash_map_order(groups, hash_map_bins(128, len(groups)))
    return {g: hash_map_order(groups[g], hash_map_bins(8, len(groups[g]))) for g in ordered}


def format_consumer_offsets(doc: ConsumerOffsetFile) -> str:
    """Exactly the text the broker writes for ``doc``."""
    parts = []
    if doc.dataVersion is not None:
        dv = doc.dataVersion
        parts.append('\t"dataVersion":' + format_fastjson_pretty(
            {"counter": dv.counter, "stateVersion": dv.stateVersion, "timestamp": dv.timestamp}, 1))
    if doc.hasGroupTopicMap:
        gtm = group_topic_map(doc.table)
        # A HashSet goes through fastjson's CollectionCodec, which writes no line breaks.
        body = ",".join(f"\n\t\t{format_fastjson_pretty(g)}:[" + ",".join(format_fastjson_pretty(t) for t in ts) + "]"
                        for g, ts in gtm.items())
        parts.append('\t"groupTopicMap":' + ("{" + body + "\n\t}" if gtm else "{}"))
    parts.append('\t"offsetTable":' + format_fastjson_pretty(doc.table, 1))
    return "{\n" + ",\n".join(parts) + "\n}"
