"""Where a consume queue ends (ConsumeQueue.recover's rule: the first unit with a negative
offset or a size of at most 0), found by reading the last file from its start in chunks."""

from __future__ import annotations

import numpy as np
import pytest

from rmqdelay.formats.consumequeue import CQ_UNIT_DTYPE
from rmqdelay.store.consumequeue import ConsumeQueue

UNIT = CQ_UNIT_DTYPE.itemsize


def _queue(directory, files: list[list[bool]]) -> ConsumeQueue:
    """A queue of equal files, each unit written (True) or zeros (False)."""
    directory.mkdir(parents=True)
    start = 0
    for written in files:
        units = np.zeros(len(written), dtype=CQ_UNIT_DTYPE)
        at = np.flatnonzero(written)
        units["commitLogOffset"][at] = (start // UNIT + at) * 100
        units["size"][at] = 100
        units["tagsCode"][at] = 1
        (directory / f"{start:020d}").write_bytes(units.tobytes())
        start += len(written) * UNIT
    return ConsumeQueue(directory, "T", 0)


@pytest.mark.parametrize("files, end", [
    ([[True] * 7 + [False] * 3], 7),
    ([[True] * 10, [False] * 10], 10),  # an empty last file: the queue ends with the file before
    ([[True] * 4 + [False] + [True] * 5], 4),  # a hole ends the queue, as on recovery
    ([[True] * 10, [False] + [True] * 9], 10),  # the last file begins with a hole
    ([[True] * 10_000 + [False] * 5_000], 10_000),  # past the first chunks
    ([[True] * 20_000], 20_000),  # a full file
    ([[False] * 10], 0),
], ids=["partial", "empty-last-file", "hole", "hole-first", "long", "full", "none"])
def test_the_queue_ends_at_its_first_unit_not_written(tmp_path, files, end):
    queue = _queue(tmp_path / "T" / "0", files)
    try:
        assert queue.max_offset == end
    finally:
        queue.close()
