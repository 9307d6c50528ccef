"""`rmqdelay offsets show|reset STORE`: read and move the delay offsets, safely.

The store and the scheduler are imported inside the commands: `--help` must not load them
(tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from rmqdelay.errors import UsageError

from .common import (
    console,
    emit_json,
    err_console,
    format_duration_ms,
    format_time_ms,
    parse_time_ms,
)
from .render import offset_cell, offset_notes
from .run import parse_levels, resolve_delay_levels

if TYPE_CHECKING:
    from rmqdelay.schedule.reset import ResetTarget

app = typer.Typer(help="Read and move the delay offsets (config/delayOffset.json).", no_args_is_help=True)


def _last_persisted_ms(store: Path) -> int | None:
    from rmqdelay.schedule.offsets import delay_offset_path

    try:
        return delay_offset_path(store).stat().st_mtime_ns // 1_000_000
    except OSError:  # absent, or no file to stat (a symlink loop): the broker reads the .bak then
        return None


@app.command("show")
def show(
    store: Path = typer.Argument(..., metavar="STORE", help="The broker store directory."),
    levels: str | None = typer.Option(None, "--levels", help="Only these levels, e.g. 1,3,5."),
    now: str | None = typer.Option(None, "--now", help="The instant 'due now' is judged at (ISO 8601 or epoch ms)."),
    delay_levels: str | None = typer.Option(None, "--delay-levels", help='messageDelayLevel, e.g. "1s 5s 10s".'),
    broker_config: Path | None = typer.Option(None, "--broker-config", help="Read messageDelayLevel from broker.conf."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per level."),
) -> None:
    """Per level: delay, offset, min, max, pending, due now, next due time, last persisted time."""
    from rmqdelay.schedule.scheduler import wall_clock_ms
    from rmqdelay.schedule.status import level_statuses
    from rmqdelay.store import Store

    table_levels = resolve_delay_levels(delay_levels, broker_config)
    chosen = _check_levels(parse_levels(levels), table_levels)
    now_ms = parse_time_ms(now) if now else wall_clock_ms()
    with Store(store) as s:
        statuses = level_statuses(s, table_levels, now_ms, chosen)
    persisted_ms = _last_persisted_ms(store)
    if json_out:
        for st in statuses:
            emit_json({**st.as_json(), "lastPersistedTimestamp": persisted_ms})
        return
    # The heading on a line of its own: a long store path must not wrap it to the table's width.
    console.print(f"delay offsets of {store} (last persisted {format_time_ms(persisted_ms)})",
                  soft_wrap=True, highlight=False)
    table = Table("level", "delay", "offset", "min", "max", "pending", "due now", "next due")
    for st in statuses:
        table.add_row(str(st.level), format_duration_ms(st.delayMs), offset_cell(st),
                      str(st.minOffset), str(st.maxOffset), str(st.pending), str(st.dueNow),
                      format_time_ms(st.nextDueTimestamp))
    console.print(table)
    for note in offset_notes(statuses):
        console.print(note, soft_wrap=True, highlight=False, markup=False)


def _check_levels(chosen: list[int] | None, table: dict[int, int]) -> list[int] | None:
    for level in chosen or []:
        if level not in table:
            raise UsageError(f"level {level}: not one of the {len(table)} delay levels")
    return chosen


def _target(to_earliest: bool, to_latest: bool, to_offset: int | None, to_datetime: str | None,
            by_duration: str | None, shift_by: int | None) -> ResetTarget:
    from rmqdelay.schedule.reset import ResetTarget, parse_iso_duration_ms

    given = [(name, value) for name, value in (
        ("to-earliest", to_earliest or None), ("to-latest", to_latest or None), ("to-offset", to_offset),
        ("to-datetime", to_datetime), ("by-duration", by_duration), ("shift-by", shift_by)) if value is not None]
    if len(given) != 1:
        raise UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, --to-datetime, "
                         "--by-duration, --shift-by")
    kind, value = given[0]
    if kind == "to-datetime":
        return ResetTarget(kind, parse_time_ms(value, "--to-datetime"))
    if kind == "by-duration":
        return ResetTarget(kind, parse_iso_duration_ms(value))
    if kind in ("to-earliest", "to-latest"):
        return ResetTarget(kind)
    return ResetTarget(kind, int(value))


@app.command("reset")
def reset(
    store: Path = typer.Argument(..., metavar="STORE", help="The broker store directory."),
    level: list[int] = typer.Option([], "--level", help="A level to move (repeat for more)."),
    all_levels: bool = typer.Option(False, "--all-levels", help="Move every level."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="The first unit still in the queue."),
    to_latest: bool = typer.Option(False, "--to-latest", help="The end of the queue: nothing pending."),
    to_offset: int | None = typer.Option(None, "--to-offset", help="This unit offset."),
    to_datetime: str | None = typer.Option(None, "--to-datetime",
                                           help="The first unit whose deliver time is >= this instant "
                                                "(ISO 8601 or epoch ms)."),
    by_duration: str | None = typer.Option(None, "--by-duration",
                                           help="ISO 8601 duration D (PT30M, P1DT2H): the first unit whose "
                                                "deliver time is >= now - D."),
    shift_by: int | None = typer.Option(None, "--shift-by", help="Move by N units (negative: back)."),
    execute: bool = typer.Option(False, "--execute", help="Write the new offsets (the default is a dry run)."),
    now: str | None = typer.Option(None, "--now", help="The instant --by-duration counts back from."),
    delay_levels: str | None = typer.Option(None, "--delay-levels", help='messageDelayLevel, e.g. "1s 5s 10s".'),
    broker_config: Path | None = typer.Option(None, "--broker-config", help="Read messageDelayLevel from broker.conf."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per level."),
) -> None:
    """Move the delay offsets of some levels. A dry run by default: shows before/after and how
    many messages would be delivered again or skipped; --execute writes delayOffset.json
    (temp file, fsync, rename, .bak) under the store lock. Targets outside a queue are
    clamped with a warning, as the broker's correctDelayOffset would."""
    from rmqdelay.schedule.offsets import OffsetPublisher
    from rmqdelay.schedule.replay import exact_offsets
    from rmqdelay.schedule.reset import plan_reset
    from rmqdelay.schedule.scheduler import wall_clock_ms
    from rmqdelay.store import Store
    from rmqdelay.store.lock import BrokerLock

    table_levels = resolve_delay_levels(delay_levels, broker_config)
    if bool(level) == all_levels:
        raise UsageError("give --level L (one or more) or --all-levels")
    chosen = sorted(set(_check_levels(level, table_levels) or table_levels))
    target = _target(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by)
    now_ms = parse_time_ms(now) if now else wall_clock_ms()
    lock = BrokerLock(store) if execute else None
    if lock is not None:
        if not Path(store).is_dir():
            Store(store)  # the one-line error for a missing store
        lock.acquire()  # refuses (exit 3) while a broker or a scheduler holds the store
    try:
        with Store(store) as s:
            recovery = exact_offsets(s, table_levels)
            for notice in recovery.notices:
                err_console.print(f"{notice.kind}: {notice.message}", markup=False, highlight=False, soft_wrap=True)
            plan = plan_reset(s, recovery.offsets, chosen, target, now_ms)
            end = s.end_offset()
        for row in plan:
            if row.warning:
                err_console.print(f"warning: {row.warning}", markup=False, highlight=False, soft_wrap=True)
        if execute:
            new_table = dict(recovery.table)
            new_table.update({row.level: row.after for row in plan})
            OffsetPublisher(store, recovery.published, recovery.dataVersion, table_levels).publish(end, new_table)
    finally:
        if lock is not None:
            lock.release()
    if json_out:
        for row in plan:
            emit_json({**row.as_json(), "executed": execute})
        return
    table = Table("level", "before", "after", "min", "max", "delivered again", "skipped",
                  title=f"reset {target.kind} ({'executed' if execute else 'dry run: nothing written; add --execute'})",
                  title_justify="left")
    for row in plan:
        table.add_row(str(row.level), str(row.before), str(row.after), str(row.minOffset), str(row.maxOffset),
                      str(row.redelivered), str(row.skipped))
    console.print(table)
    console.print(f"{sum(r.redelivered for r in plan)} messages would be delivered again, "
                  f"{sum(r.skipped for r in plan)} skipped" if not execute else
                  f"{sum(r.redelivered for r in plan)} messages will be delivered again, "
                  f"{sum(r.skipped for r in plan)} skipped")
