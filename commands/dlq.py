"""`rmqdelay dlq export|resend STORE --group G`: a group's dead letters written out whole, or
put back for its consumers (the group's %RETRY% queue, through the one writer, exactly once).

The store is imported inside the commands: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from rmqdelay.errors import UsageError

from .group import typer_app
from . import options
from .common import clock_ms, console, emit_json, format_time_ms, parse_time_ms, require_store
from .tables import Column, hidden_note, print_table

app = typer_app("A consumer group's dead letters (%DLQ%GROUP): export them, put them back.\n\n"
                       "Example: rmqdelay dlq resend STORE --group GID_ORDERS --since 2026-11-22T12:00:00Z")


def _group_option(required: bool):
    return typer.Option(... if required else None, "--group", metavar="GROUP", show_default=False,
                        help="The consumer group whose %DLQ% topic is read" + (" (required)." if required
                                                                              else ". Default: every group."))


def _uniq_keys():
    return typer.Option([], "--uniq-key", metavar="UNIQ_KEY", show_default=False,
                        help="Only the dead letter with this UNIQ_KEY (the client's msgId; repeatable).")


def _keys():
    return typer.Option([], "--key", metavar="KEY", show_default=False,
                        help="Only dead letters whose KEYS hold this key (repeatable).")


def _chosen(store, group, uniq_key, key, since, until, limit, now_ms):
    from rmqdelay.groups.deadletters import select
    from rmqdelay.store.deadletter import dead_letters

    return select(dead_letters(store, now_ms, group), uniq_keys=uniq_key or None, keys=key or None,
                  since=None if since is None else parse_time_ms(since, "--since"),
                  until=None if until is None else parse_time_ms(until, "--until"),
                  limit=options.parse_count(limit, "--limit"))


@app.command("export")
def export(
    store: Path = options.store(),
    output: Path = typer.Option(..., "--output", metavar="FILE", show_default=False,
                                help="Where to write: JSON lines, or Parquet when FILE ends in .parquet; "
                                     "- for JSON lines on stdout (required)."),
    group: Optional[str] = _group_option(False),
    uniq_key: list[str] = _uniq_keys(),
    key: list[str] = _keys(),
    since: Optional[str] = options.since("dead letters put into the DLQ"),
    until: Optional[str] = options.until("dead letters put into the DLQ"),
    limit: Optional[str] = options.limit("dead letters", "all"),
    now: Optional[str] = options.now("how long each has sat in the DLQ is judged at"),
) -> None:
    """Every dead letter whole: what `inspect dlq` says of it (why it died included), the
    record's fields, its properties and its body (base64 in JSON lines, bytes in Parquet).
    Read-only: the store is not changed.

    Example: rmqdelay dlq export /data/broker-a/store --group GID_ORDERS --output dead.parquet
    """
    from rmqdelay.groups.deadletters import export_rows, json_row, write_parquet
    from rmqdelay.store import Store

    now_ms = clock_ms(now)
    to_stdout = str(output) == "-"
    if not to_stdout and output.is_dir():
        raise UsageError(f"--output: a file to write, found a directory {output}")
    with Store(store) as s:
        letters = _chosen(s, group, uniq_key, key, since, until, limit, now_ms)
        rows = export_rows(s, letters)
        if to_stdout:
            for row in rows:
                emit_json(json_row(row))
            return
        tmp = output.with_name(output.name + ".tmp")
        try:
            if output.suffix.lower() == ".parquet":
                count = write_parquet(tmp, rows)
            else:
                count = _write_jsonl(tmp, rows)
            tmp.replace(output)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UsageError(f"--output: a file that can be written, found {output} ({exc.strerror})") from None
    from rich.text import Text

    groups = sorted({d.group for d in letters})
    console.print(Text(f"exported {count} dead letter(s) of {len(groups)} group(s) to {output}", style="bold"),
                  soft_wrap=True)


def _write_jsonl(path: Path, rows) -> int:
    import json

    from rmqdelay.groups.deadletters import json_row

    from .common import json_text

    count = 0
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as fh:
        for row in rows:
            fh.write(json_text(json.dumps(json_row(row), ensure_ascii=False, separators=(",", ":"))) + "\n")
            count += 1
    return count


@app.command("resend")
def resend(
    store: Path = options.store(),
    group: str = _group_option(True),
    uniq_key: list[str] = _uniq_keys(),
    key: list[str] = _keys(),
    since: Optional[str] = options.since("dead letters put into the DLQ"),
    until: Optional[str] = options.until("dead letters put into the DLQ"),
    limit: Optional[str] = options.limit("dead letters", "all"),
    again: bool = typer.Option(False, "--again", help="Put back also the ones resent before."),
    execute: bool = typer.Option(False, "--execute", help="Put them back. Default: a dry run."),
    now: Optional[str] = options.now("how long each has sat in the DLQ is judged at"),
    json_out: bool = options.json_out(),
    wide: bool = options.wide(),
) -> None:
    """Put a group's dead letters back for its consumers, as the broker's own retry path does:
    into the group's %RETRY% queue, which only that group reads, as the original message
    (topic, keys, tags, body, user properties and UNIQ_KEY as the consumer first saw them,
    reconsumeTimes 0). A dry run by default lists what would go back; --execute puts each
    through the one writer under the store lock, exactly once: a copy carries RESENT_FROM_DLQ,
    so a second resend (or one after a kill) puts back only what is not back yet, unless
    --again. The broker, restarted, delivers them to the group's consumers.

    Example: rmqdelay dlq resend STORE --group GID_ORDERS --key ORDER-42 --execute
    """
    from rmqdelay.groups.deadletters import resend as put_back
    from rmqdelay.groups.deadletters import resend_plan
    from rmqdelay.store import Store
    from rmqdelay.store.writer import StoreWriter

    now_ms = clock_ms(now)
    resent = []
    if execute:
        if not Path(store).is_dir():
            Store(store)  # the one-line error for a missing store
        require_store(store)
        with StoreWriter(store) as writer, Store(store) as s:  # the lock, and recovery, before reading
            letters = _chosen(s, group, uniq_key, key, since, until, limit, now_ms)
            plan = resend_plan(s, group, letters, again=again)
            resent = put_back(writer, s, plan)
    else:
        with Store(store) as s:
            letters = _chosen(s, group, uniq_key, key, since, until, limit, now_ms)
            plan = resend_plan(s, group, letters, again=again)
    placed = {r.letter.msgId: r for r in resent}
    if json_out:
        for r in plan:
            p = placed.get(r.letter.msgId)
            d = r.letter
            emit_json({"group": d.group, "msgId": d.msgId, "uniqKey": d.uniqKey, "keys": d.keys,
                       "originalTopic": d.originalTopic, "dlqTimestamp": d.dlqTimestamp, "copies": r.resent,
                       "resend": r.put, "topic": f"%RETRY%{group}", "queueId": None if p is None else p.queueId,
                       "queueOffset": None if p is None else p.queueOffset,
                       "commitLogOffset": None if p is None else p.commitLogOffset, "executed": execute})
        return
    _print_resend(plan, group, execute, wide)


def _print_resend(plan, group: str, execute: bool, wide: bool) -> None:
    from rich.text import Text

    going = [r for r in plan if r.put]
    done = [r for r in plan if not r.put]
    verb = "put back" if execute else "would be put back"
    console.print(Text(f"{len(going)} dead letter(s) of {group} {verb} into %RETRY%{group}"
                       + (f", {len(done)} resent before (--again puts them back too)" if done else "")
                       + ("" if execute else " (dry run: nothing written; add --execute)"), style="bold"))
    if not plan:
        return
    rows = [[Text(r.letter.originalTopic or "-"), Text(r.letter.keys or "-"), r.letter.uniqKey or "-",
             "yes" if r.put else "no", str(r.resent), format_time_ms(r.letter.dlqTimestamp)] for r in plan]
    note = hidden_note(print_table(console, [Column("topic", "left", fold=True), Column("keys", "left", fold=True),
                                             Column("uniq key", "left"), Column("resend", "left"),
                                             Column("resent", drop=2), Column("in DLQ since", drop=1)],
                                   rows, wide=wide))
    if note:
        console.print(Text(note, style="dim"))
