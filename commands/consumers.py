"""`rmqdelay consumers show|reset STORE --group G`: a consumer group's place in its queues,
and moving it (config/consumerOffset.json), safely.

The store is imported inside the commands: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rmqdelay.errors import UsageError

from .group import typer_app
from . import options
from .common import clock_ms, console, emit_json, err_console, lock_store
from .inspect_groups import inspect_consumers
from .tables import Column, hidden_note, print_table

app = typer_app("Read and move a consumer group's offsets (config/consumerOffset.json).\n\n"
                       "Example: rmqdelay consumers reset STORE --group GID_ORDERS --all-topics --to-latest")

app.command("show", help="The same as `inspect consumers`: per consumer group, topic and queue, the committed "
                         "offset, the queue's max offset and the lag in messages and in time.\n\n"
                         "Example: rmqdelay consumers show /data/broker-a/store --group GID_ORDER")(inspect_consumers)


@app.command("reset")
def reset(
    store: Path = options.store(),
    group: str = typer.Option(..., "--group", metavar="GROUP", show_default=False,
                              help="The consumer group whose offsets move (required)."),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="The topic whose queues move."),
    all_topics: bool = typer.Option(False, "--all-topics", help="Every topic the group has committed offsets of."),
    include_retry: bool = typer.Option(False, "--include-retry",
                                       help="Also the group's %RETRY% topic (its retries waiting to be consumed)."),
    queues: list[str] = typer.Option([], "--queues", metavar="LIST", show_default=False,
                                     help="Only these queue ids: 0,2 or 0-3 (repeatable). Default: every queue."),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="The first message still in the queue."),
    to_latest: bool = typer.Option(False, "--to-latest", help="The end of the queue: nothing left to consume."),
    to_offset: Optional[str] = typer.Option(None, "--to-offset", metavar="N", show_default=False,
                                            help="This queue offset."),
    to_datetime: Optional[str] = typer.Option(None, "--to-datetime", metavar=options.TIME, show_default=False,
                                              help="The first message stored at or after this instant, as the "
                                                   "5.x broker's resetOffsetByTime finds it (4.9.4's takes the "
                                                   "nearest; ISO 8601 or epoch ms)."),
    by_duration: Optional[str] = options.duration("--by-duration", "The first message stored at or after "
                                                                    "now - DURATION"),
    shift_by: Optional[str] = typer.Option(None, "--shift-by", metavar="N", show_default=False,
                                           help="Move by N messages (negative: back)."),
    execute: bool = typer.Option(False, "--execute", help="Write the new offsets. Default: a dry run."),
    now: Optional[str] = options.now("--by-duration counts back from"),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """Move a consumer group's committed offsets, as mqadmin resetOffsetByTime does with the
    broker down. A dry run by default: per queue before / after and how many messages the
    group's consumers get again or skip; --execute writes config/consumerOffset.json as the
    broker does (temp file, fsync, rename, .bak) under the store lock. The broker, restarted,
    gives the group's consumers exactly that.

    Example: rmqdelay consumers reset STORE --group GID_ORDERS --topic TopicOrders --to-datetime 2026-11-22T12:30:00Z --execute
    """
    from rmqdelay.groups.reset import (
        apply_reset,
        check_topics,
        group_topics,
        plan_group_reset,
        publish_reset,
        read_offset_file,
    )
    from rmqdelay.store import Store
    from rmqdelay.store.consumers import read_consumer_offsets
    from rmqdelay.store.kind import store_features
    from rmqdelay.store.topics import validate_topic

    from .offsets import _target

    if (topic is None) == (not all_topics):
        raise UsageError("give --topic TOPIC or --all-topics")
    if topic is not None:
        validate_topic(topic)
    only = options.parse_levels(queues, "--queues", what="queue ids such as 0,2 or 0-3")
    target = _target(to_earliest, to_latest, to_offset, to_datetime, by_duration, shift_by)
    now_ms = clock_ms(now)
    lock = lock_store(store) if execute else None
    try:
        with Store(store) as s:
            offsets = read_consumer_offsets(s)
            if topic is not None:
                topics = [topic] + ([f"%RETRY%{group}"] if include_retry and topic != f"%RETRY%{group}" else [])
                check_topics(s, offsets, group, topics[:1])
            else:
                topics = group_topics(offsets, group, include_retry=include_retry)
                if not topics:
                    raise UsageError(f"--group: group {group} has no committed offsets in {offsets.source}")
            plan = plan_group_reset(s, offsets, group, topics, only, target, now_ms)
            if only is not None and not plan:
                raise UsageError(f"--queues: none of {','.join(map(str, only))} is a queue of {', '.join(topics)}")
            fresh_5x = execute and store_features(s).version == "5.x"
        for row in plan:
            if row.warning:
                err_console.print(f"warning: {row.warning}", markup=False, highlight=False, soft_wrap=True)
        if execute:
            doc = apply_reset(read_offset_file(store, fresh_5x), plan)
            publish_reset(store, doc)
    finally:
        if lock is not None:
            lock.release()
    if json_out:
        for row in plan:
            emit_json({**row.as_json(), "executed": execute})
        return
    _print_plan(plan, group, target.kind, execute, wide)


def _print_plan(plan, group: str, kind: str, execute: bool, wide: bool) -> None:
    from rich.text import Text

    again, skipped = sum(r.consumedAgain for r in plan), sum(r.skipped for r in plan)
    verb = "will" if execute else "would"
    console.print(Text(f"reset {kind} of group {group}, {len(plan)} queue(s): its consumers {verb} get {again} "
                       f"message(s) again, {skipped} skipped "
                       + ("(executed: consumerOffset.json written)" if execute
                          else "(dry run: nothing written; add --execute)"), style="bold"))
    rows = [[Text(r.topic), str(r.queueId), "-" if r.before is None else str(r.before), str(r.after),
             str(r.minOffset), str(r.maxOffset), str(r.consumedAgain), str(r.skipped)] for r in plan]
    note = hidden_note(print_table(console, [Column("topic", "left", fold=True), Column("queue"), Column("before"),
                                             Column("after"), Column("min", drop=2), Column("max", drop=1),
                                             Column("again"), Column("skipped")], rows, wide=wide))
    if any(r.before is None for r in plan):
        console.print(Text("before '-': the group never committed the queue (counted from the queue's min offset)",
                           style="dim"))
    if note:
        console.print(Text(note, style="dim"))
