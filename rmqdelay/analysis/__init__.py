"""`rmqdelay analyze`, the embedded engine: backlog, lateness and retries over one or many
stores, in this process (pyarrow + numpy); backlog and lateness include the 5.x timer wheel
(``timer``). docs/analyze.md describes every figure; the Spark engine (rmqdelay.spark.jobs)
computes the same tables.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.store import Store
from rmqdelay.store.kind import timer_files_present
from rmqdelay.store.levels import parse_delay_levels
from rmqdelay.store.ref import StoreRef, store_ref
from rmqdelay.store.scan import UNIT_CHUNK, Skipped, delay_offsets, schedule_unit_chunks

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
    with Spark, before any task). The units are read a chunk at a time."""
    from rmqdelay.timer.store import TimerStore

    for ref in stores:
        with Store(ref.path) as store:
            delay_offsets(store)
            for queue_id in store.topics().get(RMQ_SYS_SCHEDULE_TOPIC, []):
                for _ in schedule_unit_chunks(store, ref.name, queue_id + 1, rows=UNIT_CHUNK):
                    pass
            if timer_files_present(ref.path):
                with TimerStore(store) as ts:
                    ts.checkpoint()


def analyze(kind: str, stores: list[StoreRef], at_ms: int, *, delay_levels: dict[int, int] | None = None,
            keep_going: bool = False, done: Callable[[StoreRef], None] | None = None, memory: int | None = None,
            messages_to: Path | None = None, with_messages: bool = True) -> AnalysisResult:
    """Run one analysis over ``stores`` as of ``at_ms``, one store at a time (``done`` is
    called after each), its rows and their matching within about ``memory`` bytes (spill.py;
    the default: RMQDELAY_ANALYZE_MEMORY, else 256 MiB). Every result table is keyed by store
    first, so the stores' tables, taken in name order and joined end to end, are the tables
    of one run over all of them.

    The per-message table (result.messages): collected and sorted (the default; it grows with
    the stores), written as Parquet to ``messages_to`` as it is made (each part sorted;
    result.messages is then empty, and a 5.x store's timer messages go beside it as
    KIND_timer_messages.parquet), or not made at all (``with_messages`` false)."""
    from .spill import Messages

    levels = checked_request(kind, stores, delay_levels)
    module = importlib.import_module(f".{kind}", __name__)  # backlog.py, lateness.py, retries.py
    run = getattr(module, kind)
    sink = Messages(module.MESSAGES_SCHEMA, module.MESSAGES_ORDER, messages_to, with_messages)
    parts: dict[str, AnalysisResult] = {}
    try:
        for ref in sorted(stores, key=lambda r: r.name):
            parts[ref.name] = run([ref], at_ms, levels, keep_going=keep_going, memory=memory, messages=sink)
            if done is not None:
                done(ref)
        if not stores:
            parts[""] = run([], at_ms, levels, keep_going=keep_going, memory=memory, messages=sink)
    except BaseException:
        sink.discard()
        raise
    messages = sink.table()
    ordered = list(parts.values())
    tables = {name: pa.concat_tables([part.tables[name] for part in ordered]) for name in ordered[0].tables}
    timer = None
    if ordered[0].timer_messages is not None:
        timer = pa.concat_tables([part.timer_messages for part in ordered])
        if messages_to is not None and with_messages:
            from .arrowfiles import write_parquet
            from .names import public_table

            write_parquet(public_table(timer), messages_to.with_name(f"{kind}_timer_messages.parquet"))
            timer = timer.schema.empty_table()
    skipped = [s for ref in stores for s in parts[ref.name].skipped]
    return AnalysisResult(kind, tables, messages, skipped, timer)
