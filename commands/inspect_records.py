"""`rmqdelay inspect cq | commitlog | message`: the units of a consume queue and the messages
of the commit log, and one message by any id an operator holds: a physical offset, the
offset msgId the broker returns, the UNIQ_KEY (client msgId) producers log, or a key.
Nothing here writes a byte.

The store is imported inside the functions that use it: `--help` must not load it
(tests/test_startup.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rmqdelay.formats.constants import KEY_SEPARATOR, RMQ_SYS_SCHEDULE_TOPIC
from rmqdelay.formats.javanum import java_parse_long

from rmqdelay.errors import EXIT_PROBLEMS, StoreError, UsageError

from . import options
from .common import clock_ms, console, emit_json, err_console, parse_time_ms, progress
from .inspect_index import find_messages_by_key, parked_note
from .inspect_timer import message_timer_info, message_units, timer_rows, unit_lines
from .render import (
    message_json,
    message_tables,
    messages_table,
    print_problems,
    unit_json,
    unit_note,
    verify_summary,
)
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.formats.commitlog import Message
    from rmqdelay.store import Store

_HEX_ID = re.compile(r"^[0-9A-Fa-f]{32}$|^[0-9A-Fa-f]{56}$")


def _exit_problems() -> None:
    raise typer.Exit(EXIT_PROBLEMS)


# -- inspect cq ------------------------------------------------------------------------------

def inspect_cq(
    store_dir: Path = options.store(),
    topic: str = typer.Option(..., "--topic", metavar="TOPIC", show_default=False, help="Topic of the consume queue."),
    queue: str = typer.Option(..., "--queue", metavar="N", show_default=False, help="Queue id."),
    offset: Optional[str] = typer.Option(None, "--offset", metavar="N", show_default=False,
                                         help="The first logical offset (queue offset) to show. Default: the "
                                              "queue's first."),
    limit: Optional[str] = options.limit("units"),
    now: Optional[str] = options.now("'due' is judged at, for SCHEDULE_TOPIC_XXXX"),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """The units of one consume queue, decoded. For SCHEDULE_TOPIC_XXXX the tagsCode is the deliver time.

    Example: rmqdelay inspect cq STORE --topic SCHEDULE_TOPIC_XXXX --queue 3 --limit 20
    """
    from rich.text import Text

    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    validate_topic(topic)
    queue_id = options.parse_count(queue, "--queue")
    count = options.parse_count(limit, "--limit")
    start = options.parse_count(offset, "--offset")
    now_ms = clock_ms(now)
    schedule = topic == RMQ_SYS_SCHEDULE_TOPIC
    with Store(store_dir) as store:
        if not store.has_queue(topic, queue_id):
            known = store.topics().get(topic)
            have = f"queues {known}" if known else "no such topic"
            raise StoreError(store.queues.queue_path(topic, queue_id), None,
                             f"a consume queue directory for {topic}/{queue_id} ({have})")
        cq = store.consume_queue(topic, queue_id)
        lo, hi = cq.min_offset, cq.max_offset
        first = lo if start is None else start
        stop = hi if count is None else min(hi, first + count)
        units = cq.units(first, stop) if first < stop else cq.units(0, 0)
        if schedule:
            cq.check_deliver_times(units, first, ext_ok=True)
        rows = [(first + i, int(u["commitLogOffset"]), int(u["size"]), int(u["tagsCode"]))
                for i, u in enumerate(units)]
    if json_out:
        for n, off, size, code in rows:
            emit_json(unit_json(topic, queue_id, n, off, size, code, schedule))
        return
    level = f" (delay level {queue_id + 1})" if schedule else ""
    console.print(Text(f"{topic}/{queue_id}{level}: logical offsets [{lo}, {hi}), {len(rows)} unit(s) from {first}",
                       style="bold"))
    columns = [Column("queue offset"), Column("commit log offset"), Column("size", drop=2),
               Column("tags code", drop=1 if schedule else 0)]
    columns += [Column("deliver time", "left"), Column("due", "left")] if schedule else [Column("note", "left", fold=True)]
    cells = []
    for n, off, size, code in rows:
        note, due = unit_note(size, code, schedule, now_ms)
        cells.append([str(n), str(off), str(size), str(code), note] + ([due] if schedule else []))
    note = hidden_note(print_table(console, columns, cells, wide=wide))
    if note:
        console.print(Text(note, style="dim"))


# -- inspect commitlog -----------------------------------------------------------------------

def inspect_commitlog(
    store_dir: Path = options.store(),
    offset: Optional[str] = typer.Option(None, "--offset", metavar="N", show_default=False,
                                         help="The physical offset of the first record (a record boundary). "
                                              "Default: the first record."),
    limit: Optional[str] = options.limit("messages"),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="Only messages of this topic."),
    since: Optional[str] = options.since("messages stored"),
    until: Optional[str] = options.until("messages stored"),
    verify: bool = typer.Option(False, "--verify", help="Check the whole store instead of listing: body CRCs, "
                                                        "magic codes, sizes, and that every consume queue unit "
                                                        "points at a message of its topic, queue and queueOffset. "
                                                        "Exit 1 when a problem is found."),
    body: bool = typer.Option(False, "--body", help="With --json: include the body (base64)."),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """Messages as the broker stored them, in commit log order. --since/--until list a window
    of store time, found by bisection over the files and the index (not a read from the start).

    Example: rmqdelay inspect commitlog STORE --topic TopicTest --since 2026-11-22T12:00:00Z --limit 50
    """
    from rich.text import Text

    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    if verify:
        if offset is not None or limit is not None or topic is not None or since is not None or until is not None:
            raise UsageError("--verify checks the whole store; it takes no --offset, --limit, --topic, --since "
                             "or --until")
        _verify(store_dir, json_out)
        return
    if topic is not None:
        validate_topic(topic)
    count = options.parse_count(limit, "--limit")
    start = options.parse_count(offset, "--offset")
    since_ms = None if since is None else parse_time_ms(since, "--since")
    until_ms = None if until is None else parse_time_ms(until, "--until")
    if start is not None and since_ms is not None:
        raise UsageError("--offset and --since: give one of them (both say where the listing starts)")
    with Store(store_dir) as store:
        log = store.commitlog
        first = log.min_offset if start is None else start
        if start is not None and log.file_index(start) < 0:
            raise StoreError(log.directory, start, f"a physical offset inside the commit log "
                                                   f"[{log.min_offset}, {log.files[-1].end if log.files else 0})")
        end = log.files[-1].end if log.files else 0
        if since_ms is not None:
            from rmqdelay.store.timewindow import first_at_or_after

            found = first_at_or_after(store, since_ms)
            first = end if found is None else found
        shown: list = []
        n = 0
        with progress("reading commit log", max(end - first, 0)) as advance:
            for msg in log.records(first) if count != 0 and first < end else ():
                advance(msg.storeSize)
                if until_ms is not None and msg.storeTimestamp >= until_ms:
                    break  # store times rise along the log: the window ends here
                if topic is not None and msg.topic != topic:
                    continue
                n += 1
                if json_out:
                    emit_json(message_json(msg, body=body))  # streamed: a pipe sees lines at once
                else:
                    shown.append(msg)
                if count is not None and n >= count:
                    break
    if not json_out:
        console.print(Text(_listing_headline(store_dir, len(shown), topic, first, since_ms, until_ms,
                                             count is not None and n >= count), style="bold"))
        columns, rows = messages_table(shown)
        note = hidden_note(print_table(console, columns, rows, wide=wide))
        if note:
            console.print(Text(note, style="dim"))


def _listing_headline(store_dir: Path, shown: int, topic: str | None, first: int, since_ms: int | None,
                      until_ms: int | None, limited: bool) -> str:
    """What the listing shows: how many, of what, from where (the window's instants as dates)."""
    from rmqdelay.units import format_time_ms

    what = f"{'the first ' if limited else ''}{shown} message(s)" + (f" of topic {topic}" if topic else "")
    if since_ms is not None or until_ms is not None:
        where = (f"stored from {format_time_ms(since_ms) if since_ms is not None else 'the start'}"
                 + (f" until {format_time_ms(until_ms)}" if until_ms is not None else ""))
    else:
        where = f"from physical offset {first}"
    return f"{what} in {store_dir.name or store_dir}, {where}" + (" (--limit)" if limited else "")


def _verify(store_dir: Path, json_out: bool) -> None:
    from rich.text import Text

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
    checked = {"commitLogFiles": counts.files, "preallocatedFiles": len(counts.preallocated),
               "messages": counts.messages, "consumeQueues": counts.queues, "units": counts.units,
               **({"dledger": counts.dledger} if counts.dledger is not None else {})}
    if json_out:
        emit_json(verify_summary(checked, len(problems)))
    else:
        spare = (f" ({len(counts.preallocated)} after the end of the data holding only zeros, as the broker "
                 "preallocates them)") if counts.preallocated else ""
        print_problems(problems, f"{counts.files} commit log file(s){spare}, {_entries(counts.dledger)}"
                                 f"{counts.messages} message(s), {counts.queues} consume queue(s), "
                                 f"{counts.units} unit(s)", console)
        if counts.dledger is not None and counts.dledger["uncommitted"] is not None:
            console.print(Text(uncommitted_note(counts.dledger["uncommitted"], counts.dledger["committedIndex"]),
                               style="dim"), soft_wrap=True)
    if problems:
        _exit_problems()


def _entries(dledger: dict | None) -> str:
    """How many DLedger entries a verify walked (nothing for a plain log)."""
    if dledger is None:
        return ""
    return f"{dledger['entries']} DLedger entries (committed index {dledger['committedIndex']}), "


def uncommitted_note(uncommitted: dict, committed_index: int | None) -> str:
    """What lies past a DLedger log's committed index, in one line."""
    where = f"past the committed index {committed_index}" if committed_index is not None else \
        "with no committed index in the checkpoint"
    return (f"{uncommitted['entries']} DLedger entries {where} (indexes {uncommitted['firstIndex']}.."
            f"{uncommitted['lastIndex']}, physical offsets [{uncommitted['startOffset']}, {uncommitted['endOffset']})): "
            f"written but not committed by the group, so the broker does not serve them; not read as messages")


# -- inspect message -------------------------------------------------------------------------

def inspect_message(
    store_dir: Path = options.store(),
    target: Optional[str] = typer.Argument(None, metavar="ID", show_default=False,
                                           help="A physical offset (digits), an offset msgId (what the broker "
                                                "returns), or a UNIQ_KEY (the client's msgId, what producers log) - "
                                                "tried in that order, as mqadmin queryMsgById does."),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY", show_default=False,
                                      help="Instead of ID: messages whose UNIQ_KEY or KEYS hold this key "
                                           "(through the index; scans what it does not cover)."),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="With --key or a UNIQ_KEY: only this topic."),
    body: bool = typer.Option(False, "--body", help="With --json: include the body (base64)."),
    json_out: bool = options.json_out(),
) -> None:
    """One message, every field: by physical offset, offset msgId, UNIQ_KEY or key.

    Example: rmqdelay inspect message STORE C0000202313A18B4AAC25A7C1E5F07CF
    """
    from rich.text import Text

    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    if (target is None) == (key is None):
        raise UsageError("give either ID (an offset, a msgId or a UNIQ_KEY) or --key KEY")
    if key is not None and (not key or KEY_SEPARATOR in key):
        # The broker splits KEYS at spaces and indexes no empty token: such a key finds nothing.
        raise UsageError(f"--key: one key, not empty and without spaces (KEYS are split at spaces), found {key!r}")
    if target is not None and java_parse_long(target) is None and not _HEX_ID.match(target):
        raise UsageError(f"ID: a physical offset (digits), or a msgId or UNIQ_KEY (32 or 56 hex digits), "
                         f"found {target!r}")
    if topic is not None:
        validate_topic(topic)
    by_key = key is not None
    with Store(store_dir) as store:
        if key is not None:
            found = find_messages_by_key(store, key, topic).messages
            if not found:
                err_console.print(Text(f"rmqdelay: no message with key {key!r}"))
                _exit_problems()
        elif java_parse_long(target) is not None:
            found = [store.message_at(java_parse_long(target))]
        else:
            found = _by_message_id(store, target, topic)
            by_key = not (len(found) == 1 and found[0].msgId == target.upper())  # found as a UNIQ_KEY
        timers = [(message_timer_info(msg), message_units(store, msg)) for msg in found]
    now_ms = clock_ms(None)
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
    note = parked_note(found, key or target, topic, now_ms) if by_key else None
    if note:
        err_console.print(Text(f"note: {note}"), soft_wrap=True)


def _by_message_id(store: Store, target: str, topic: str | None) -> list[Message]:
    """mqadmin queryMsgById: the offset msgId when it decodes to a record of this store,
    else the id as a UNIQ_KEY (the index, then a scan of what it does not cover)."""
    from rich.text import Text

    from rmqdelay.formats.msgid import decode_message_id

    _, _, offset = decode_message_id(target)
    log = store.commitlog
    end = store.end_offset()
    why = f"as an offset msgId it points at byte {offset}, outside the commit log [{log.min_offset}, {end})"
    if log.min_offset <= offset < end:
        try:
            msg = store.message_at(offset)
        except StoreError as exc:
            msg, why = None, f"as an offset msgId it points at byte {offset}, where no record starts ({exc.expected})"
        if msg is not None:
            if msg.msgId == target.upper():
                return [msg]
            why = (f"as an offset msgId it points at the record at byte {offset}, stored by {msg.storeHost} "
                   f"(msgId {msg.msgId}), not by the host it names")
    if len(target) == 32:  # a UNIQ_KEY has the length of an IPv4 msgId
        lookup = find_messages_by_key(store, target.upper(), topic, unique=True)
        if lookup.messages:
            return lookup.messages
        why += "; as a UNIQ_KEY " + ("the index and a scan find" if lookup.indexed else "a scan finds") + \
            (f" no message of {topic}" if topic else " no message")
    err_console.print(Text(f"rmqdelay: no message with msgId or UNIQ_KEY {target}: {why}"), soft_wrap=True)
    raise typer.Exit(EXIT_PROBLEMS)
