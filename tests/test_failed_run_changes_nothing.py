"""A run that cannot read a log file whole changes nothing: a dangling symlink or a FIFO where
the last commit log file belongs, or that file gone (or a directory in its place) while queues
point into it, is refused in one line before recovery drops a consume queue unit or anything
is published (the broker's MappedFileQueue.load refuses such a file too); once the file is
back, a rerun delivers everything exactly once, no hand edit needed."""

from __future__ import annotations

import json
import os

import pytest
from clirun import assert_one_line, console
from test_bad_input import snapshot

from rmqdelay.schedule.audit import check_store
from rmqdelay.store import Store
from rmqdelay.store.brokercut import broker_cut
from rmqdelay.store.recovery import data_end
from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

FAR = "4102444800000"


@pytest.mark.parametrize("kind", ["dangling-symlink", "fifo"])
def test_a_special_file_in_place_of_the_last_commit_log_file_is_refused_and_a_rerun_delivers_all(
        store_copy, tmp_path, kind):
    store = store_copy("timer-partial")
    last = sorted((store / "commitlog").iterdir())[-1]
    saved = tmp_path / "saved"
    os.rename(last, saved)
    if kind == "fifo":
        os.mkfifo(last)
    else:
        os.symlink(tmp_path / "gone", last)
    before = snapshot(store)
    result = console("run", store, "--until-empty", "--now", FAR, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"rmqdelay: {last}") and ("FIFO" in lines[-1] or "symlink" in lines[-1]), lines
    assert "Traceback" not in result.stderr
    assert snapshot(store) == before  # no unit dropped, nothing published
    os.unlink(last)
    os.rename(saved, last)
    result = console("run", store, "--until-empty", "--now", FAR)
    assert result.returncode == 0, result.stderr[-2000:]
    check = check_timer_store(store)
    assert check.lost == [] and check.duplicated == [] and check.delivered == 1112
    assert check.delay_delivered == check.delay_parked


@pytest.mark.parametrize("sample, kind", [("timer-partial", "missing"), ("timer-partial", "directory"),
                                          ("delay-partial", "missing")])
def test_a_lost_last_commit_log_file_is_refused_before_a_unit_is_dropped_and_a_rerun_with_it_back_delivers_all(
        store_copy, tmp_path, sample, kind):
    # Its records have units (and index entries, timer log units, published offsets): cutting
    # them as a torn tail would lose them, and the file put back would be delivered again.
    store = store_copy(sample)
    last = sorted((store / "commitlog").iterdir())[-1]
    saved = tmp_path / "saved"
    os.rename(last, saved)
    if kind == "directory":
        last.mkdir()
    before = snapshot(store)
    result = console("run", store, "--until-empty", "--now", FAR)
    assert_one_line(result, 2, f"rmqdelay: {last}: a commit log file after", "put the file back",
                    "found a directory" if kind == "directory" else "found none")
    assert snapshot(store) == before
    if kind == "directory":
        last.rmdir()
    os.rename(saved, last)
    assert console("run", store, "--until-empty", "--now", FAR).returncode == 0
    if sample == "timer-partial":
        check = check_timer_store(store)
        assert check.lost == [] and check.duplicated == [] and check.delivered == 1112
        assert check.delay_delivered == check.delay_parked
    else:
        check = check_store(store)
        assert check.lost == 0 and check.duplicated == 0 and check.pending == 0 and check.problems == []


@pytest.mark.parametrize("sample", ["timer-partial", "delay-partial"])
def test_a_broken_record_the_brokers_recovery_would_cut_at_is_refused_before_a_delivery_is_appended(
        store_copy, tmp_path, sample):
    # A zeroed size field in the middle of the log (the file before the last, which the broker's
    # recoverNormally checks): a broker starting after the run would cut the log there and lose
    # every delivery appended after it.
    store = store_copy(sample)
    with Store(store) as s:
        mf = s.commitlog.files[-2]
        offsets = [r.commitLogOffset for r in s.commitlog.records(mf.start) if r.commitLogOffset < mf.end]
    at = offsets[len(offsets) // 2] - mf.start
    saved = mf.path.read_bytes()
    with open(mf.path, "r+b") as fh:
        fh.seek(at)
        fh.write(bytes(4))
    before = snapshot(store)
    # The reads say it too: inspect store and inspect delay exit 1, the metric is printed, exit 0.
    said = f"a broker starting now would cut the log at {mf.path}:{at} ("
    with Store(store) as s:
        slow, fast = broker_cut(s, data_end(s), fast=False), broker_cut(s, data_end(s), fast=True)
    assert slow == fast and slow.describe().startswith(said) and slow.dropped > 0
    shown = console("inspect", "store", store, "--json")
    assert shown.returncode == 1 and json.loads(shown.stdout)["brokerCut"] == {
        "file": str(mf.path), "offset": at, "physicalOffset": mf.start + at, "reason": slow.why,
        "droppedRecords": slow.dropped}
    assert "brokerCut" in [p["kind"] for p in json.loads(shown.stdout)["problems"]]
    delay = console("inspect", "delay", store, "--now", FAR)
    assert delay.returncode == 1 and delay.stderr.strip().splitlines() == [f"rmqdelay: {slow.describe()}"]
    metrics = console("inspect", "delay", store, "--now", FAR, "--format", "prometheus")
    assert metrics.returncode == 0 and \
        f'rmqdelay_broker_cut_records{{store="{store.name}"}} {slow.dropped}' in metrics.stdout.splitlines()
    result = console("run", store, "--until-empty", "--now", FAR)
    assert_one_line(result, 2, f"rmqdelay: {mf.path} at byte {at}: ", "a broker starting now would cut the log there",
                    f"restore {mf.path.name} from a replica or backup")
    assert snapshot(store) == before
    mf.path.write_bytes(saved)  # the way out: the file restored
    assert console("run", store, "--until-empty", "--now", FAR).returncode == 0
    if sample == "timer-partial":
        check = check_timer_store(store)
        assert check.lost == [] and check.duplicated == [] and check.delivered == 1112
    else:
        check = check_store(store)
        assert check.lost == 0 and check.duplicated == 0 and check.pending == 0 and check.problems == []
