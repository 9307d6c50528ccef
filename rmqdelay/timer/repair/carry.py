"""The state an rmqdelay run published (config/rmqdelay.timer.json), carried through a repair.

A run stopped by a kill has put outputs past the state it published; the next run finds its
own state (config/timercheck equal to the one named there), replays from its commit log
offset and puts none of them twice. A repair rewrites config/timercheck: it rewrites the state
with it - same commit log offset and read clock, the new checkpoint and timer log end - so the
next run still finds it its own and replays. Left behind, the run would take the repaired
checkpoint as a broker's and deliver every output of the stopped run a second time.

When config/timercheck itself is damaged, the checkpoint the state names is the one rmqdelay
published last: the repair resumes from it, not from one derived from the commit log.
"""

from __future__ import annotations

from rmqdelay.errors import StoreError
from rmqdelay.formats.timercheck import TimerCheckpoint

from ..runstate import TimerRunState, checkpoint_from_json, own_checkpoint, read_timer_state, state_bytes
from ..store import TimerStore
from .plan import Change, LeftAlone, RepairPlan

STATE_NAME = "config/rmqdelay.timer.json"


def run_state(ts: TimerStore, cp: TimerCheckpoint | None, damaged: bool,
              plan: RepairPlan) -> tuple[TimerRunState | None, TimerCheckpoint | None]:
    """(the state, the checkpoint to repair from) when the store's checkpoint is one an
    rmqdelay run published - or config/timercheck is damaged and the state names the last one
    it published; (None, ``cp``) otherwise."""
    try:
        state = read_timer_state(ts.store.path)
    except StoreError:
        plan.leftAlone.append(LeftAlone(STATE_NAME, "not the JSON rmqdelay writes: the repair takes config/timercheck "
                                                    "as the broker's, and `run` refuses until the file is removed"))
        return None, cp
    if state is None:
        return None, cp
    if damaged:
        try:
            return state, checkpoint_from_json(state.timercheck)
        except (KeyError, TypeError, ValueError):
            return None, cp
    own = own_checkpoint(state, cp)
    return (state, own) if own is not None else (None, cp)


def carry(state: TimerRunState, found: TimerCheckpoint | None, new: TimerCheckpoint, log_end: int,
          plan: RepairPlan) -> None:
    """The state rewritten beside the repaired checkpoint ``new``: the next run finds it its own.
    ``found``: what config/timercheck held (None: unreadable), named as the previous one, as a
    run publishes it."""
    carried = TimerRunState(state.commitLogOffset, log_end, new.as_json(),
                            found.as_json() if found is not None else state.timercheck, state.readTimeMs)
    plan.state = state_bytes(carried)
    plan.changes.append(Change(STATE_NAME, "timerLogEnd", str(state.timerLogEnd), str(log_end)))
