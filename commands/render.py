"""How records look to a user: JSON objects (docs/cli.md) and rich tables.

Imported by commands before their arguments are parsed, so it imports no decoder (construct,
numpy) at the top: the records it renders were decoded by then.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from rmqdelay.formats.constants import (
    COMPRESSED_FLAG,
    COMPRESSION_TYPE_MASK,
    CQ_PRE_BLANK_SIZE,
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_DELAY_TIME_LEVEL,
    PROPERTY_KEYS,
    PROPERTY_TAGS,
    TRANSACTION_TYPE_MASK,
)

from .common import console, format_date_ms, format_duration_ms, format_relative_ms, format_time_ms
from .tables import Column, hidden_note, print_table

if TYPE_CHECKING:
    from rmqdelay.formats.commitlog import Message

_TRANSACTION = {0x0: "", 0x4: "prepared", 0x8: "commit", 0xC: "rollback"}
_COMPRESSION = {0x000: "zlib", 0x100: "lz4", 0x200: "zstd", 0x300: "zlib"}
_SYS_FLAG_BITS = [(0x2, "multi-tags"), (0x10, "born-v6"), (0x20, "store-v6"),
                  (0x40, "need-unwrap"), (0x80, "inner-batch")]


# -- JSON ------------------------------------------------------------------------------------

def message_json(msg: Message, *, body: bool = False) -> dict:
    obj = {
        "msgId": msg.msgId, "topic": msg.topic, "queueId": msg.queueId, "flag": msg.flag,
        "queueOffset": msg.queueOffset, "commitLogOffset": msg.commitLogOffset,
        "storeSize": msg.storeSize, "sysFlag": msg.sysFlag, "bornTimestamp": msg.bornTimestamp,
        "bornHost": msg.bornHost, "storeTimestamp": msg.storeTimestamp, "storeHost": msg.storeHost,
        "reconsumeTimes": msg.reconsumeTimes, "preparedTransactionOffset": msg.preparedTransactionOffset,
        "bodyCRC": msg.bodyCRC, "properties": dict(msg.properties),
    }
    if body:
        obj["body"] = base64.b64encode(msg.body).decode("ascii")
    return obj


def unit_json(topic: str, queue_id: int, cq_offset: int, commit_log_offset: int, size: int,
              tags_code: int, schedule: bool) -> dict:
    obj = {"topic": topic, "queueId": queue_id, "cqOffset": cq_offset,
           "commitLogOffset": commit_log_offset, "size": size, "tagsCode": tags_code}
    if schedule:
        # In SCHEDULE_TOPIC_XXXX the tagsCode is the deliver time (CommitLog.checkMessageAndReturnSize).
        obj["deliverTimestamp"] = None if _not_a_time(size, tags_code) else tags_code
    return obj


def _not_a_time(size: int, tags_code: int) -> bool:
    from rmqdelay.formats.consumequeue import is_ext_address

    return size == CQ_PRE_BLANK_SIZE or is_ext_address(tags_code)


# -- words -----------------------------------------------------------------------------------

def sys_flag_text(sys_flag: int) -> str:
    words = []
    if sys_flag & COMPRESSED_FLAG:
        words.append("compressed:" + _COMPRESSION.get(sys_flag & COMPRESSION_TYPE_MASK, "?"))
    words += [name for bit, name in _SYS_FLAG_BITS if sys_flag & bit]
    tran = _TRANSACTION[sys_flag & TRANSACTION_TYPE_MASK]
    if tran:
        words.append(f"tx-{tran}")
    return f"0x{sys_flag:X}" + (f" ({', '.join(words)})" if words else "")


def body_preview(msg: Message, limit: int = 200) -> str:
    """Text when the stored body is text; otherwise what it is and its first bytes in hex."""
    data = msg.body
    if not data:
        return "(empty)"
    if not msg.sysFlag & COMPRESSED_FLAG:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is not None and all(ch.isprintable() or ch in "\n\t\r" for ch in text):
            return text if len(text) <= limit else text[:limit] + f"… ({len(data)} bytes)"
        kind = "binary"
    else:
        kind = "compressed (" + _COMPRESSION.get(msg.sysFlag & COMPRESSION_TYPE_MASK, "?") + ")"
    head = data[:32].hex(" ")
    return f"{kind}, {len(data)} bytes: {head}" + (" …" if len(data) > 32 else "")


def unit_note(size: int, tags_code: int, schedule: bool, now_ms: int) -> tuple[str, str]:
    """What a consume queue unit's tagsCode means: (deliver time or note, when it is due)."""
    from rmqdelay.formats.consumequeue import is_ext_address

    if size == CQ_PRE_BLANK_SIZE:
        return "pre-blank (fillPreBlank: no message was ever here)", ""
    if is_ext_address(tags_code):
        return "ConsumeQueueExt address", ""
    if schedule:
        return format_time_ms(tags_code), format_relative_ms(tags_code, now_ms)
    return "", ""


# -- delay levels ----------------------------------------------------------------------------

def offset_cell(status) -> str:
    """A level's offset, marked when delayOffset.json does not hold it as is (* absent,
    ! corrected into the queue)."""
    if not status.persisted:
        return f"{status.offset}*"
    return f"{status.offset}!" if status.storedOffset != status.offset else str(status.offset)


def offset_notes(statuses) -> list[str]:
    notes = []
    if any(not s.persisted for s in statuses):
        notes.append("* not in delayOffset.json: the broker starts that level at 0, which its "
                     "timer moves to the queue's minimum offset")
    corrected = [s for s in statuses if s.persisted and s.storedOffset != s.offset]
    if corrected:
        fixes = ", ".join(f"level {s.level}: {s.storedOffset} -> {s.offset}" for s in corrected)
        notes.append(f"! outside its queue in delayOffset.json; shown as the broker's correctDelayOffset "
                     f"corrects it on start ({fixes})")
    return notes


def print_levels(title: str, statuses, now_ms: int, wide: bool, *, with_min: bool = False) -> None:
    """The delay level table of `inspect delay` and `offsets show`: one headline with the
    totals the rows add up to, then a row per level."""
    from rich.text import Text

    pending = sum(s.pending for s in statuses)
    due = sum(s.dueNow for s in statuses)
    console.print(Text(f"{title} at {format_time_ms(now_ms)}: {pending} pending, {due} due now", style="bold"))
    columns = [Column("level"), Column("delay"), Column("offset"), Column("min", drop=4), Column("max offset"),
               Column("pending"), Column("due now"), Column("next due"), Column("next due at", "left", drop=3)]
    if not with_min:
        columns.pop(3)
    rows = []
    for s in statuses:
        # The head unit: the next message the level delivers, due already or not yet.
        head = s.nextDueTimestamp
        cells = [str(s.level), format_duration_ms(s.delayMs), offset_cell(s), str(s.minOffset), str(s.maxOffset),
                 str(s.pending), str(s.dueNow), format_relative_ms(head, now_ms), format_date_ms(head)]
        if not with_min:
            cells.pop(3)
        rows.append(cells)
    note = hidden_note(print_table(console, columns, rows, wide=wide))
    for line in offset_notes(statuses) + ([note] if note else []):
        console.print(Text(line, style="dim"))


# -- tables ----------------------------------------------------------------------------------

def messages_table(messages: list[Message]) -> tuple[list, list]:
    """The columns and rows of a message listing (tables.print_table fits them): the offset,
    topic, queue and store time always; keys and tags fold; the rest goes first on a narrow
    terminal."""
    from rich.text import Text

    columns = [Column("offset"), Column("size", drop=4), Column("topic", "left", fold=True, floor=20), Column("queue"),
               Column("queue offset", drop=3), Column("stored", "left"), Column("tags", "left", fold=True, drop=2),
               Column("keys", "left", fold=True, drop=1), Column("delay", drop=5), Column("retry", drop=6),
               Column("crc", "left")]
    rows = []
    for msg in messages:
        props = msg.properties
        # Text(), not markup: message data may hold anything, '[' included.
        rows.append([str(msg.commitLogOffset), str(msg.storeSize), Text(msg.topic), str(msg.queueId),
                     str(msg.queueOffset), format_time_ms(msg.storeTimestamp), Text(props.get(PROPERTY_TAGS, "")),
                     Text(props.get(PROPERTY_KEYS, "")), props.get(PROPERTY_DELAY_TIME_LEVEL, ""),
                     str(msg.reconsumeTimes), Text("ok") if msg.bodyCrcOk else Text("BAD", style="red")])
    return columns, rows


PROBLEM_LINES = 40  # a screenful of `--verify` problems; --json lists them all


def verify_summary(checked: dict, problems: int, advisories: int = 0) -> dict:
    """The last line of every `--verify --json`: what was checked and how many problems, so a
    clean store prints one line too (docs/cli.md)."""
    return {"kind": "summary", "problems": problems, "advisories": advisories, "checked": checked}


def print_problems(problems: list, checked: str, console, limit: int = PROBLEM_LINES, advisories: int = 0) -> None:
    """`--verify` on a terminal: what was checked and how many problems first, then one line
    per problem (the first ``limit``) and how to see the rest."""
    from rich.text import Text

    faults = len(problems) - advisories
    summary = f"checked {checked}: " + (f"{faults} problem(s)" if faults else "no problems")
    if advisories:
        summary += f", {advisories} advisory note(s) (timermetrics drift; not a fault)"
    console.print(Text(summary, style="bold red" if faults else "bold green"), soft_wrap=True)
    for problem in problems[:limit]:
        console.print(Text(f"{problem.kind}: {problem}", style="yellow" if getattr(problem, "advisory", False)
                           else None), soft_wrap=True)
    if len(problems) > limit:
        console.print(Text(f"... and {len(problems) - limit} more: --json lists them all", style="dim"))


def message_tables(msg: Message) -> tuple[Table, Table]:
    """Every field of one message, then its properties."""
    from rich.table import Table
    from rich.text import Text

    from rmqdelay.formats.commitlog import body_crc

    fields = Table(show_header=False, show_edge=False, box=None)
    fields.add_column(style="bold", no_wrap=True)
    fields.add_column(overflow="fold")
    magic = "v2 (0xDAA320AB)" if msg.magicCode == MESSAGE_MAGIC_CODE_V2 else "v1 (0xDAA320A7)"
    crc = "ok" if msg.bodyCrcOk else f"MISMATCH: the body's CRC is {body_crc(msg.body)}"
    for name, value in (
        ("msgId", msg.msgId), ("topic", msg.topic), ("queueId", msg.queueId),
        ("queueOffset", msg.queueOffset), ("commitLogOffset", msg.commitLogOffset),
        ("storeSize", msg.storeSize), ("magicCode", magic), ("flag", msg.flag),
        ("sysFlag", sys_flag_text(msg.sysFlag)),
        ("bornTimestamp", f"{msg.bornTimestamp} ({format_time_ms(msg.bornTimestamp)})"),
        ("bornHost", msg.bornHost),
        ("storeTimestamp", f"{msg.storeTimestamp} ({format_time_ms(msg.storeTimestamp)})"),
        ("storeHost", msg.storeHost), ("reconsumeTimes", msg.reconsumeTimes),
        ("preparedTransactionOffset", msg.preparedTransactionOffset),
        ("bodyCRC", f"{msg.bodyCRC} ({crc})"), ("bodyLength", len(msg.body)),
        ("body", body_preview(msg)),
    ):
        fields.add_row(name, Text(str(value)))
    props = Table(title="properties", title_justify="left", show_edge=False, header_style="bold")
    props.add_column("key", overflow="fold")
    props.add_column("value", overflow="fold")
    for key, value in msg.properties.items():
        props.add_row(Text(key), Text(value))
    return fields, props
