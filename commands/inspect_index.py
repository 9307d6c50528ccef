"""`rmqdelay inspect index STORE`: the index files, look-ups by key and unique key as the
broker's queryMessage answers them (mqadmin queryMsgByKey / queryMsgByUniqueKey), and
--verify. Nothing here writes a byte.

The store modules are imported inside the functions that use them: `--help` must not load
them (tests/test_startup.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rmqdelay.formats.constants import (
    KEY_SEPARATOR,
    PROPERTY_REAL_TOPIC,
    PROPERTY_TIMER_OUT_MS,
    RMQ_SYS_SCHEDULE_TOPIC,
    RMQ_SYS_WHEEL_TIMER_TOPIC,
)

from rmqdelay.errors import EXIT_PROBLEMS, UsageError

from . import options
from .common import (
    console,
    emit_json,
    err_console,
    format_date_ms,
    format_time_ms,
    parse_time_ms,
    progress,
)
from .render import message_json, messages_table, print_problems
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.formats.commitlog import Message
    from rmqdelay.store import Store
    from rmqdelay.store.index import IndexSettings
    from rmqdelay.store.keylookup import KeyLookup

DEFAULT_QUERY_MAX_NUM = 32  # MessageStoreConfig.defaultQueryMaxNum: what a unique-key query gets
# Where a message waits before its real topic gets it: a delay level, the 5.x timer.
PARKING_TOPICS = (RMQ_SYS_SCHEDULE_TOPIC, RMQ_SYS_WHEEL_TIMER_TOPIC)


def inspect_index(
    store_dir: Path = options.store(),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY", show_default=False,
                                      help="Messages whose KEYS hold this key (what mqadmin queryMsgByKey finds)."),
    uniq_key: Optional[str] = typer.Option(None, "--uniq-key", metavar="UNIQ_KEY", show_default=False,
                                           help="The message with this UNIQ_KEY, the client's msgId "
                                                "(queryMsgByUniqueKey)."),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="The topic to look in. Default: every topic with a consume queue."),
    since: Optional[str] = options.since("messages stored"),
    until: Optional[str] = options.until("messages stored"),
    limit: Optional[str] = options.limit("index entries per topic", "64 for --key, 32 for --uniq-key, as the broker"),
    verify: bool = typer.Option(False, "--verify", help="Check the index against itself and the commit log: "
                                                        "chains, slots, headers, every entry and every key. "
                                                        "Exit 1 when a problem is found."),
    broker_config: Optional[Path] = options.broker_config("maxHashSlotNum and maxIndexNum (default: what the "
                                                          "files tell)"),
    body: bool = typer.Option(False, "--body", help="With --json: include the body (base64)."),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """The index (index/): its files, or the messages a key finds through it, or --verify.

    Example: rmqdelay inspect index STORE --key ORDER_1999 --topic TopicTest
    """
    from rmqdelay.formats.index import LONG_MAX
    from rmqdelay.store import Store
    from rmqdelay.store.index import IndexSettings
    from rmqdelay.store.topics import validate_topic

    if (key is not None) + (uniq_key is not None) + verify > 1:
        raise UsageError("give one of --key, --uniq-key and --verify")
    if key is None and uniq_key is None and (since or until or limit is not None or topic is not None):
        raise UsageError("--topic, --since, --until and --limit go with --key or --uniq-key")
    if key is not None and (not key or KEY_SEPARATOR in key):
        # The client keeps a message whose KEYS, split at spaces, hold the key: such a key finds nothing.
        raise UsageError(f"--key: one key, not empty and without spaces (KEYS are split at spaces), found {key!r}")
    if topic is not None:
        validate_topic(topic)
    max_num = options.parse_count(limit, "--limit", minimum=1)
    settings = IndexSettings.from_broker_config(broker_config)
    with Store(store_dir) as store:
        if verify:
            _verify(store, settings, json_out)
        elif key is not None or uniq_key is not None:
            lo = parse_time_ms(since, "--since") if since else 0
            hi = parse_time_ms(until, "--until") if until else LONG_MAX
            _query(store, settings, uniq_key if key is None else key, key is None, topic, lo, hi,
                   max_num or (DEFAULT_QUERY_MAX_NUM if key is None else 64), body, json_out, wide)
        else:
            _summary(store, settings, json_out, wide)


def _exit_problems() -> None:
    raise typer.Exit(EXIT_PROBLEMS)


# -- the files ---------------------------------------------------------------------------------

def _summary(store: Store, settings: IndexSettings, json_out: bool, wide: bool) -> None:
    from rich.text import Text

    from rmqdelay.store.index import StoreIndex

    log_end = store.end_offset()
    with StoreIndex(store.path, settings) as index:
        files = [{"file": f.name, "hashSlotNum": f.hashSlotNum, "indexNum": f.indexNum, "entries": f.entry_count,
                  "full": f.header.count >= f.indexNum, "beginTimestamp": f.header.beginTimestamp,
                  "endTimestamp": f.header.endTimestamp, "beginPhyOffset": f.header.beginPhyOffset,
                  "endPhyOffset": f.header.endPhyOffset, "hashSlotCount": f.header.hashSlotCount,
                  "indexCount": f.header.indexCount} for f in index.files]
        coverage = index.coverage
    checkpoint = store.checkpoint()
    info = {"store": str(store.path), "files": files,
            "coverage": None if coverage is None else {"beginPhyOffset": coverage[0], "endPhyOffset": coverage[1]},
            "maxPhysicalOffset": log_end,
            "indexMsgTimestamp": None if checkpoint is None else checkpoint.indexMsgTimestamp}
    if json_out:
        emit_json(info)
        return
    if not files:
        console.print(Text(f"{store.path / 'index'}: no index files (the broker indexes what it dispatches; "
                           "`inspect message --key` scans the commit log)"))
        return
    columns = [Column("file", "left"), Column("slots", drop=3), Column("entries"), Column("used"),
               Column("slots used", drop=2), Column("phy offsets", "left", drop=1), Column("stored", "left", fold=True, floor=22)]
    rows = [[f["file"], str(f["hashSlotNum"]), f"{f['entries']} of {f['indexNum'] - 1}",
             f"{100 * f['entries'] / max(f['indexNum'] - 1, 1):.1f}%", str(f["hashSlotCount"]),
             f"[{f['beginPhyOffset']}, {f['endPhyOffset']}]",
             f"{format_date_ms(f['beginTimestamp'])} .. {format_date_ms(f['endTimestamp'])}"] for f in files]
    note = hidden_note(print_table(console, columns, rows, wide=wide))
    if note:
        console.print(Text(note, style="dim"))
    if coverage is not None:
        console.print(Text(f"the index covers commit log offsets [{coverage[0]}, {coverage[1]}]; the log ends "
                           f"at {log_end}"))
    if checkpoint is not None:
        ts = checkpoint.indexMsgTimestamp
        console.print(Text(f"checkpoint indexMsgTimestamp: {format_time_ms(ts) if ts else '0 (no index file known whole)'}"))


# -- look-ups ----------------------------------------------------------------------------------

def _query(store: Store, settings: IndexSettings, key: str, unique: bool, topic: str | None, begin: int,
           end: int, max_num: int, body: bool, json_out: bool, wide: bool) -> None:
    from rich.text import Text

    from rmqdelay.store.index import StoreIndex
    from rmqdelay.store.keylookup import query_messages, query_topics

    what = f"UNIQ_KEY {key!r}" if unique else f"key {key!r}"
    with StoreIndex(store.path, settings) as index:
        if not index.files:
            err_console.print(Text(f"rmqdelay: {store.path / 'index'}: no index files; "
                                   f"`inspect message --key` scans the commit log"), soft_wrap=True)
            _exit_problems()
        answers = [query_messages(store, index, name, key, unique=unique, max_num=max_num, begin=begin, end=end)
                   for name in query_topics(store, topic)]
    found = [m for a in answers for m in a.messages]
    if json_out:
        for msg in found:
            emit_json(message_json(msg, body=body))
    else:
        if found:
            columns, rows = messages_table(found)
            note = hidden_note(print_table(console, columns, rows, wide=wide))
            if note:
                console.print(Text(note, style="dim"))
        entries = sum(a.entries for a in answers)
        topics = topic if topic is not None else f"{len(answers)} topic(s)"
        console.print(Text(f"{len(found)} message(s) with {what} in {topics} ({entries} index entr"
                           f"{'y' if entries == 1 else 'ies'} of that hash)", style="dim"))
        capped = [a.topic for a in answers if a.entries >= max_num]
        if capped:
            console.print(Text(f"{', '.join(capped)}: {max_num} entries, the most the broker returns "
                               f"(maxMsgsNumBatch); --limit for more", style="dim"))
    if answers and answers[0].indexLastUpdatePhyoffset < store.end_offset():
        _note_tail(store, answers[0].indexLastUpdatePhyoffset)
    if not found:
        parked = parked_copies(store, key, topic, unique) if topic is not None else []
        hint = ""
        if parked:
            hint = f"; {parked_note(parked, key, topic, time.time_ns() // 1_000_000)}"
        err_console.print(Text(f"rmqdelay: no message with {what} in "
                               f"{topic if topic is not None else 'the index'}{hint}"), soft_wrap=True)
        _exit_problems()


def _note_tail(store: Store, index_end: int) -> None:
    from rich.text import Text

    try:
        after = store.message_at(index_end)
        index_end = after.commitLogOffset + after.storeSize
    except Exception:  # the index ends past the log: nothing unindexed to speak of
        return
    log_end = store.end_offset()
    if index_end < log_end:
        err_console.print(Text(f"note: the index ends at commit log offset {index_end}, the log at {log_end}: "
                               f"messages after it are not indexed (the broker would not find them either; "
                               f"`inspect message --key` scans them)"), soft_wrap=True)


def find_messages_by_key(store: Store, key: str, topic: str | None, *, unique: bool = False) -> KeyLookup:
    """`inspect message --key` (and a UNIQ_KEY as its ID): through the index where it covers
    the log; says on stderr what was scanned instead. With ``topic``, a parked copy waiting
    for that topic (SCHEDULE_TOPIC_XXXX, rmq_sys_wheel_timer) is found as well: the index
    holds it under the parking topic until it is delivered."""
    from rich.text import Text

    from rmqdelay.store.keylookup import find_by_key

    log = store.commitlog
    total = (log.files[-1].end - log.min_offset) if log.files else 0
    with progress(f"looking for key {key}", total) as advance:
        lookup = find_by_key(store, key, topic, advance=advance, unique=unique)
        if topic is not None and not lookup.messages:
            lookup.messages = parked_copies(store, key, topic, unique)
    if not lookup.indexed:
        err_console.print(Text("note: no index files: scanned the commit log"), style="dim", soft_wrap=True)
    else:
        for start, stop in lookup.scanned:
            err_console.print(Text(f"note: commit log offsets [{start}, {stop}) are not in the index: scanned "
                                   f"them"), style="dim", soft_wrap=True)
    return lookup


def parked_copies(store: Store, key: str, topic: str, unique: bool) -> list[Message]:
    """The copies of a key's messages that wait, parked, for ``topic``: in SCHEDULE_TOPIC_XXXX
    (a delay level) or rmq_sys_wheel_timer (5.x timer), with REAL_TOPIC ``topic``."""
    from rmqdelay.store.keylookup import find_by_key

    found = []
    for parking in PARKING_TOPICS:
        if parking in store.topics():
            found += [m for m in find_by_key(store, key, parking, unique=unique).messages
                      if m.properties.get(PROPERTY_REAL_TOPIC) == topic]
    return sorted(found, key=lambda m: m.commitLogOffset)


def parked_note(found: list[Message], key: str | None, topic: str | None, now_ms: int) -> str | None:
    """What to say when every message a look-up found is a parked copy: where it waits, until
    when, and where it goes then."""
    parked = [m for m in found if m.topic in PARKING_TOPICS]
    if not found or len(parked) < len(found):
        return None
    m = parked[0]
    real = m.properties.get(PROPERTY_REAL_TOPIC, "?")
    if m.topic == RMQ_SYS_SCHEDULE_TOPIC:
        where = f"{RMQ_SYS_SCHEDULE_TOPIC} (delay level {m.queueId + 1})"
    else:
        due = m.properties.get(PROPERTY_TIMER_OUT_MS)
        where = f"{m.topic} (timer" + (f", due {format_date_ms(int(due))}" if due and due.isdigit() else "") + ")"
    more = f" and {len(parked) - 1} more" if len(parked) > 1 else ""
    return (f"only a parked copy{more}: it waits in {where} and is delivered to {real} when due; until then the "
            f"index holds it under {m.topic}, not {real}")


# -- verify ------------------------------------------------------------------------------------

def _verify(store: Store, settings: IndexSettings, json_out: bool) -> None:
    from rmqdelay.store.index_verify import IndexVerifyCounts, iter_index_problems

    counts = IndexVerifyCounts()
    problems = []
    total = sum(mf.size for mf in store.commitlog.files)
    with progress("verifying index", total) as advance:
        for problem in iter_index_problems(store, settings, counts, advance):
            if json_out:
                emit_json(problem.as_json())
            problems.append(problem)
    if json_out:
        from .render import verify_summary

        emit_json(verify_summary({"indexFiles": counts.files, "entries": counts.entries, "messages": counts.messages,
                                  "keys": counts.keys}, len(problems)))
    else:
        print_problems(problems, f"{counts.files} index file(s), {counts.entries} entries, {counts.messages} "
                                 f"message(s), {counts.keys} key(s)", console)
    if problems:
        _exit_problems()
