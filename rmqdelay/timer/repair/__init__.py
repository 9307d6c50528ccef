"""`rmqdelay timer repair`: put a 5.3.3 timer store back into a state the broker resumes from
without losing or delivering anything twice.

What is mended, all derived from the timer log and the commit log (never from the wheel):

- the timer log: whatever is not a unit (a torn tail, garbage in a file, a file without its
  BLANK) is cut; units that point outside the commit log (below its first offset after
  retention, past its end after a truncation), at no record or at a record of another topic
  are dropped, each reported with what it pointed at; fields that disagree with the unit's own
  timer message (sizePy, hashCodeOfRealTopic, the DELETE bit, the slot of a non-roll unit) are
  set from the message; every prevPos is relinked so each slot's units form one chain in log
  order. When units go, the units after them move up (the layout TimerLog.append would have
  written: 52-byte units back to back, a BLANK closing every full file), so no hole is left
  for the broker's recovery to stop at.
- the wheel (``timerwheel``) is rebuilt from the log: firstPos, lastPos and num of every slot
  (the broker's own recovery revises the positions but never the counts).
- ``config/timercheck`` is set to a point consistent with the data (see ``planner._checkpoint``).
- ``config/timermetrics`` gets the true pending counts when anything else changes (or when
  asked): 5.3.3's own counts drift, so drift alone is only reported.

The parts: planner.py (``plan_repair``: what changes, read only), fromlog.py (what is taken
from the commit log alone: later records of a key, a checkpoint rebuilt when it cannot be
trusted), layout.py (the kept units laid out and the wheel rebuilt from them), plan.py (``RepairPlan``: what is shown and written),
execute.py (``execute_repair``: the writing, and the backups that keep every old byte).
"""
