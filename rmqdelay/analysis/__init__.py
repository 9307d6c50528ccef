"""`rmqdelay analyze`, the embedded engine: backlog, lateness and retries over one or many
stores, in this process (pyarrow + numpy); backlog and lateness include the 5.x timer wheel
(``timer``). docs/analyze.md describes every figure; the Spark engine (rmqdelay.spark.jobs)
computes the same tables.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa

from rmqdelay.errors import UsageError
from rmqdelay.store import Store
from rmqdelay.store.kind import timer_files_present
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.ref import StoreRef, store_ref
from rmqdelay.store.scan import Skipped, delay_offsets, schedule_units

KINDS = ("backlog", "lateness", "retries")

__all__ = ["KINDS", "AnalysisResult", "Skipped", "StoreRef", "analyze", "check_stores", "checked_request",
           "store_ref"]


@dataclass
class AnalysisResult:
    kind: str  # "backlog" | "lateness" | "retries"
    tables: dict[str, pa.Table]  # result tables, each sorted by its key columns
    messages: pa.Table  # the per-message table behind them
    skipped: list[Skipped] = field(default_factory=list)
    # The per-message table behind the timer tables (5.x stores: backlog, lateness), or None.
    timer_messages: pa.Table | None = None


def checked_request(kind: str, stores: list[StoreRef], delay_levels: dict[int, int] | None) -> dict[int, int]:
    """Refuse an unknown analysis or two stores of one name (both engines); the delay levels to use."""
    if kind not in KINDS:
        raise UsageError(f"unknown analysis {kind!r}; one of {', '.join(KINDS)}")
    names = [s.name for s in stores]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"two stores named {dupes[0]!r}; name them NAME=PATH")
    return parse_delay_levels() if delay_levels is None else dict(delay_levels)


def check_stores(stores: list[StoreRef]) -> None:
    """What every analysis reads of each store besides the commit log -- the directory,
    config/delayOffset.json, the schedule units, a 5.x store's timer wheel and checkpoint --
    read once up front, so that a bad store stops the run in one line before any scan (and,
    with Spark, before any task)."""
    from rmqdelay.timer.store import TimerStore

    for ref in stores:
        with Store(ref.path) as store:
            delay_offsets(store)
            schedule_units(store, ref.name)
            if timer_files_present(ref.path):
                with TimerStore(store) as ts:
                    ts.checkpoint()


def analyze(kind: str, stores: list[StoreRef], at_ms: int, *, delay_levels: dict[int, int] | None = None,
            keep_going: bool = False, done: Callable[[StoreRef], None] | None = None) -> AnalysisResult:
    """Run one analysis over ``stores`` as of ``at_ms``, one store at a time (so memory holds
    one store's rows at most; ``done`` is called after each). Every result table is keyed by
    store first, so the stores' tables, taken in name order and joined end to end, are the
    tables of one run over all of them."""
    levels = checked_request(kind, stores, delay_levels)
    if kind == "backlog":
        from .backlog import backlog as run
    elif kind == "lateness":
        from .lateness import lateness as run
    else:
        from .retries import retries as run
    if not stores:
        return run([], at_ms, levels, keep_going=keep_going)
    parts: dict[str, AnalysisResult] = {}
    for ref in sorted(stores, key=lambda r: r.name):
        parts[ref.name] = run([ref], at_ms, levels, keep_going=keep_going)
        if done is not None:
            done(ref)
    ordered = list(parts.values())
    tables = {name: pa.concat_tables([part.tables[name] for part in ordered]) for name in ordered[0].tables}
    messages = pa.concat_tables([part.messages for part in ordered])
    timer = None
    if ordered[0].timer_messages is not None:
        timer = pa.concat_tables([part.timer_messages for part in ordered])
    return AnalysisResult(kind, tables, messages, [s for ref in stores for s in parts[ref.name].skipped], timer)
