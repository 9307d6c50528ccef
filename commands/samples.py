"""`rmqdelay samples generate DIR`: a deterministic, realistic store to try every command on.

The generator is imported inside the commands: `--help` must not load it
(tests/test_startup.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rmqdelay.formats.constants import DEFAULT_COMMITLOG_FILE_SIZE, DEFAULT_CQ_FILE_SIZE

from rmqdelay.errors import UsageError

from .group import typer_app
from . import aliases, options
from .common import camel_keys, console, err_console, emit_json, format_time_ms, int_option, progress

app = typer_app("Sample stores.\n\nExample: rmqdelay samples unpack timer-partial /tmp/timer-partial")


def _positive(name: str, text: str) -> int:
    value = int_option(name, text)
    if value < 1:
        raise UsageError(f"{name}: at least 1, found {value}")
    return value


@app.command("generate")
def generate_command(
    directory: Path = typer.Argument(..., metavar="DIR", help="New (or empty) directory for the store; plan.json goes in it too."),
    messages: str = typer.Option(None, "--messages", metavar="N", show_default=False,
                                 help="Number of records to write. Required."),
    seed: str = typer.Option("1", "--seed", metavar="N", help="Same seed, same bytes."),
    span: str = options.duration("--span", "About how much store time to span", default="8h"),
    hours: str = typer.Option(None, "--hours", hidden=True),  # before --span, in hours: goes in 0.3
    commitlog_file_size: str = typer.Option(str(DEFAULT_COMMITLOG_FILE_SIZE), "--commitlog-file-size", metavar="BYTES",
                                            help="Bytes per commit log file."),
    cq_file_size: str = typer.Option(str(DEFAULT_CQ_FILE_SIZE), "--cq-file-size", metavar="BYTES",
                                     help="Bytes per consume queue file (a multiple of 20)."),
    max_hash_slot_num: str = typer.Option(None, "--max-hash-slot-num", metavar="N", show_default=False,
                                          help="maxHashSlotNum of the broker to open it. Default: 5000000."),
    max_index_num: str = typer.Option(None, "--max-index-num", metavar="N", show_default=False,
                                      help="maxIndexNum of the broker to open it. Default: 20000000."),
    timer: bool = typer.Option(False, "--timer", help="A 5.x store with timer traffic as well: timer messages "
                                                      "near and far (rolls), sharing a millisecond, recalled, "
                                                      "some delivered, some pending; its timer store."),
    json_out: bool = typer.Option(False, "--json", help="The plan (plan.json) as one JSON object."),
) -> None:
    """Write a deterministic, realistic store: several topics, all 18 delay levels (some
    delivered, some pending), consumer retry chains through %RETRY% to the DLQ, consumer
    offsets; and DIR/plan.json, the figures it holds by construction.

    Example: rmqdelay samples generate /tmp/broker-a --messages 150000 --seed 7 --timer
    """
    from rich.text import Text

    from rmqdelay.samples.generate import GenerateOptions, generate
    from rmqdelay.store.index import IndexSettings

    if messages is None:
        raise UsageError("--messages: required")
    count = int_option("--messages", messages)
    if count < 1:
        raise UsageError(f"--messages: at least 1, found {count}")
    if hours is not None:
        err_console.print(aliases.note("--hours N", "--span Nh"), markup=False, highlight=False, soft_wrap=True)
        span = f"{hours.strip()}h"
    span_ms = options.parse_duration_ms(span, "--hours" if hours is not None else "--span")
    if span_ms <= 0:
        raise UsageError(f"--span: more than 0, found {span!r}")
    cl_size = int_option("--commitlog-file-size", commitlog_file_size)
    cq_size = int_option("--cq-file-size", cq_file_size)
    if cl_size < 4096:
        raise UsageError(f"--commitlog-file-size: at least 4096 bytes, found {cl_size}")
    if cq_size < 20 or cq_size % 20:
        raise UsageError(f"--cq-file-size: a positive multiple of 20 bytes, found {cq_size}")
    index = IndexSettings(*(None if text is None else _positive(name, text) for name, text in
                            (("--max-hash-slot-num", max_hash_slot_num), ("--max-index-num", max_index_num))))
    settings = GenerateOptions(messages=count, seed=int_option("--seed", seed), hours=span_ms / 3_600_000,
                               commitlog_file_size=cl_size, cq_file_size=cq_size, index=index)
    with progress("generating", count) as advance:
        if timer:
            from rmqdelay.samples.generate_timer import generate_timer

            plan = generate_timer(directory, settings, on_progress=advance)
        else:
            plan = generate(directory, settings, on_progress=advance)
    if json_out:
        emit_json(camel_keys(plan))  # plan.json's own names are the generator's; --json speaks docs/cli.md's
        return
    r = plan["records"]
    pending = sum(level["pending"] for level in plan["levels"].values())
    say = lambda text, style=None: console.print(Text(text, style=style))  # noqa: E731
    say(f"{directory}: {plan['messages']} records stored from {format_time_ms(plan['start_ms'])} to "
        f"{format_time_ms(plan['at_ms'])} (--now {plan['at_ms']} looks at it as of its end)", "bold")
    say(f"records: {r['normal']} normal, {r['delay']} delay ({pending} units still pending), {r['delivered']} "
        f"delivered copies, {r['send_back']} send-backs, {r['retry']} retries, {r['dlq']} in DLQs")
    t = plan.get("timer")
    if t is not None:
        say(f"timer: {t['parked']} parked, {t['delivered']} delivered, {t['cancelled']} cancelled, {t['rolled']} "
            f"roll re-puts, {t['pending']} pending ({t['pending_cancelled']} of them recalled, "
            f"{t['pending_rolled']} in roll units)")
    say(f"the figures it holds by construction: {Path(directory) / 'plan.json'}", "dim")


@app.command("unpack")
def unpack_command(
    name: str = typer.Argument(..., metavar="NAME", help="A packed sample store (timer-fresh, timer-partial) "
                                                         "or the path of a store .tar.xz."),
    directory: Path = typer.Argument(..., metavar="DIR", help="New (or empty) directory for the store."),
) -> None:
    """Unpack a sample store kept compressed in samples/NAME/store.tar.xz (the 5.3.3 stores with
    their 38.7 MB timer wheel); zero runs become holes, so it takes little disk.

    Example: rmqdelay samples unpack timer-partial /tmp/timer-partial
    """
    from rmqdelay.samples.pack import resolve_archive, unpack

    written = unpack(resolve_archive(name), directory)
    console.print(f"{directory}: {len(written)} files from {name}", markup=False, highlight=False, soft_wrap=True)
