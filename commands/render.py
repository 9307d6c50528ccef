"""How records look to a user: JSON objects (spec/json-output.md) and rich tables.

Imported by commands before their arguments are parsed, so it imports no decoder (construct,
numpy) at the top: the records it renders were decoded by then.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING

from rich.table import Table
from rich.text import Text
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

from .common import format_duration_ms, format_time_ms

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
        delta = tags_code - now_ms
        due = f"in {format_duration_ms(delta)}" if delta > 0 else f"{format_duration_ms(-delta)} ago"
        return format_time_ms(tags_code), due
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


# -- tables ----------------------------------------------------------------------------------

def messages_table(messages: list[Message]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for name, justify in (("commitLogOffset", "right"), ("size", "right"), ("topic", "left"),
                          ("queue", "right"), ("queueOffset", "right"), ("storeTimestamp", "left"),
                          ("tags", "left"), ("keys", "left"), ("delay", "right"), ("reconsume", "right"),
                          ("crc", "left")):
        table.add_column(name, justify=justify, no_wrap=name != "keys")
    for msg in messages:
        props = msg.properties
        # Text(), not markup: message data may hold anything, '[' included.
        table.add_row(*(Text(str(v)) for v in (
            msg.commitLogOffset, msg.storeSize, msg.topic, msg.queueId, msg.queueOffset,
            format_time_ms(msg.storeTimestamp), props.get(PROPERTY_TAGS, ""), props.get(PROPERTY_KEYS, ""),
            props.get(PROPERTY_DELAY_TIME_LEVEL, ""), msg.reconsumeTimes,
        )), Text("ok") if msg.bodyCrcOk else Text("BAD", style="red"))
    return table


def print_problems(problems: list, checked: str, console, limit: int = 200) -> None:
    """`--verify` on a terminal: one line per problem (the first ``limit``), then what was
    checked and how many problems."""
    for problem in problems[:limit]:
        console.print(Text(f"{problem.kind}: {problem}"), soft_wrap=True)
    if len(problems) > limit:
        console.print(Text(f"... and {len(problems) - limit} more (--json lists them all)"))
    summary = f"checked {checked}: " + (f"{len(problems)} problem(s)" if problems else "no problems")
    console.print(Text(summary, style="bold red" if problems else "bold green"), soft_wrap=True)


def message_tables(msg: Message) -> tuple[Table, Table]:
    """Every field of one message, then its properties."""
    from rmqdelay.formats.commitlog import body_crc

    fields = Table(show_header=False, show_edge=False, box=None)
    fields.add_column(style="bold")
    fields.add_column()
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
    props.add_column("key", no_wrap=True)
    props.add_column("value")
    for key, value in msg.properties.items():
        props.add_row(Text(key), Text(value))
    return fields, props
