"""`rmqdelay inspect ...`: read-only views of a broker store. Nothing here writes a byte.

The store is imported inside each command, not here: `--help` must not load it, and each
command loads only what it reads (tests/test_startup.py)."""

from __future__ import annotations

import re
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text
from rmqdelay.formats.constants import KEY_SEPARATOR, RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.formats.javanum import java_parse_long

from rmqdelay.errors import EXIT_PROBLEMS, StoreError, UsageError

from .common import (
    console,
    emit_json,
    err_console,
    format_duration_ms,
    format_time_ms,
    parse_time_ms,
    progress,
)
from .inspect_index import find_messages_by_key, inspect_index
from .inspect_timer import (
    inspect_timer,
    message_timer_info,
    message_units,
    print_features,
    timer_rows,
    unit_lines,
)
from .prometheus import delay_level_families, exposition
from .render import (
    message_json,
    message_tables,
    messages_table,
    offset_cell,
    offset_notes,
    print_problems,
    unit_json,
    unit_note,
)

app = typer.Typer(help="Read-only views of a broker store.", no_args_is_help=True)

StoreArg = typer.Argument(..., metavar="STORE", help="The broker store directory (storePathRootDir).",
                          show_default=False)
JsonOpt = typer.Option(False, "--json", help="One JSON object per line, for scripts.")

_MAX_PROBLEM_LINES = 200  # on a terminal; --json lists every problem
_MSGID = re.compile(r"^[0-9A-Fa-f]{32}$|^[0-9A-Fa-f]{56}$")


def _exit_problems() -> None:
    raise typer.Exit(EXIT_PROBLEMS)


# -- inspect store ---------------------------------------------------------------------------

@app.command("store")
def inspect_store(store_dir: Path = StoreArg, json_out: bool = JsonOpt,
                  broker_config: Optional[Path] = typer.Option(None, "--broker-config",
                                                               help="Read the timer settings from this broker.conf.")
                  ) -> None:
    """One screen: what kind of store (4.x or 5.x features), commit log files, offsets, queues,
    lock and abort state, checkpoint, delay offsets. What cannot be read is listed under
    problems (exit 1); the rest is still shown."""
    from rmqdelay.store import Store
    from rmqdelay.store.kind import store_features
    from rmqdelay.store.lock import describe_holder
    from rmqdelay.timer.store import timer_summary

    with Store(store_dir, lenient=True) as store:
        problems = store.problems

        def attempt(kind: str, read, default=None):
            try:
                return read()
            except StoreError as exc:
                problems.add(kind, exc.path, exc.offset, exc.expected)
                return default

        features = store_features(store)
        features.timer = timer_summary(store, broker_config, problems)
        files = [{"file": mf.path.name, "size": mf.size} for mf in store.commitlog.files]
        queues = []
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                info = attempt("queue", lambda: (cq.min_offset, cq.max_offset, cq.max_physic_offset))
                if info is not None:
                    queues.append({"topic": topic, "queueId": qid, "minOffset": info[0], "maxOffset": info[1],
                                   "maxPhysicOffset": info[2]})
        hint = max([q["maxPhysicOffset"] for q in queues], default=store.commitlog.min_offset)
        max_offset = attempt("end-of-data", lambda: store.commitlog.end_offset(hint=hint))
        holder = store.lock_holder()
        checkpoint = attempt("checkpoint", store.checkpoint)
        offsets = attempt("delay-offsets", store.delay_offsets)
        who = describe_holder(holder) if holder else None
        info = {
            "store": str(store.path),
            "commitLogFiles": files,
            "minPhysicalOffset": store.commitlog.min_offset,
            "maxPhysicalOffset": max_offset,
            "queues": queues,
            "lockFilePresent": store.lock_path.exists(),
            "lockHolderPid": holder,
            "lockHolder": None if who is None else {"pid": who.pid, "kind": who.kind, "command": who.command},
            "abortPresent": store.abort_present,
            "checkpoint": None if checkpoint is None else {
                "physicMsgTimestamp": checkpoint.physicMsgTimestamp,
                "logicsMsgTimestamp": checkpoint.logicsMsgTimestamp,
                "indexMsgTimestamp": checkpoint.indexMsgTimestamp,
                # 5.x's two more longs; a 4.x store's checkpoint reads as it always did.
                **({"masterFlushedOffset": checkpoint.masterFlushedOffset,
                    "confirmPhyOffset": checkpoint.confirmPhyOffset} if features.version == "5.x" else {})},
            "delayOffsets": None if offsets is None else {str(k): v for k, v in sorted(offsets.offsetTable.items())},
            "features": features.as_json(),
            "problems": [p.as_json() for p in problems],
        }
    if json_out:
        emit_json(info)
    else:
        _print_store(info)
    if problems:
        _exit_problems()


def _print_store(info: dict) -> None:
    console.print(Text(f"store {info['store']}", style="bold"))
    print_features(info["features"])
    holder = info["lockHolder"]
    if holder is not None:
        what = {"broker": "a RocketMQ broker", "rmqdelay": "another rmqdelay"}.get(holder["kind"], "a process")
        lock = f"held by process {holder['pid']} ({what}" + (f": {holder['command']})" if holder["command"] else ")")
    else:
        lock = "free" if info["lockFilePresent"] else "free (no lock file)"
    console.print(Text(f"lock: {lock}"))
    console.print(Text("abort: " + ("present (the broker is running or did not shut down cleanly)"
                                    if info["abortPresent"] else "absent (clean shutdown)")))
    cp = info["checkpoint"]
    if cp is None:
        console.print("checkpoint: none")
    else:
        console.print(Text(
            f"checkpoint: physicMsgTimestamp {format_time_ms(cp['physicMsgTimestamp'])}, "
            f"logicsMsgTimestamp {format_time_ms(cp['logicsMsgTimestamp'])}, "
            f"indexMsgTimestamp {format_time_ms(cp['indexMsgTimestamp']) if cp['indexMsgTimestamp'] else '-'}"
            + (f", masterFlushedOffset {cp['masterFlushedOffset']}, confirmPhyOffset {cp['confirmPhyOffset']}"
               if "confirmPhyOffset" in cp else "")))
    total = sum(f["size"] for f in info["commitLogFiles"])
    end = "?" if info["maxPhysicalOffset"] is None else info["maxPhysicalOffset"]
    console.print(Text(f"commit log: {len(info['commitLogFiles'])} file(s), {total} bytes; physical offsets "
                       f"[{info['minPhysicalOffset']}, {end})"))
    files = Table(show_edge=False, header_style="bold")
    files.add_column("file")
    files.add_column("size", justify="right")
    for f in info["commitLogFiles"]:
        files.add_row(f["file"], str(f["size"]))
    console.print(files)
    console.print(Text("consume queues", style="bold"))
    queues = Table(show_edge=False, header_style="bold")
    for name in ("topic", "queueId", "minOffset", "maxOffset", "maxPhysicOffset"):
        queues.add_column(name, justify="left" if name == "topic" else "right")
    for q in info["queues"]:
        queues.add_row(Text(q["topic"]), str(q["queueId"]), str(q["minOffset"]), str(q["maxOffset"]),
                       str(q["maxPhysicOffset"]))
    console.print(queues)
    offsets = info["delayOffsets"]
    if offsets is None:
        console.print("delay offsets: none (config/delayOffset.json absent: the scheduler never ran)")
    else:
        console.print(Text("delay offsets (config/delayOffset.json)", style="bold"))
        table = Table(show_edge=False, header_style="bold")
        table.add_column("level", justify="right")
        table.add_column("offset", justify="right")
        for level, offset in offsets.items():
            table.add_row(level, str(offset))
        console.print(table)
    if info["problems"]:
        console.print(Text(f"{len(info['problems'])} problem(s)", style="bold red"))
        for p in info["problems"]:
            where = p["file"] if p["offset"] is None else f"{p['file']} at byte {p['offset']}"
            console.print(Text(f"{p['kind']}: {where}: {p['expected']}"), soft_wrap=True)


# -- inspect cq ------------------------------------------------------------------------------

@app.command("cq")
def inspect_cq(
    store_dir: Path = StoreArg,
    topic: str = typer.Option(..., "--topic", help="Topic of the consume queue."),
    queue: int = typer.Option(..., "--queue", help="Queue id."),
    start: Optional[int] = typer.Option(None, "--from", help="First logical offset (default: the queue's first)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many units."),
    now: Optional[str] = typer.Option(None, "--now", help="For SCHEDULE_TOPIC_XXXX: 'due in' relative to this "
                                                          "instant (ISO 8601 or epoch ms; default: now)."),
    json_out: bool = JsonOpt,
) -> None:
    """The units of one consume queue, decoded. For SCHEDULE_TOPIC_XXXX the tagsCode is the deliver time."""
    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    validate_topic(topic)
    if queue < 0:
        raise UsageError(f"--queue: a queue id >= 0, found {queue}")
    if limit is not None and limit < 0:
        raise UsageError(f"--limit: a count >= 0, found {limit}")
    if start is not None and start < 0:
        raise UsageError(f"--from: a logical offset >= 0, found {start}")
    now_ms = parse_time_ms(now) if now else time.time_ns() // 1_000_000
    schedule = topic == RMQ_SYS_SCHEDULE_TOPIC
    with Store(store_dir) as store:
        if not store.has_queue(topic, queue):
            known = store.topics().get(topic)
            have = f"queues {known}" if known else "no such topic"
            raise StoreError(store.consumequeue_dir / topic / str(queue), None,
                             f"a consume queue directory for {topic}/{queue} ({have})")
        cq = store.consume_queue(topic, queue)
        lo, hi = cq.min_offset, cq.max_offset
        first = lo if start is None else start
        stop = hi if limit is None else min(hi, first + limit)
        units = cq.units(first, stop) if first < stop else cq.units(0, 0)
        if schedule:
            cq.check_deliver_times(units, first, ext_ok=True)
        rows = [(first + i, int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"]))
                for i, u in enumerate(units)]
    if json_out:
        for n, off, size, code in rows:
            emit_json(unit_json(topic, queue, n, off, size, code, schedule))
        return
    level = f" (delay level {queue + 1})" if schedule else ""
    console.print(Text(f"{topic}/{queue}{level}: logical offsets [{lo}, {hi}), showing {len(rows)} from {first}",
                       style="bold"))
    table = Table(show_edge=False, header_style="bold")
    for name in ("cqOffset", "commitLogOffset", "size", "tagsCode"):
        table.add_column(name, justify="right")
    table.add_column("deliver time" if schedule else "note", no_wrap=True)
    if schedule:
        table.add_column("due", justify="right", no_wrap=True)
    for n, off, size, code in rows:
        note, due = unit_note(size, code, schedule, now_ms)
        table.add_row(str(n), str(off), str(size), str(code), note, *((due,) if schedule else ()))
    console.print(table)


# -- inspect commitlog -----------------------------------------------------------------------

@app.command("commitlog")
def inspect_commitlog(
    store_dir: Path = StoreArg,
    start: Optional[int] = typer.Option(None, "--from", help="Physical offset of the first record "
                                                              "(a record boundary; default: the first)."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many messages."),
    topic: Optional[str] = typer.Option(None, "--topic", help="Only messages of this topic."),
    verify: bool = typer.Option(False, "--verify", help="Check the whole store instead of listing: body CRCs, "
                                                        "magic codes, sizes, and that every consume queue unit "
                                                        "points at a message of its topic, queue and queueOffset. "
                                                        "Exit 1 when a problem is found."),
    body: bool = typer.Option(False, "--body", help="With --json: include the body (base64)."),
    json_out: bool = JsonOpt,
) -> None:
    """Messages as the broker stored them, in commit log order."""
    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    if verify:
        if start is not None or limit is not None or topic is not None:
            raise UsageError("--verify checks the whole store; it takes no --from, --limit or --topic")
        _verify(store_dir, json_out)
        return
    if topic is not None:
        validate_topic(topic)
    if limit is not None and limit < 0:
        raise UsageError(f"--limit: a count >= 0, found {limit}")
    with Store(store_dir) as store:
        log = store.commitlog
        first = log.min_offset if start is None else start
        if start is not None and log.file_index(start) < 0:
            raise StoreError(log.directory, start, f"a physical offset inside the commit log "
                                                   f"[{log.min_offset}, {log.files[-1].end if log.files else 0})")
        end = log.files[-1].end if log.files else 0
        shown: list = []
        count = 0
        with progress("reading commit log", max(end - first, 0)) as advance:
            for msg in log.records(first) if limit != 0 else ():
                advance(msg.storeSize)
                if topic is not None and msg.topic != topic:
                    continue
                count += 1
                if json_out:
                    emit_json(message_json(msg, body=body))  # streamed: a pipe sees lines at once
                else:
                    shown.append(msg)
                if limit is not None and count >= limit:
                    break
    if not json_out:
        console.print(messages_table(shown))
        console.print(Text(f"{len(shown)} message(s)", style="dim"))


def _verify(store_dir: Path, json_out: bool) -> None:
    from rmqdelay.store import Store
    from rmqdelay.store.lock import describe_holder
    from rmqdelay.store.verify import VerifyCounts, iter_problems, verify_total

    with Store(store_dir, lenient=True) as store:
        holder = store.lock_holder()
        if holder:
            # A running broker appends while this reads: its last records may be half written.
            err_console.print(Text(f"rmqdelay: note: {store.lock_path} is held by {describe_holder(holder).text}: "
                                   "the store is live, and what is written while this runs is not checked"),
                              soft_wrap=True)
        counts = VerifyCounts()
        problems = []
        with progress("verifying store", verify_total(store)) as advance:
            for problem in iter_problems(store, advance, counts):
                if json_out:
                    emit_json(problem.as_json())
                problems.append(problem)
    if not json_out:
        spare = (f" ({len(counts.preallocated)} after the end of the data holding only zeros, as the broker "
                 "preallocates them)") if counts.preallocated else ""
        print_problems(problems, f"{counts.files} commit log file(s){spare}, {counts.messages} message(s), "
                                 f"{counts.queues} consume queue(s), {counts.units} unit(s)", console,
                       _MAX_PROBLEM_LINES)
    if problems:
        _exit_problems()


# -- inspect message -------------------------------------------------------------------------

@app.command("message")
def inspect_message(
    store_dir: Path = StoreArg,
    target: Optional[str] = typer.Argument(None, metavar="OFFSET|MSGID",
                                           help="A physical offset or an offset message id (msgId).",
                                           show_default=False),
    key: Optional[str] = typer.Option(None, "--key", help="Messages whose UNIQ_KEY or KEYS hold this key "
                                                          "(through the index; scans what it does not cover)."),
    topic: Optional[str] = typer.Option(None, "--topic", help="With --key: only this topic."),
    body: bool = typer.Option(False, "--body", help="With --json: include the body (base64)."),
    json_out: bool = JsonOpt,
) -> None:
    """One message, every field: by physical offset, by msgId, or by key."""
    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    if (target is None) == (key is None):
        raise UsageError("give either OFFSET | MSGID or --key K")
    if key is not None and (not key or KEY_SEPARATOR in key):
        # The broker splits KEYS at spaces and indexes no empty token: such a key finds nothing.
        raise UsageError(f"--key: one key, not empty and without spaces (KEYS are split at spaces), found {key!r}")
    if topic is not None:
        validate_topic(topic)
    with Store(store_dir) as store:
        if key is not None:
            found = find_messages_by_key(store, key, topic).messages
            if not found:
                err_console.print(Text(f"rmqdelay: no message with key {key!r}"))
                _exit_problems()
        elif java_parse_long(target) is not None:
            found = [store.message_at(java_parse_long(target))]
        elif _MSGID.match(target):
            msg = store.message_by_id(target)
            if msg.msgId != target.upper():
                raise StoreError("MSGID", None, f"a message stored by the host in {target} "
                                                f"(at offset {msg.commitLogOffset}), found one stored by "
                                                f"{msg.storeHost} (msgId {msg.msgId})")
            found = [msg]
        else:
            raise UsageError(f"a physical offset (digits) or a msgId (32 or 56 hex digits), found {target!r}")
        timers = [(message_timer_info(msg), message_units(store, msg)) for msg in found]
    now_ms = time.time_ns() // 1_000_000
    for msg, (timer, units) in zip(found, timers):
        if json_out:
            extra = {"timer": timer.as_json() | ({"units": units} if units is not None else {})} if timer else {}
            emit_json(message_json(msg, body=body) | extra)
        else:
            fields, props = message_tables(msg)
            for name, value in (timer_rows(timer) + (unit_lines(units, now_ms) if units is not None else [])
                                if timer else ()):
                fields.add_row(name, Text(value))
            console.print(fields)
            console.print(props)
            if len(found) > 1:
                console.print()


def _short_time(ms: int | None, now_ms: int) -> str:
    """The time of day alone when it falls on the same (UTC) day as ``now_ms``."""
    text = format_time_ms(ms)
    same_day = ms is not None and text[:10] == format_time_ms(now_ms)[:10]
    return text[11:] if same_day else text


# -- inspect delay ---------------------------------------------------------------------------

class DelayFormat(str, Enum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


@app.command("delay")
def inspect_delay(
    store_dir: Path = StoreArg,
    now: Optional[str] = typer.Option(None, "--now", help="The instant to judge 'due' by (ISO 8601 or "
                                                          "epoch ms; default: now)."),
    delay_levels: Optional[str] = typer.Option(None, "--delay-levels",
                                               help='messageDelayLevel, e.g. "1s 5s 10s 30s 1m ..." '
                                                    "(default: the broker's default)."),
    broker_config: Optional[Path] = typer.Option(None, "--broker-config",
                                                 help="Read messageDelayLevel from this broker.conf."),
    json_out: bool = JsonOpt,
    output_format: DelayFormat = typer.Option(DelayFormat.table, "--format",
                                              help="table, json (as --json), or prometheus: the text format "
                                                   "node_exporter's textfile collector reads (docs/metrics.md)."),
    store_name: Optional[str] = typer.Option(None, "--store-name",
                                             help="With --format prometheus: the store label (default: the "
                                                  "directory's name, or its parent's for .../store)."),
) -> None:
    """Per delay level: delay, offset, max offset, pending, due now, oldest due time."""
    from rmqdelay.schedule.status import level_statuses
    from rmqdelay.store import Store
    from rmqdelay.store.levels import delay_levels_from_broker_config, parse_delay_levels
    from rmqdelay.store.ref import store_ref

    if json_out and output_format not in (DelayFormat.table, DelayFormat.json):
        raise UsageError("--json and --format: give one of them")
    if json_out:
        output_format = DelayFormat.json
    if delay_levels is not None and broker_config is not None:
        raise UsageError("give --delay-levels or --broker-config, not both")
    if broker_config is not None:
        levels = delay_levels_from_broker_config(broker_config)
    else:
        levels = parse_delay_levels(delay_levels) if delay_levels is not None else parse_delay_levels()
    now_ms = parse_time_ms(now) if now else time.time_ns() // 1_000_000
    with Store(store_dir) as store:
        statuses = level_statuses(store, levels, now_ms)
    if output_format is DelayFormat.prometheus:
        name = store_name if store_name is not None else store_ref(str(store_dir)).name
        sys.stdout.write(exposition(delay_level_families(statuses, name, now_ms)))
        return
    if output_format is DelayFormat.json:
        for status in statuses:
            emit_json(status.as_json())
        return
    console.print(Text(f"SCHEDULE_TOPIC_XXXX at {format_time_ms(now_ms)}", style="bold"))
    table = Table(show_edge=False, header_style="bold")
    for name in ("level", "delay", "offset", "maxOffset", "pending", "dueNow", "head due at", "due"):
        table.add_column(name, justify="right", no_wrap=True)
    for s in statuses:
        # The head unit: its deliver time, already due (oldest due) or not yet (next due).
        head = s.nextDueTimestamp
        due = "-" if head is None else (f"{format_duration_ms(now_ms - head)} ago" if head <= now_ms
                                        else f"in {format_duration_ms(head - now_ms)}")
        table.add_row(str(s.level), format_duration_ms(s.delayMs), offset_cell(s),
                      str(s.maxOffset), str(s.pending), str(s.dueNow), _short_time(head, now_ms), due)
    console.print(table)
    total_pending = sum(s.pending for s in statuses)
    total_due = sum(s.dueNow for s in statuses)
    console.print(Text(f"{total_pending} pending, {total_due} due now", style="bold"))
    for note in offset_notes(statuses):
        console.print(Text(note, style="dim"), soft_wrap=True)


app.command("index")(inspect_index)  # commands/inspect_index.py
app.command("timer")(inspect_timer)  # commands/inspect_timer.py
