"""config/rmqdelay.timer.json: where the timer state rmqdelay published is exact (the commit log
offset X, the timer log end, the read clock) beside the config/timercheck it published with it.
A run that finds its own file (timercheck equal to the one named there) replays from it; any
other timercheck is taken as the broker's, as it is."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.delayoffset import DataVersion
from rmqdelay.formats.timercheck import TimerCheckpoint
from rmqdelay.store.durable import config_dir
from rmqdelay.store.fileio import read_file

TIMER_STATE_FILE = "rmqdelay.timer.json"


def timer_state_path(store_path: Path) -> Path:
    return config_dir(store_path) / TIMER_STATE_FILE


@dataclass(slots=True)
class TimerRunState:
    commitLogOffset: int
    timerLogEnd: int
    timercheck: dict
    previousTimercheck: dict | None
    # the engine's read clock: every slot before it was read by rmqdelay (ahead of
    # timercheck's lastReadTimeMs when it read past the wall clock)
    readTimeMs: int | None = None


def read_timer_state(store_path: Path) -> TimerRunState | None:
    path = timer_state_path(store_path)
    data = read_file(path)
    if data is None:
        return None
    try:
        doc = json.loads(data.decode("utf-8"))
        read = doc.get("readTimeMs")
        return TimerRunState(int(doc["commitLogOffset"]), int(doc["timerLogEnd"]), dict(doc["timercheck"]),
                             doc.get("previousTimercheck"), None if read is None else int(read))
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        raise StoreError(path, 0, 'the timer state rmqdelay writes ({"commitLogOffset", "timerLogEnd", '
                                  '"timercheck", ...}); remove it to start from config/timercheck as the broker '
                                  'would') from None


def state_bytes(state: TimerRunState) -> bytes:
    return (json.dumps({"commitLogOffset": state.commitLogOffset, "timerLogEnd": state.timerLogEnd,
                        "readTimeMs": state.readTimeMs, "timercheck": state.timercheck,
                        "previousTimercheck": state.previousTimercheck}, indent=1) + "\n").encode()


def checkpoint_from_json(doc: dict) -> TimerCheckpoint:
    dv = doc.get("dataVersion", {})
    return TimerCheckpoint(int(doc["lastReadTimeMs"]), int(doc["lastTimerLogFlushPos"]),
                           int(doc["lastTimerQueueOffset"]), int(doc["masterTimerQueueOffset"]),
                           DataVersion(int(dv.get("counter", 0)), int(dv.get("stateVersion", 0)),
                                       int(dv.get("timestamp", 0))))


def own_checkpoint(state: TimerRunState | None, cp: TimerCheckpoint | None) -> TimerCheckpoint | None:
    """The checkpoint rmqdelay published, when config/timercheck is one it published with
    ``state`` (the state file is renamed first: when the file is still the previous one, the
    newer of the two); None when the file is not rmqdelay's (a broker's, or no state)."""
    if state is None or cp is None:
        return None
    found = cp.as_json()
    if found == state.timercheck:
        return cp
    if found == state.previousTimercheck:
        return checkpoint_from_json(state.timercheck)
    return None
