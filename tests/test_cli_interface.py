"""One tool, not a dialect per command (docs/cli.md): the old spellings still work and say
what replaced them; every id an operator holds finds its message; headlines count what the
screen shows; analyze shows a screenful and says how to get the rest; durations read as
durations."""

from __future__ import annotations

import json

import pytest
from clirun import assert_one_line, console, run_cli
from conftest import SAMPLES, load_expected

from rmqdelay.commands.common import format_date_ms, format_duration_ms, format_time_ms, format_when_ms

DELAY = SAMPLES / "delay-partial" / "store"
FAR = "2100-01-01T00:00:00Z"


@pytest.mark.parametrize("ms, text", [(0, "0 ms"), (180, "180 ms"), (2600, "2.6 s"), (1000, "1 s"), (42_000, "42 s"),
                                      (252_000, "4m 12s"), (60_000, "1m"), (12_300_000, "3h 25m"),
                                      (7_200_000, "2h"), (402_041_218, "4d 15h"), (-5_000, "-5 s")])
def test_durations_read_as_durations(ms, text):
    assert format_duration_ms(ms) == text


def test_an_instant_on_the_clocks_day_shows_the_time_alone():
    assert format_when_ms(1795450347000, 1795450330000) == "16:12:27Z (in 17 s)"
    assert format_when_ms(1795450347000, 1795450347000 + 3 * 86_400_000) == "2026-11-23 16:12:27Z (3d ago)"


def test_an_instant_no_date_can_hold_shows_its_milliseconds():
    """A damaged timer unit's slot time, in `timer repair`'s table of dropped units."""
    assert format_date_ms(-8095489983854422230) == format_time_ms(-8095489983854422230) == \
        "-8095489983854422230 (not a date)"
    assert format_time_ms(253402300799999) == "9999-12-31 23:59:59.999Z"
    assert format_date_ms(-62135596800000) == "0001-01-01 00:00:00Z"


# -- old spellings --------------------------------------------------------------------------------
@pytest.mark.parametrize("old, new, args", [
    (["--at", FAR], ["--now", FAR], ["analyze", "backlog", DELAY, "--json"]),
    (["--delay-levels", "1s 5s"], ["--message-delay-level", "1s 5s"], ["inspect", "delay", DELAY, "--json"]),
    (["--from", "3"], ["--offset", "3"], ["inspect", "cq", DELAY, "--topic", "TopicTest", "--queue", "0", "--json"]),
    (["--max", "1"], ["--limit", "1"], ["inspect", "index", DELAY, "--key", "ORDER_1", "--json"]),
    (["--level", "4"], ["--levels", "4"], ["offsets", "reset", DELAY, "--to-latest", "--json"]),
])
def test_an_old_spelling_does_what_the_new_one_does_and_says_so_in_one_line(capsys, old, new, args):
    before = run_cli(capsys, *args, *old)
    after = run_cli(capsys, *args, *new)
    assert before.code == after.code and before.out == after.out and after.err == ""
    assert before.err == f"rmqdelay: note: {old[0]} is now {new[0]} (the old name goes in 0.3)\n"
    # ... and a bad value is blamed on the option as the user typed it.
    if old[0] in ("--at", "--from", "--max"):
        bad = run_cli(capsys, *args, old[0], "soon")
        command = " ".join(args[:2])  # analyze backlog too: every kind is its own command
        assert bad.code == 2 and bad.err.splitlines()[-1].startswith(f"rmqdelay: {command}: {old[0]}: ")


def test_old_spellings_are_not_in_the_help(capsys):
    for command, old in ((["analyze"], "--at"), (["inspect", "index"], "--begin"), (["offsets", "reset"], "--level ")):
        assert old not in run_cli(capsys, *command, "--help").out


def test_levels_take_lists_ranges_and_repeats(capsys):
    rows = run_cli(capsys, "offsets", "show", DELAY, "--levels", "1,3", "--levels", "5-6", "--json").json_lines()
    assert [r["level"] for r in rows] == [1, 3, 5, 6]
    assert_one_line(console("offsets", "show", DELAY, "--levels", "3-1"), 2, "--levels: level numbers such as")


# -- every id -------------------------------------------------------------------------------------
def test_a_uniq_key_finds_its_message_as_mqadmin_query_msg_by_id_does(capsys):
    expected = load_expected("delay-partial")["msg"]
    uniq = expected[1]["properties"]["UNIQ_KEY"]  # a client msgId, what producers log
    found = run_cli(capsys, "inspect", "message", DELAY, uniq, "--json")
    assert found.code == 0, found.err
    want = [m["commitLogOffset"] for m in expected if m["properties"].get("UNIQ_KEY") == uniq]
    assert [m["commitLogOffset"] for m in found.json_lines()] == want and len(want) == 2  # parked, then delivered
    # The offset msgId the broker returns still finds exactly its record.
    by_id = run_cli(capsys, "inspect", "message", DELAY, expected[1]["msgId"], "--json").json_lines()
    assert [m["commitLogOffset"] for m in by_id] == [expected[1]["commitLogOffset"]]


def test_a_key_that_only_matches_a_parked_copy_says_where_it_waits(capsys):
    parked = next(m for m in load_expected("delay-partial")["msg"]
                  if m["topic"] == "SCHEDULE_TOPIC_XXXX" and m["properties"].get("DELAY") == "18"
                  and " " not in m["properties"].get("KEYS", " "))
    key = parked["properties"]["KEYS"]
    index = run_cli(capsys, "inspect", "index", DELAY, "--key", key, "--topic", "TopicTest")
    assert index.code == 1 and index.err.count("\n") == 1
    assert "only a parked copy: it waits in SCHEDULE_TOPIC_XXXX (delay level 18)" in index.err
    message = run_cli(capsys, "inspect", "message", DELAY, "--key", key, "--topic", "TopicTest", "--json")
    assert message.code == 0 and [m["commitLogOffset"] for m in message.json_lines()] == [parked["commitLogOffset"]]
    assert "only a parked copy" in message.err


# -- headlines and screens ------------------------------------------------------------------------
def test_runs_headline_counts_the_levels_and_the_timer_wheel(capsys, store_copy):
    store = store_copy("timer-partial")
    twin = store.parent / "twin"
    import shutil

    shutil.copytree(store, twin)
    result = run_cli(capsys, "run", store, "--until-empty", "--now", FAR)
    assert result.code == 0, result.err
    headline = result.out.splitlines()[0]
    events = run_cli(capsys, "run", twin, "--until-empty", "--now", FAR, "--json").json_lines()
    stopped = next(e for e in events if e["event"] == "stopped")
    total = stopped["delivered"] + stopped["timerDelivered"]
    assert stopped["timerDelivered"] > 0
    assert f"delivered {total} ({stopped['delivered']} from the delay levels, {stopped['timerDelivered']} from the " \
           f"timer wheel)" in " ".join(headline.split())


def test_analyze_shows_a_screenful_of_each_table_and_how_to_get_the_rest(capsys):
    result = run_cli(capsys, "analyze", "retries", f"r={SAMPLES / 'retry' / 'store'}", "--now", FAR, "--limit", "3")
    assert result.code == 0, result.err
    lines = result.out.splitlines()
    assert lines[0].startswith("retries: 90 chain(s) in 1 group(s), 10 in the DLQ (11.1%), 20 pending")
    attempts = lines.index(next(line for line in lines if line.startswith("retries: attempts")))
    rows = [r for r in run_cli(capsys, "analyze", "retries", f"r={SAMPLES / 'retry' / 'store'}", "--now", FAR,
                               "--json").json_lines() if r["table"] == "attempts"]
    assert lines[attempts].endswith(f"the first 3 of {len(rows)} rows")
    more = next(line for line in lines[attempts:] if line.startswith("..."))
    assert f"{len(rows) - 3} more rows: --limit {len(rows)} shows them; --json, --output DIR or --report FILE.html" in more


def test_analyze_shows_no_table_a_store_cannot_have(capsys):
    result = run_cli(capsys, "analyze", "all", DELAY, "--now", FAR)
    assert result.code == 0, result.err
    assert "timer" not in result.out  # a 4.x store has no timer wheel: none of its five tables
    assert "backlog: drain (pending by when they fall due" in result.out
    assert "p99" in result.out and "_ms" not in result.out  # words and units, not field names


def test_a_verify_of_a_clean_store_prints_its_summary_in_json(capsys):
    result = run_cli(capsys, "inspect", "commitlog", DELAY, "--verify", "--json")
    assert result.code == 0
    (summary,) = result.json_lines()
    assert summary["kind"] == "summary" and summary["problems"] == 0 and summary["checked"]["messages"] > 0


def test_send_makes_no_store_by_accident(capsys, tmp_path):
    typo = tmp_path / "stroe"
    result = run_cli(capsys, "send", typo, "--topic", "TopicTest")
    assert result.code == 2 and "--create makes a new store" in result.err and not typo.exists()
    made = run_cli(capsys, "send", typo, "--create", "--topic", "TopicTest", "--json")
    assert made.code == 0 and json.loads(made.out)["topic"] == "TopicTest"
