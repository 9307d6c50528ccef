"""Packed sample stores: `rmqdelay samples unpack` gives back every byte, with the wheel's
zeros as holes, and refuses what it must."""

from __future__ import annotations

import filecmp
import os

import pytest
from clirun import run_cli
from conftest import SAMPLES, TIMER_SAMPLES

from rmqdelay.samples.pack import pack, packed_samples


def same_tree(a, b) -> bool:
    cmp = filecmp.dircmp(a, b)
    if cmp.left_only or cmp.right_only or cmp.diff_files or cmp.funny_files:
        return False
    mismatch = filecmp.cmpfiles(a, b, cmp.common_files, shallow=False)[1:]
    return not any(mismatch) and all(same_tree(os.path.join(a, d), os.path.join(b, d)) for d in cmp.common_dirs)


def test_every_timer_sample_is_packed_small():
    assert set(TIMER_SAMPLES) <= set(packed_samples())
    for name in TIMER_SAMPLES:
        assert (SAMPLES / name / "store.tar.xz").stat().st_size < 2_000_000


def test_unpack_gives_the_store_back_with_the_wheel_sparse(tmp_path, capsys, sample_store):
    dest = tmp_path / "partial"
    result = run_cli(capsys, "samples", "unpack", "timer-partial", dest)
    assert result.code == 0, result.err
    assert same_tree(dest, sample_store("timer-partial"))
    wheel = (dest / "timerwheel").stat()
    assert wheel.st_size == 38_707_200
    assert wheel.st_blocks * 512 < 2_000_000  # the zero runs are holes


@pytest.mark.slow  # byte identity on a store of real size: CI runs it, the quick loop does not
def test_packing_is_deterministic_and_round_trips(tmp_path, sample_store):
    store = sample_store("timer-fresh")
    pack(store, tmp_path / "a.tar.xz")
    pack(store, tmp_path / "b.tar.xz")
    assert (tmp_path / "a.tar.xz").read_bytes() == (tmp_path / "b.tar.xz").read_bytes()
    from rmqdelay.samples.pack import unpack

    unpack(tmp_path / "a.tar.xz", tmp_path / "again")
    assert same_tree(tmp_path / "again", store)


def test_unpack_refuses_a_non_empty_directory_and_unknown_names(tmp_path, capsys):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    result = run_cli(capsys, "samples", "unpack", "timer-fresh", tmp_path / "full")
    assert result.code == 2 and "new or empty directory" in result.err and "Traceback" not in result.err
    result = run_cli(capsys, "samples", "unpack", "no-such-sample", tmp_path / "new")
    assert result.code == 2 and "timer-partial" in result.err
    bad = tmp_path / "bad.tar.xz"
    bad.write_bytes(b"not xz at all")
    result = run_cli(capsys, "samples", "unpack", str(bad), tmp_path / "new2")
    assert result.code == 2 and str(bad) in result.err and len(result.err.strip().splitlines()) == 1
