"""Which command repairs what a damaged store's error names (docs/cli.md: every refusal of a
damaged store names the command that repairs it). Pure string and path work: main.py words
every error with it, before any command module is needed."""

from __future__ import annotations

import shlex
from pathlib import Path

# The timer store's files, as a store holds them: `timer repair` rebuilds or rewrites each.
_TIMER_FILES = {"timerwheel": 1, "timercheck": 2, "timermetrics": 2}


def repair_hint(exc: Exception) -> str:
    """`` - `rmqdelay timer repair STORE` ...`` for an error in a timer store file that does not
    name its repair already; "" for any other."""
    path = getattr(exc, "path", None)
    if path is None or "timer repair" in str(exc):
        return ""
    path = Path(path)
    store = None
    if "timerlog" in path.parts:
        store = Path(*path.parts[:path.parts.index("timerlog")]) if path.parts.index("timerlog") else Path(".")
    elif path.name in _TIMER_FILES:
        store = path.parents[_TIMER_FILES[path.name] - 1]
    if store is None:
        return ""
    return (f" - `rmqdelay timer repair {shlex.quote(str(store))}` shows how it would be repaired (a dry run; "
            "--execute repairs it)")
