"""What `inspect` would warn of, for the report: a timer store's findings (a restart that
would skip messages, cancellations that miss, a wheel of another precision) read as `inspect
timer` reads them, so the report's summary band never says "none found" where `inspect` of
the same store warns (docs/analyze.md, "The report")."""

from __future__ import annotations

from rmqdelay.analysis.timer import timer_stores
from rmqdelay.store import Store
from rmqdelay.store.ref import StoreRef
from rmqdelay.timer import TimerStore
from rmqdelay.timer.status import timer_status


def inspect_findings(stores: list[StoreRef], at_ms: int) -> dict[str, dict[str, int]]:
    """Per store with a timer store: ``TimerStatus.findings()`` at ``at_ms``."""
    found = {}
    for ref in timer_stores(stores):
        with Store(ref.path) as store, TimerStore(store) as ts:
            found[ref.name] = timer_status(ts, at_ms, hot=0).findings()
    return found
