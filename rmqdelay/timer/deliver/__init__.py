"""The timer wheel of a 5.x store, delivered offline as TimerMessageStore (5.3.3) delivers it:
``TimerEngine`` (engine.py) runs the enqueue (enqueue.py) and the dequeue (dequeue.py), publishes
its state (publish.py), and after a kill takes up what the killed run left (replay.py).

Exactly once, kill -9 included. Every output (delivery or re-put) goes through the one writer;
``publish`` makes the commit log durable, then the timer log and the wheel, then renames in
``config/rmqdelay.timer.json`` (where the timer state is exact: commit log offset X, timer log
end) and ``config/timercheck`` together. A run that finds its own state file replays: units past
the published timer log end are adopted (each by the queue entry after the published queue
offset whose record - offset and size - it points at; a unit is only ever appended for a record
already written to the commit log file), and the outputs in the commit log past X are matched, by everything
but the clock, against what the engine puts again - each found one is not put twice. Its
write clock is at least the newest TIMER_DEQUEUE_MS found there, so it reaches every slot the
killed run had read.
"""

from .engine import TimerEngine

__all__ = ["TimerEngine"]
