"""`rmqdelay inspect timer`: the 5.x timer wheel of a store, one screen an operator can act
on; its slots and units (`--slots`, `--units`); and what is wrong with it (`--verify`).
Nothing here writes a byte.

The store and timer modules are imported inside the functions that use them: `--help` must
not load them (tests/test_startup.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rmqdelay.formats.javahash import java_string_hash

from rmqdelay.errors import EXIT_PROBLEMS, StoreError, UsageError

from . import options
from .common import (
    clock_ms,
    console,
    emit_json,
    format_date_ms,
    format_duration_ms,
    format_size,
    format_time_ms,
    format_when_ms,
    parse_time_ms,
    progress,
)
from .checks import crossed, fail_if_overdue_option, parse_duration_ms
from .outputs import Format, emit, format_option, output_format, read_for, store_label, store_name_option
from .render import print_problems
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.formats.timerprops import TimerInfo
    from rmqdelay.store import Store
    from rmqdelay.timer import TimerStore
    from rmqdelay.timer.status import TimerStatus

# By the bucket names of rmqdelay.timer.status (BUCKETS, then LATER).
_BUCKET_WORDS = {"dueNow": "due now (overdue included)", "nextMinute": "in the next minute",
                 "nextHour": "in the next hour", "nextDay": "in the next day", "later": "later (within the window)"}
_CANCEL_WORDS = {
    "honoured": "honoured", "willBeHonoured": "will be honoured (target in the same pending slot)",
    "missed": "missed", "notInSlot": "target not in its slot", "rolled": "rolled (re-put)",
    "rolling": "rolling (tried at its own slot)", "queued": "not enqueued yet, target parked at its time",
    "queuedNoTarget": "not enqueued yet, no target",
}
_CANCEL_WARNINGS = {
    "missed": "MISSED: their slot was read without the target (delivered, or never existed)",
    "notInSlot": "have no target in their slot yet: the target is delivered unless it arrives there",
    "queuedNoTarget": "not enqueued yet have no parked target at their time: the target is delivered",
}


def inspect_timer(
    store_dir: Path = options.store(),
    now: Optional[str] = options.now("'due' and 'behind' are judged at"),
    broker_config: Optional[Path] = options.broker_config("the timer settings (timerPrecisionMs, "
                                                          "timerRollWindowSlot, timerCongestNumEachSlot, ...)"),
    hot: str = typer.Option("10", "--hot", metavar="N", help="How many of the fullest pending slots to show."),
    slots: bool = typer.Option(False, "--slots", help="List the non-empty wheel slots instead."),
    units: bool = typer.Option(False, "--units", help="List the timer log units (decoded) instead."),
    since: Optional[str] = options.since("slots (with --slots or --units: slot times)"),
    until: Optional[str] = options.until("slots"),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="With --units: only units of this real topic."),
    key: Optional[str] = typer.Option(None, "--uniq-key", metavar="UNIQ_KEY", show_default=False,
                                      help="With --units: only units whose message has this UNIQ_KEY (none: "
                                           "exit 1)."),
    limit: Optional[str] = options.limit("rows (with --slots or --units)"),
    verify: bool = typer.Option(False, "--verify", help="Check the timer store against itself and the commit log; "
                                                        "one line per problem, exit 1 when there is one."),
    fail_if_overdue: Optional[str] = fail_if_overdue_option("timer message"),
    json_out: bool = options.json_out(),
    output_format_: Format = format_option(),
    store_name: Optional[str] = store_name_option(),
    wide: bool = options.wide(),
) -> None:
    """The timer wheel of a 5.x store: what is pending and when it falls due, how far dequeue and
    enqueue are behind, hot slots, rolls, cancellations, what a late restart would skip, and the
    metrics against the true counts. Exit 1 when a restart would skip pending messages.

    Example: rmqdelay inspect timer STORE --units --topic TimerTopic --since 2026-11-23T16:00:00Z --limit 20
    """
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
    fmt = output_format(json_out, output_format_)
    json_out = fmt is Format.json
    if (listing or verify) and (fmt is Format.prometheus or fail_if_overdue is not None):
        raise UsageError("--format prometheus and --fail-if-overdue go with the summary, not --slots, --units "
                         "or --verify")
    overdue_ms = parse_duration_ms(fail_if_overdue, "--fail-if-overdue") if fail_if_overdue is not None else None
    if not listing and any(v is not None for v in (since, until, topic, key, limit)):
        raise UsageError("--since, --until, --topic, --uniq-key and --limit go with --slots or --units")
    if slots and (topic is not None or key is not None):
        raise UsageError("--topic and --uniq-key go with --units")
    if topic is not None:
        validate_topic(topic)
    count = options.parse_count(limit, "--limit")
    hot_n = options.parse_count(hot, "--hot")
    now_ms = clock_ms(now)
    from_ms = parse_time_ms(since, "--since") if since else None
    to_ms = parse_time_ms(until, "--until") if until else None
    with Store(store_dir) as store:
        if not timer_files_present(store.path):
            raise StoreError(store.path, None, "a 5.x store with a timer store (timerlog/, timerwheel, "
                                               "config/timercheck); found none")
        try:
            # --verify reads what it can of a damaged timer store and lists every problem.
            timer_store = TimerStore(store, broker_config, lenient=verify)
        except StoreError as exc:
            if fmt is not Format.prometheus:
                raise
            from .outputs import note_problem
            from .prometheus import exposition, timer_families

            problems = []
            note_problem(problems, exc)  # a timer store that cannot be opened: still a reading, its problem
            sys.stdout.write(exposition(timer_families(None, store_label(store_dir, store_name), now_ms, problems)))
            return
        with timer_store as ts:
            if verify:
                _verify(ts, now_ms, json_out)
            elif slots:
                _list_slots(ts, now_ms, from_ms, to_ms, count, json_out, wide)
            elif units:
                _list_units(ts, now_ms, from_ms, to_ms, topic, key, count, json_out, wide)
            else:
                problems: list[str] = []

                def read() -> TimerStatus:
                    with progress("reading timer log", ts.log.size) as advance:
                        return timer_status(ts, now_ms, hot=hot_n, advance=advance)

                status = read_for(fmt, problems, read, None)
                from .prometheus import timer_families

                emit(fmt, [status], lambda: timer_families(None if status is None else status.as_json(),
                                                           store_label(store_dir, store_name), now_ms, problems),
                     lambda: _print_status(status, wide))
                if status is None:
                    return
                oldest = status.as_json()["pending"]["oldestDueTimestamp"]
                if overdue_ms is not None and oldest is not None and now_ms - oldest > overdue_ms:
                    crossed("inspect timer", "--fail-if-overdue", fail_if_overdue,
                            f"the oldest due timer message has been due {format_duration_ms(now_ms - oldest)} "
                            f"(slot {format_date_ms(oldest)}; the wheel has read up to "
                            f"{format_date_ms(status.as_json()['dequeue']['lastReadTimeMs'])})")
                if status.horizon["skipped"] and fmt is not Format.prometheus:
                    raise typer.Exit(EXIT_PROBLEMS)  # the metrics say it: rmqdelay_timer_skipped_messages


# -- the one screen ------------------------------------------------------------------------------
def _print_status(s: TimerStatus, wide: bool) -> None:
    """Headline first (the figures the tables below add up to), the details after, warnings last."""
    from rich.text import Text

    from rmqdelay.timer.status import BUCKETS, CANCEL_STATES, LATER

    cfg, p, now = s.config, s.pending, s.nowMs
    line = lambda text, style=None: console.print(Text(text, style=style))  # noqa: E731
    warnings: list[str] = []
    total = p.units + p.notEnqueued
    due = p.buckets["dueNow"] + p.notEnqueuedBuckets["dueNow"]
    soon = p.buckets["nextMinute"] + p.notEnqueuedBuckets["nextMinute"]
    line(f"timer wheel of {s.store} at {format_time_ms(now)}", "bold")
    counts = s.cancellation_counts()
    dropped = counts["willBeHonoured"]  # analyze backlog's `cancelled`: not delivered, not pending there
    line(f"pending: {total} timer message(s): {due} due now, {soon} in the next minute, {p.beyondRollWindow} rolling "
         f"(due beyond the roll window); {p.cancelMarkers + p.notEnqueuedCancels} cancellation marker(s)"
         + (f", which drop {dropped} of them when their slot is read" if dropped else ""), "bold")
    h = s.horizon
    # What changes what an operator does leads the screen (docs/cli.md, "One story per screen").
    if h["skipped"]:
        line(f"warning: a broker starting now reads from {format_time_ms(h['readFromMs'])} and SKIPS "
             f"{h['skipped']} pending message(s) in older slots (the wheel spans "
             f"{format_duration_ms(h['wheelSpanMs'])}): they are never delivered", "bold red")
    if s.precisionInFiles is not None and s.precisionInFiles != cfg["timerPrecisionMs"]:
        line(f"warning: the wheel was written with a precision of {s.precisionInFiles} ms, not "
             f"{cfg['timerPrecisionMs']} ms (--broker-config reads the broker's timerPrecisionMs)", "bold red")
    d, e, log = s.dequeue, s.enqueue, s.timerLog
    read = "-" if d["lastReadTimeMs"] is None else format_date_ms(d["lastReadTimeMs"])
    behind = d["behindMs"]
    lag = ("-" if behind is None else f"{format_duration_ms(behind)} behind" if behind >= 0
           else f"{format_duration_ms(-behind)} past --now")
    line(f"dequeue: read up to {read}, {lag}; enqueue: "
         + (f"{e['behindMessages']} message(s) of rmq_sys_wheel_timer not in the timer log yet"
            if e["behindMessages"] else "up to date")
         + f" (queue offset {e['masterTimerQueueOffset']} of {e['queueMaxOffset']})")
    sources = cfg["sources"]
    line(f"settings: precision {cfg['timerPrecisionMs']} ms ({sources.get('timerPrecisionMs', 'default')}), wheel "
         f"{cfg['wheelSlots']} slots, roll window {cfg['rollWindowSlots']} slots "
         f"({sources.get('timerRollWindowSlot', 'default')}); timer log: {log['files']} file(s) of "
         f"{cfg['mappedFileSizeTimerLog']} bytes, {log['units']} unit(s), offsets [{log['minOffset']}, "
         f"{log['endOffset']})", "dim")
    if s.rollWindowInFiles is not None and s.rollWindowInFiles != cfg["rollWindowSlots"]:
        line(f"note: the roll units were written with a roll window of {s.rollWindowInFiles} slots "
             f"(timerRollWindowSlot; --broker-config reads the broker's)", "yellow")
    cp = s.checkpoint
    if cp is None:
        line("checkpoint: none (config/timercheck absent): the broker starts reading at now - 7 days", "dim")
    else:
        line(f"checkpoint: lastReadTimeMs {cp.lastReadTimeMs}, masterTimerQueueOffset {cp.masterTimerQueueOffset}, "
             f"lastTimerQueueOffset {cp.lastTimerQueueOffset}, lastTimerLogFlushPos {cp.lastTimerLogFlushPos}"
             + ("" if log["flushPosLag"] in (None, 0) else f" ({log['flushPosLag']} bytes of timer log after it)")
             + f", dataVersion {cp.dataVersion.counter}", "dim")
    rows = []
    for name, _ in (*BUCKETS, (LATER, None)):
        a, b = p.buckets[name], p.notEnqueuedBuckets[name]
        rows.append([_BUCKET_WORDS[name], str(a), str(b), str(a + b)])
    rows.append(["rolling: due beyond the roll window", str(p.beyondRollWindow), "-", str(p.beyondRollWindow)])
    rows.append([Text("total", style="bold"), str(p.units), str(p.notEnqueued), Text(str(total), style="bold")])
    hidden = print_table(console, [Column("pending by due time", "left"), Column("in the wheel"),
                                   Column("not enqueued yet"), Column("total")], rows, wide=wide)
    if s.hotSlots:
        line(f"hot slots: the {len(s.hotSlots)} fullest pending slot(s) - the units the timer log holds there: "
             "messages due then, roll units (re-put from there), cancellation markers", "bold")
        rows = [[format_when_ms(h.timeMs, now), str(h.messages + h.rolls + h.markers), str(h.messages), str(h.rolls),
                 str(h.markers), str(h.num), str(h.index), Text(h.congestion or "", style="bold red")]
                for h in s.hotSlots]
        columns = [Column("slot time", "left"), Column("units"), Column("messages"), Column("rolls"),
                   Column("markers"), Column("wheel count", drop=2), Column("index", drop=1),
                   Column("congestion", "left")]
        if not any(h.congestion for h in s.hotSlots):  # a column of nothing: left out
            columns, rows = columns[:-1], [r[:-1] for r in rows]
        hidden += print_table(console, columns, rows, wide=wide)
        congest = cfg["timerCongestNumEachSlot"]
        if congest < 2**31 - 1:
            line(f"timerCongestNumEachSlot {congest}: sends to a slot are refused at random above it, always from "
                 f"{2 * congest}", "dim")
    in_log = p.units + p.cancelMarkers
    if d["behindMessages"] != in_log:
        line(f"the wheel's own slot counts add up to {d['behindMessages']} (getAllNum: what the broker reports as "
             f"dequeue behind); the timer log holds {in_log} pending unit(s) ({p.units} message(s) and "
             f"{p.cancelMarkers} marker(s)): the broker's recovery does not rebuild slot counts (`timer repair` does)",
             "dim")
    words = [f"{counts[state]} {_CANCEL_WORDS[state]}" for state in CANCEL_STATES if counts[state]]
    line(f"rolls: {s.rolls['pending']} pending roll unit(s), {s.rolls['done']} already rolled; cancellations: "
         + ("; ".join(words) if words else "none"))
    for state in ("missed", "notInSlot", "queuedNoTarget"):
        if counts[state]:
            warnings.append(f"warning: {counts[state]} cancellation marker(s) {_CANCEL_WARNINGS[state]}")
    if s.metrics:
        line("config/timermetrics against the wheel (advisory: 5.3.3 counts drift)"
             if s.metricsFile else "no config/timermetrics; true counts per topic", "bold")
        rows = [[Text(m.topic), "-" if m.count is None else str(m.count), str(m.trueCount),
                 "-" if m.drift is None else f"{m.drift:+d}"] for m in s.metrics]
        hidden += print_table(console, [Column("topic", "left", fold=True), Column("timermetrics"),
                                        Column("true count"), Column("drift")], rows, wide=wide)
    if not h["skipped"]:
        line(f"restart: a broker starting now reads from {format_date_ms(h['readFromMs'])}; nothing pending is skipped")
    note = hidden_note(hidden)
    if note:
        line(note, "dim")
    for warning in warnings:
        line(warning, "bold red")


# -- listings -----------------------------------------------------------------------------------
def _list_slots(ts: TimerStore, now_ms: int, from_ms, to_ms, limit, json_out: bool, wide: bool) -> None:
    from rich.text import Text

    from rmqdelay.timer.listing import slot_rows

    rows, total = slot_rows(ts, from_ms, to_ms, limit)
    if json_out:
        for row in rows:
            emit_json(row)
        return
    columns = [Column("index"), Column("slot time", "left"), Column("first pos", drop=2), Column("last pos", drop=2),
               Column("num"), Column("magic", drop=1), Column("state", "left")]
    cells = [[str(r["index"]), format_when_ms(r["timeMs"], now_ms), str(r["firstPos"]), str(r["lastPos"]),
              str(r["num"]), str(r["magic"]), r["state"]] for r in rows]
    note = hidden_note(print_table(console, columns, cells, wide=wide))
    more = f" of {total} (--limit for more)" if total > len(rows) else ""
    console.print(Text(f"{len(rows)} slot(s){more}" + (f"; {note}" if note else ""), style="dim"))


def _list_units(ts: TimerStore, now_ms: int, from_ms, to_ms, topic, key, limit, json_out: bool, wide: bool) -> None:
    from rich.text import Text

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
    if key is not None and not count:
        from .common import err_console

        err_console.print(Text(f"rmqdelay: no timer log unit of a message with UNIQ_KEY {key}"
                               + (f" of topic {topic}" if topic is not None else "")
                               + (" in the slots asked" if from_ms is not None or to_ms is not None else "")),
                          soft_wrap=True)
        raise typer.Exit(EXIT_PROBLEMS)
    if json_out:
        return
    columns = [Column("offset"), Column("prev pos", drop=4), Column("kind", "left"), Column("written", "left", drop=3),
               Column("slot time", "left"), Column("message at", drop=2), Column("message size", drop=5),
               Column("real topic", "left", fold=True), Column("uniq key", "left", drop=1),
               Column("due at", "left", drop=6)]
    cells = []
    for r in shown:
        m = r["message"] or {}
        kind = ("roll" if r["roll"] else "") + (" delete" if r["delete"] else "") or "unit"
        cells.append([str(r["offset"]), str(r["prevPos"]), kind.strip(), format_date_ms(r["currWriteTime"]),
                      format_when_ms(r["slotTimeMs"], now_ms), str(r["offsetPy"]), str(r["sizePy"]),
                      Text(str(m.get("realTopic", "?"))), Text(str(m.get("uniqKey", "?"))),
                      format_date_ms(m.get("timerOutMs"))])
    note = hidden_note(print_table(console, columns, cells, wide=wide))
    console.print(Text(f"{len(shown)} unit(s)" + (f"; {note}" if note else ""), style="dim"))


# -- verify -------------------------------------------------------------------------------------
def _verify(ts: TimerStore, now_ms: int, json_out: bool) -> None:
    from rmqdelay.timer.verify import TimerVerifyCounts, iter_timer_problems

    from .render import verify_summary

    counts = TimerVerifyCounts()
    problems = []
    with progress("verifying timer store", ts.log.size) as advance:
        for problem in iter_timer_problems(ts, now_ms, advance, counts):
            if json_out:
                emit_json(problem.as_json())
            problems.append(problem)
    faults = [p for p in problems if not p.advisory]
    if json_out:
        emit_json(verify_summary({"timerLogFiles": counts.files, "units": counts.units, "slots": counts.slots,
                                  "timerMessages": counts.messages}, len(faults), len(problems) - len(faults)))
    else:
        print_problems(problems, f"{counts.files} timer log file(s), {counts.units} unit(s), {counts.slots} slot(s), "
                                 f"{counts.messages} timer message(s)", console,
                       advisories=len(problems) - len(faults))
    if faults:
        raise typer.Exit(EXIT_PROBLEMS)


# -- used by inspect store and inspect message ----------------------------------------------------
def print_features(features: dict) -> None:
    """The store-kind lines of `inspect store`."""
    from rich.text import Text

    from rmqdelay.store.kind import StoreFeatures

    f = StoreFeatures(**features)
    console.print(Text(f"kind: {f.version} store" + (": " + "; ".join(f.signs) if f.signs else
                                                     " (no 5.x feature found)")))
    if f.timer is not None:
        t = f.timer
        precision = t["timerPrecisionMs"]
        source = _SOURCE_WORDS.get(t["sources"].get("timerPrecisionMs", "default"), "the broker's default")
        console.print(Text(f"timer: precision {format_duration_ms(precision)} ({source}), "
                           f"wheel {t['wheelFileSize'] // 32} slots ({format_size(t['wheelFileSize'])}), "
                           f"timer log {t['timerLogFiles']} file(s) of {format_size(t['mappedFileSizeTimerLog'])}, "
                           f"roll window {t['rollWindowSlots']} slots "
                           f"({format_duration_ms(t['rollWindowSlots'] * precision)})"))


# Where a timer setting was read from (features.timer.sources), in words.
_SOURCE_WORDS = {"brokerConfig": "from --broker-config", "storeFiles": "from the store's files",
                 "default": "the broker's default"}


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
    return [("timer log unit", f"offset {u['offset']}, slot {format_when_ms(u['slotTimeMs'], now_ms)}"
             + (", roll" if u["roll"] else "") + (", delete" if u["delete"] else "")
             + f" ({u['state']})") for u in units]
