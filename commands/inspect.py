"""`rmqdelay inspect ...`: read-only views of a broker store. Nothing here writes a byte.
This module holds the group, `inspect store` and `inspect delay` (and the delay level table
`offsets show` shares); the record views are in inspect_records.py, the index and the timer
wheel in inspect_index.py and inspect_timer.py.

The store is imported inside each command, not here: `--help` must not load it, and each
command loads only what it reads (tests/test_startup.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from rmqdelay.errors import EXIT_PROBLEMS, StoreError

from .group import typer_app
from . import options
from .checks import crossed, fail_if_overdue_option, parse_duration_ms
from .common import (clock_ms, console, emit_json, format_date_ms, format_duration_ms, format_relative_ms,
                     format_size, format_time_ms)
from .inspect_groups import inspect_consumers, inspect_dlq
from .inspect_index import inspect_index
from .outputs import Format, emit, format_option, output_format, read_for, store_label, store_name_option
from .inspect_records import inspect_commitlog, inspect_cq, inspect_message
from .inspect_timer import inspect_timer, print_features
from .render import print_levels
from .tables import Column, hidden_note, print_table

app = typer_app("Read-only views of a broker store.\n\nExample: rmqdelay inspect delay /data/broker-a/store")


def _exit_problems() -> None:
    raise typer.Exit(EXIT_PROBLEMS)


# -- inspect store ---------------------------------------------------------------------------

def inspect_store(store_dir: Path = options.store(), json_out: bool = options.json_out(),
                  broker_config: Optional[Path] = options.broker_config(
                      "the timer settings and retention (fileReservedTime, deleteWhen, diskMaxUsedSpaceRatio)"),
                  now: Optional[str] = options.now("retention is judged at"),
                  output_format_: Format = format_option(),
                  store_name: Optional[str] = store_name_option(),
                  wide: bool = options.wide()) -> None:
    """One screen: what kind of store (4.x or 5.x features), commit log files, offsets, queues,
    lock and abort state, checkpoint, delay offsets, and what retention deletes when: each
    commit log file's deletion (fileReservedTime, deleteWhen, diskMaxUsedSpaceRatio from
    --broker-config, else the broker's 72 h, "04", 75 %) and the messages not yet consumed by
    each group, and the delay and timer messages not yet due, that go with it. What cannot be
    read is listed under problems (exit 1); the rest is still shown.

    Example: rmqdelay inspect store /data/broker-a/store
    """
    from rmqdelay.store import Store
    from rmqdelay.store.kind import store_features
    from rmqdelay.store.lock import describe_holder
    from rmqdelay.store.problems import Problem

    fmt = output_format(json_out, output_format_)
    now_ms = clock_ms(now)
    with Store(store_dir, lenient=True) as store:
        problems = store.problems

        def attempt(kind: str, read, default=None):
            try:
                return read()
            except StoreError as exc:
                problems.add(kind, exc.path, exc.offset, exc.expected)
                return default

        features = store_features(store)
        if features.timerFiles:  # the timer store's modules, only for a store that has one
            from rmqdelay.timer.store import timer_summary

            features.timer = timer_summary(store, broker_config, problems)
        files = [{"file": mf.path.name, "size": mf.size} for mf in store.commitlog.files]
        queues = []
        for topic, ids in store.topics().items():
            for qid in ids:
                cq = store.consume_queue(topic, qid)
                info = attempt("queue", lambda: (cq.min_offset, cq.max_offset, cq.max_physic_offset))
                if info is not None:
                    queues.append({"topic": topic, "queueId": qid, "minOffset": info[0], "maxOffset": info[1],
                                   "maxPhysicalOffset": info[2]})
        hint = max([q["maxPhysicalOffset"] for q in queues], default=store.commitlog.min_offset)
        max_offset = attempt("endOfData", lambda: store.commitlog.end_offset(hint=hint))
        from rmqdelay.store.recovery import store_cut

        cut = store_cut(store) if max_offset is not None else None
        if cut is not None:
            problems.append(Problem("brokerCut", str(cut.path), cut.byte, cut.describe(), cut.offset))
        holder = store.lock_holder()
        checkpoint = attempt("checkpoint", store.checkpoint)
        offsets = attempt("delayOffsets", store.delay_offsets)
        who = describe_holder(holder) if holder else None
        facts = getattr(store.commitlog, "facts", None)
        databases = [db.as_json(store.path) for source in (store.queues, store.configs)
                     for db in (getattr(source, "databases", list)())]
        from rmqdelay.groups.retention import retention

        kept = attempt("retention", lambda: retention(store, broker_config, now_ms))
        info = {
            "store": str(store.path),
            "layout": {**store.layout.as_json(), **({"dledger": facts()} if facts is not None else {}),
                       **({"rocksdb": databases} if databases else {})},
            "commitLogFiles": files,
            "minPhysicalOffset": store.commitlog.min_offset,
            "maxPhysicalOffset": max_offset,
            "brokerCut": None if cut is None else cut.as_json(),
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
            "retention": kept,
            "problems": [p.as_json() for p in problems],
        }
    if fmt is Format.prometheus:
        import sys

        from .prometheus import exposition, retention_families

        sys.stdout.write(exposition(retention_families(kept, store_label(store_dir, store_name))))
        return
    if fmt is Format.json:
        emit_json(info)
    else:
        _print_store(info, wide)
        _print_retention(kept, now_ms, wide)
    if problems:
        _exit_problems()


def _say(text: str, style: str | None = None) -> None:
    from rich.text import Text

    console.print(Text(text, style=style), soft_wrap=False)


def _print_store(info: dict, wide: bool) -> None:
    from rich.text import Text

    _say(f"store {info['store']}", "bold")
    print_features(info["features"])
    holder = info["lockHolder"]
    if holder is not None:
        what = {"broker": "a RocketMQ broker", "rmqdelay": "another rmqdelay"}.get(holder["kind"], "a process")
        lock = f"held by process {holder['pid']} ({what}" + (f": {holder['command']})" if holder["command"] else ")")
    else:
        lock = "free" if info["lockFilePresent"] else "free (no lock file)"
    _say(f"lock: {lock}; abort: " + ("present (the broker is running or did not shut down cleanly)"
                                     if info["abortPresent"] else "absent (clean shutdown)"))
    cp = info["checkpoint"]
    if cp is None:
        _say("checkpoint: none")
    else:
        # The store time of the last message each file set flushed (0: none yet).
        def flushed(ms: int) -> str:
            return format_time_ms(ms) if ms else "-"

        _say(f"checkpoint: flushed up to messages stored at {flushed(cp['physicMsgTimestamp'])} (commit log), "
             f"{flushed(cp['logicsMsgTimestamp'])} (consume queues), {flushed(cp['indexMsgTimestamp'])} (index)"
             + (f"; master flushed to physical offset {cp['masterFlushedOffset']}, confirmed to "
                f"{cp['confirmPhyOffset']}" if "confirmPhyOffset" in cp else ""))
    _print_layout(info["layout"])
    files = info["commitLogFiles"]
    end = "?" if info["maxPhysicalOffset"] is None else info["maxPhysicalOffset"]
    sizes = sorted({f["size"] for f in files})
    each = f" of {format_size(sizes[0])}" if len(sizes) == 1 else ""
    names = f": {files[0]['file']}" + (f" .. {files[-1]['file']}" if len(files) > 1 else "") if files else ""
    _say(f"commit log: {len(files)} file(s){each}{names}; data at physical offsets [{info['minPhysicalOffset']}, {end})")
    # The queues a topic has, summed per topic: --json lists each queue.
    topics: dict[str, list[dict]] = {}
    for q in info["queues"]:
        topics.setdefault(q["topic"], []).append(q)
    _say(f"consume queues: {len(info['queues'])} of {len(topics)} topic(s) (--json lists each queue)", "bold")
    rows = [[Text(topic), str(len(qs)), _queue_ids(qs), str(sum(q["maxOffset"] - q["minOffset"] for q in qs)),
             str(max(q["maxPhysicalOffset"] for q in qs))] for topic, qs in topics.items()]
    hidden = print_table(console, [Column("topic", "left", fold=True), Column("queues"), Column("ids", "left", drop=2),
                                   Column("units"), Column("max physical offset", drop=1)], rows, wide=wide)
    offsets = info["delayOffsets"]
    if offsets is None:
        _say("delay offsets: none (config/delayOffset.json absent: the scheduler never ran)")
    else:
        console.print(Text("delay offsets (config/delayOffset.json, level:offset): "
                           + "  ".join(f"{level}:{offset}" for level, offset in offsets.items())))
    note = hidden_note(hidden)
    if note:
        _say(note, "dim")
    if info["problems"]:
        _say(f"{len(info['problems'])} problem(s)", "bold red")
        for p in info["problems"]:
            where = p["file"] if p["offset"] is None else f"{p['file']} at byte {p['offset']}"
            console.print(Text(f"{p['kind']}: {where}: {p['expected']}"), soft_wrap=True)


def _print_retention(kept: dict | None, now_ms: int, wide: bool) -> None:
    if kept is None:
        return
    st = kept["settings"]
    used = "?" if kept["diskUsedRatio"] is None else f"{kept['diskUsedRatio'] * 100:.0f} %"
    files = kept["files"]
    going = [f for f in files if f["deleteTimestamp"] is not None]
    risky = [g for g in kept["consumers"] if g["messages"]]
    lost = sum(g["messages"] for g in risky) + kept["delay"]["messages"] + \
        (kept["timer"]["messages"] if kept["timer"] else 0)
    _say(f"retention: fileReservedTime {st['fileReservedTime']} h, deleteWhen {st['deleteWhen']}, "
         f"diskMaxUsedSpaceRatio {st['diskMaxUsedSpaceRatio']} % (disk {used} used): {len(going)} of {len(files)} "
         f"commit log file(s) deleted, {lost} message(s) not yet read or due go with them", "bold")
    # why is what an operator acts on (age: fileReservedTime at deleteWhen; a full disk): it stays,
    # the last modified date (what the age is counted from) goes first on a narrow terminal.
    rows = [[f["file"], format_date_ms(f["lastModifiedTimestamp"]),
             "never" if f["deleteTimestamp"] is None else format_relative_ms(f["deleteTimestamp"], now_ms),
             _retention_why(f["why"], st)] for f in files]
    hidden = print_table(console, [Column("file", "left"), Column("last modified", drop=1), Column("deleted", "left"),
                                   Column("why", "left", fold=True)], rows, wide=wide)
    for g in risky:
        _say(f"group {g['group']}: {g['messages']} message(s) not consumed yet in files retention deletes (the first "
             f"deleted {format_relative_ms(g['firstDeleteTimestamp'], now_ms)})", "yellow")
    for kind, name in (("delay", "delay-level"), ("timer", "timer")):
        r = kept[kind]
        if r and r["messages"]:
            _say(f"{r['messages']} {name} message(s) waiting in files deleted before they are due (the first "
                 f"deleted {format_relative_ms(r['firstDeleteTimestamp'], now_ms)})", "yellow")
    note = hidden_note(hidden)
    if note:
        _say(note, "dim")


def _retention_why(why: str, settings: dict) -> str:
    """retention.files.why in words: what deletes the file (its age, at the deleteWhen hour; a
    disk fuller than diskMaxUsedSpaceRatio; one fuller than 85 %, whatever the age)."""
    from rmqdelay.groups.retention import CLEAN_FORCIBLY_RATIO

    return {"deleteWhen": "age (deleteWhen)", "diskFull": f"disk over {settings['diskMaxUsedSpaceRatio']} %",
            "forcibly": f"disk over {CLEAN_FORCIBLY_RATIO * 100:.0f} %, any age",
            "current": "the current file"}.get(why, why)


def _print_layout(layout: dict) -> None:
    """The store's layout, and a DLedger log's facts: group node, term, indexes, files."""
    from .inspect_records import uncommitted_note

    dledger = layout.get("dledger")
    if dledger is None:
        _say(f"layout: {layout['name']}" + (" (storeType=defaultRocksDB)" if "rocksdb" in layout else ""))
        for db in layout.get("rocksdb", []):
            _say(f"RocksDB {db['directory']}/: column families {', '.join(db['columnFamilies']) or '?'}; written by "
                 f"RocksDB {db['rocksdbVersion'] or '?'}; {db['sstFiles']} SST file(s), {format_size(db['bytes'])}")
        return
    term = "?" if dledger["currTerm"] is None else dledger["currTerm"]
    voted = dledger["voteLeader"] or "nobody"
    _say(f"layout: DLedger (enableDLegerCommitLog): node {dledger['selfId']} ({dledger['directory']}/), "
         f"term {term} (voted for {voted}); entries {dledger['firstIndex']}..{dledger['endIndex']}, committed "
         f"index {dledger['committedIndex']} (checkpoint: committed index {dledger['checkpointCommittedIndex']}, "
         f"end index {dledger['checkpointEndIndex']})")
    data = dledger["dataFiles"]
    sizes = sorted({f["size"] for f in data})
    names = f": {data[0]['file']}" + (f" .. {data[-1]['file']}" if len(data) > 1 else "") if data else ""
    _say(f"DLedger data: {len(data)} file(s)" + (f" of {format_size(sizes[0])}" if len(sizes) == 1 else "") + names
         + f"; committed position {dledger['committedPosition']}, written to {dledger['writePosition']}")
    if dledger["oldCommitLogFiles"]:
        _say(f"old commit log (below dividedCommitlogOffset {dledger['dividedCommitlogOffset']}): "
             f"{len(dledger['oldCommitLogFiles'])} file(s) in commitlog/")
    if dledger["uncommitted"] is not None:
        _say(uncommitted_note(dledger["uncommitted"], dledger["committedIndex"]), "yellow")


def _queue_ids(queues: list[dict]) -> str:
    ids = sorted(q["queueId"] for q in queues)
    return f"{ids[0]}-{ids[-1]}" if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 1 else \
        ",".join(map(str, ids))


# -- inspect delay ---------------------------------------------------------------------------

def inspect_delay(
    store_dir: Path = options.store(),
    now: Optional[str] = options.now(),
    message_delay_level: Optional[str] = options.message_delay_level(),
    broker_config: Optional[Path] = options.broker_config(),
    json_out: bool = options.json_out(),
    output_format_: Format = format_option(),
    store_name: Optional[str] = store_name_option(),
    fail_if_overdue: Optional[str] = fail_if_overdue_option("message of a level"),
    wide: bool = options.wide(),
) -> None:
    """Per delay level: delay, offset, max offset, pending, due now, when the next message is due.

    Example: rmqdelay inspect delay /data/broker-a/store --format prometheus
    """
    from rmqdelay.schedule.status import level_statuses
    from rmqdelay.store import Store

    fmt = output_format(json_out, output_format_)
    levels = options.delay_level_table(message_delay_level, broker_config)
    overdue_ms = parse_duration_ms(fail_if_overdue, "--fail-if-overdue") if fail_if_overdue is not None else None
    now_ms = clock_ms(now)
    problems: list[str] = []
    with Store(store_dir) as store:
        if fmt is Format.prometheus:  # a damaged level leaves out its own figures only
            statuses = [s for level in sorted(levels)
                        for s in read_for(fmt, problems, lambda: level_statuses(store, levels, now_ms, [level]), [])]
        else:
            statuses = level_statuses(store, levels, now_ms)
        from rmqdelay.store.recovery import store_cut

        cut = store_cut(store)
    from .prometheus import delay_level_families

    emit(fmt, statuses, lambda: delay_level_families(statuses, store_label(store_dir, store_name), now_ms, problems,
                                                     cut),
         lambda: print_levels(f"SCHEDULE_TOPIC_XXXX of {store_dir}", statuses, now_ms, wide))
    if cut is not None:
        # The deliveries these levels wait for would go after a record the broker cuts the log at;
        # --format prometheus says it in rmqdelay_broker_cut_records and exits 0.
        sys.stderr.write(f"rmqdelay: {cut.describe()}\n")
        if fmt is not Format.prometheus:
            raise typer.Exit(EXIT_PROBLEMS)
    if overdue_ms is not None:
        over = [s for s in statuses if s.oldestDueTimestamp is not None and now_ms - s.oldestDueTimestamp > overdue_ms]
        worst = min(over, key=lambda s: s.oldestDueTimestamp, default=None)
        if worst is not None:
            crossed("inspect delay", "--fail-if-overdue", fail_if_overdue,
                    f"level {worst.level}'s oldest due message has been due "
                    f"{format_duration_ms(now_ms - worst.oldestDueTimestamp)} (since "
                    f"{format_date_ms(worst.oldestDueTimestamp)}; {worst.dueNow} due)"
                    + (f"; levels over: {', '.join(str(s.level) for s in over)}" if len(over) > 1 else ""))


# In the order `inspect --help` lists them.
app.command("store")(inspect_store)
app.command("cq")(inspect_cq)  # commands/inspect_records.py
app.command("commitlog")(inspect_commitlog)
app.command("message")(inspect_message)
app.command("delay")(inspect_delay)
app.command("index")(inspect_index)  # commands/inspect_index.py
app.command("timer")(inspect_timer)  # commands/inspect_timer.py
app.command("consumers")(inspect_consumers)  # commands/inspect_groups.py
app.command("dlq")(inspect_dlq)
