"""`rmqdelay run STORE`: the scheduler, delivering due delay messages to their real topics.

The scheduler is imported inside the functions that use it: `--help` must not load it
(tests/test_startup.py)."""

from __future__ import annotations

import dataclasses
import functools
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdelay.errors import EXIT_PROBLEMS, UsageError

from . import options
from .common import (
    MOST_SECONDS,
    console,
    emit_json,
    err_console,
    finite_seconds,
    format_date_ms,
    format_duration_ms,
    format_time_ms,
    parse_time_ms,
    require_store,
)
from .tables import Column, fit, hidden_note, print_table

if TYPE_CHECKING:
    from rich.console import Group

    from rmqdelay.schedule.events import Stopped
    from rmqdelay.schedule.scheduler import Scheduler


@functools.cache
def _event_names() -> dict[type, str]:
    from rmqdelay.schedule.events import (
        Delivered,
        Held,
        Notice,
        Persisted,
        QueueCreated,
        Replayed,
        Skipped,
        Sleeping,
        Stopped,
    )
    from rmqdelay.timer.deliver.events import (
        TimerCancelled,
        TimerDelivered,
        TimerHeld,
        TimerNotice,
        TimerPersisted,
        TimerSkipped,
    )

    return {Delivered: "delivered", Held: "held", TimerHeld: "timerHeld", Skipped: "skipped", QueueCreated: "queueCreated", Notice: "notice",
            Replayed: "replayed", Persisted: "persisted", Sleeping: "sleeping", Stopped: "stopped",
            TimerDelivered: "timerDelivered", TimerCancelled: "timerCancelled", TimerSkipped: "timerSkipped",
            TimerNotice: "timerNotice", TimerPersisted: "timerPersisted"}


def event_json(event) -> dict:
    name = _event_names()[type(event)]
    body = dataclasses.asdict(event)
    for key in ("offsetTable", "perLevel"):
        if key in body:
            body[key] = {str(k): v for k, v in body[key].items()}
    return {"event": name, **body}


_LEVEL_COLUMNS = [Column("level"), Column("delay", drop=3), Column("offset", drop=4), Column("pending"),
                  Column("delivered"), Column("skipped", drop=5), Column("next due", "left", drop=6),
                  Column("late p50", drop=2), Column("late p99"), Column("late max", drop=1)]


class _LiveView:
    """Per level: pending, delivered, skipped, next due, lateness p50/p99/max; the timer wheel
    as the last row; a headline with the totals of both."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def __rich__(self) -> Group:
        from rich.text import Text

        from rich.console import Group

        s = self.scheduler
        delivered, skipped = _totals(s)
        rows = [[str(level), format_duration_ms(st.delayMs), str(st.offset), str(st.pending), str(st.delivered),
                 str(st.skipped), format_date_ms(st.nextDueTimestamp), *_lateness_cells(st)]
                for level, st in s.states.items()]
        t = s.timer
        if t is not None:
            rows.append(["timer", format_duration_ms(t.precision), str(t.queue_offset), "-",
                         f"{t.delivered} (+{t.rolled} rolled, {t.cancelled} cancelled)", str(t.skipped),
                         format_date_ms(t.next_due()), *_lateness_cells(t)])
        fitted = fit(_LEVEL_COLUMNS, rows, err_console.width)
        return Group(Text(f"rmqdelay run {s.store_path}: delivered {delivered}, skipped {skipped}", style="bold"),
                     fitted.table)


def _totals(s: Scheduler) -> tuple[int, int]:
    """What the levels and the timer wheel delivered and skipped together: the headline's figures."""
    t = s.timer
    return s.delivered + (t.delivered if t else 0), s.skipped + (t.skipped if t else 0)


def _lateness_cells(state) -> tuple[str, str, str]:
    pct = state.lateness_percentiles()
    if pct is None:
        return "-", "-", "-"
    return format_duration_ms(pct[0]), format_duration_ms(pct[1]), format_duration_ms(pct[2])


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def _flush_interval_ms(text: str) -> int:
    """--flush-interval: a DURATION; a bare number is the seconds it took before 0.2.1 (with a note)."""
    from .aliases import note

    raw = text.strip()
    try:
        seconds = float(raw)
    except ValueError:
        ms = options.parse_duration_ms(raw, "--flush-interval")
    else:
        finite_seconds(seconds, "--flush-interval")
        _say(note(f"--flush-interval {raw}", f"--flush-interval {raw}s"))
        ms = int(seconds * 1000)
    if not 0 <= ms <= MOST_SECONDS * 1000:
        raise UsageError(f"--flush-interval: {options.DURATION_HELP} up to {MOST_SECONDS} s, found {text!r}")
    return ms


def run(
    store: Path = options.store(),
    once: bool = typer.Option(False, "--once", help="Deliver what is due now, then exit."),
    until_empty: bool = typer.Option(False, "--until-empty", help="Run until every level (and the timer wheel) "
                                                                  "is drained."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what is due now; write nothing, take no lock."),
    levels: list[str] = options.levels(),
    now: str | None = typer.Option(None, "--now", metavar=options.TIME, show_default=False,
                                   help="A fixed clock (ISO 8601 or epoch ms) for replays and tests: deliver times "
                                        "are compared with it and delivered copies get it as their store time. "
                                        "With --until-empty the run stops when nothing more is due at that "
                                        "instant. Default: the wall clock."),
    message_delay_level: str | None = options.message_delay_level(),
    broker_config: Path | None = options.broker_config("messageDelayLevel (and the index's maxHashSlotNum, "
                                                       "maxIndexNum, messageIndexEnable)"),
    topics: str | None = typer.Option(None, "--topics", metavar="LIST", show_default=False,
                                      help="Only messages for these real topics: T1,T2. A level stops at its first "
                                           "message for another topic, the timer wheel at the first slot holding "
                                           "one (the broker resumes there: nothing is skipped)."),
    until: str | None = options.until("messages due by then (ISO 8601 or epoch ms): a level stops at its first "
                                      "message due after it, the wheel at its first slot after it"),
    rate: float | None = typer.Option(None, "--rate", metavar="N", show_default=False,
                                      help="At most N messages a second (levels and timer wheel together), so the "
                                           "consumers of a live cluster are not flooded."),
    limit: str | None = options.limit("deliveries (with --dry-run: listed); levels stop at the first one past it, "
                                      "the wheel before a slot that would pass it"),
    flush_interval: str = options.duration("--flush-interval", "How often the offsets are persisted", default="10s"),
    json_out: bool = options.json_out("One JSON event per line (docs/cli.md lists the events)."),
    wide: bool = options.wide(),
    batch_size: int = typer.Option(1024, "--batch-size", hidden=True),
) -> None:
    """Deliver due delay messages of SCHEDULE_TOPIC_XXXX to their real topics, as the broker's
    ScheduleMessageService does, and on a 5.x store the timer wheel as its TimerMessageStore
    does (cancellations honoured, rolls re-put) - exactly once, even after kill -9.

    Example: rmqdelay run STORE --until-empty --levels 1-3
    """
    from rich.live import Live

    from rmqdelay.schedule.scheduler import Scheduler
    from rmqdelay.store.index import IndexSettings

    if once and until_empty:
        raise UsageError("--once and --until-empty: give one of them")
    flush_ms = _flush_interval_ms(flush_interval)
    if not dry_run:
        require_store(store)  # a typo must not become a new store
    if batch_size < 1:
        raise UsageError(f"--batch-size: at least 1, found {batch_size}")
    mode = "once" if once else "until-empty" if until_empty else "forever"
    run_filter = _run_filter(topics, until, rate, limit)
    scheduler = Scheduler(store, delay_levels=options.delay_level_table(message_delay_level, broker_config),
                          levels=options.parse_levels(levels), now_ms=parse_time_ms(now, "--now") if now else None,
                          mode=mode, dry_run=dry_run, flush_interval_ms=flush_ms,
                          batch_size=batch_size, index=IndexSettings.from_broker_config(broker_config),
                          broker_config=broker_config, run_filter=run_filter)
    previous = {sig: signal.signal(sig, lambda *_: scheduler.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    live = None
    try:
        if not json_out and not dry_run and err_console.is_terminal:
            live = Live(_LiveView(scheduler), console=err_console.made(), refresh_per_second=4, transient=True)
            live.start()
        stopped = _consume(scheduler, json_out, dry_run, wide)
    finally:
        if live is not None:
            live.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not json_out and stopped is not None:
        _summary(scheduler, stopped, wide)
    if scheduler.problems:
        # Skipped messages are problems found (exit 1): each was named on stderr or in --json.
        raise typer.Exit(EXIT_PROBLEMS)


def _run_filter(topics: str | None, until: str | None, rate: float | None, limit: str | None):
    from rmqdelay.runfilter import RunFilter
    from rmqdelay.store.topics import validate_topic

    names = None
    if topics is not None:
        names = frozenset(t.strip() for t in topics.split(",") if t.strip())
        if not names:
            raise UsageError(f"--topics: topic names such as T1,T2, found {topics!r}")
        for name in names:
            validate_topic(name)
    if rate is not None and not (rate > 0 and rate != float("inf")):
        raise UsageError(f"--rate: a number of messages a second > 0, found {rate}")
    return RunFilter(topics=names, until_ms=parse_time_ms(until, "--until") if until else None,
                     limit=options.parse_count(limit, "--limit"), rate=rate)


_DRY_RUN_ROWS = 50  # a screenful of a dry run; --json lists every message


def _consume(scheduler: Scheduler, json_out: bool, dry_run: bool, wide: bool) -> Stopped | None:
    from rich.text import Text

    from rmqdelay.schedule.events import Delivered, Held, Notice, QueueCreated, Replayed, Skipped, Sleeping, Stopped
    from rmqdelay.timer.deliver.events import TimerDelivered, TimerHeld, TimerNotice, TimerSkipped

    stopped = None
    rows: list[list] = []
    due = 0
    for event in scheduler.events():
        if json_out:
            if not isinstance(event, Sleeping):
                emit_json(event_json(event))
        elif isinstance(event, Delivered):
            if dry_run:
                due += 1
                if len(rows) < _DRY_RUN_ROWS:
                    rows.append([str(event.level), str(event.offset), format_time_ms(event.deliverTimestamp),
                                 Text(event.topic), str(event.queueId), event.uniqKey or "-"])
        elif isinstance(event, Skipped):
            _say(f"level {event.level} offset {event.offset} (commit log offset "
                 f"{event.scheduleCommitLogOffset}): skipped, {event.reason}")
        elif isinstance(event, Held):
            _say(f"level {event.level} stops at offset {event.offset} (held back: {event.reason}); the broker "
                 f"resumes it there")
        elif isinstance(event, TimerHeld):
            where = f"slot {format_time_ms(event.slotTimeMs)}" if event.slotTimeMs is not None else \
                f"rmq_sys_wheel_timer offset {event.timerQueueOffset}"
            _say(f"timer wheel stops at {where} (held back: {event.reason}); the broker resumes it there")
        elif isinstance(event, QueueCreated):
            _say(f"level {event.level} offset {event.offset}: REAL_QID {event.queueId} is beyond the queues of "
                 f"{event.topic} (config/topics.json, or its queues on disk); delivered to that queue, as the broker "
                 "does (said once per topic and queue)")
        elif isinstance(event, (Notice, TimerNotice)):
            if event.kind != "writeFormat":  # how the store's broker writes: --json says it, a terminal needs not
                _say(f"{event.kind}: {event.message}")
        elif isinstance(event, TimerDelivered):
            if dry_run:
                due += 1
                if len(rows) < _DRY_RUN_ROWS:
                    rows.append(["timer", "-", format_time_ms(event.timerOutMs), Text(event.topic), str(event.queueId),
                                 (event.uniqKey or "-") + (" (roll)" if event.rolled else "")])
        elif isinstance(event, TimerSkipped):
            where = f"timer queue offset {event.timerQueueOffset}" if event.timerQueueOffset is not None \
                else f"commit log offset {event.offsetPy}"
            _say(f"timer: {where}: skipped, {event.reason}")
        elif isinstance(event, Replayed):
            found = ", ".join(f"level {k}: {v}" for k, v in sorted(event.perLevel.items()))
            _say(f"replay: deliveries after commit log offset {event.commitLogOffset} already done ({found}); "
                 f"not delivered again")
        if isinstance(event, Stopped):
            stopped = event
    if dry_run and not json_out:
        console.print(Text(f"due now (dry run): {due} message(s)" + (f", the first {len(rows)} listed"
                                                                    if due > len(rows) else ""), style="bold"))
        columns = [Column("level"), Column("offset", drop=2), Column("deliver time", "left"),
                   Column("topic", "left", fold=True), Column("queue"), Column("uniq key", "left", drop=1)]
        note = hidden_note(print_table(console, columns, rows, wide=wide))
        if due > len(rows):
            console.print(Text(f"... and {due - len(rows)} more: --json lists them all", style="dim"))
        if note:
            console.print(Text(note, style="dim"))
    return stopped


def _summary(scheduler: Scheduler, stopped: Stopped, wide: bool) -> None:
    """The headline counts what the rows below show: the levels' and the timer wheel's
    deliveries together."""
    from rich.text import Text

    verb = "would deliver" if scheduler.dry_run else "delivered"
    delivered, skipped = _totals(scheduler)
    t = scheduler.timer
    parts = f" ({stopped.delivered} from the delay levels, {t.delivered} from the timer wheel)" if t is not None else ""
    console.print(Text(f"{stopped.reason}: {verb} {delivered}{parts}, skipped {skipped}", style="bold"))
    columns = [Column("level"), Column("offset"), Column("pending"), Column(verb), Column("skipped"),
               Column("late p50", drop=2), Column("late p99"), Column("late max", drop=1)]
    rows = [[str(level), str(st.offset), str(st.pending), str(st.delivered), str(st.skipped), *_lateness_cells(st)]
            for level, st in scheduler.states.items()]
    if t is not None:
        rows.append([Text("timer", style="bold"), str(t.queue_offset), "-",
                     f"{t.delivered} (+{t.rolled} rolled, {t.cancelled} cancelled)", str(t.skipped),
                     *_lateness_cells(t)])
    note = hidden_note(print_table(console, columns, rows, wide=wide))
    if t is not None:
        console.print(Text(f"timer wheel: read up to {format_time_ms(t.read_ms)}, queue offset {t.queue_offset} "
                           f"(the offset column of its row)", style="dim"))
    if note:
        console.print(Text(note, style="dim"))
