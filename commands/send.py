"""`rmqdelay send STORE --topic T ...`: put messages as a producer would, through the one writer.

The writer is imported inside the command: `--help` must not load it (tests/test_startup.py)."""

from __future__ import annotations

import os
import stat

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rmqdelay.formats.constants import (
    DEFAULT_COMMITLOG_FILE_SIZE,
    DEFAULT_CQ_FILE_SIZE,
    DEFAULT_PRODUCER_GROUP,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.javanum import java_parse_long
from rmqdelay.formats.msgid import parse_host

from rmqdelay.errors import UsageError

from . import options
from .common import (
    emit_json,
    err_console,
    format_time_ms,
    int_option,
    parse_time_ms,
    progress,
    require_store,
)

if TYPE_CHECKING:
    from rmqdelay.send import Sent


def _int(name: str, text: str | None) -> int | None:
    return None if text is None else int_option(name, text)


def _properties(items: list[str]) -> dict[str, str]:
    props: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--property: KEY=VALUE, found {item!r}")
        if any(c in key + value for c in "\x01\x02"):
            raise UsageError(f"--property {key}: the separators \\x01 and \\x02 cannot appear in a property")
        props[key] = value
    return props


def _body(body: str | None, body_file: Path | None) -> bytes:
    if body is not None and body_file is not None:
        raise UsageError("--body and --body-file: give one of them")
    if body_file is not None:
        try:
            # Opened without blocking and checked before reading: a FIFO or a device would wait
            # for a writer (or never end).
            fd = os.open(body_file, os.O_RDONLY | os.O_NONBLOCK)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise UsageError(f"--body-file {body_file}: a regular file, found "
                                     f"{'a FIFO' if stat.S_ISFIFO(os.fstat(fd).st_mode) else 'a special file'}")
                with os.fdopen(os.dup(fd), "rb") as fh:
                    return fh.read()
            finally:
                os.close(fd)
        except OSError as exc:
            raise UsageError(f"--body-file {body_file}: a readable file ({exc.strerror})") from None
    text = body if body is not None else "Hello RocketMQ"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes the shell gave that are not UTF-8
        raise UsageError(f"--body: UTF-8 text, found a byte that is not at character {exc.start} "
                         "(--body-file sends any bytes)") from None


def _timer(deliver_at: str | None, delay_sec: str | None, delay_ms: str | None) -> tuple[str, str, str] | None:
    """(option, property, value) of the one timer option given: what the client's
    setDeliverTimeMs / setDelayTimeSec / setDelayTimeMs put (String.valueOf of a long)."""
    from rmqdelay.send import TIMER_OPTIONS

    given = [(name, text) for name, text in (("--deliver-at", deliver_at), ("--delay-sec", delay_sec),
                                             ("--delay-ms", delay_ms)) if text is not None]
    if len(given) > 1:
        raise UsageError(f"{given[0][0]} and {given[1][0]}: a message has one deliver time, give one of them")
    if not given:
        return None
    name, text = given[0]
    if name == "--deliver-at":
        value = parse_time_ms(text, name)
    else:
        value = java_parse_long(text.strip())
        if value is None:
            raise UsageError(f"{name}: an integer from -9223372036854775808 to 9223372036854775807 "
                             f"(a Java long), found {text!r}")
    return name, TIMER_OPTIONS[name], str(value)


def _json(sent: Sent) -> dict:
    r = sent.result
    obj = {"msgId": r.msgId, "uniqKey": sent.uniqKey, "topic": r.topic, "queueId": r.queueId,
           "queueOffset": r.queueOffset, "commitLogOffset": r.commitLogOffset, "storeSize": r.storeSize,
           "bornTimestamp": sent.bornTimestamp, "storeTimestamp": r.storeTimestamp}
    if r.topic == RMQ_SYS_SCHEDULE_TOPIC:
        obj.update(realTopic=sent.realTopic, realQueueId=sent.realQueueId, delayLevel=sent.delayLevel,
                   deliverTimestamp=r.tagsCode)
    if sent.timer is not None:
        obj.update(realTopic=sent.realTopic, realQueueId=sent.realQueueId, parked=sent.timer.parked,
                   deliverMs=sent.timer.deliverMs, timerOutMs=sent.timer.timerOutMs)
    if sent.cancels is not None:
        obj["cancels"] = sent.cancels
    return obj


def _line(item: Sent) -> str:
    r = item.result
    line = (f"{r.topic} queue {r.queueId} queueOffset {r.queueOffset} commitLogOffset {r.commitLogOffset} "
            f"msgId {r.msgId} uniqKey {item.uniqKey}")
    if r.topic == RMQ_SYS_SCHEDULE_TOPIC:
        line += (f" -> {item.realTopic} queue {item.realQueueId} level {item.delayLevel} "
                 f"due {format_time_ms(r.tagsCode)}")
    elif item.cancels is not None:
        line += f" cancels {item.cancels} in the slot of {format_time_ms(item.timer.timerOutMs)}"
    elif item.timer is not None and item.timer.parked:
        line += (f" -> {item.realTopic} queue {item.realQueueId} timer due {format_time_ms(item.timer.timerOutMs)} "
                 f"(TIMER_OUT_MS {item.timer.timerOutMs})")
    elif item.timer is not None:
        line += (f" (deliver time {format_time_ms(item.timer.deliverMs)} not in the future: stored in its "
                 "topic at once, as the broker does)")
    return line


def send(
    store: Path = options.store("The broker store directory (a new one only with --create)."),
    topic: str = typer.Option(None, "--topic", metavar="TOPIC", show_default=False, help="Topic to send to."),
    queue: str = typer.Option(None, "--queue", metavar="N", show_default=False,
                              help="Queue id. Default: round robin over the topic's write queues."),
    tags: str = typer.Option(None, "--tags", metavar="TAGS", show_default=False, help="TAGS property."),
    keys: str = typer.Option(None, "--keys", metavar="KEYS", show_default=False,
                             help="KEYS property (space-separated keys)."),
    delay_level: str = typer.Option("0", "--delay-level", metavar="N", help="Delay level (0: none; above the maximum: capped)."),
    deliver_at: str = typer.Option(None, "--deliver-at", metavar="TIME",
                                   help="Timer message (5.x store): deliver at this time (TIMER_DELIVER_MS; ISO without a zone is UTC)."),
    delay_sec: str = typer.Option(None, "--delay-sec", metavar="N",
                                  help="Timer message (5.x store): deliver N seconds after the put (TIMER_DELAY_SEC)."),
    delay_ms: str = typer.Option(None, "--delay-ms", metavar="N",
                                 help="Timer message (5.x store): deliver N ms after the put (TIMER_DELAY_MS)."),
    cancel: str = typer.Option(None, "--cancel", metavar="UNIQ_KEY",
                               help="Cancel the parked timer message with this UNIQ_KEY (a recall: TIMER_DEL_UNIQKEY)."),
    producer_group: str = typer.Option(DEFAULT_PRODUCER_GROUP, "--producer-group", metavar="GROUP",
                                       help="PGROUP of a cancellation (the recalling producer's group)."),
    broker_config: Path = typer.Option(None, "--broker-config", metavar="FILE",
                                       help="broker.conf: timer settings, brokerClusterName, enabledAppendPropCRC."),
    prop: list[str] = typer.Option([], "--property", metavar="KEY=VALUE", show_default=False,
                                   help="A user property (repeatable)."),
    body: str = typer.Option(None, "--body", metavar="TEXT", show_default=False,
                             help="Body text (UTF-8). Default: 'Hello RocketMQ'."),
    body_file: Path = typer.Option(None, "--body-file", metavar="FILE", show_default=False,
                                   help="Body bytes from a file."),
    count: str = typer.Option("1", "--count", metavar="N", help="Number of messages."),
    store_host: str = typer.Option(None, "--store-host", metavar="IP:PORT", show_default=False,
                                   help="The broker's address (storeHost, msgId). Default: the store's, from its "
                                        "newest records (127.0.0.1:10911 for a new store)."),
    create: bool = typer.Option(False, "--create", help="Make a new store at STORE when there is none (a missing "
                                                        "or empty directory). Without it such a STORE is refused."),
    commitlog_file_size: str = typer.Option(None, "--commitlog-file-size", metavar="BYTES",
                                            help="Bytes per commit log file, for a new store (default 1 GiB)."),
    cq_file_size: str = typer.Option(None, "--cq-file-size", metavar="BYTES",
                                     help="Bytes per consume queue file, for a new store (default 6,000,000)."),
    json_out: bool = options.json_out("One JSON object per message (docs/cli.md lists the fields)."),
) -> None:
    """Put messages into STORE as a producer and the broker would (UNIQ_KEY, CLUSTER, the delay
    rewrite into SCHEDULE_TOPIC_XXXX, on a 5.x store the timer rewrite into rmq_sys_wheel_timer);
    adds the topic to config/topics.json; a new store only with --create. Refused while a broker
    holds STORE/lock.

    Example: rmqdelay send STORE --topic TopicTest --tags TagA --delay-level 3 --count 10
    """
    from rmqdelay.send import SendRequest, check_request, send_messages

    timer = _timer(deliver_at, delay_sec, delay_ms)
    if cancel is not None:
        given = [name for name, value in (("--body", body), ("--body-file", body_file), ("--tags", tags),
                                          ("--keys", keys), ("--property", prop)) if value]
        if given:
            raise UsageError(f"--cancel and {given[0]}: a cancellation is the broker's own message (body \"0\", "
                             "tags _RECALL_TAG_)")
    elif topic is None:
        raise UsageError("--topic: required")
    try:
        host = parse_host(store_host) if store_host else None
    except ValueError:
        raise UsageError(f"--store-host: ip:port, found {store_host!r}") from None
    request = SendRequest(topic=topic, body=b"0" if cancel is not None else _body(body, body_file),
                          queue_id=_int("--queue", queue), tags=tags or None, keys=keys or None,
                          delay_level=_int("--delay-level", delay_level), properties=_properties(prop),
                          count=_int("--count", count), store_host=host, timer=timer, cancel=cancel,
                          producer_group=producer_group, broker_config=broker_config)
    check_request(request)
    from rmqdelay.store.layout import refuse_unwritable

    refuse_unwritable(store)  # a DLedger or RocksDB store, with --create too
    if not create:
        require_store(store, create_option=True)  # a typo must not become a new store
    sizes = {}
    for name, text, default in (("--commitlog-file-size", commitlog_file_size, DEFAULT_COMMITLOG_FILE_SIZE),
                                ("--cq-file-size", cq_file_size, DEFAULT_CQ_FILE_SIZE)):
        value = _int(name, text)
        if value is not None and (value <= 0 or (name == "--cq-file-size" and value % 20)):
            raise UsageError(f"{name}: a positive size{' (a multiple of 20)' if name == '--cq-file-size' else ''}, found {value}")
        sizes[name] = value if value is not None else default
    with progress("sending", request.count) as advance:
        # What the writer's recovery did is worth a line; what the store is, on success, is not.
        sent = send_messages(store, request, commitlog_file_size=sizes["--commitlog-file-size"],
                             cq_file_size=sizes["--cq-file-size"], on_progress=advance,
                             on_notice=lambda text: err_console.print(text, markup=False, highlight=False,
                                                                      soft_wrap=True)
                             if text.startswith("recovery: ") else None)
    for item in sent:
        if json_out:
            emit_json(_json(item))
            continue
        sys.stdout.write(_line(item) + "\n")  # plain lines: --count can be large
