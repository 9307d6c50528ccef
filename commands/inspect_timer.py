"""`rmqdelay inspect timer`: the 5.x timer wheel of a store, one screen an operator can act
on; its slots and units (`--slots`, `--units`); and what is wrong with it (`--verify`).
Nothing here writes a byte.

The store and timer modules are imported inside the functions that use them: `--help` must
not load them (tests/test_startup.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.table import Table
from rich.text import Text
from rmqdelay.formats.javahash import java_string_hash

from rmqdelay.errors import EXIT_PROBLEMS, StoreError, UsageError

from .common import (
    console,
    emit_json,
    format_duration_ms,
    format_time_ms,
    parse_time_ms,
    progress,
)

if TYPE_CHECKING:
    from rmqdelay.formats.timerprops import TimerInfo
    from rmqdelay.store import Store
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.status import TimerStatus

# By the bucket names of rmqdelay.timer.status (BUCKETS, then LATER).
_BUCKET_WORDS = {"dueNow": "due now (overdue included)", "nextMinute": "in the next minute",
                 "nextHour": "in the next hour", "nextDay": "in the next day", "later": "later"}
_CANCEL_WORDS = {
    "honoured": "honoured (its slot was read with the target in it)",
    "will-be-honoured": "will be honoured (target in the same pending slot)",
    "missed": "MISSED (slot read without its target: the target was delivered or never existed)",
    "not-in-slot": "target NOT in its slot yet (delivered anyway unless it arrives there)",
    "rolled": "rolled (re-put; a later marker carries on)",
    "rolling": "rolling (tried when it reaches its own slot)",
    "queued": "not enqueued yet, its target parked at the same time (dropped with it in that slot)",
    "queued-no-target": "not enqueued yet, NO parked target at its time (dropped at its slot, target delivered)",
}
_MAX_PROBLEM_LINES = 200


def inspect_timer(
    store_dir: Path = typer.Argument(..., help="The broker store directory (storePathRootDir).", show_default=False),
    now: Optional[str] = typer.Option(None, "--now", help="The instant to judge 'due' and 'behind' by (ISO 8601 or "
                                                          "epoch ms; default: now)."),
    broker_config: Optional[Path] = typer.Option(None, "--broker-config",
                                                 help="Read the timer settings (timerPrecisionMs, timerRollWindowSlot, "
                                                      "timerCongestNumEachSlot, ...) from this broker.conf."),
    hot: int = typer.Option(10, "--hot", metavar="N", help="How many of the fullest pending slots to show."),
    slots: bool = typer.Option(False, "--slots", help="List the non-empty wheel slots instead."),
    units: bool = typer.Option(False, "--units", help="List the timer log units (decoded) instead."),
    start: Optional[str] = typer.Option(None, "--from", help="With --slots/--units: slot times from this instant."),
    end: Optional[str] = typer.Option(None, "--to", help="With --slots/--units: slot times before this instant."),
    topic: Optional[str] = typer.Option(None, "--topic", help="With --units: only units of this real topic."),
    key: Optional[str] = typer.Option(None, "--key", help="With --units: only units whose message has this UNIQ_KEY."),
    limit: Optional[int] = typer.Option(None, "--limit", help="With --slots/--units: at most this many rows."),
    verify: bool = typer.Option(False, "--verify", help="Check the timer store against itself and the commit log; "
                                                        "one line per problem, exit 1 when there is one."),
    json_out: bool = typer.Option(False, "--json", help="JSON for scripts (docs/json-output.md)."),
) -> None:
    """The timer wheel of a 5.x store: checkpoint and how far dequeue and enqueue are behind,
    pending messages by due time, hot slots, rolls, cancellations, what a late restart would
    skip, and the metrics against the true counts."""
    from rmqdelay.store import Store
    from rmqdelay.store.kind import timer_files_present
    from rmqdelay.store.topics import validate_topic
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.status import timer_status

    if slots and units:
        raise UsageError("give --slots or --units, not both")
    if verify and (slots or units):
        raise UsageError("--verify checks the whole timer store; it takes no --slots or --units")
    listing = slots or units
    if not listing and any(v is not None for v in (start, end, topic, key, limit)):
        raise UsageError("--from, --to, --topic, --key and --limit go with --slots or --units")
    if slots and (topic is not None or key is not None):
        raise UsageError("--topic and --key go with --units")
    if topic is not None:
        validate_topic(topic)
    if limit is not None and limit < 0:
        raise UsageError(f"--limit: a count >= 0, found {limit}")
    if hot < 0:
        raise UsageError(f"--hot: a count >= 0, found {hot}")
    now_ms = parse_time_ms(now) if now else time.time_ns() // 1_000_000
    from_ms = parse_time_ms(start) if start else None
    to_ms = parse_time_ms(end) if end else None
    with Store(store_dir) as store:
        if not timer_files_present(store.path):
            raise StoreError(store.path, None, "a 5.x store with a timer store (timerlog/, timerwheel, "
                                               "config/timercheck); found none")
        with TimerStore(store, broker_config) as ts:
            if verify:
                _verify(ts, now_ms, json_out)
            elif slots:
                _list_slots(ts, now_ms, from_ms, to_ms, limit, json_out)
            elif units:
                _list_units(ts, from_ms, to_ms, topic, key, limit, json_out)
            else:
                with progress("reading timer log", ts.log.size) as advance:
                    status = timer_status(ts, now_ms, hot=hot, advance=advance)
                if json_out:
                    emit_json(status.as_json())
                else:
                    _print_status(status)


# -- the one screen ------------------------------------------------------------------------------
def _when(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return "-"
    delta = ms - now_ms
    rel = f"in {format_duration_ms(delta)}" if delta > 0 else f"{format_duration_ms(-delta)} ago"
    return f"{format_time_ms(ms)} ({rel})"


def _print_status(s: TimerStatus) -> None:
    from rmqdelay.timer.status import BUCKETS, CANCEL_STATES, LATER

    cfg = s.config
    line = lambda text, style=None: console.print(Text(text, style=style), soft_wrap=True)  # noqa: E731
    line(f"timer store of {s.store} at {format_time_ms(s.nowMs)}", "bold")
    sources = cfg["sources"]
    line(f"precision {cfg['timerPrecisionMs']} ms ({sources.get('timerPrecisionMs', 'default')}), wheel "
         f"{cfg['wheelSlots']} slots, roll window {cfg['rollWindowSlots']} slots "
         f"({sources.get('timerRollWindowSlot', 'default')}), timer log files of {cfg['mappedFileSizeTimerLog']} bytes")
    if s.rollWindowInFiles is not None and s.rollWindowInFiles != cfg["rollWindowSlots"]:
        line(f"note: the roll units were written with a roll window of {s.rollWindowInFiles} slots "
             f"(timerRollWindowSlot; --broker-config reads the broker's)", "yellow")
    if s.precisionInFiles is not None and s.precisionInFiles != cfg["timerPrecisionMs"]:
        line(f"warning: the wheel was written with a precision of {s.precisionInFiles} ms, not "
             f"{cfg['timerPrecisionMs']} ms", "bold red")
    cp = s.checkpoint
    if cp is None:
        line("checkpoint: none (config/timercheck absent): the broker starts reading at now - 7 days")
    else:
        line(f"checkpoint: lastReadTimeMs {_when(cp.lastReadTimeMs, s.nowMs)}, masterTimerQueueOffset "
             f"{cp.masterTimerQueueOffset}, lastTimerQueueOffset {cp.lastTimerQueueOffset}, lastTimerLogFlushPos "
             f"{cp.lastTimerLogFlushPos}, dataVersion {cp.dataVersion.counter}@{format_time_ms(cp.dataVersion.timestamp)}")
    d, e, log = s.dequeue, s.enqueue, s.timerLog
    line(f"dequeue: {format_duration_ms(d['behindMs'])} behind now, {d['behindMessages']} unit(s) in the wheel "
         "from the read position (getAllNum)")
    line(f"enqueue: {e['behindMessages']} message(s) of rmq_sys_wheel_timer not in the timer log yet "
         f"(queue max offset {e['queueMaxOffset']}, checkpoint {e['masterTimerQueueOffset']})")
    line(f"timer log: {log['files']} file(s), {log['units']} unit(s), offsets [{log['minOffset']}, {log['endOffset']})"
         + ("" if log["flushPosLag"] is None else f", {log['flushPosLag']} bytes past lastTimerLogFlushPos"))
    p = s.pending
    line("pending timer messages by due time", "bold")
    table = Table(show_edge=False, header_style="bold")
    table.add_column("due")
    table.add_column("in the wheel", justify="right")
    table.add_column("not enqueued yet", justify="right")
    for name, _ in (*BUCKETS, (LATER, None)):
        table.add_row(_BUCKET_WORDS[name], str(p.buckets[name]), str(p.notEnqueuedBuckets[name]))
    table.add_row("beyond the roll window (rolls at its slot)", str(p.beyondRollWindow), "-")
    table.add_row(Text("total", style="bold"), str(p.units), str(p.notEnqueued))
    console.print(table)
    line(f"oldest pending slot: {_when(p.oldestDueMs, s.nowMs)}; cancellation markers pending: {p.cancelMarkers}"
         + (f" (+{p.notEnqueuedCancels} not enqueued)" if p.notEnqueuedCancels else ""))
    if s.hotSlots:
        line("hot slots (pending)", "bold")
        hot = Table(show_edge=False, header_style="bold")
        for name in ("index", "time", "num", "firstPos", "lastPos", "congestion"):
            hot.add_column(name, justify="left" if name in ("time", "congestion") else "right")
        for h in s.hotSlots:
            hot.add_row(str(h.index), _when(h.timeMs, s.nowMs), str(h.num), str(h.firstPos), str(h.lastPos),
                        Text(h.congestion or "", style="bold red" if h.congestion else None))
        console.print(hot)
        congest = cfg["timerCongestNumEachSlot"]
        if congest < 2**31 - 1:
            line(f"timerCongestNumEachSlot {congest}: sends to a slot are refused at random above it, always from "
                 f"{2 * congest}", "dim")
    line(f"rolls: {s.rolls['pending']} pending roll unit(s), {s.rolls['done']} already rolled")
    counts = s.cancellation_counts()
    if any(counts.values()):
        line("cancellation markers", "bold")
        for state in CANCEL_STATES:
            if counts[state]:
                line(f"  {counts[state]:>6}  {_CANCEL_WORDS[state]}",
                     "red" if state in ("missed", "not-in-slot", "queued-no-target") else None)
    h = s.horizon
    if h["skipped"]:
        line(f"restart: a broker starting at {format_time_ms(h['restartAtMs'])} reads from "
             f"{format_time_ms(h['readFromMs'])} and SKIPS {h['skipped']} pending message(s) in older slots "
             f"(the wheel spans {format_duration_ms(h['wheelSpanMs'])})", "bold red")
    else:
        line(f"restart: a broker starting now reads from {format_time_ms(h['readFromMs'])}; nothing pending is "
             "skipped")
    if s.metrics:
        line("config/timermetrics against the wheel (advisory: 5.3.3 counts drift)"
             if s.metricsFile else "no config/timermetrics; true counts per topic", "bold")
        table = Table(show_edge=False, header_style="bold")
        for name in ("topic", "timermetrics", "true count", "drift"):
            table.add_column(name, justify="left" if name == "topic" else "right")
        for m in s.metrics:
            table.add_row(Text(m.topic), "-" if m.count is None else str(m.count), str(m.trueCount),
                          "-" if m.drift is None else f"{m.drift:+d}")
        console.print(table)


# -- listings -----------------------------------------------------------------------------------
def _list_slots(ts: TimerStore, now_ms: int, from_ms, to_ms, limit, json_out: bool) -> None:
    from rmqdelay.timer.listing import slot_rows

    rows = slot_rows(ts, from_ms, to_ms, limit)
    if json_out:
        for row in rows:
            emit_json(row)
        return
    table = Table(show_edge=False, header_style="bold")
    for name in ("index", "time", "firstPos", "lastPos", "num", "magic", "state"):
        table.add_column(name, justify="left" if name in ("time", "state") else "right", no_wrap=True)
    for r in rows:
        table.add_row(str(r["index"]), _when(r["timeMs"], now_ms), str(r["firstPos"]), str(r["lastPos"]),
                      str(r["num"]), str(r["magic"]), r["state"])
    console.print(table)
    console.print(Text(f"{len(rows)} slot(s)", style="dim"))


def _list_units(ts: TimerStore, from_ms, to_ms, topic, key, limit, json_out: bool) -> None:
    from rmqdelay.timer.listing import unit_rows

    topic_hash = java_string_hash(topic) if topic is not None else None
    shown = []
    count = 0
    with progress("reading timer log", ts.log.size) as advance:
        for row in unit_rows(ts, from_ms, to_ms, topic_hash, advance):
            msg = row["message"]
            if topic is not None and (msg is None or msg["realTopic"] != topic):
                continue
            if key is not None and (msg is None or msg["uniqKey"] != key):
                continue
            if limit is not None and count >= limit:
                break
            count += 1
            if json_out:
                emit_json(row)  # streamed: a pipe sees lines at once
            else:
                shown.append(row)
    if json_out:
        return
    table = Table(show_edge=False, header_style="bold")
    for name in ("offset", "prevPos", "magic", "currWriteTime", "slot time", "offsetPy", "sizePy", "realTopic",
                 "uniqKey", "TIMER_OUT_MS"):
        table.add_column(name, justify="right" if name in ("offset", "prevPos", "offsetPy", "sizePy") else "left",
                         no_wrap=True)
    for r in shown:
        m = r["message"] or {}
        magic = f"{r['magic']}" + (" roll" if r["roll"] else "") + (" delete" if r["delete"] else "")
        table.add_row(str(r["offset"]), str(r["prevPos"]), magic, format_time_ms(r["currWriteTime"]),
                      format_time_ms(r["slotTimeMs"]), str(r["offsetPy"]), str(r["sizePy"]),
                      Text(str(m.get("realTopic", "?"))), Text(str(m.get("uniqKey", "?"))),
                      format_time_ms(m.get("timerOutMs")))
    console.print(table)
    console.print(Text(f"{len(shown)} unit(s)", style="dim"))


# -- verify -------------------------------------------------------------------------------------
def _verify(ts: TimerStore, now_ms: int, json_out: bool) -> None:
    from rmqdelay.timer.verify import TimerVerifyCounts, iter_timer_problems

    counts = TimerVerifyCounts()
    problems = []
    with progress("verifying timer store", ts.log.size) as advance:
        for problem in iter_timer_problems(ts, now_ms, advance, counts):
            if json_out:
                emit_json(problem.as_json())
            problems.append(problem)
    faults = [p for p in problems if not p.advisory]
    if not json_out:
        for problem in problems[:_MAX_PROBLEM_LINES]:
            style = "yellow" if problem.advisory else None
            console.print(Text(f"{problem.kind}: {problem}", style=style), soft_wrap=True)
        if len(problems) > _MAX_PROBLEM_LINES:
            console.print(Text(f"... and {len(problems) - _MAX_PROBLEM_LINES} more (--json lists them all)"))
        summary = (f"checked {counts.files} timer log file(s), {counts.units} unit(s), {counts.slots} slot(s), "
                   f"{counts.messages} timer message(s): ")
        summary += f"{len(faults)} problem(s)" if faults else "no problems"
        advisories = len(problems) - len(faults)
        if advisories:
            summary += f", {advisories} advisory note(s) (timermetrics drift; not a fault)"
        console.print(Text(summary, style="bold red" if faults else "bold green"), soft_wrap=True)
    if faults:
        raise typer.Exit(EXIT_PROBLEMS)


# -- used by inspect store and inspect message ----------------------------------------------------
def print_features(features: dict) -> None:
    """The store-kind lines of `inspect store`."""
    from rmqdelay.store.kind import StoreFeatures

    f = StoreFeatures(**features)
    console.print(Text(f"kind: {f.version} store" + (": " + "; ".join(f.signs) if f.signs else
                                                     " (no 5.x feature found)")), soft_wrap=True)
    if f.timer is not None:
        t = f.timer
        precision = t["timerPrecisionMs"]
        console.print(Text(f"timer: precision {precision} ms ({t['sources'].get('timerPrecisionMs', 'default')}), "
                           f"wheel {t['wheelFileSize']} bytes = {t['wheelFileSize'] // 32} slots, "
                           f"timer log {t['timerLogFiles']} file(s) of {t['mappedFileSizeTimerLog']} bytes, "
                           f"roll window {t['rollWindowSlots']} slots"), soft_wrap=True)


def timer_rows(info: TimerInfo) -> list[tuple[str, str]]:
    """The timer stage lines of `inspect message`: each property read as a time."""
    rows = [("timer stage", info.stage)]
    for name, label in (("deliverMs", "TIMER_DELIVER_MS (asked)"), ("outMs", "TIMER_OUT_MS (due, slot)"),
                        ("enqueueMs", "TIMER_ENQUEUE_MS (unit written)"), ("dequeueMs", "TIMER_DEQUEUE_MS (slot read)")):
        value = getattr(info, name)
        if value is None:
            continue
        text = "never enqueued (Long.MAX_VALUE: delivered without a unit)" if name == "enqueueMs" and \
            info.neverEnqueued else f"{value} ({format_time_ms(value)})"
        rows.append((label, text))
    if info.delaySec is not None:
        rows.append(("TIMER_DELAY_SEC (asked)", f"{info.delaySec} s"))
    if info.delayMs is not None:
        rows.append(("TIMER_DELAY_MS (asked)", f"{info.delayMs} ms"))
    if info.outMs is not None and info.dequeueMs is not None:
        if info.stage == "rolled":
            rows.append(("rolled ahead of due by", format_duration_ms(info.outMs - info.dequeueMs)))
        else:
            rows.append(("slot read after due by", format_duration_ms(info.dequeueMs - info.outMs)))
    if info.rollTimes is not None:
        rows.append(("TIMER_ROLL_TIMES", str(info.rollTimes)))
    if info.delUniqKey is not None:
        rows.append(("TIMER_DEL_UNIQKEY (cancels)", info.delUniqKey))
    return rows


def message_timer_info(msg) -> TimerInfo | None:
    from rmqdelay.formats.timerprops import timer_info

    return timer_info(msg.topic, msg.properties)


def message_units(store: Store, msg) -> list[dict] | None:
    """The timer log units of a parked record (None: not parked, or no timer store)."""
    from rmqdelay.store.kind import timer_files_present
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.listing import units_of_message

    info = message_timer_info(msg)
    if info is None or info.stage not in ("parked", "rolled", "cancel") or not timer_files_present(store.path):
        return None
    try:
        with TimerStore(store) as ts:
            return units_of_message(ts, msg.commitLogOffset)
    except StoreError:
        return None  # the message itself is fine; `inspect timer` names what is wrong with the timer log


def unit_lines(units: list[dict], now_ms: int) -> list[tuple[str, str]]:
    if not units:
        return [("timer log", "no unit points at it (not enqueued yet, or delivered without one)")]
    return [("timer log unit", f"offset {u['offset']}, slot {_when(u['slotTimeMs'], now_ms)}"
             + (", roll" if u["roll"] else "") + (", delete" if u["delete"] else "")
             + f" ({u['state']})") for u in units]
