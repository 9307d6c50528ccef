"""`rmqdelay trace STORE ID`: one message through its whole life - sent, parked, rolled,
cancelled, delivered, consumed or not, each send-back and redelivery, the DLQ. Nothing here
writes a byte.

The store is imported inside the command: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

import typer

from rmqdelay.errors import EXIT_PROBLEMS, UsageError

from . import options
from .common import clock_ms, console, emit_json, err_console, format_duration_ms, format_time_ms, progress
from .tables import Column, hidden_note, print_table

_HEX_ID = re.compile(r"^[0-9A-Fa-f]{32}$|^[0-9A-Fa-f]{56}$")


def trace(
    store_dir: Path = options.store(),
    target: Optional[str] = typer.Argument(None, metavar="ID", show_default=False,
                                           help="A UNIQ_KEY (the client's msgId, what producers log), an offset "
                                                "msgId (what the broker returns), or a physical offset (digits)."),
    key: Optional[str] = typer.Option(None, "--key", metavar="KEY", show_default=False,
                                      help="Instead of ID: the message whose KEYS (or UNIQ_KEY) hold this key."),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="With --key: only messages of this topic."),
    now: Optional[str] = options.now("'waiting' and 'due' are judged at"),
    message_delay_level: Optional[str] = options.message_delay_level(),
    broker_config: Optional[Path] = options.broker_config(),
    json_out: bool = options.json_out("One JSON object per record, in time order, with its stage."),
    wide: bool = options.wide(),
) -> None:
    """Follow one message through its whole life: sent, parked (delay level or timer), rolled,
    cancelled, delivered, consumed or not, each send-back and redelivery, the DLQ.

    Every record of the message in time order, 4.x and 5.x alike, found by its UNIQ_KEY and
    ORIGIN_MESSAGE_ID (through the index where it covers the log, a scan elsewhere); whether a
    copy was consumed is each group's committed offset in config/consumerOffset.json.

    Example: rmqdelay trace /data/broker-a/store C0000202331C5FFD2B276EC837D60012
    """
    from rich.text import Text

    from rmqdelay.analysis.trace import seeds_for
    from rmqdelay.analysis.trace import trace as follow
    from rmqdelay.formats.constants import KEY_SEPARATOR
    from rmqdelay.formats.javanum import java_parse_long
    from rmqdelay.store import Store
    from rmqdelay.store.topics import validate_topic

    if (target is None) == (key is None):
        raise UsageError("give either ID (a UNIQ_KEY, a msgId or an offset) or --key KEY")
    if key is not None and (not key or KEY_SEPARATOR in key):
        raise UsageError(f"--key: one key, not empty and without spaces (KEYS are split at spaces), found {key!r}")
    if target is not None and (java_parse_long(target) is None or not target.isdigit()) and not _HEX_ID.match(target):
        raise UsageError(f"ID: a UNIQ_KEY or msgId (32 or 56 hex digits), or a physical offset (digits), "
                         f"found {target!r}")
    if topic is not None:
        validate_topic(topic)
    levels = options.delay_level_table(message_delay_level, broker_config)
    now_ms = clock_ms(now)
    with Store(store_dir) as store:
        log = store.commitlog
        total = (log.files[-1].end - log.min_offset) if log.files else 0
        with progress("following the message", total) as advance:
            seeds = seeds_for(store, target, key, topic, advance=advance)
            if not seeds:
                err_console.print(Text(f"rmqdelay: no message with {'key ' + repr(key) if key else 'id ' + target}"))
                raise typer.Exit(EXIT_PROBLEMS)
            result = follow(store, seeds, levels, now_ms, advance=advance)
    if json_out:
        for rec in result.records:
            emit_json(rec.as_json())
        return
    _print_trace(result, now_ms, wide)


def _print_trace(result, now_ms: int, wide: bool) -> None:
    from rich.text import Text

    records = result.records
    first = records[0].msg
    last = records[-1]
    keys = first.properties.get("KEYS")
    where = _where_now(last, now_ms)
    # A life within one (UTC) day: the date once in the headline, the times in the table.
    day = format_time_ms(first.storeTimestamp)[:10]
    one_day = all(format_time_ms(r.msg.storeTimestamp).startswith(day) for r in records)
    stored = (lambda ms: format_time_ms(ms)[11:]) if one_day else format_time_ms
    console.print(Text(f"UNIQ_KEY {', '.join(result.uniqKeys) or '-'}" + (f" (KEYS {keys})" if keys else "")
                       + f": {len(records)} record(s)" + (f" stored on {day}" if one_day else "") + f", {where}",
                       style="bold"))
    rows = [[stored(r.msg.storeTimestamp), r.stage, Text(f"{r.msg.topic} {r.msg.queueId}:{r.msg.queueOffset}"),
             Text(_detail(r, now_ms)), str(r.msg.commitLogOffset)] for r in records]
    hidden = print_table(console, [Column("stored", "left"), Column("stage", "left"),
                                   Column("topic queue:offset", "left", fold=True), Column("what", "left", fold=True),
                                   Column("commit log offset", drop=1)], rows, wide=wide)
    if result.scanned:
        console.print(Text("the index does not cover the whole log: the rest was scanned", style="dim"))
    note = hidden_note(hidden)
    if note:
        console.print(Text(note, style="dim"))


_STATE_WORDS = {"waiting": "waiting", "delivered": "delivered", "rolled": "rolled (re-put)",
                "recalled": "recalled (dropped when its slot is read)", None: "-"}


def _due(ms: int | None, now_ms: int, waiting: bool | None = True) -> str:
    if ms is None:
        return "due -"
    return f"due {format_time_ms(ms)}" + (f" (in {format_duration_ms(ms - now_ms)})" if waiting and ms > now_ms
                                          else " (overdue)" if waiting else "")


def _consumed(r) -> str:
    if not r.consumers:
        return "; consumed? no group has an offset for this queue in consumerOffset.json"
    return "; " + ", ".join(f"consumed by {c.group}" if c.consumed else
                            f"NOT consumed by {c.group} (committed {c.consumerOffset})" for c in r.consumers)


def _late(ms: int | None) -> str:
    if ms is None:
        return ""
    return f", {format_duration_ms(ms)} late" if ms >= 0 else f", {format_duration_ms(-ms)} early"


def _detail(r, now_ms: int) -> str:
    m = r.msg
    if r.stage == "sent":
        return f"sent to {m.topic} queue {m.queueId} offset {m.queueOffset}" + _consumed(r)
    if r.stage == "parked":
        how = f"delay level {r.delayLevel}" if m.topic == "SCHEDULE_TOPIC_XXXX" else "timer (TIMER_OUT_MS)"
        return (f"parked for {r.realTopic} queue {r.realQueueId}: {how}, "
                f"{_due(r.deliverTimestamp, now_ms, r.state == 'waiting')}; {_STATE_WORDS[r.state]}")
    if r.stage == "rolled":
        return f"re-put by a roll: {_due(r.deliverTimestamp, now_ms, r.state == 'waiting')}; {_STATE_WORDS[r.state]}"
    if r.stage == "cancelled":
        return f"recall marker for {r.realTopic} from producer group {r.producerGroup or '-'}"
    if r.stage == "delivered":
        return f"delivered to {m.topic} queue {m.queueId} offset {m.queueOffset}{_late(r.latenessMs)}" + _consumed(r)
    if r.stage == "sendBack":
        state = "waiting" if r.state == "waiting" else "came back"
        return (f"attempt {r.attempt} failed: {r.group} sent it back (reconsumeTimes {m.reconsumeTimes}), "
                f"level {r.delayLevel}, {_due(r.deliverTimestamp, now_ms, r.state == 'waiting')}; {state}")
    if r.stage == "redelivered":
        return f"retry {r.attempt} back in {m.topic} offset {m.queueOffset}{_late(r.latenessMs)}" + _consumed(r)
    if r.stage == "dlq":
        return f"dead-lettered by {r.group} after {m.reconsumeTimes} attempt(s)"
    return r.stage


def _where_now(last, now_ms: int) -> str:
    m = last.msg
    if last.stage == "dlq":
        return f"in {m.topic} since {format_time_ms(m.storeTimestamp)}"
    if last.stage in ("parked", "rolled", "sendBack") and last.state == "waiting":
        return f"waiting in {m.topic}, {_due(last.deliverTimestamp, now_ms)}"
    if last.stage == "cancelled" or last.state == "recalled":
        return "recalled: the wheel drops it when its slot is read"
    if last.consumers and all(c.consumed for c in last.consumers):
        return f"consumed from {m.topic}"
    return f"last in {m.topic}" + (" (not consumed)" if last.consumers else "")
