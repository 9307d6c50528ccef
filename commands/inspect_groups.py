"""`rmqdelay inspect consumers | dlq`: the consumer groups of a store - where each is in each
queue and how far behind (config/consumerOffset.json against the consume queues), and what
they gave up on (the %DLQ% queues). Nothing here writes a byte.

The store is imported inside the functions that use it: `--help` must not load it
(tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import options
from .checks import crossed, parse_count, parse_count_or_duration
from .outputs import Format, emit, format_option, output_format, read_for, store_label, store_name_option
from .common import clock_ms, console, format_duration_ms, format_time_ms
from .tables import Column, hidden_note, print_table


# -- inspect consumers -----------------------------------------------------------------------

def inspect_consumers(
    store_dir: Path = options.store(),
    group: Optional[str] = typer.Option(None, "--group", metavar="GROUP", show_default=False,
                                        help="Only this consumer group."),
    topic: Optional[str] = typer.Option(None, "--topic", metavar="TOPIC", show_default=False,
                                        help="Only this topic (a %RETRY% or %DLQ% topic too)."),
    now: Optional[str] = options.now("the lag in time is judged at"),
    fail_if_lag: Optional[str] = typer.Option(
        None, "--fail-if-lag", metavar="N|DURATION", show_default=False,
        help="Exit 1 (one line on stderr saying which group and queue) when a queue's lag is more than N "
             "messages, or, given a duration such as 10m, when its oldest unconsumed message is older than "
             "that. DLQ queues are left to `inspect dlq --fail-if-dlq`."),
    sort: str = typer.Option("group", "--sort", metavar="group|lag",
                             help="group: by group, topic and queue; lag: the groups furthest behind first, "
                                  "each group's queues the same way."),
    limit: Optional[str] = options.limit("queues on the terminal (and JSON lines)", "all"),
    json_out: bool = options.json_out(),
    output_format_: Format = format_option(),
    store_name: Optional[str] = store_name_option(),
    wide: bool = options.wide(),
) -> None:
    """Per consumer group, topic and queue: the committed offset (config/consumerOffset.json,
    its .bak as the broker falls back), the queue's max offset, the lag in messages and in
    time (the store time of the oldest unconsumed message); %RETRY% and %DLQ% topics marked.

    Example: rmqdelay inspect consumers /data/broker-a/store --group GID_ORDER --fail-if-lag 10m
    """
    from rmqdelay.store import Store
    from rmqdelay.store.consumers import consumer_lag, read_consumer_offsets
    from rmqdelay.store.topics import validate_topic

    from rmqdelay.errors import UsageError
    from rmqdelay.store.consumers import sort_by_lag

    fmt = output_format(json_out, output_format_)
    threshold = parse_count_or_duration(fail_if_lag, "--fail-if-lag")
    if sort not in ("group", "lag"):
        raise UsageError(f"--sort: group or lag, found {sort!r}")
    shown = options.parse_count(limit, "--limit")
    if topic is not None:
        validate_topic(topic)
    now_ms = clock_ms(now)
    problems: list[str] = []
    with Store(store_dir) as store:
        offsets = read_for(fmt, problems, lambda: read_consumer_offsets(store), None)
        rows = [] if offsets is None else \
            read_for(fmt, problems, lambda: consumer_lag(store, offsets, now_ms, group=group, topic=topic), [])
    if sort == "lag":
        rows = sort_by_lag(rows)
    from .prometheus import consumer_families

    listed = rows if shown is None or fmt is Format.prometheus else rows[:shown]
    emit(fmt, listed, lambda: consumer_families(rows, store_label(store_dir, store_name), now_ms, problems),
         lambda: _print_consumers(rows, offsets, store_dir, now_ms, wide, shown))
    if threshold is not None:
        _check_lag(rows, threshold, fail_if_lag)


def _print_consumers(rows, offsets, store_dir: Path, now_ms: int, wide: bool, limit: int | None = None) -> None:
    from rich.text import Text

    from rmqdelay.store.consumers import group_totals, worst_group

    totals = group_totals(rows)
    behind = [r for r in rows if r.lag and r.kind != "dlq"]
    source = offsets.source if offsets.present else f"no {offsets.source} (nothing committed)"
    dead = sum(r.lag for r in rows if r.kind == "dlq")
    worst = worst_group(totals)
    worst_text = "" if worst is None else (
        f"; furthest behind: {worst.group}, {worst.lag} message(s)"
        + (f", oldest {format_duration_ms(worst.lagMs)} old" if worst.lagMs else ""))
    console.print(Text(f"{len(totals)} consumer group(s) in {store_dir}: {sum(r.lag for r in behind)} message(s) "
                       f"not consumed in {len(behind)} queue(s)" + (f", {dead} in DLQ queues" if dead else "")
                       + worst_text + f" ({source})", style="bold"))
    marks = {"retry": "retry", "dlq": "DLQ", "topic": ""}
    listed = rows if limit is None else rows[:limit]
    by_group = {t.group: t for t in totals}
    table = []
    for n, r in enumerate(listed):
        table.append([Text(r.group), Text(r.topic), marks[r.kind], str(r.queueId),
                      "-" if r.consumerOffset is None else str(r.consumerOffset), str(r.maxOffset), str(r.lag),
                      format_duration_ms(r.lagMs) if r.lag else "-",
                      format_time_ms(r.oldestUnconsumedTimestamp) if r.oldestUnconsumedTimestamp else "-",
                      str(r.minOffset)])
        if n + 1 == len(listed) or listed[n + 1].group != r.group:
            t = by_group[r.group]
            bold = "bold"
            table.append([Text(r.group, style=bold), Text(f"all {t.queues} queue(s)", style=bold), "", "", "",
                          "", Text(str(t.lag), style=bold),
                          Text(format_duration_ms(t.lagMs) if t.lag and t.lagMs is not None else "-", style=bold),
                          format_time_ms(t.oldestUnconsumedTimestamp) if t.oldestUnconsumedTimestamp else "-", ""])
    hidden = print_table(console, [Column("group", "left", fold=True), Column("topic", "left", fold=True),
                                   Column("kind", "left", drop=2), Column("queue"), Column("committed"),
                                   Column("max"), Column("lag"), Column("behind"),
                                   Column("oldest unconsumed", drop=3), Column("min", drop=4)], table, wide=wide)
    if limit is not None and len(rows) > limit:
        console.print(Text(f"{len(rows) - limit} more queue(s) (--limit, --json)", style="dim"))
    console.print(Text("all N queue(s): a group's total over its topic and %RETRY% queues (its DLQ apart): the "
                       "messages not consumed, and how far behind its oldest unconsumed message is", style="dim"))
    never = [r for r in rows if r.consumerOffset is None and r.kind != "dlq"]
    if never:
        console.print(Text(f"{len(never)} queue(s) without a committed offset ('-'): the lag counts from the "
                           "queue's min offset", style="dim"))
    note = hidden_note(hidden)
    if note:
        console.print(Text(note, style="dim"))


def _check_lag(rows, threshold, typed: str) -> None:
    checked = [r for r in rows if r.kind != "dlq"]
    if threshold.count is not None:
        over = [r for r in checked if r.lag > threshold.count]
        worst = max(over, key=lambda r: r.lag, default=None)
        if worst is not None:
            crossed("inspect consumers", "--fail-if-lag", typed,
                    f"group {worst.group} is {worst.lag} message(s) behind on {worst.topic} queue {worst.queueId}"
                    + (f" ({len(over)} queue(s) over)" if len(over) > 1 else ""))
    else:
        over = [r for r in checked if r.lag and r.lagMs is not None and r.lagMs > threshold.ms]
        worst = max(over, key=lambda r: r.lagMs, default=None)
        if worst is not None:
            crossed("inspect consumers", "--fail-if-lag", typed,
                    f"group {worst.group} is {format_duration_ms(worst.lagMs)} behind on {worst.topic} queue "
                    f"{worst.queueId} (oldest unconsumed message stored "
                    f"{format_time_ms(worst.oldestUnconsumedTimestamp)}, {worst.lag} message(s))"
                    + (f" ({len(over)} queue(s) over)" if len(over) > 1 else ""))


# -- inspect dlq -----------------------------------------------------------------------------

def inspect_dlq(
    store_dir: Path = options.store(),
    group: Optional[str] = typer.Option(None, "--group", metavar="GROUP", show_default=False,
                                        help="Only this consumer group's %DLQ% topic."),
    now: Optional[str] = options.now("how long a message has sat in the DLQ is judged at"),
    limit: Optional[str] = options.limit("messages on the terminal", "all"),
    fail_if_dlq: Optional[str] = typer.Option(
        None, "--fail-if-dlq", metavar="N", show_default=False,
        help="Exit 1 (one line on stderr saying which group) when more than N messages are dead-lettered "
             "(0: any)."),
    json_out: bool = options.json_out(),
    output_format_: Format = format_option(),
    store_name: Optional[str] = store_name_option(),
    wide: bool = options.wide(),
) -> None:
    """Every dead-lettered message: its group, original topic (RETRY_TOPIC), keys, UNIQ_KEY, why
    it died (the group's retryMaxTimes, the consumer's own maxReconsumeTimes, or sent straight
    to the DLQ), reconsumeTimes, tags, the first send and the last attempt, how long it has sat
    in the DLQ, body size. Read-only: `dlq resend` puts them back, `dlq export` writes them out.

    Example: rmqdelay inspect dlq /data/broker-a/store --group GID_ORDER --fail-if-dlq 0
    """
    from rmqdelay.store import Store
    from rmqdelay.store.deadletter import dead_letters

    fmt = output_format(json_out, output_format_)
    most = parse_count(fail_if_dlq, "--fail-if-dlq")
    shown = options.parse_count(limit, "--limit")
    now_ms = clock_ms(now)
    problems: list[str] = []
    with Store(store_dir) as store:
        letters = read_for(fmt, problems, lambda: dead_letters(store, now_ms, group), [])
    from .prometheus import dlq_families

    emit(fmt, letters, lambda: dlq_families(letters, store_label(store_dir, store_name), now_ms, problems),
         lambda: _print_dlq(letters, store_dir, now_ms, shown, wide))
    if most is not None and len(letters) > most:
        counts: dict[str, int] = {}
        for letter in letters:
            counts[letter.group] = counts.get(letter.group, 0) + 1
        crossed("inspect dlq", "--fail-if-dlq", fail_if_dlq,
                f"{len(letters)} dead-lettered message(s): "
                + ", ".join(f"%DLQ%{g} {n}" for g, n in sorted(counts.items(), key=lambda kv: -kv[1])))


def _reason_text(d) -> str:
    """The why column: short enough to stay on one line at 80 columns (the note says what each means)."""
    if d.reason == "retryMaxTimes":
        return f"group {d.maxReconsumeTimes}"
    if d.reason == "maxReconsumeTimes":
        return f"client {d.maxReconsumeTimes}"
    return "sent"


def _reasons(letters) -> str:
    """The headline's count by why: ``8 at the client's limit of 2``."""
    counts: dict[tuple[str, int | None], int] = {}
    for d in letters:
        counts[(d.reason, d.maxReconsumeTimes)] = counts.get((d.reason, d.maxReconsumeTimes), 0) + 1
    words = {"retryMaxTimes": "at the group's limit of {}", "maxReconsumeTimes": "at the client's limit of {}",
             "sentToDlq": "sent straight to the DLQ"}
    return ", ".join(f"{n} " + words.get(reason, reason).format(most)
                     for (reason, most), n in sorted(counts.items(), key=lambda kv: -kv[1]))


def _print_dlq(letters, store_dir: Path, now_ms: int, limit: int | None, wide: bool) -> None:
    from rich.text import Text

    groups = sorted({d.group for d in letters})
    console.print(Text(f"{len(letters)} dead-lettered message(s) in {len(groups)} group(s) of {store_dir}"
                       + (f": {_reasons(letters)}" if letters else ""), style="bold"))
    if not letters:
        return
    rows = [[Text(d.group), Text(d.originalTopic or "-"), Text(d.keys or "-"), d.uniqKey or "-",
             Text(_reason_text(d)), str(d.reconsumeTimes), Text(d.tags or "-"), str(d.bodySize),
             format_duration_ms(d.inDlqMs), format_time_ms(d.firstStoreTimestamp or d.bornTimestamp),
             format_time_ms(d.lastAttemptTimestamp) if d.lastAttemptTimestamp else "-"]
            for d in letters[:limit]]
    # At 80 columns the ids an operator acts on (keys, UNIQ_KEY) stay; the times go first.
    hidden = print_table(console, [Column("group", "left", fold=True), Column("topic", "left", fold=True),
                                   Column("keys", "left", fold=True), Column("uniq key", "left"),
                                   Column("why", "left", fold=True, drop=3, floor=8), Column("reconsume", drop=4),
                                   Column("tags", "left", drop=5), Column("body", drop=6),
                                   Column("in DLQ", drop=7), Column("first sent", drop=8),
                                   Column("last attempt", drop=9)],
                         rows, wide=wide)
    if limit is not None and len(letters) > limit:
        console.print(Text(f"{len(letters) - limit} more (--limit, --json)", style="dim"))
    console.print(Text("topic: the one it was sent to (RETRY_TOPIC); why: group N, the group's limit (retryMaxTimes "
                       "N, subscriptionGroup.json) reached; client N, the consumer's own maxReconsumeTimes N (the "
                       "most retries the group's dead letters made); sent, sent straight to the DLQ; first sent: the first copy's store time (its born time when the log no longer "
                       "holds it); last attempt: the last %RETRY% delivery the consumer failed", style="dim"))
    note = hidden_note(hidden)
    if note:
        console.print(Text(note, style="dim"))
