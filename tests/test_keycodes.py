"""Key codes (a string and an integer): two rows share a code exactly when their keys are
equal (the strings byte for byte), rows with a null never coded, whatever the hashes do."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from rmqdelay.analysis import keycodes

STRINGS = ["k1", "k2", "k10", "", "ü", "k1\x00", "a" * 70]


def _rows(rng: np.random.Generator, n: int) -> tuple[pa.Array, np.ndarray, np.ndarray]:
    strings = pa.array([None if rng.random() < 0.05 else STRINGS[rng.integers(0, len(STRINGS))] for _ in range(n)],
                       pa.string())
    return strings, rng.integers(-2, 3, n).astype(np.int64), rng.random(n) > 0.05


def _expected(strings: pa.Array, numbers: np.ndarray, valid: np.ndarray) -> list[int]:
    """Codes numbered by first appearance, from Python tuples."""
    seen: dict[tuple, int] = {}
    out = []
    for text, number, ok in zip(strings.to_pylist(), numbers.tolist(), valid.tolist()):
        out.append(seen.setdefault((text, number), len(seen)) if ok and text is not None else -1)
    return out


@pytest.mark.parametrize("seed", range(30))
def test_codes_are_those_of_the_keys(seed):
    rng = np.random.default_rng(seed)
    strings, numbers, valid = _rows(rng, int(rng.integers(0, 300)))
    codes, count = keycodes.key_codes(strings, numbers, valid)
    expected = _expected(strings, numbers, valid)
    assert codes.tolist() == expected
    assert count == len({c for c in expected if c >= 0})


def test_keys_that_share_every_hash_still_get_their_own_codes():
    """All hashes equal: every lookup lands on taken slots and only the comparison of the
    keys tells them apart."""
    strings, numbers, valid = _rows(np.random.default_rng(7), 200)
    valid = valid & strings.is_valid().to_numpy(zero_copy_only=False)
    offsets, data = keycodes._string_buffers(strings)
    out = np.empty(len(strings), dtype=np.int64)
    count = keycodes._codes(np.zeros(len(strings), dtype=np.uint64), valid, offsets, data, numbers, out)
    assert out.tolist() == _expected(strings, numbers, valid)
    assert count == max(out) + 1


def test_sliced_and_chunked_strings_read_their_own_bytes():
    whole = pa.array(["x", "y", "x", "z", "y"])
    strings = pa.chunked_array([whole.slice(1, 2), whole.slice(3, 2)])  # y x | z y
    codes, count = keycodes.key_codes(strings, np.array([1, 1, 1, 2]), np.ones(4, dtype=bool))
    assert codes.tolist() == [0, 1, 2, 3] and count == 4
    codes, count = keycodes.key_codes(strings, np.zeros(4, dtype=np.int64), np.ones(4, dtype=bool))
    assert codes.tolist() == [0, 1, 2, 0] and count == 3
