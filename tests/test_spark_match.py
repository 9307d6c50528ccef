"""The keyed matching of lateness (exact integer codes of the keys, numpy lookups: what the
Spark tasks and the embedded engine's partitions run) gives the rows of the plain join, whatever the keys hold: nulls, repeats, copies of
another store or topic, several units for one record."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from conftest import SAMPLES

from rmqdelay.analysis import lateness as embedded
from rmqdelay.analysis.common import sort_table
from rmqdelay.store import Store
from rmqdelay.store.scan import commitlog_files, schedule_unit_ranges, schedule_units

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"


def _column(rng, values, n, type_=pa.string(), nulls=0.15):
    return pa.array([None if rng.random() < nulls else values[rng.integers(0, len(values))] for _ in range(n)],
                    type=type_)


def _rows(rng, n):
    """Commit log rows of one store as lateness reads them: schedule records, copies and others."""
    is_schedule = rng.random(n) < 0.5
    return pa.table({
        "store": pa.array(["s"] * n, pa.string()),
        "commitlog_offset": pa.array(rng.permutation(n) * 100, pa.int64()),
        "topic": pa.array(np.where(is_schedule, SCHEDULE_TOPIC, "T"), pa.string()),
        "store_timestamp": pa.array(rng.integers(0, 1000, n), pa.int64()),
        "reconsume_times": _column(rng, [0, 1], n, pa.int32(), nulls=0.05),
        "uniq_key": _column(rng, ["k1", "k2", "k3", "k4"], n),
        # A copy keeps DELAY (the 4.9.4 quirk); a record without it is neither kind, left out.
        "delay_level": _column(rng, [3], n, pa.int32(), nulls=0.1),
        "real_topic": _column(rng, ["T", "U"], n, nulls=0.05),
    })


def _units(rng, rows):
    """Units of some of the schedule records, now and then two for one record."""
    offsets = rows.column("commitlog_offset").to_numpy()
    picked = offsets[rng.random(len(offsets)) < 0.8]
    picked = np.concatenate([picked, picked[rng.random(len(picked)) < 0.1]])
    n = len(picked)
    return pa.table({"store": pa.array(["s"] * n, pa.string()), "commitlog_offset": pa.array(picked, pa.int64()),
                     "level": pa.array(rng.integers(1, 19, n), pa.int32()),
                     "deliver_ms": pa.array(rng.integers(0, 1000, n), pa.int64())})


@pytest.mark.parametrize("seed", range(40))
def test_keyed_matching_gives_the_rows_of_the_join(seed):
    rng = np.random.default_rng(seed)
    rows = _rows(rng, int(rng.integers(0, 60)))
    units = _units(rng, rows)
    schedule, copies = embedded.with_units(rows.filter(embedded._is_schedule_or_copy(rows)), units)
    expected = sort_table(embedded.match(schedule, copies), ["level", "schedule_offset", "intended_ms"])

    got = embedded.match_rows(embedded.records_with_units(rows, units))
    assert sort_table(got, ["level", "schedule_offset", "intended_ms"]).equals(expected)


def test_each_file_task_reads_the_units_of_its_file_and_together_all_of_them():
    """generated-small spreads over several commit log files: the unit ranges the driver
    hands each file's task, kept to that file, give every schedule unit once."""
    path = SAMPLES / "generated-small" / "store"
    files = commitlog_files(path)
    starts = [f.start for f in files]
    assert len(starts) > 1
    with Store(path) as store:
        everything = schedule_units(store, "s")
        ranges = schedule_unit_ranges(store, starts)
        parts = []
        for i, start in enumerate(starts):
            units = schedule_units(store, "s", ranges[i])
            offsets = units.column("commitlog_offset")
            inside = pa.compute.greater_equal(offsets, start)
            if i + 1 < len(starts):
                inside = pa.compute.and_(inside, pa.compute.less(offsets, starts[i + 1]))
            parts.append(units.filter(inside))
            # A task reads its own file's share, not the whole queue.
            assert units.num_rows < everything.num_rows
    order = ["level", "queue_offset"]
    assert sort_table(pa.concat_tables(parts), order).equals(sort_table(everything, order))
