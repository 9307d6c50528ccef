"""The embedded engine within a memory budget (RMQDELAY_ANALYZE_MEMORY): a budget far below
the store splits the work -- lateness and retries by key into partitions spilled to disk,
backlog into chunks of units -- and gives the same tables and the same per-message rows as one
pass over everything in memory, and leaves no file behind."""

from __future__ import annotations

import json
import tempfile

import pyarrow.parquet as pq
import pytest
from clirun import run_cli
from conftest import SAMPLES, load_plan

from rmqdelay.analysis import KINDS, StoreRef, analyze, spill
from rmqdelay.analysis.common import sort_table

GENERATED = SAMPLES / "generated-small" / "store"
TINY = 16 << 10  # bytes: generated-small's rows are a few hundred kB


def _all_columns(table):
    return sort_table(table, table.column_names)


@pytest.fixture
def spill_dir(tmp_path, monkeypatch):
    """The engine's temporary files go under a directory of the test's own, which it lists."""
    where = tmp_path / "spill"
    where.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(where))
    return where


@pytest.fixture
def partitions(monkeypatch):
    """How many partitions each run of KeyedRows handed back."""
    seen: list[int] = []
    original = spill.KeyedRows.partitions

    def counted(self):
        n = 0
        for part in original(self):
            n += 1
            yield part
        seen.append(n)

    monkeypatch.setattr(spill.KeyedRows, "partitions", counted)
    return seen


@pytest.mark.parametrize("kind", KINDS)
def test_a_tiny_budget_gives_the_tables_and_rows_of_one_pass(kind, spill_dir, partitions):
    refs = [StoreRef("gen", GENERATED), StoreRef("retry", SAMPLES / "retry" / "store")]
    at_ms = load_plan(GENERATED)["at_ms"]
    whole = analyze(kind, refs, at_ms, memory=1 << 40)
    assert all(n == 1 for n in partitions)
    partitions.clear()
    split = analyze(kind, refs, at_ms, memory=TINY)
    if kind != "backlog":
        assert max(partitions) > 4, "the rows were split"
    assert whole.tables.keys() == split.tables.keys()
    for name, table in whole.tables.items():
        assert split.tables[name].equals(table), name
    assert whole.messages.num_rows > 0
    assert _all_columns(split.messages).equals(_all_columns(whole.messages))
    assert list(spill_dir.iterdir()) == []


@pytest.mark.parametrize("kind", KINDS)
def test_output_parquet_holds_the_same_rows_whatever_the_budget(kind, tmp_path, spill_dir):
    at_ms = load_plan(GENERATED)["at_ms"]
    refs = [StoreRef("gen", GENERATED)]
    files = []
    for memory in (1 << 40, TINY):
        out = tmp_path / f"{memory}.parquet"
        result = analyze(kind, refs, at_ms, memory=memory, messages_to=out)
        assert result.messages.num_rows == 0  # written, not held
        files.append(pq.read_table(out))
    assert files[0].num_rows > 0
    assert _all_columns(files[0]).equals(_all_columns(files[1]))
    assert list(spill_dir.iterdir()) == []


def test_the_cli_takes_the_budget_from_the_environment(capsys, monkeypatch, tmp_path):
    at_ms = load_plan(GENERATED)["at_ms"]
    args = ("analyze", "lateness", f"gen={GENERATED}", "--now", str(at_ms), "--json")
    whole = run_cli(capsys, *args)
    monkeypatch.setenv(spill.MEMORY_ENV, "16K")
    assert run_cli(capsys, *args).json_lines() == whole.json_lines()
    monkeypatch.setenv(spill.MEMORY_ENV, "lots")
    bad = run_cli(capsys, *args)
    assert bad.code == 2
    assert len(bad.err.strip().splitlines()) == 1
    assert f"{spill.MEMORY_ENV}='lots': a size in bytes such as 268435456, 256M or 1G" in bad.err


def test_backlog_chunks_count_every_unit(spill_dir):
    """A budget of one unit a chunk: each pending unit is its own chunk, the counts the same."""
    at_ms = load_plan(GENERATED)["at_ms"]
    refs = [StoreRef("gen", GENERATED)]
    whole = analyze("backlog", refs, at_ms)
    one = analyze("backlog", refs, at_ms, memory=1)
    for name in ("levels", "drain"):
        assert one.tables[name].equals(whole.tables[name])
    assert one.messages.equals(whole.messages)



def test_unit_ranges_counted_chunk_by_chunk_are_those_of_the_whole_queue(monkeypatch):
    """schedule_unit_ranges reads each queue a chunk at a time: chunks of 7 units give the
    ranges one chunk gives."""
    from rmqdelay.store import Store, scan

    starts = [f.start for f in scan.commitlog_files(GENERATED)]
    with Store(GENERATED) as store:
        whole = scan.schedule_unit_ranges(store, starts)
        monkeypatch.setattr(scan, "UNIT_CHUNK", 7)
        assert scan.schedule_unit_ranges(store, starts) == whole
    assert any(len(r) > 0 for r in whole[1:])
