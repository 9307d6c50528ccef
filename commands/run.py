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
from rich.table import Table
from rmqdelay.formats.javanum import java_parse_int

from rmqdelay.errors import EXIT_PROBLEMS, UsageError

from .common import (
    console,
    emit_json,
    err_console,
    finite_seconds,
    format_duration_ms,
    format_time_ms,
    parse_time_ms,
)

if TYPE_CHECKING:
    from rmqdelay.schedule.events import Stopped
    from rmqdelay.schedule.scheduler import Scheduler


def resolve_delay_levels(delay_levels: str | None, broker_config: Path | None) -> dict[int, int]:
    from rmqdelay.store.levels import delay_levels_from_broker_config, parse_delay_levels

    if delay_levels and broker_config:
        raise UsageError("--delay-levels and --broker-config: give one of them")
    if broker_config:
        return delay_levels_from_broker_config(broker_config)
    return parse_delay_levels(delay_levels) if delay_levels else parse_delay_levels()


def parse_levels(text: str | None) -> list[int] | None:
    if not text:
        return None
    levels = [java_parse_int(part) for part in text.replace(" ", "").split(",") if part]
    if None in levels:
        raise UsageError(f"--levels: comma-separated level numbers such as 1,3,5, found {text!r}")
    return levels


@functools.cache
def _event_names() -> dict[type, str]:
    from rmqdelay.schedule.events import (
        Delivered,
        Notice,
        Persisted,
        QueueCreated,
        Replayed,
        Skipped,
        Sleeping,
        Stopped,
    )
    from rmqdelay.timer.deliver.events import TimerCancelled, TimerDelivered, TimerNotice, TimerPersisted, TimerSkipped

    return {Delivered: "delivered", Skipped: "skipped", QueueCreated: "queueCreated", Notice: "notice",
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


class _LiveView:
    """Per level: pending, delivered, skipped, next due, lateness p50/p99/max."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def __rich__(self) -> Table:
        s = self.scheduler
        table = Table(title=f"rmqdelay run {s.store_path} - delivered {s.delivered}, skipped {s.skipped}",
                      title_justify="left")
        for col in ("level", "delay", "offset", "pending", "delivered", "skipped", "next due",
                    "late p50", "late p99", "late max"):
            table.add_column(col, justify="right")
        for level, st in s.states.items():
            table.add_row(str(level), format_duration_ms(st.delayMs), str(st.offset), str(st.pending),
                          str(st.delivered), str(st.skipped), format_time_ms(st.nextDueTimestamp),
                          *_lateness_cells(st))
        t = s.timer
        if t is not None:
            table.add_row("timer", format_duration_ms(t.precision), str(t.queue_offset), "-",
                          f"{t.delivered} (+{t.rolled} rolled, {t.cancelled} cancelled)", str(t.skipped),
                          format_time_ms(t.next_due()), *_timer_lateness_cells(t))
        return table


def _lateness_cells(state) -> tuple[str, str, str]:
    pct = state.lateness_percentiles()
    if pct is None:
        return "-", "-", "-"
    return format_duration_ms(round(pct[0])), format_duration_ms(round(pct[1])), format_duration_ms(pct[2])


def _timer_lateness_cells(timer) -> tuple[str, str, str]:
    pct = timer.lateness_percentiles()
    if pct is None:
        return "-", "-", "-"
    return format_duration_ms(round(pct[0])), format_duration_ms(round(pct[1])), format_duration_ms(pct[2])


def _say(text: str) -> None:
    err_console.print(text, markup=False, highlight=False, soft_wrap=True)


def run(
    store: Path = typer.Argument(..., metavar="STORE", help="The broker store directory."),
    once: bool = typer.Option(False, "--once", help="Deliver what is due now, then exit."),
    until_empty: bool = typer.Option(False, "--until-empty", help="Run until every level is drained."),
    dry_run: bool = typer.Option(False, "--dry-run", help="List what is due now; write nothing, take no lock."),
    levels: str | None = typer.Option(None, "--levels", help="Only these levels, e.g. 1,3,5."),
    now: str | None = typer.Option(None, "--now", help="A fixed clock (ISO 8601 or epoch ms) for replays and "
                                   "tests: deliver times are compared with it and delivered copies get it as "
                                   "their store time. With --until-empty the run stops when nothing more is "
                                   "due at that instant."),
    delay_levels: str | None = typer.Option(None, "--delay-levels", help='messageDelayLevel, e.g. "1s 5s 10s".'),
    broker_config: Path | None = typer.Option(None, "--broker-config", help="Read messageDelayLevel (and the "
                                              "index's maxHashSlotNum, maxIndexNum, messageIndexEnable) from broker.conf."),
    flush_interval: float = typer.Option(10.0, "--flush-interval", help="Seconds between persisting offsets."),
    json_out: bool = typer.Option(False, "--json", help="One JSON event per line."),
    batch_size: int = typer.Option(1024, "--batch-size", hidden=True),
) -> None:
    """Deliver due delay messages of SCHEDULE_TOPIC_XXXX to their real topics, as the broker's
    ScheduleMessageService does, and on a 5.x store the timer wheel as its TimerMessageStore
    does (cancellations honoured, rolls re-put) - exactly once, even after kill -9."""
    from rich.live import Live

    from rmqdelay.schedule.scheduler import Scheduler
    from rmqdelay.store.index import IndexSettings

    if once and until_empty:
        raise UsageError("--once and --until-empty: give one of them")
    finite_seconds(flush_interval, "--flush-interval")
    if batch_size < 1:
        raise UsageError(f"--batch-size: at least 1, found {batch_size}")
    mode = "once" if once else "until-empty" if until_empty else "forever"
    scheduler = Scheduler(store, delay_levels=resolve_delay_levels(delay_levels, broker_config),
                          levels=parse_levels(levels), now_ms=parse_time_ms(now) if now else None,
                          mode=mode, dry_run=dry_run, flush_interval_ms=int(flush_interval * 1000),
                          batch_size=batch_size, index=IndexSettings.from_broker_config(broker_config),
                          broker_config=broker_config)
    previous = {sig: signal.signal(sig, lambda *_: scheduler.stop()) for sig in (signal.SIGINT, signal.SIGTERM)}
    live = None
    try:
        if not json_out and not dry_run and err_console.is_terminal:
            live = Live(_LiveView(scheduler), console=err_console, refresh_per_second=4, transient=False)
            live.start()
        stopped = _consume(scheduler, json_out, dry_run)
    finally:
        if live is not None:
            live.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not json_out and stopped is not None:
        _summary(scheduler, stopped)
    if scheduler.problems:
        # Skipped messages are problems found (exit 1): each was named on stderr or in --json.
        raise typer.Exit(EXIT_PROBLEMS)


def _consume(scheduler: Scheduler, json_out: bool, dry_run: bool) -> Stopped | None:
    from rmqdelay.schedule.events import Delivered, Notice, QueueCreated, Replayed, Skipped, Sleeping, Stopped
    from rmqdelay.timer.deliver.events import TimerDelivered, TimerNotice, TimerSkipped

    stopped = None
    if dry_run and not json_out:
        rows = Table("level", "offset", "deliver time", "topic", "queue", "UNIQ_KEY", title="due now (dry run)",
                     title_justify="left")
    for event in scheduler.events():
        if json_out:
            if not isinstance(event, Sleeping):
                emit_json(event_json(event))
        elif isinstance(event, Delivered):
            if dry_run:
                rows.add_row(str(event.level), str(event.offset), format_time_ms(event.deliverTimestamp),
                             event.topic, str(event.queueId), event.uniqKey or "-")
        elif isinstance(event, Skipped):
            _say(f"level {event.level} offset {event.offset} (commit log offset "
                 f"{event.scheduleCommitLogOffset}): skipped, {event.reason}")
        elif isinstance(event, QueueCreated):
            _say(f"level {event.level} offset {event.offset}: REAL_QID {event.queueId} is beyond the queues of "
                 f"{event.topic}; delivered to that queue, as the broker does")
        elif isinstance(event, (Notice, TimerNotice)):
            _say(f"{event.kind}: {event.message}")
        elif isinstance(event, TimerDelivered):
            if dry_run:
                rows.add_row("timer", "-", format_time_ms(event.timerOutMs), event.topic, str(event.queueId),
                             (event.uniqKey or "-") + (" (roll)" if event.rolled else ""))
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
        console.print(rows)
    return stopped


def _summary(scheduler: Scheduler, stopped: Stopped) -> None:
    verb = "would deliver" if scheduler.dry_run else "delivered"
    table = Table("level", "offset", "pending", verb, "skipped", "late p50", "late p99", "late max",
                  title=f"{stopped.reason}: {verb} {stopped.delivered}, skipped {stopped.skipped}",
                  title_justify="left")
    for level, st in scheduler.states.items():
        table.add_row(str(level), str(st.offset), str(st.pending), str(st.delivered), str(st.skipped),
                      *_lateness_cells(st))
    console.print(table)
    t = scheduler.timer
    if t is not None:
        pct = t.lateness_percentiles()
        late = "" if pct is None else (f"; lateness p50 {format_duration_ms(round(pct[0]))}, p99 "
                                       f"{format_duration_ms(round(pct[1]))}, max {format_duration_ms(pct[2])}")
        console.print(f"timer wheel: {verb} {t.delivered}, rolled {t.rolled}, cancelled {t.cancelled}, "
                      f"skipped {t.skipped}; read up to {format_time_ms(t.read_ms)}, queue offset "
                      f"{t.queue_offset}{late}", markup=False, highlight=False)
