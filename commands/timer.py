"""`rmqdelay timer repair`: mend a 5.x timer store offline (rmqdelay/timer/repair/ does
the work; this prints the plan and, with --execute, applies it under the store's lock).

The repair is imported inside the command: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rmqdelay.formats.constants import TIMER_MAGIC_DELETE

from rmqdelay.errors import EXIT_PROBLEMS, StoreError

from .group import typer_app
from . import options
from .common import console, emit_json, format_date_ms, parse_time_ms
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.timer.repair.plan import RepairPlan

app = typer_app("The 5.x timer store: repair it offline.\n\nExample: rmqdelay timer repair STORE")

_MAX_ROWS = 50


@app.command("repair")
def repair(
    store_dir: Path = options.store(),
    execute: bool = typer.Option(False, "--execute", help="Apply the repair (under the store's lock; every file "
                                                          "replaced keeps a backup). Without it nothing is written."),
    metrics: bool = typer.Option(False, "--metrics", help="Rewrite config/timermetrics with the true counts even "
                                                          "when nothing else changes (5.3.3's counts drift)."),
    now: Optional[str] = options.now("the checkpoint's read time is judged by (the broker's clock)"),
    broker_config: Optional[Path] = options.broker_config("the timer settings"),
    json_out: bool = options.json_out("The plan as one JSON object (docs/cli.md lists the fields)."),
    verbose: bool = typer.Option(False, "--verbose", help="List every unit dropped, set, cut or made (the summary "
                                                          "counts them by kind; --json has them too)."),
    wide: bool = options.wide(),
) -> None:
    """Rebuild the timer wheel from the timer log (slot counts included), cut a torn timer log
    tail, drop units that point outside the commit log, set config/timercheck to a point
    consistent with the data and config/timermetrics to the true counts. A dry run unless
    --execute: it shows what would change, before and after.

    Example: rmqdelay timer repair STORE --execute
    """
    from rmqdelay.store import Store
    from rmqdelay.store.kind import timer_files_present
    from rmqdelay.store.layout import refuse_unwritable
    from rmqdelay.store.lock import BrokerLock
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.repair.execute import execute_repair, finish_interrupted
    from rmqdelay.timer.repair.planner import plan_repair

    wall_ms = time.time_ns() // 1_000_000
    now_ms = parse_time_ms(now, "--now") if now else wall_ms
    if execute:
        refuse_unwritable(store_dir)  # a DLedger or RocksDB store: its layout, not its timer files
    with Store(store_dir) as store:
        if not timer_files_present(store.path):
            raise StoreError(store.path, None, "a 5.x store with a timer store (timerlog/, timerwheel, "
                                               "config/timercheck); found none")
        if execute:
            with BrokerLock(store.path):
                finished = finish_interrupted(store.path)
                with TimerStore(store, broker_config, lenient=True) as ts:
                    plan = plan_repair(ts, now_ms, wall_ms, fix_metrics=metrics)
                execute_repair(store.path, plan)
            plan.interrupted = finished
        else:
            with TimerStore(store, broker_config, lenient=True) as ts:
                plan = plan_repair(ts, now_ms, wall_ms, fix_metrics=metrics)
    if json_out:
        emit_json(plan.as_json() | {"executed": execute})
    else:
        _print(plan, execute, wide, verbose)
    if plan.leftAlone or (plan.changed and not execute):
        raise typer.Exit(EXIT_PROBLEMS)


def _shown(item: str, value: str) -> str:
    """A value of the changes table as people read it: an instant as a date (its epoch ms
    beside it, what the file holds), a DataVersion's timestamp too."""
    counter, at, stamp = value.partition("@")
    if at and counter.isdigit() and stamp.isdigit():
        return f"{counter} @ {format_date_ms(int(stamp))}"
    if item.endswith(("TimeMs", "Timestamp")) and value.lstrip("-").isdigit():
        return f"{format_date_ms(int(value))} ({value})"
    return value


def _counted(rows, key) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[key(r)] = counts.get(key(r), 0) + 1
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _print(plan: RepairPlan, executed: bool, wide: bool, verbose: bool = False) -> None:
    from rich.text import Text

    from rmqdelay.timer.repair.plan import BELOW_LOG, LOG_BACKUP_DIR, PAST_LOG, WHEEL_BACKUP

    line = lambda text, style=None: console.print(Text(text, style=style))  # noqa: E731
    line(f"timer repair of {plan.store}" + ("" if executed else " (dry run: nothing written)"), "bold")
    if plan.interrupted:
        line("an interrupted repair was found and finished first" if executed else
             "an interrupted repair was found: --execute finishes it before anything else", "yellow")
    line(f"timer log: {plan.units} unit(s) read, {plan.kept} kept, {len(plan.dropped)} dropped, "
         f"{len(plan.fixed)} field(s) set from their message, {plan.relinked} prevPos relinked, {plan.moved} moved")
    hidden: list[str] = []
    if plan.changes:
        hidden += print_table(console, [Column(name, "left", fold=True) for name in ("file", "what", "before", "after")],
                              [[Text(c.file), Text(c.item), Text(_shown(c.item, c.before)),
                                Text(_shown(c.item, c.after))] for c in plan.changes],
                              wide=wide)
    if not verbose:
        _summary(plan, line)
    if plan.dropped and verbose:
        line("units dropped (their old bytes stay in the backup)", "bold")
        columns = [Column("offset"), Column("slot time", "left"), Column("magic", drop=2), Column("message at"),
                   Column("message size", drop=1), Column("why", "left", fold=True), Column("it pointed at", "left", fold=True)]
        hidden += print_table(console, columns, [[str(d.offset), format_date_ms(d.slotTimeMs), str(d.magic),
                                                  str(d.offsetPy), str(d.sizePy), d.kind, Text(d.pointedAt)]
                                                 for d in plan.dropped[:_MAX_ROWS]], wide=wide)
        _more(plan.dropped)
    if plan.dropped:
        lost = sum(1 for d in plan.dropped if d.pending and not d.magic & TIMER_MAGIC_DELETE
                   and d.kind in (BELOW_LOG, PAST_LOG))
        if lost:
            line(f"{lost} of them were pending messages whose slot was not read yet: their records are not in "
                 "the commit log, so no broker can deliver them", "yellow")
    if plan.fixed and verbose:
        line("unit fields set from their message", "bold")
        columns = [Column("offset"), Column("field", "left"), Column("before"), Column("after"),
                   Column("why", "left", fold=True)]
        hidden += print_table(console, columns, [[str(f.offset), f.field, str(f.before), str(f.after), Text(f.why)]
                                                 for f in plan.fixed[:_MAX_ROWS]], wide=wide)
        _more(plan.fixed)
    for s in plan.stray[:_MAX_ROWS] if verbose else ():
        line(f"not a unit: {s.file} at byte {s.offset}, {s.length} bytes ({s.head}...): cut")
    if verbose:
        _more(plan.stray)
    for r in plan.remade[:_MAX_ROWS] if verbose else ():
        line(f"unit made: rmq_sys_wheel_timer queue offset {r.queueOffset} (commit log {r.offsetPy}, UNIQ_KEY "
             f"{r.uniqKey}, due {format_date_ms(r.timerOutMs)}) was enqueued and has no unit left: without one it "
             "is never delivered")
    if verbose:
        _more(plan.remade)
    if plan.metricsDriftOnly:
        line("config/timermetrics drifts from the true counts (5.3.3's own counts do): left as it is; "
             "--metrics rewrites it", "yellow")
    note = hidden_note(hidden)
    if note:
        line(note, "dim")
    for a in plan.leftAlone:
        line(f"left alone: {a.what}: {a.why}", "bold red")
    if not plan.changed:
        line("nothing to repair: the timer store is consistent; no file changed", "bold green")
    elif executed:
        line(f"repaired: {', '.join(plan.as_json()['filesWritten'] + plan.as_json()['filesRemoved'])}; the old "
             f"files are in config/*.bak, {WHEEL_BACKUP}, {LOG_BACKUP_DIR}/", "bold green")
    else:
        line(f"{len(plan.changes)} change(s) to make: run again with --execute to apply them", "bold")


def _summary(plan: RepairPlan, line) -> None:
    """The units the repair touches, counted by kind (--verbose lists them)."""
    said = []
    if plan.dropped:
        said.append(f"{len(plan.dropped)} unit(s) dropped ({_counted(plan.dropped, lambda d: d.kind)})")
    if plan.fixed:
        said.append(f"{len(plan.fixed)} field(s) set from their message ({_counted(plan.fixed, lambda f: f.field)})")
    if plan.stray:
        said.append(f"{len(plan.stray)} stretch(es) that are not units cut ({sum(s.length for s in plan.stray)} bytes)")
    if plan.remade:
        due = sorted(r.timerOutMs for r in plan.remade)
        said.append(f"{len(plan.remade)} unit(s) made for enqueued messages without one (due "
                    f"{format_date_ms(due[0])}" + (f" to {format_date_ms(due[-1])})" if len(due) > 1 else ")"))
    if said:
        line("; ".join(said) + " - --verbose lists them, --json too")


def _more(rows: list) -> None:
    from rich.text import Text

    if len(rows) > _MAX_ROWS:
        console.print(Text(f"... and {len(rows) - _MAX_ROWS} more: --json lists them all", style="dim"))
