"""A damaged index never blocks delivery: index/ is derived data. An index file whose header is
zeroed, that is truncated or empty is set aside into index.damaged/ (kept, outside index/ where
the broker would load it), said in one line, and indexed again from the commit log; `run`
delivers everything and the index then verifies."""

from __future__ import annotations

import os

import pytest
from clirun import console

FAR = "4102444800000"


def damage(path, how: str) -> None:
    if how == "header-zeroed":
        with open(path, "r+b") as fh:
            fh.write(bytes(40))
    elif how == "truncated":
        os.truncate(path, 1000)
    else:
        os.truncate(path, 0)


@pytest.mark.parametrize("how", ["header-zeroed", "truncated", "empty"])
def test_a_damaged_index_file_is_set_aside_and_run_delivers_everything(store_copy, how):
    store = store_copy("delay-partial")
    index = sorted((store / "index").iterdir())[-1]
    original = index.read_bytes()
    damage(index, how)
    kept = index.read_bytes()
    result = console("run", store, "--until-empty", "--now", FAR)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "delivered 1251" in result.stdout
    said = [line for line in result.stderr.splitlines() if "set aside" in line]
    assert len(said) == 1 and index.name in said[0], result.stderr
    # The damaged bytes are kept, out of the broker's way.
    assert (store / "index.damaged" / index.name).read_bytes() == kept != original
    assert console("inspect", "index", store, "--verify").returncode == 0  # rebuilt whole
