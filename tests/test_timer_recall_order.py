"""A timer message and its recall both still waiting in rmq_sys_wheel_timer when `run` starts
after their time (`send --delay-sec 8`, `send --cancel`, a run 12 s later or any time after): a
broker that never stopped had both in the slot and put nothing, so the run puts nothing either.
(A recall stored after its message's time is dropped, as doPut drops it; `send` refuses to make
one, RECALL_TIMESTAMP_INVALID.)"""

from __future__ import annotations

import json

import pytest
from clirun import run_cli

from rmqdelay.timer.audit import check_timer_store

pytestmark = pytest.mark.clock  # the 5.x sample's times (tests/wallclock.py)


def _send(capsys, path, *args) -> dict:
    result = run_cli(capsys, "send", path, *args, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out.splitlines()[0])


@pytest.mark.parametrize("now", [12_000, None])
def test_a_recall_waiting_with_its_message_past_their_time_is_honoured(store_copy, capsys, now):
    path = store_copy("timer-fresh")
    sent = _send(capsys, path, "--topic", "T", "--delay-sec", "8")
    _send(capsys, path, "--cancel", sent["uniqKey"], "--topic", "T")
    at = sent["storeTimestamp"] + now if now else 4_102_444_800_000
    result = run_cli(capsys, "run", path, "--until-empty", "--now", str(at), "--json")
    assert result.code == 0, result.err
    events = [json.loads(line) for line in result.out.splitlines()]
    mine = [e for e in events if e.get("uniqKey") == sent["uniqKey"]]
    assert [e["event"] for e in mine] == ["timerCancelled"]
    assert not [e for e in events if e.get("kind") == "cancelDropped"]
    if now is None:  # everything due: the reference set, the recalled message not among it
        check = check_timer_store(path)
        assert check.lost == [] and check.duplicated == [] and check.delivered == 1112
