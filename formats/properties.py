"""The properties string: ``k\\x01v\\x02k\\x01v`` in UTF-8 (MessageDecoder).

The broker keeps properties in a java.util.HashMap and writes them in its iteration
order, so rebuilding a record byte for byte needs that order too (``java_order``).
"""

from functools import lru_cache

from .javahash import java_string_hash

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def parse_properties(text: str) -> dict[str, str]:
    """MessageDecoder.string2messageProperties, including what it silently skips."""
    # Java walks the string from separator to separator and keeps a segment of 3+ chars whose
    # first NAME_VALUE_SEPARATOR is neither its first nor its last char: the same, per segment
    # (0 < kv < len - 1 implies the 3 chars).
    result: dict[str, str] = {}
    for segment in text.split(PROPERTY_SEPARATOR):
        kv = segment.find(NAME_VALUE_SEPARATOR)
        if 0 < kv < len(segment) - 1:
            result[segment[:kv]] = segment[kv + 1:]
    return result


def format_properties(properties: dict[str, str]) -> str:
    """MessageDecoder.messageProperties2String, in the dict's own order."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in properties.items() if v is not None
    )


# 5.x MessageDecoder.string2messageProperties makes ``new HashMap<>(128)`` (4.9.4: the
# default 16): the map the broker's timer and schedule services rebuild a stored message's
# properties string from, so their order is that of a 128-bucket table.
DECODED_MAP_CAPACITY_5X = 128


def _hashmap_capacity(size: int, initial: int = 16) -> int:
    capacity = initial
    while size > capacity * 3 // 4:
        capacity *= 2
    return capacity


def java_order(properties: dict[str, str], capacity: int = 16) -> dict[str, str]:
    """The iteration order of a java.util.HashMap made with ``capacity`` buckets and filled by
    put() in the dict's order.

    A bucket keeps insertion order across resizes, so the order is (bucket, insertion).
    Buckets long enough to become trees (8+ colliding keys) are not modelled.
    """
    return {k: properties[k] for k in _java_key_order(tuple(properties), capacity)}


def format_java_order(properties: dict[str, str]) -> str:
    """``format_properties(java_order(properties))`` without the ordered map in between (put()'s
    hot path)."""
    return PROPERTY_SEPARATOR.join([f"{k}{NAME_VALUE_SEPARATOR}{v}" for k in _java_key_order(tuple(properties), 16)
                                    if (v := properties[k]) is not None])


def properties_to_string(properties: dict[str, str]) -> str:
    """MessageDecoder.messageProperties2String: every pair followed by a separator, in the
    dict's order (give it ``java_order``'s)."""
    return "".join(f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}" for k, v in properties.items()
                   if v is not None)


def broker_properties_string(properties: dict[str, str]) -> str:
    """What a 5.x broker's service stores for a message it read back and re-puts (the
    schedule service's messageTimeup, the timer's convert): messageProperties2String of
    MessageDecoder's map (128 buckets, filled in the stored order, empty values gone), every
    pair followed by a separator. The order of a key set is worked out once (the timer's
    hot path: messages repeat a few key sets)."""
    return "".join([f"{k}{NAME_VALUE_SEPARATOR}{v}{PROPERTY_SEPARATOR}"
                    for k in _java_key_order(tuple(properties), DECODED_MAP_CAPACITY_5X)
                    if (v := properties[k]) is not None])


def delete_property(text: str, name: str) -> str:
    """MessageUtils.deleteProperty: every ``name\x01value`` entry cut out of a stored
    properties string (with its separator)."""
    needle = name + NAME_VALUE_SEPARATOR
    if needle not in text:
        return text
    parts = text.split(PROPERTY_SEPARATOR)
    kept = [part for part in parts if not part.startswith(needle)]
    return PROPERTY_SEPARATOR.join(kept)


def reformat_properties(properties: dict[str, str], stored: str) -> str:
    """``format_properties(java_order(properties))`` for a map parsed from ``stored``.

    When ``stored`` already is that text, it is returned as it is: its keys are in HashMap
    order, and it has one segment per key (so none was dropped or repeated by the parse).
    """
    keys = tuple(properties)
    if keys and stored.count(PROPERTY_SEPARATOR) == len(keys) - 1 and keys == _java_key_order(keys):
        return stored
    return format_properties(java_order(properties))


@lru_cache(maxsize=4096)
def _java_key_order(keys: tuple[str, ...], initial: int = 16) -> tuple[str, ...]:
    # The order depends on the keys alone, and messages repeat the same few key sets.
    capacity = _hashmap_capacity(len(keys), initial)

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return tuple(k for _, k in sorted(enumerate(keys), key=lambda item: (bucket(item[1]), item[0])))


def property_value(text: str, key: str) -> str | None:
    """``parse_properties(text).get(key)`` without building the map (one key of a stored
    string on a hot path): the last well-formed ``key\\x01value`` entry wins, as there."""
    needle = key + NAME_VALUE_SEPARATOR
    if not key or NAME_VALUE_SEPARATOR in key or PROPERTY_SEPARATOR in key:
        return parse_properties(text).get(key)
    result = None
    start = 0
    while True:
        i = text.find(needle, start)
        if i < 0:
            return result
        if i == 0 or text[i - 1] == PROPERTY_SEPARATOR:
            end = text.find(PROPERTY_SEPARATOR, i)
            if end < 0:
                end = len(text)
            if end > i + len(needle):  # an empty value is skipped by the parser
                result = text[i + len(needle):end]
            start = end
        else:
            start = i + 1
