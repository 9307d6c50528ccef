"""Every metric `--format prometheus` gives of one store, in one reading: what `inspect delay`,
`inspect timer` (a 5.x store with a timer store), `inspect consumers`, `inspect dlq` and
`inspect store` (retention) print under it, each source read as those commands read it (a damaged file is a problem of that
source, counted in rmqdelay_problems, and the rest is read). `rmqdelay serve` serves it.

Nothing is printed here: the problems are returned, the caller says them. The store and
timer modules are imported inside the functions (`serve --help` loads none of them)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from .prometheus import Family

T = TypeVar("T")


@dataclass(slots=True)
class Reading:
    families: list[Family]
    problems: list[str] = field(default_factory=list)  # each one line, as inspect says it on stderr
    opened: bool = True  # False: the store itself could not be opened (nothing but its problem)


def _collect(problems: list[str], compute: Callable[[], T], fallback: T) -> T:
    """``compute()``, or ``fallback`` with its StoreError's one line in ``problems`` (as
    outputs.read_for under --format prometheus, without the stderr line)."""
    from rmqdelay.errors import StoreError

    try:
        return compute()
    except StoreError as exc:
        line = " ".join(str(exc).split())
        if line not in problems:
            problems.append(line)
        return fallback


def read_store(path: Path, label: str, now_ms: int, levels: dict[int, int],
               broker_config: Path | None = None) -> Reading:
    """One reading of the store at ``path``: every family, labelled ``store=label``, merged by
    name (rmqdelay_problems and rmqdelay_reading_timestamp_seconds once, a sample per source)."""
    from rmqdelay.errors import StoreError
    from rmqdelay.groups.retention import retention
    from rmqdelay.schedule.status import level_statuses
    from rmqdelay.store import Store
    from rmqdelay.store.consumers import consumer_lag, read_consumer_offsets
    from rmqdelay.store.deadletter import dead_letters
    from rmqdelay.store.kind import timer_files_present

    from rmqdelay.store.recovery import store_cut
    from .prometheus import (consumer_families, delay_level_families, dlq_families, problems_family,
                             retention_families, timer_families)

    problems: list[str] = []
    try:
        store = Store(path)
    except StoreError as exc:
        line = " ".join(str(exc).split())
        return Reading([problems_family(label, "store", [line])], [line], opened=False)
    families: list[Family] = []
    with store:
        mine: list[str] = []
        statuses = [s for level in sorted(levels)
                    for s in _collect(mine, lambda: level_statuses(store, levels, now_ms, [level]), [])]
        cut = store_cut(store)  # where a broker starting now would cut the log: inspect delay's stderr line too
        families += delay_level_families(statuses, label, now_ms, mine, cut)
        problems += mine + ([] if cut is None else [cut.describe()])

        if timer_files_present(store.path):  # a 4.x store has no timer: its families are left out
            mine = []
            families += timer_families(_collect(mine, lambda: _timer_status(store, broker_config, now_ms), None),
                                       label, now_ms, mine)
            problems += mine

        mine = []
        offsets = _collect(mine, lambda: read_consumer_offsets(store), None)
        rows = [] if offsets is None else _collect(mine, lambda: consumer_lag(store, offsets, now_ms), [])
        families += consumer_families(rows, label, now_ms, mine)
        problems += mine

        mine = []
        families += dlq_families(_collect(mine, lambda: dead_letters(store, now_ms), []), label, now_ms, mine)
        problems += mine

        mine = []  # inspect store's retention; its problems (and the store's) are source="store"
        families += retention_families(_collect(mine, lambda: retention(store, broker_config, now_ms), None), label)
        families.append(problems_family(label, "store", mine))
        problems += mine
    return Reading(merged(families), problems)


def _timer_status(store, broker_config: Path | None, now_ms: int) -> dict:
    """`inspect timer --json`'s summary (its default --hot), as timer_families takes it."""
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.status import timer_status

    with TimerStore(store, broker_config) as ts:
        return timer_status(ts, now_ms).as_json()


def merged(families: Iterable[Family]) -> list[Family]:
    """One family per name, in the order the names first come, the samples of each in order:
    an exposition names each family once, however many sources or stores fed it."""
    out: dict[str, Family] = {}
    for family in families:
        mine = out.get(family.name)
        if mine is None:
            out[family.name] = Family(family.name, family.help, family.type, list(family.samples))
        else:
            mine.samples.extend(family.samples)
            mine.help = mine.help or family.help
    return list(out.values())
