"""Java's String.hashCode and what RocketMQ derives from it."""

from functools import lru_cache


def java_string_hash(text: str) -> int:
    """String.hashCode(): over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


@lru_cache(maxsize=4096)  # a store repeats a few tags millions of times
def tags_code(tags: str | None) -> int:
    """MessageExtBrokerInner.tagsString2tagsCode: the CQ tagsCode of a normal message."""
    if not tags:
        return 0
    return java_string_hash(tags)


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: abs(hashCode), with MIN_VALUE mapped to 0."""
    h = abs(java_string_hash(key))
    return 0 if h == 0x80000000 else h
