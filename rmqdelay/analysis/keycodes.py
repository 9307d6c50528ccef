"""Keys as integers, compiled by numba: a 64-bit hash of each string of an array (the same
in every process, unlike Python's ``hash``: how rows are split by key), and exact codes of
keys made of a string and an integer: equal keys get equal codes, different keys different
ones.

What lateness matches its rows on: one code per row for (UNIQ_KEY, the rest of the key --
store, real topic, reconsume times -- already coded as one integer). Each row's key is
hashed, and the hashes go into an open-addressing table whose slots keep the hash and the
first row of their key; a row whose hash is already there is compared with that row (the
integer, then the string byte for byte), so two rows share a code only when their keys are
equal, whatever the hashes. Keys are mostly distinct, so each lookup would wait for memory at a random place:
the slots of the rows a little ahead, and the bytes their keys will be compared with, are
asked for (prefetched) before they are needed.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)
_MIX = np.uint64(0x9E3779B97F4A7C15)
# How many rows ahead a row's slot is prefetched (half that: the row in it; a quarter: its
# bytes).
_AHEAD = 32


@intrinsic
def _prefetch(typingctx, data, pos):
    """Ask for the cache line of ``data[pos]`` (a hint: nothing waits, nothing can fail)."""
    sig = types.void(data, pos)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        pointer = builder.bitcast(builder.gep(array.data, [args[1]]), ir.IntType(8).as_pointer())
        int32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [pointer.type, int32, int32, int32]), "llvm.prefetch.p0i8")
        # read, high locality, data cache
        builder.call(function, [pointer, ir.Constant(int32, 0), ir.Constant(int32, 3), ir.Constant(int32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@njit(cache=True, nogil=True, inline="always")
def _finish(h: np.uint64) -> np.uint64:
    # splitmix64's finaliser: every input bit moves the low bits the table is indexed by.
    h ^= h >> np.uint64(30)
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


@njit(cache=True, nogil=True, inline="always")
def _fnv1a(data: np.ndarray, start: int, end: int) -> np.uint64:
    h = _FNV_OFFSET
    for j in range(start, end):
        h ^= np.uint64(data[j])
        h *= _FNV_PRIME
    return h


@njit(cache=True, nogil=True)
def _hash_strings(offsets: np.ndarray, data: np.ndarray, hashes: np.ndarray) -> None:
    """Mix each row's string (FNV-1a of its bytes) into ``hashes``."""
    for i in range(hashes.shape[0]):
        hashes[i] = _finish((hashes[i] * _MIX) ^ _fnv1a(data, offsets[i], offsets[i + 1]))


@njit(cache=True, nogil=True)
def _string_hashes(offsets: np.ndarray, data: np.ndarray, out: np.ndarray) -> None:
    for i in range(out.shape[0]):
        out[i] = _finish(_fnv1a(data, offsets[i], offsets[i + 1]))


@njit(cache=True, nogil=True)
def _hash_numbers(numbers: np.ndarray, hashes: np.ndarray) -> None:
    for i in range(hashes.shape[0]):
        hashes[i] = _finish((hashes[i] * _MIX) ^ np.uint64(numbers[i]))


@njit(cache=True, nogil=True, inline="always")
def _same(a: int, b: int, offsets: np.ndarray, data: np.ndarray, numbers: np.ndarray) -> bool:
    if numbers[a] != numbers[b]:
        return False
    start, other = offsets[a], offsets[b]
    length = offsets[a + 1] - start
    if offsets[b + 1] - other != length:
        return False
    for j in range(length):
        if data[start + j] != data[other + j]:
            return False
    return True


@njit(cache=True, nogil=True)
def _codes(hashes: np.ndarray, valid: np.ndarray, offsets: np.ndarray, data: np.ndarray, numbers: np.ndarray,
           out: np.ndarray) -> int:
    """A code per row of the keys hashed in ``hashes`` (-1 where not ``valid``), numbered
    in order of first appearance; returns how many there are."""
    n = hashes.shape[0]
    size = 16
    while size < 2 * n:
        size <<= 1
    mask = np.uint64(size - 1)
    # Per slot, side by side (one cache line a lookup): the first row whose key took it
    # (-1: free) and that key's hash.
    slots = np.empty((size, 2), dtype=np.int64)
    slots[:, 0] = -1
    count = 0
    for i in range(n + _AHEAD):
        ahead = i + _AHEAD
        if ahead < n:
            _prefetch(slots, 2 * np.int64(hashes[ahead] & mask))
        near = i + _AHEAD // 2
        if near < n:
            row = slots[np.int64(hashes[near] & mask), 0]
            if row >= 0:
                _prefetch(offsets, row)
                _prefetch(numbers, row)
        next_ = i + _AHEAD // 4
        if next_ < n:
            row = slots[np.int64(hashes[next_] & mask), 0]
            if row >= 0:
                _prefetch(data, offsets[row])
        if i >= n:
            continue
        if not valid[i]:
            out[i] = -1
            continue
        h = hashes[i]
        slot = np.int64(h & mask)
        while True:
            row = slots[slot, 0]
            if row < 0:
                slots[slot, 0] = i
                slots[slot, 1] = np.int64(h)
                out[i] = count
                count += 1
                break
            if np.uint64(slots[slot, 1]) == h and _same(i, row, offsets, data, numbers):
                out[i] = out[row]
                break
            slot = np.int64((np.uint64(slot) + np.uint64(1)) & mask)
    return count


def _string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(offsets as int64 from the array's first string, its bytes) of a string array."""
    offset_type = np.int64 if array.type == pa.large_string() else np.int32
    _, offsets, data = array.buffers()
    offsets = np.frombuffer(offsets, dtype=offset_type)[array.offset:array.offset + len(array) + 1].astype(np.int64)
    # Read-only either way, so that every column's bytes are of one numba type.
    data = np.frombuffer(data if data is not None else b"", dtype=np.uint8)
    return offsets, data


def _one_piece(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A string array in one piece."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks else pa.array([], array.type)
    if array.type not in (pa.string(), pa.large_string()):
        raise TypeError(f"a string array, not {array.type}")
    return array


def key_hash(array: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash (uint64) of each string of ``array``. A null hashes as the empty
    string; callers treat nulls themselves."""
    array = _one_piece(array)
    out = np.empty(len(array), dtype=np.uint64)
    if len(array):
        _string_hashes(*_string_buffers(array), out)
    return out


def key_codes(strings: pa.Array | pa.ChunkedArray, numbers: np.ndarray, valid: np.ndarray) -> tuple[np.ndarray, int]:
    """A code (int64, 0..n-1) per row for its key: its string in ``strings`` and its
    integer in ``numbers`` (the rest of the key, coded already); -1 for a row not ``valid``
    or with a null string. And n, how many distinct keys there are."""
    strings = _one_piece(strings)
    n = len(strings)
    out = np.empty(n, dtype=np.int64)
    if n == 0:
        return out, 0
    if strings.null_count:
        valid = valid & strings.is_valid().to_numpy(zero_copy_only=False)
    numbers = np.ascontiguousarray(numbers, dtype=np.int64)
    offsets, data = _string_buffers(strings)
    hashes = np.zeros(n, dtype=np.uint64)
    _hash_numbers(numbers, hashes)
    _hash_strings(offsets, data, hashes)
    return out, int(_codes(hashes, np.ascontiguousarray(valid), offsets, data, numbers, out))
