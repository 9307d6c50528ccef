"""`rmqdelay timer repair`: mend a 5.x timer store offline (rmqdelay/timer/repair/ does
the work; this prints the plan and, with --execute, applies it under the store's lock).

The repair is imported inside the command: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table
from rich.text import Text
from rmqdelay.formats.constants import TIMER_MAGIC_DELETE

from rmqdelay.errors import EXIT_PROBLEMS, StoreError

from .common import console, emit_json, format_time_ms, parse_time_ms

if TYPE_CHECKING:
    from rmqdelay.timer.repair.plan import RepairPlan

app = typer.Typer(help="The 5.x timer store: repair it offline.", no_args_is_help=True)

_MAX_ROWS = 50


@app.command("repair")
def repair(
    store_dir: Path = typer.Argument(..., help="The broker store directory (storePathRootDir).", show_default=False),
    execute: bool = typer.Option(False, "--execute", help="Apply the repair (under the store's lock; every file "
                                                          "replaced keeps a backup). Without it nothing is written."),
    metrics: bool = typer.Option(False, "--metrics", help="Rewrite config/timermetrics with the true counts even "
                                                          "when nothing else changes (5.3.3's counts drift)."),
    now: Optional[str] = typer.Option(None, "--now", help="The broker's clock to judge the checkpoint's read time "
                                                          "by (ISO 8601 or epoch ms; default: now)."),
    broker_config: Optional[Path] = typer.Option(None, "--broker-config",
                                                 help="Read the timer settings from this broker.conf."),
    json_out: bool = typer.Option(False, "--json", help="JSON for scripts (docs/json-output.md)."),
) -> None:
    """Rebuild the timer wheel from the timer log (slot counts included), cut a torn timer log
    tail, drop units that point outside the commit log, set config/timercheck to a point
    consistent with the data and config/timermetrics to the true counts. A dry run unless
    --execute: it shows what would change, before and after."""
    from rmqdelay.store import Store
    from rmqdelay.store.kind import timer_files_present
    from rmqdelay.store.lock import BrokerLock
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.repair.execute import execute_repair, finish_interrupted
    from rmqdelay.timer.repair.planner import plan_repair

    wall_ms = time.time_ns() // 1_000_000
    now_ms = parse_time_ms(now) if now else wall_ms
    with Store(store_dir) as store:
        if not timer_files_present(store.path):
            raise StoreError(store.path, None, "a 5.x store with a timer store (timerlog/, timerwheel, "
                                               "config/timercheck); found none")
        if execute:
            with BrokerLock(store.path):
                finished = finish_interrupted(store.path)
                with TimerStore(store, broker_config) as ts:
                    plan = plan_repair(ts, now_ms, wall_ms, fix_metrics=metrics)
                execute_repair(store.path, plan)
            plan.interrupted = finished
        else:
            with TimerStore(store, broker_config) as ts:
                plan = plan_repair(ts, now_ms, wall_ms, fix_metrics=metrics)
    if json_out:
        emit_json(plan.as_json() | {"executed": execute})
    else:
        _print(plan, execute)
    if plan.leftAlone or (plan.changed and not execute):
        raise typer.Exit(EXIT_PROBLEMS)


def _print(plan: RepairPlan, executed: bool) -> None:
    from rmqdelay.timer.repair.plan import BELOW_LOG, LOG_BACKUP_DIR, PAST_LOG, WHEEL_BACKUP

    line = lambda text, style=None: console.print(Text(text, style=style), soft_wrap=True)  # noqa: E731
    line(f"timer repair of {plan.store}" + ("" if executed else " (dry run: nothing written)"), "bold")
    if plan.interrupted:
        line("an interrupted repair was found and finished first" if executed else
             "an interrupted repair was found: --execute finishes it before anything else", "yellow")
    line(f"timer log: {plan.units} unit(s) read, {plan.kept} kept, {len(plan.dropped)} dropped, "
         f"{len(plan.fixed)} field(s) set from their message, {plan.relinked} prevPos relinked, {plan.moved} moved")
    if plan.changes:
        table = Table(show_edge=False, header_style="bold")
        for name in ("file", "what", "before", "after"):
            table.add_column(name, overflow="fold")
        for c in plan.changes:
            table.add_row(Text(c.file), Text(c.item), Text(c.before), Text(c.after))
        console.print(table)
    if plan.dropped:
        line("units dropped (their old bytes stay in the backup)", "bold")
        table = Table(show_edge=False, header_style="bold")
        for name in ("offset", "slot time", "magic", "offsetPy", "sizePy", "why", "it pointed at"):
            table.add_column(name, justify="right" if name in ("offset", "magic", "offsetPy", "sizePy") else "left",
                             overflow="fold")
        for d in plan.dropped[:_MAX_ROWS]:
            table.add_row(str(d.offset), format_time_ms(d.slotTimeMs), str(d.magic), str(d.offsetPy), str(d.sizePy),
                          d.kind, Text(d.pointedAt))
        console.print(table)
        _more(plan.dropped)
        lost = sum(1 for d in plan.dropped if d.pending and not d.magic & TIMER_MAGIC_DELETE
                   and d.kind in (BELOW_LOG, PAST_LOG))
        if lost:
            line(f"{lost} of them were pending messages whose slot was not read yet: their records are not in "
                 "the commit log, so no broker can deliver them", "yellow")
    if plan.fixed:
        line("unit fields set from their message", "bold")
        table = Table(show_edge=False, header_style="bold")
        for name in ("offset", "field", "before", "after", "why"):
            table.add_column(name, justify="left" if name in ("field", "why") else "right", overflow="fold")
        for f in plan.fixed[:_MAX_ROWS]:
            table.add_row(str(f.offset), f.field, str(f.before), str(f.after), f.why)
        console.print(table)
        _more(plan.fixed)
    for s in plan.stray[:_MAX_ROWS]:
        line(f"not a unit: {s.file} at byte {s.offset}, {s.length} bytes ({s.head}...): cut")
    _more(plan.stray)
    for r in plan.remade[:_MAX_ROWS]:
        line(f"unit made: rmq_sys_wheel_timer queue offset {r.queueOffset} (commit log {r.offsetPy}, UNIQ_KEY "
             f"{r.uniqKey}, due {r.timerOutMs}) was enqueued and has no unit left: without one it is never delivered")
    _more(plan.remade)
    if plan.metricsDriftOnly:
        line("config/timermetrics drifts from the true counts (5.3.3's own counts do): left as it is; "
             "--metrics rewrites it", "yellow")
    for a in plan.leftAlone:
        line(f"left alone: {a.what}: {a.why}", "bold red")
    if not plan.changed:
        line("nothing to repair: the timer store is consistent; no file changed", "bold green")
    elif executed:
        line(f"repaired: {', '.join(plan.as_json()['filesWritten'] + plan.as_json()['filesRemoved'])}; the old "
             f"files are in config/*.bak, {WHEEL_BACKUP}, {LOG_BACKUP_DIR}/", "bold green")
    else:
        line(f"{len(plan.changes)} change(s) to make: run again with --execute to apply them", "bold")


def _more(rows: list) -> None:
    if len(rows) > _MAX_ROWS:
        console.print(Text(f"... and {len(rows) - _MAX_ROWS} more (--json lists them all)"))
