"""`inspect commitlog --since/--until`: a window of store time, found by bisection over the
commit log files and the index (store/timewindow.py), the same records a read from the start
finds."""

from __future__ import annotations

import shutil

import pytest
from clirun import run_cli
from conftest import SAMPLES

from rmqdelay.store import Store
from rmqdelay.store.timewindow import first_at_or_after, index_jump

STORE = SAMPLES / "generated-small" / "store"  # 11 commit log files, an index


def _all(store):
    with Store(store) as s:
        return [(m.commitLogOffset, m.storeTimestamp) for m in s.commitlog.records()]


def test_the_start_found_is_the_first_record_stored_at_or_after(tmp_path):
    records = _all(STORE)
    times = sorted({t for _, t in records})
    no_index = tmp_path / "store"
    shutil.copytree(STORE, no_index)
    shutil.rmtree(no_index / "index")
    with Store(STORE) as s, Store(no_index) as bare:
        for instant in times[:: max(len(times) // 40, 1)] + [times[0] - 1, times[-1], times[-1] + 1]:
            expected = next((o for o, t in records if t >= instant), None)
            assert first_at_or_after(s, instant) == expected, instant
            assert first_at_or_after(bare, instant) == expected, instant  # the files alone


def test_the_index_lands_close_before_the_start():
    records = _all(STORE)
    with Store(STORE) as s:
        f = s.commitlog.files[5]
        inside = [(o, t) for o, t in records if f.start <= o < f.end]
        offset, instant = inside[len(inside) // 2]
        jump = index_jump(s, f.start, f.end, instant)
        assert jump is not None and f.start < jump <= offset
        assert dict(records)[jump] < instant


def test_the_window_lists_what_a_read_from_the_start_does(capsys):
    records = _all(STORE)
    since, until = records[len(records) // 3][1], records[2 * len(records) // 3][1]
    rows = run_cli(capsys, "inspect", "commitlog", STORE, "--since", str(since), "--until", str(until),
                   "--json").json_lines()
    assert [r["commitLogOffset"] for r in rows] == [o for o, t in records if since <= t < until]
    topic = rows[0]["topic"]
    only = run_cli(capsys, "inspect", "commitlog", STORE, "--since", str(since), "--topic", topic, "--limit", "3",
                   "--json").json_lines()
    assert [r["commitLogOffset"] for r in only] == [r["commitLogOffset"] for r in rows if r["topic"] == topic][:3]
    after = run_cli(capsys, "inspect", "commitlog", STORE, "--since", str(records[-1][1] + 1), "--json")
    assert after.code == 0 and after.out == ""


@pytest.mark.parametrize("args", [["--offset", "0", "--since", "0"], ["--verify", "--since", "0"],
                                  ["--since", "yesterday"]])
def test_window_usage_errors_are_one_line(capsys, args):
    result = run_cli(capsys, "inspect", "commitlog", STORE, *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err


def test_the_screen_leads_with_what_it_lists(capsys):
    records = _all(STORE)
    since, until = records[10][1], records[40][1]
    window = run_cli(capsys, "inspect", "commitlog", STORE, "--since", str(since), "--until", str(until))
    first = window.out.splitlines()[0]
    shown = sum(since <= t < until for _, t in records)
    assert first.startswith(f"{shown} message(s) in store, stored from 20")  # dates, never epoch ms
    assert str(since) not in window.out and "Z until 20" in first
    limited = run_cli(capsys, "inspect", "commitlog", STORE, "--limit", "2").out.splitlines()[0]
    assert limited == "the first 2 message(s) in store, from physical offset 0 (--limit)"
