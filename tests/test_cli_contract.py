"""docs/cli.md is the contract: every command's JSON fields are the ones it lists, named in its
one style; every help reads the same way (an example, defaults, no programming-language
types, -h); every table fits 80 and 120 columns without a cut or empty column."""

from __future__ import annotations

import re
import shutil

import pyarrow.parquet as pq
import pytest
from clirun import run_cli
from conftest import SAMPLES

from rmqdelay.commands import common
from rmqdelay.commands.main import COMMANDS

CONTRACT = SAMPLES.parent / "docs" / "cli.md"
DELAY = SAMPLES / "delay-partial" / "store"
TIMER_AT = "1795450329969"  # the end of timer-partial's run
FAR = "2100-01-01T00:00:00Z"
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")
# A field about time says its unit (Ms, Timestamp, Sec), unless it is the broker's own name
# for a field its files hold (docs/cli.md, "Units").
TIMEISH = {"time", "timestamp", "delay", "delayed", "late", "lateness", "behind", "ago", "age", "since", "until"}
BROKER_NAMES = {"currWriteTime", "delayedTime", "storedTime", "delayLevel", "rollTimes", "reconsumeTimes",
                "delayOffsets", "delaySec", "dequeueLatenessMs", "lateness"}


def contract() -> dict[str, tuple[list[str], set[str]]]:
    """output -> (fields in order, the optional ones), from the fields block of docs/cli.md."""
    block = re.search(r"```fields\n(.*?)```", CONTRACT.read_text(encoding="utf-8"), re.S).group(1)
    found = {}
    for line in block.strip().splitlines():
        name, _, fields = line.partition(": ")
        names = [f.strip() for f in fields.split(",")]
        found[name] = ([f.rstrip("?") for f in names], {f.rstrip("?") for f in names if f.endswith("?")})
    return found


CONTRACT_FIELDS = contract()


def contract_values() -> dict[tuple[str, str], set[str]]:
    """(output, field path) -> the values docs/cli.md's enums block allows."""
    block = re.search(r"```enums\n(.*?)```", CONTRACT.read_text(encoding="utf-8"), re.S).group(1)
    found = {}
    for line in block.strip().splitlines():
        output, _, rest = line.partition(": ")
        path, _, values = rest.partition(" = ")
        found[(output, path)] = {v.strip() for v in values.split(",")}
    return found


CONTRACT_VALUES = contract_values()
# Fields whose values come from a fixed set, wherever they occur; their values are camelCase.
ENUM_FIELDS = {"kind", "state", "stage", "event", "table", "analysis", "source", "congestion", "sources",
               "cancellations"}


# Fields whose keys are data rather than names (docs/cli.md: "Keys that are data rather than names").
DATA_KEYED = {"properties", "delayOffsets", "cancellations", "sources", "offsetTable", "perLevel", "checked",
              "groups", "topics", "retryQueues", "consumerOffsets", "levels", "expectedByQueue", "kinds"}


def enum_values(obj, path: str = ""):
    """(field path, value) of every string value in a JSON object, the keys of a count by state
    (``cancellations``) and the values of ``sources`` among them."""
    if isinstance(obj, list):
        for item in obj:
            yield from enum_values(item, path)
        return
    if not isinstance(obj, dict):
        return
    for key, value in obj.items():
        where = f"{path}.{key}" if path else key
        if key == "cancellations" and isinstance(value, dict):
            yield from ((where, state) for state in value)
        elif key == "sources" and isinstance(value, dict):
            yield from ((where, v) for v in value.values())
        elif isinstance(value, str):
            yield where, value
        elif key not in DATA_KEYED:
            yield from enum_values(value, where)


def nested_names(obj, path: str = ""):
    """(field path, name) of every field inside the objects of a JSON object, at any depth,
    but for the fields whose keys are data (DATA_KEYED)."""
    if isinstance(obj, list):
        for item in obj:
            yield from nested_names(item, path)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            if path:
                yield path, key
            if key not in DATA_KEYED:
                yield from nested_names(value, f"{path}.{key}" if path else key)


def keys_of(objects: list[dict]) -> list[str]:
    seen: list[str] = []
    for obj in objects:
        seen += [k for k in obj if k not in seen]
    return seen


def check(output: str, objects: list[dict]) -> None:
    """Every object has the required fields in the documented order; none has another."""
    assert objects, output
    fields, optional = CONTRACT_FIELDS[output]
    for obj in objects:
        assert [k for k in fields if k in obj] == [k for k in obj], (output, list(obj))
        assert set(fields) - optional <= set(obj), (output, set(fields) - optional - set(obj))
        for path, name in nested_names(obj):
            assert CAMEL.match(name), (output, path, name)
        for path, value in enum_values(obj):
            allowed = CONTRACT_VALUES.get((output, path))
            if allowed is None and path.rpartition(".")[2] not in ENUM_FIELDS:
                continue  # free text or data
            assert CAMEL.match(value), (output, path, value)
            assert allowed is None or value in allowed, (output, path, value, allowed)


def test_every_documented_value_is_camel_case():
    for (output, path), values in CONTRACT_VALUES.items():
        assert output in CONTRACT_FIELDS, output
        assert path.split(".")[0] in CONTRACT_FIELDS[output][0], (output, path)
        assert all(CAMEL.match(v) for v in values), (output, path)


def test_every_documented_field_is_camel_case_and_says_its_unit():
    for output, (fields, _) in CONTRACT_FIELDS.items():
        for name in fields:
            assert CAMEL.match(name), (output, name)
            words = {w.lower() for w in re.findall(r"[a-z]+|[A-Z][a-z]*", name)}
            if words & TIMEISH and name not in BROKER_NAMES:
                assert name.endswith(("Ms", "Timestamp", "Sec")) or name in ("dueNow", "timerDelivered",
                                                                           "timerRolled", "timerCancelled",
                                                                           "timerSkipped", "timerLogOffset",
                                                                           "timerLogEnd", "timer"), (output, name)


def jsons(capsys, *args, code: int = 0) -> list[dict]:
    result = run_cli(capsys, *args)
    assert result.code == code, result.err
    return result.json_lines()


def test_inspect_json_fields_are_the_contracts(capsys, sample_store, store_copy):
    tp = sample_store("timer-partial")
    check("inspect store", jsons(capsys, "inspect", "store", tp, "--json"))
    check("inspect cq", jsons(capsys, "inspect", "cq", DELAY, "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", 3,
                              "--limit", 3, "--json")
          + jsons(capsys, "inspect", "cq", DELAY, "--topic", "TopicTest", "--queue", 0, "--limit", 3, "--json"))
    check("inspect commitlog", jsons(capsys, "inspect", "commitlog", tp, "--limit", 20, "--json", "--body"))
    parked = next(m for m in jsons(capsys, "inspect", "commitlog", tp, "--json", "--topic", "rmq_sys_wheel_timer")
                  if "UNIQ_KEY" in m["properties"])
    check("inspect message", jsons(capsys, "inspect", "message", tp, parked["commitLogOffset"], "--json")
          + jsons(capsys, "inspect", "message", DELAY, 0, "--json", "--body"))
    check("inspect delay", jsons(capsys, "inspect", "delay", DELAY, "--json"))
    check("offsets show", jsons(capsys, "offsets", "show", DELAY, "--json"))
    check("offsets reset", jsons(capsys, "offsets", "reset", DELAY, "--levels", "4", "--to-latest", "--json"))
    check("dlq export", jsons(capsys, "dlq", "export", sample_store("broker-e2e"), "--output", "-"))
    check("dlq resend", jsons(capsys, "dlq", "resend", sample_store("broker-e2e"), "--group", "GID_FAIL", "--json"))
    check("consumers reset", jsons(capsys, "consumers", "reset", sample_store("broker-e2e"), "--group", "GID_FAIL",
                                   "--all-topics", "--include-retry", "--to-earliest", "--json"))
    check("inspect index", jsons(capsys, "inspect", "index", DELAY, "--json"))
    key = next(m for m in jsons(capsys, "inspect", "commitlog", DELAY, "--json", "--topic", "TopicTest")
               if " " not in m["properties"].get("KEYS", " "))["properties"]["KEYS"]
    check("inspect index --key", jsons(capsys, "inspect", "index", DELAY, "--key", key, "--json"))
    check("inspect timer", jsons(capsys, "inspect", "timer", tp, "--now", TIMER_AT, "--json"))
    check("inspect consumers", jsons(capsys, "inspect", "consumers", sample_store("broker-e2e"), "--json"))
    check("inspect dlq", jsons(capsys, "inspect", "dlq", sample_store("broker-e2e"), "--json"))
    check("trace", jsons(capsys, "trace", SAMPLES / "retry" / "store", "C0000202331C5FFD2B276EC837D60012", "--json"))
    check("inspect timer --slots", jsons(capsys, "inspect", "timer", tp, "--slots", "--limit", 5, "--json"))
    check("inspect timer --units", jsons(capsys, "inspect", "timer", tp, "--units", "--limit", 5, "--json"))
    # --verify: problems, then the summary, which a clean store prints alone.
    *problems, summary = jsons(capsys, "inspect", "timer", tp, "--verify", "--now", TIMER_AT, "--json")
    check("inspect timer --verify", problems)  # 5.3.3's metrics drift: advisory problems
    check("verify summary", [summary] + jsons(capsys, "inspect", "commitlog", DELAY, "--verify", "--json")
          + jsons(capsys, "inspect", "index", DELAY, "--verify", "--json"))
    bad = store_copy("delay-partial")
    victim = bad / "commitlog" / "00000000000000000000"
    data = bytearray(victim.read_bytes())
    data[300] ^= 0xFF  # inside the first record's body: a CRC mismatch
    victim.write_bytes(bytes(data))
    *problems, _ = jsons(capsys, "inspect", "commitlog", bad, "--verify", "--json", code=1)
    check("inspect commitlog --verify", problems)


def test_incident_commands_json_fields_are_the_contracts(capsys, sample_store):
    """The commands an operator meets in an incident: consumers, dead letters, a window of
    the log, and what the store is (its layout, its retention, where a broker would cut it)."""
    be = sample_store("broker-e2e")
    check("consumers show", jsons(capsys, "consumers", "show", be, "--now", FAR, "--json"))
    by_lag = jsons(capsys, "inspect", "consumers", be, "--sort", "lag", "--limit", 5, "--now", FAR, "--json")
    assert len(by_lag) == 5
    check("inspect consumers", by_lag)
    check("consumers reset", jsons(capsys, "consumers", "reset", be, "--group", "GID_FAIL", "--all-topics",
                                   "--to-datetime", "2026-11-23T00:00:00Z", "--json"))
    dead = jsons(capsys, "inspect", "dlq", be, "--now", FAR, "--json")
    check("inspect dlq", dead)
    assert {d["reason"] for d in dead} == {"maxReconsumeTimes"}
    check("dlq export", jsons(capsys, "dlq", "export", be, "--group", "GID_FAIL", "--limit", 2, "--output", "-"))
    check("dlq resend", jsons(capsys, "dlq", "resend", be, "--group", "GID_FAIL", "--limit", 2, "--json"))
    gen = SAMPLES / "generated-small" / "store"
    times = [m["storeTimestamp"] for m in jsons(capsys, "inspect", "commitlog", gen, "--limit", 400, "--json")]
    window = jsons(capsys, "inspect", "commitlog", gen, "--since", times[100], "--until", times[300], "--json")
    assert window and all(times[100] <= m["storeTimestamp"] < times[300] for m in window)
    check("inspect commitlog", window)
    for name in ("timer-partial", "dledger-clean", "rocksdb-clean", "broker-e2e"):
        store = jsons(capsys, "inspect", "store", sample_store(name), "--now", FAR, "--json")
        check("inspect store", store)
        assert {"layout", "retention", "brokerCut"} <= set(store[0]), name


def test_writing_commands_json_fields_are_the_contracts(capsys, store_copy, sample_store, tmp_path):
    tp = store_copy("timer-partial")
    check("timer repair", jsons(capsys, "timer", "repair", tp, "--now", TIMER_AT, "--json"))
    new = tmp_path / "new"
    sent = jsons(capsys, "send", new, "--create", "--topic", "TopicTest", "--json")
    sent += jsons(capsys, "send", new, "--topic", "TopicTest", "--delay-level", "3", "--json")
    sent += jsons(capsys, "send", tp, "--topic", "TimerTopic", "--delay-sec", "600", "--json")
    sent += jsons(capsys, "send", tp, "--cancel", sent[-1]["uniqKey"], "--json")
    check("send", sent)
    check("samples generate", jsons(capsys, "samples", "generate", tmp_path / "gen", "--messages", 300, "--timer",
                                    "--json"))
    events = jsons(capsys, "run", store_copy("delay-partial"), "--until-empty", "--now", FAR, "--json")
    events += jsons(capsys, "run", tp, "--until-empty", "--now", FAR, "--json")
    filtered = tmp_path / "filtered"
    shutil.copytree(sample_store("timer-partial"), filtered)
    events += jsons(capsys, "run", filtered, "--until-empty", "--now", FAR, "--topics",
                    "TimerTopic", "--json")
    kinds = {e["event"] for e in events}
    assert {"held", "timerHeld"} <= kinds, kinds
    assert {"delivered", "persisted", "stopped", "timerDelivered", "timerPersisted"} <= kinds, kinds
    for kind in kinds:
        check(f"run {kind}", [e for e in events if e["event"] == kind])


def test_analyze_json_and_parquet_fields_are_the_contracts(capsys, sample_store, tmp_path):
    out = tmp_path / "out"
    rows = jsons(capsys, "analyze", "all", f"delay={DELAY}", f"timer={sample_store('timer-partial')}",
                 "--now", TIMER_AT, "--json", "--output", out)
    tables = {(r["analysis"], r["table"]) for r in rows}
    assert len(tables) == 12, tables  # every table has rows here but retries' anomalies (none)
    for analysis, table in tables:
        check(f"analyze {analysis} {table}", [r for r in rows if (r["analysis"], r["table"]) == (analysis, table)])
    for output, (fields, _) in CONTRACT_FIELDS.items():
        if output.startswith("analyze "):
            _, analysis, table = output.split()
            assert pq.read_schema(out / f"{analysis}_{table}.parquet").names == fields[2:], output
    for name in ("backlog_messages", "backlog_timer_messages", "lateness_messages", "lateness_timer_messages",
                 "retries_messages"):
        assert pq.read_schema(out / f"{name}.parquet").names == CONTRACT_FIELDS[f"parquet {name}"][0], name


# -- help ---------------------------------------------------------------------------------------
GROUPS = ("inspect", "offsets", "consumers", "dlq", "samples", "timer", "analyze")
EVERY_COMMAND = [[]] + [[name] for name in COMMANDS] + [
    ["inspect", c] for c in ("store", "cq", "commitlog", "message", "delay", "index", "timer",
                                    "consumers", "dlq")] + [
    ["offsets", "show"], ["offsets", "reset"], ["consumers", "show"], ["consumers", "reset"],
    ["dlq", "export"], ["dlq", "resend"], ["samples", "generate"], ["samples", "unpack"], ["timer", "repair"]] + [
    ["analyze", kind] for kind in ("backlog", "lateness", "retries", "all")]


def sections(text: str) -> dict[str, list[str]]:
    """Typer's plain help page by section (Usage, the text, Arguments, Options, Commands)."""
    found: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1]
            found[current] = []
        else:
            found[current].append(line)
    return found


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command", EVERY_COMMAND, ids=lambda c: " ".join(c) or "rmqdelay")
def test_help_reads_the_same_way_everywhere(capsys, monkeypatch, command, width):
    monkeypatch.setenv("COLUMNS", str(width))
    short = run_cli(capsys, *command, "-h")
    assert short.code == 0 and short.out == run_cli(capsys, *command, "--help").out
    text = short.out
    assert "Example: rmqdelay" in " ".join(text.split()), text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    assert text.startswith(f"Usage: rmqdelay {' '.join(command)}".rstrip() + " [OPTIONS]"), text
    parts = sections(text)
    options = parts.get("Options", [])
    # An option's value is named in words (its metavar), never a programming language's type.
    assert not re.search(r"<(str|int|integer|float|path|bool|text)>|list\[", "\n".join(options)), text
    # Its text is never squeezed: it starts within the first 40 columns, so at 80 it has 40.
    starts = [len(line) - len(line.lstrip()) for line in options if line.startswith("      ")]
    assert all(start <= 40 for start in starts), options
    if command and command[-1] not in GROUPS:
        named = re.findall(r"^  (?:-h, )?(--[a-z-]+)(?: ([A-Z][A-Za-z_|=.:0-9]*))?", "\n".join(options), re.M)
        assert named, text


def test_analyze_kind_help_is_the_kinds_own(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    pages = {kind: run_cli(capsys, "analyze", kind, "-h").out for kind in ("backlog", "lateness", "retries", "all")}
    assert len(set(pages.values())) == 4
    assert pages["lateness"].startswith("Usage: rmqdelay analyze lateness [OPTIONS]")
    assert "lateness percentiles" in " ".join(pages["lateness"].split())
    assert "Example: rmqdelay analyze lateness" in " ".join(pages["lateness"].split())


# -- tables -------------------------------------------------------------------------------------
# timer-partial holds a topic of 140 bytes (a 5.x V2 record): the widest name a store can have.
TABLE_COMMANDS = [
    ("inspect", "store", "{tp}"),
    ("inspect", "cq", "{delay}", "--topic", "SCHEDULE_TOPIC_XXXX", "--queue", "3", "--limit", "5", "--now", FAR),
    ("inspect", "commitlog", "{tp}", "--limit", "20"),
    ("inspect", "delay", "{delay}", "--now", FAR),
    ("inspect", "index", "{delay}"),
    ("inspect", "timer", "{tp}", "--now", TIMER_AT),
    ("inspect", "timer", "{tp}", "--units", "--limit", "10", "--now", TIMER_AT),
    ("inspect", "timer", "{tp}", "--slots", "--limit", "10", "--now", TIMER_AT),
    ("inspect", "consumers", "{be}", "--now", FAR),
    ("inspect", "consumers", "{be}", "--sort", "lag", "--limit", "5", "--now", FAR),
    ("inspect", "dlq", "{be}", "--now", FAR),
    ("inspect", "commitlog", "{gen}", "--since", "2026-01-01", "--until", "2100-01-01", "--limit", "20"),
    ("inspect", "store", "{dledger}", "--now", FAR),
    ("inspect", "store", "{rocksdb}", "--now", FAR),
    ("inspect", "dlq", "{retry}", "--now", FAR),
    ("trace", "{retry}", "C0000202331C5FFD2B276EC837D60012", "--now", FAR),
    ("offsets", "show", "{delay}", "--now", FAR),
    ("offsets", "reset", "{delay}", "--levels", "1-18", "--to-latest"),
    ("dlq", "resend", "{be}", "--group", "GID_FAIL"),
    ("consumers", "reset", "{be}", "--group", "GID_FAIL", "--all-topics", "--include-retry", "--to-earliest"),
    ("run", "{delay}", "--dry-run", "--now", FAR),
    ("timer", "repair", "{tp}", "--now", TIMER_AT),
    ("analyze", "all", "{delay}", "{tp}", "--now", TIMER_AT),
]


@pytest.fixture(scope="module")
def table_stores(sample_store):
    return {"tp": sample_store("timer-partial"), "delay": DELAY, "be": sample_store("broker-e2e"),
            "retry": SAMPLES / "retry" / "store", "gen": SAMPLES / "generated-small" / "store",
            "dledger": sample_store("dledger-clean"), "rocksdb": sample_store("rocksdb-clean")}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("args", TABLE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_tables_fit_the_terminal_with_no_cut_or_empty_column(capsys, monkeypatch, table_stores, args, width):
    monkeypatch.setattr(common.console.made(), "width", width)
    result = run_cli(capsys, *(a.format(**table_stores) for a in args))
    assert result.code in (0, 1), result.err
    lines = result.out.splitlines()
    assert lines
    assert "…" not in result.out  # nothing cut
    for line in lines:
        assert len(line.rstrip()) <= width, line
        if "┃" in line:  # a header row: every column has a name, so none is squeezed to nothing
            assert all(cell.strip() for cell in line.split("┃")), line
