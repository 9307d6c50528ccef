"""`rmqdelay offsets show|reset STORE`: read and move the delay offsets, safely.

The store and the scheduler are imported inside the commands: `--help` must not load them
(tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rmqdelay.formats.javanum import java_parse_long

from rmqdelay.errors import UsageError

from .group import typer_app
from . import options
from .common import clock_ms, console, emit_json, err_console, format_time_ms, lock_store, parse_time_ms
from .render import print_levels
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.schedule.reset import ResetTarget

app = typer_app("Read and move the delay offsets (config/delayOffset.json).\n\n"
                       "Example: rmqdelay offsets reset STORE --levels 4 --to-latest")


@app.command("show")
def show(
    store: Path = options.store(),
    levels: list[str] = options.levels(),
    now: str | None = options.now(),
    message_delay_level: str | None = options.message_delay_level(),
    broker_config: Path | None = options.broker_config(),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """Per level: delay, offset, min and max offset, pending, due now, when the next message is due.

    Example: rmqdelay offsets show STORE --levels 1-3
    """
    from rmqdelay.schedule.status import level_statuses
    from rmqdelay.store import Store

    table_levels = options.delay_level_table(message_delay_level, broker_config)
    chosen = _check_levels(options.parse_levels(levels), table_levels)
    now_ms = clock_ms(now)
    with Store(store) as s:
        statuses = level_statuses(s, table_levels, now_ms, chosen)
        offsets = s.delay_offsets()
    version = offsets.dataVersion if offsets is not None else None
    if json_out:
        for st in statuses:
            emit_json(st.as_json())
        return
    # delayOffset.json keeps no time of its own on 4.x; a 5.x broker's has a dataVersion whose
    # timestamp is when the offsets last moved (the file's mtime is not: a copy changes it).
    moved = f" (dataVersion {version.counter}, {format_time_ms(version.timestamp)})" if version is not None else ""
    print_levels(f"delay offsets of {store}{moved}", statuses, now_ms, wide, with_min=True)


def _check_levels(chosen: list[int] | None, table: dict[int, int]) -> list[int] | None:
    for level in chosen or []:
        if level not in table:
            raise UsageError(f"level {level}: not one of the {len(table)} delay levels")
    return chosen


def _target(to_earliest: bool, to_latest: bool, to_offset: str | None, to_datetime: str | None,
            by_duration: str | None, shift_by: str | None) -> ResetTarget:
    from rmqdelay.schedule.reset import ResetTarget

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
        return ResetTarget(kind, options.parse_duration_ms(value, "--by-duration"))
    if kind in ("to-earliest", "to-latest"):
        return ResetTarget(kind)
    if kind == "to-offset":
        return ResetTarget(kind, options.parse_count(value, "--to-offset"))
    number = java_parse_long(value.strip())
    if number is None:
        raise UsageError(f"--shift-by: an integer (negative: back), found {value!r}")
    return ResetTarget(kind, number)


@app.command("reset")
def reset(
    store: Path = options.store(),
    levels: list[str] = options.levels("The levels to move: 4, or 1,3,5, or 3-18 (repeatable)."),
    all_levels: bool = typer.Option(False, "--all-levels", help="Move every level."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="The first unit still in the queue."),
    to_latest: bool = typer.Option(False, "--to-latest", help="The end of the queue: nothing pending."),
    to_offset: str | None = typer.Option(None, "--to-offset", metavar="N", show_default=False,
                                         help="This unit offset."),
    to_datetime: str | None = typer.Option(None, "--to-datetime", metavar=options.TIME, show_default=False,
                                           help="The first unit whose deliver time is at or after this instant "
                                                "(ISO 8601 or epoch ms)."),
    by_duration: str | None = options.duration("--by-duration", "The first unit whose deliver time is at or "
                                                                "after now - DURATION"),
    shift_by: str | None = typer.Option(None, "--shift-by", metavar="N", show_default=False,
                                        help="Move by N units (negative: back)."),
    execute: bool = typer.Option(False, "--execute", help="Write the new offsets. Default: a dry run."),
    now: str | None = options.now("--by-duration counts back from"),
    message_delay_level: str | None = options.message_delay_level(),
    broker_config: Path | None = options.broker_config(),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """Move the delay offsets of some levels. A dry run by default: shows before/after and how
    many messages would be delivered again or skipped; --execute writes delayOffset.json
    (temp file, fsync, rename, .bak) under the store lock. Targets outside a queue are
    clamped with a warning, as the broker's correctDelayOffset would.

    Example: rmqdelay offsets reset STORE --levels 4 --to-datetime 2026-11-22T12:30:00Z --execute
    """
    from rich.text import Text

    from rmqdelay.schedule.offsets import OffsetPublisher
    from rmqdelay.schedule.replay import exact_offsets
    from rmqdelay.schedule.reset import plan_reset
    from rmqdelay.store import Store

    table_levels = options.delay_level_table(message_delay_level, broker_config)
    named = options.parse_levels(levels)
    if bool(named) == all_levels:
        raise UsageError("give --levels LIST or --all-levels")
    chosen = sorted(set(_check_levels(named, table_levels) or table_levels))
    target = _target(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by)
    now_ms = clock_ms(now)
    lock = lock_store(store) if execute else None
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
    again, skipped = sum(r.redelivered for r in plan), sum(r.skipped for r in plan)
    verb = "will be" if execute else "would be"
    console.print(Text(f"reset {target.kind} of {len(plan)} level(s): {again} message(s) {verb} delivered again, "
                       f"{skipped} skipped " + ("(executed: delayOffset.json written)" if execute
                                                else "(dry run: nothing written; add --execute)"), style="bold"))
    moved = [r for r in plan if r.after != r.before]
    if moved:
        lead = "to undo it: " if execute else "to undo it once executed: "
        for command in undo_commands(store, moved):
            console.print(Text(lead + command))  # folds at spaces on a narrow terminal; one line in a pipe
    rows = [[str(r.level), str(r.before), str(r.after), str(r.minOffset), str(r.maxOffset), str(r.redelivered),
             str(r.skipped)] for r in plan]
    note = hidden_note(print_table(console, [Column("level"), Column("before"), Column("after"), Column("min", drop=2),
                                             Column("max", drop=1), Column("delivered again"), Column("skipped")],
                                   rows, wide=wide))
    if note:
        console.print(Text(note, style="dim"))


def undo_commands(store: Path, moved) -> list[str]:
    """The `offsets reset` lines that put every moved level back where it was: the levels of
    one offset in one line, offset by offset."""
    import shlex

    by_offset: dict[int, list[int]] = {}
    for r in moved:
        by_offset.setdefault(r.before, []).append(r.level)
    return [f"rmqdelay offsets reset {shlex.quote(str(store))} --levels {_level_list(levels)} --to-offset {offset} "
            "--execute" for offset, levels in sorted(by_offset.items())]


def _level_list(levels: list[int]) -> str:
    """1,3,5 or 4-18: the levels as --levels takes them."""
    levels = sorted(levels)
    runs: list[list[int]] = []
    for level in levels:
        if runs and level == runs[-1][-1] + 1:
            runs[-1].append(level)
        else:
            runs.append([level])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)
