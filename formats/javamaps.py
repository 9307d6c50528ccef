"""The order Java's hash maps list their entries in, where the broker's config files print a
map as the map iterates (fastjson writes a map's entries in iteration order).

A ``HashMap`` / ``HashSet`` and a ``ConcurrentHashMap`` list their bins in index order, a bin's
entries in the order they were put (no bin here grows to a tree: that takes 8 keys in one bin).
The bin of a key is ``spread(hashCode) & (n - 1)`` for a table of ``n`` bins; the table grows
by doubling (HashMap: when its size passes 0.75 n; ConcurrentHashMap: when it reaches it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from rmqdelay.formats.javahash import java_string_hash


def spread(hash_code: int) -> int:
    """HashMap.hash / ConcurrentHashMap.spread: the high half folded into the low half."""
    h = hash_code & 0xFFFFFFFF
    return (h ^ (h >> 16)) & 0x7FFFFFFF


def key_hash(key: str | int) -> int:
    """hashCode() of a String or an Integer key."""
    return java_string_hash(key) if isinstance(key, str) else int(key)


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two at or above ``capacity``."""
    n = 1
    while n < capacity:
        n <<= 1
    return n


def hash_map_bins(initial_capacity: int, size: int) -> int:
    """The bins of a ``new HashMap<>(initial_capacity)`` holding ``size`` entries."""
    n = table_size_for(max(initial_capacity, 1))
    while size > n * 3 // 4:
        n <<= 1
    return n


def concurrent_map_bins(initial_bins: int, size: int) -> int:
    """The bins of a ConcurrentHashMap of ``initial_bins`` bins holding ``size`` entries."""
    n = initial_bins
    while size >= n - (n >> 2):
        n <<= 1
    return n


def hash_map_order(keys: Iterable[str | int], bins: int) -> list:
    """``keys``, put in this order, as a map of ``bins`` bins lists them (a HashMap keeps a
    bin's order when it grows, so its final size alone decides)."""
    keys = list(keys)
    return sorted(keys, key=lambda k: spread(key_hash(k)) & (bins - 1))  # sorted() is stable: a bin's put order


def merge_in_bin_order(existing: list, new: Iterable, bin_of: Callable[[object], int]) -> list:
    """``existing`` in its own order, each of ``new`` put before the first existing key of a
    higher bin (after those of its own bin, as a put appends to its bin)."""
    out = list(existing)
    for key in new:
        b = bin_of(key)
        at = next((i for i, k in enumerate(out) if bin_of(k) > b), len(out))
        out.insert(at, key)
    return out
