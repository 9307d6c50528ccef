"""`rmqdelay offsets show|reset`: read and move the delay offsets, safely."""

import os
import re

import numpy as np
import pytest
from clirun import broker_holding_lock, run_cli
from rmqdelay.formats.delayoffset import parse_delay_offsets

from rmqdelay.schedule.events import Delivered
from rmqdelay.schedule.offsets import read_scheduler_state
from rmqdelay.commands.options import parse_duration_ms
from rmqdelay.errors import UsageError
from rmqdelay.schedule.reset import first_unit_at_or_after
from rmqdelay.schedule.scheduler import Scheduler
from rmqdelay.store import Store

FAR_AHEAD = 4_102_444_800_000


def delay_offsets_text(path):
    return (path / "config" / "delayOffset.json").read_text()


def test_show_reports_every_level_as_inspect_delay_does(store_copy, capsys):
    path = store_copy("delay-partial")
    result = run_cli(capsys, "offsets", "show", path, "--json", "--now", str(FAR_AHEAD))
    assert result.code == 0, result.err
    rows = result.json_lines()
    assert [r["level"] for r in rows] == list(range(1, 19))
    assert rows[0] == {"level": 1, "delayMs": 1000, "offset": 83, "storedOffset": 83, "minOffset": 0,
                       "maxOffset": 83, "pending": 0, "dueNow": 0, "nextDueTimestamp": None}
    assert rows[3]["pending"] == 83 and rows[3]["dueNow"] == 83 and rows[3]["offset"] == 0
    assert rows[17]["maxOffset"] == 89
    assert run_cli(capsys, "inspect", "delay", path, "--json", "--now", str(FAR_AHEAD)).json_lines() == rows
    text = run_cli(capsys, "offsets", "show", path).out
    assert "not in delayOffset.json" in text


def test_show_says_no_time_a_copy_of_the_file_would_change(store_copy, capsys):
    # A 4.x delayOffset.json keeps no time: nothing like the file's mtime (which a cp moves) is shown.
    path = store_copy("delay-partial")
    os.utime(path / "config" / "delayOffset.json", (0, 0))
    text = run_cli(capsys, "offsets", "show", path).out
    assert "1970" not in text and "persisted" not in text


def test_show_on_a_store_without_config_starts_every_level_at_0(store_copy, capsys):
    path = store_copy("delay-fresh")
    rows = run_cli(capsys, "offsets", "show", path, "--json").json_lines()
    assert all(r["offset"] == 0 and r["storedOffset"] is None for r in rows)


def test_reset_is_a_dry_run_by_default_and_changes_no_byte(store_copy, capsys):
    path = store_copy("delay-partial")
    before = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    result = run_cli(capsys, "offsets", "reset", path, "--levels", "1", "--levels", "2", "--to-earliest")
    assert result.code == 0, result.err
    assert "166 message(s) would be delivered again" in " ".join(result.out.split()) and "dry run" in result.out
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == before


def test_reset_execute_writes_like_the_broker_keeps_bak_and_other_levels(store_copy, capsys):
    path = store_copy("delay-partial")
    old = delay_offsets_text(path)
    result = run_cli(capsys, "offsets", "reset", path, "--levels", "2", "--to-offset", "10", "--execute", "--json")
    assert result.code == 0, result.err
    assert result.json_lines() == [{"level": 2, "before": 83, "after": 10, "requested": 10, "minOffset": 0,
                                    "maxOffset": 83, "redelivered": 73, "skipped": 0, "warning": None,
                                    "executed": True}]
    assert delay_offsets_text(path) == "{\n\t\"offsetTable\":{1:83,2:10,3:83\n\t}\n}"
    assert (path / "config" / "delayOffset.json.bak").read_text() == old
    assert not (path / "config" / "delayOffset.json.tmp").exists()
    state = read_scheduler_state(path)
    assert state.offsetTable == {1: 83, 2: 10, 3: 83}
    # The scheduler now redelivers exactly the 73 messages the reset asked for.
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", levels=[2]).events())
    assert [e.offset for e in events if isinstance(e, Delivered)] == list(range(10, 83))


def test_out_of_range_targets_are_clamped_with_a_warning(store_copy, capsys):
    path = store_copy("delay-partial")
    result = run_cli(capsys, "offsets", "reset", path, "--levels", "3", "--to-offset", "500", "--execute")
    assert result.code == 0
    assert "clamped to 83" in result.err and "correctDelayOffset" in result.err
    result = run_cli(capsys, "offsets", "reset", path, "--levels", "3", "--shift-by", "-1000", "--json")
    row = result.json_lines()[0]
    assert (row["requested"], row["after"], row["redelivered"]) == (83 - 1000, 0, 83)
    assert "before minOffset" in result.err


def test_to_datetime_is_the_first_unit_due_at_or_after_it(store_copy, capsys):
    path = store_copy("delay-fresh")
    with Store(path) as store:
        times = [int(t) for t in store.schedule_queue(6).units()["tagsCode"]]
    for k in (0, 1, 40, 82):
        target = times[k]
        expect = next(i for i, t in enumerate(times) if t >= target)
        rows = run_cli(capsys, "offsets", "reset", path, "--levels", "6", "--to-datetime", str(target),
                       "--json").json_lines()
        assert rows[0]["after"] == expect
    rows = run_cli(capsys, "offsets", "reset", path, "--levels", "6", "--to-datetime", "2100-01-01",
                   "--json").json_lines()
    assert rows[0]["after"] == len(times)


def test_by_duration_rewinds_to_the_first_unit_due_after_now_minus_it(store_copy, capsys):
    path = store_copy("delay-fresh")
    with Store(path) as store:
        times = [int(t) for t in store.schedule_queue(18).units()["tagsCode"]]
    now = times[50] + 30 * 60_000
    rows = run_cli(capsys, "offsets", "reset", path, "--levels", "18", "--by-duration", "PT30M", "--now", str(now),
                   "--json").json_lines()
    assert rows[0]["after"] == next(i for i, t in enumerate(times) if t >= times[50])
    # The one dialect: 30m is PT30M.
    assert run_cli(capsys, "offsets", "reset", path, "--levels", "18", "--by-duration", "30m", "--now", str(now),
                   "--json").json_lines() == rows


def test_all_levels_to_latest_then_to_earliest(store_copy, capsys):
    path = store_copy("delay-fresh")
    assert run_cli(capsys, "offsets", "reset", path, "--all-levels", "--to-latest", "--execute").code == 0
    table = parse_delay_offsets(delay_offsets_text(path)).offsetTable
    assert table == {level: (89 if level == 18 else 83) for level in range(1, 19)}
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty").events())
    assert not [e for e in events if isinstance(e, Delivered)]


def test_reset_keeps_and_bumps_a_5x_data_version(store_copy, capsys):
    path = store_copy("delay-partial")
    (path / "config" / "delayOffset.json").write_text(
        '{\n\t"dataVersion":{\n\t\t"counter":7,\n\t\t"stateVersion":2,\n\t\t"timestamp":1700000000000\n\t},\n'
        '\t"offsetTable":{1:83,2:83,3:83\n\t}\n}')
    assert run_cli(capsys, "offsets", "reset", path, "--levels", "1", "--to-offset", "5", "--execute").code == 0
    parsed = parse_delay_offsets(delay_offsets_text(path))
    assert parsed.offsetTable == {1: 5, 2: 83, 3: 83}
    assert (parsed.dataVersion.counter, parsed.dataVersion.stateVersion) == (8, 2)
    assert parsed.dataVersion.timestamp > 1700000000000


def test_reset_counts_deliveries_a_crashed_run_never_persisted(store_copy, capsys):
    path = store_copy("delay-partial")
    snap = None
    for event in Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", levels=[4]).events():
        if snap is None and event.__class__.__name__ == "Persisted":
            snap = {p.name: p.read_bytes() for p in (path / "config").iterdir()}
    for name, data in snap.items():  # as if killed before the next publish
        (path / "config" / name).write_bytes(data)
    rows = run_cli(capsys, "offsets", "reset", path, "--levels", "5", "--to-latest", "--execute",
                   "--json").json_lines()
    assert rows[0]["after"] == 83
    table = parse_delay_offsets(delay_offsets_text(path)).offsetTable
    assert table[4] == 83 and table[5] == 83  # level 4's deliveries were found in the log
    events = list(Scheduler(path, now_ms=FAR_AHEAD, mode="until-empty", levels=[4, 5]).events())
    assert not [e for e in events if isinstance(e, Delivered)]


def test_reset_execute_refuses_while_the_store_is_locked(store_copy, capsys):
    path = store_copy("delay-partial")
    with broker_holding_lock(path):
        before = delay_offsets_text(path)
        result = run_cli(capsys, "offsets", "reset", path, "--levels", "1", "--to-earliest", "--execute")
        assert result.code == 3 and len(result.err.strip().splitlines()) == 1
        assert delay_offsets_text(path) == before
        # A dry run only reads: it works while the broker runs.
        assert run_cli(capsys, "offsets", "reset", path, "--levels", "1", "--to-earliest").code == 0


@pytest.mark.parametrize("args", [
    ["--levels", "1"],  # no target
    ["--levels", "1", "--to-earliest", "--to-latest"],
    ["--to-earliest"],  # no levels
    ["--levels", "19", "--to-earliest"],
    ["--levels", "1", "--by-duration", "30 minutes"],
])
def test_bad_reset_arguments_are_one_line_and_exit_2(store_copy, capsys, args):
    path = store_copy("delay-partial")
    result = run_cli(capsys, "offsets", "reset", path, *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1


def test_one_duration_dialect_and_binary_search():
    for text, ms in [("PT30M", 1_800_000), ("P1DT2H", 93_600_000), ("PT1.5S", 1500), ("30m", 1_800_000),
                     ("1h30m", 5_400_000), ("90s", 90_000), ("2d", 172_800_000), ("500ms", 500), ("1.5s", 1500),
                     ("1d2h", 93_600_000), ("pt30m", 1_800_000)]:
        assert parse_duration_ms(text, "--by-duration") == ms, text
    for bad in ["30", "", "PT", "P", "30m1h", "1m1m", "30 minutes", "-5m", "PT30X"]:
        with pytest.raises(UsageError, match=r"^--by-duration: a duration such as"):
            parse_duration_ms(bad, "--by-duration")
    times = np.array([5, 5, 7, 9, 9, 12], dtype=">i8")
    assert [first_unit_at_or_after(times, t) for t in (0, 5, 6, 9, 12, 13)] == [0, 0, 2, 3, 5, 6]


def test_a_reset_prints_the_command_that_undoes_it_and_counts_from_where_the_scheduler_resumes(store_copy, capsys):
    from rmqdelay.schedule.reset import LevelReset

    path = store_copy("delay-partial")
    shown = run_cli(capsys, "offsets", "show", path, "--json").json_lines()
    done = run_cli(capsys, "offsets", "reset", path, "--levels", "1-18", "--to-earliest", "--execute")
    assert done.code == 0
    undo = re.findall(r"to undo it: (rmqdelay .*? --execute)", " ".join(done.out.split()))
    assert undo == [f"rmqdelay offsets reset {path} --levels 1-3 --to-offset 83 --execute"]
    assert run_cli(capsys, *undo[0].split()[1:]).code == 0
    assert [r["offset"] for r in run_cli(capsys, "offsets", "show", path, "--json").json_lines()] == \
        [r["offset"] for r in shown]
    # Units gone from below the queue's minimum are neither skipped nor delivered again.
    gone = LevelReset(level=4, before=0, requested=83, after=83, minOffset=20, maxOffset=83, warning=None)
    assert (gone.skipped, gone.redelivered) == (63, 0)
    back = LevelReset(level=4, before=0, requested=20, after=20, minOffset=20, maxOffset=83, warning=None)
    assert (back.skipped, back.redelivered) == (0, 0)
