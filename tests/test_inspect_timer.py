"""`rmqdelay inspect timer` on the 5.3.3 stores: every figure computed here again, independently,
from the real code's dumps (expected.jsonl.gz, verify.json, schedule.json), never from
rmqdelay's own output."""

from __future__ import annotations

import json

import pytest
from clirun import run_cli
from conftest import SAMPLES

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

DAY = 86_400_000


def status(capsys, path, now_ms, *extra):
    result = run_cli(capsys, "inspect", "timer", path, "--now", str(now_ms), "--json", *extra)
    (obj,) = result.json_lines()
    # A restart that would skip pending messages is a problem found: exit 1.
    assert result.code == (1 if obj["horizon"]["skipped"] else 0), result.err
    return obj


def truth(expected: dict) -> dict:
    """What the dumps say, in plain Python."""
    cp = expected["timercheck"][0]["raw"]
    units = expected["timerlog"]
    slots = expected["timerwheel"]
    timer_cq = [c for c in expected["cq"] if c["topic"] == "rmq_sys_wheel_timer"]
    return {"read": cp["lastReadTimeMs"], "master": cp["masterTimerQueueOffset"], "units": units, "slots": slots,
            "cq": timer_cq, "queue_max": max(c["cqOffset"] for c in timer_cq) + 1,
            "metrics": expected["timermetrics"][0]["parsed"]["timingCount"]}


def bucket(due: int, now: int) -> str:
    for name, upper in (("dueNow", 0), ("nextMinute", 60_000), ("nextHour", 3_600_000), ("nextDay", DAY)):
        if due <= now + upper:
            return name
    return "later"


@pytest.mark.parametrize("ahead", [1_000, 45_000, 2 * 3_600_000])
def test_pending_by_due_time_behind_figures_and_hot_slots_match_the_dump(timer_sample, capsys, ahead):
    name, path, expected = timer_sample
    t = truth(expected)
    now = t["read"] + ahead
    got = status(capsys, path, now, "--hot", "5")
    pending = [u for u in t["units"] if u["delayedTimeMs"] >= t["read"]]
    messages = [u for u in pending if not u["magicDelete"]]
    want = {"units": len(messages), "dueNow": 0, "nextMinute": 0, "nextHour": 0, "nextDay": 0, "later": 0,
            "beyondRollWindow": sum(u["magicRoll"] for u in messages),
            "cancelMarkers": sum(u["magicDelete"] for u in pending)}
    for u in messages:
        if not u["magicRoll"]:
            want[bucket(u["delayedTimeMs"], now)] += 1
    assert {k: got["pending"][k] for k in want} == want
    assert got["pending"]["oldestDueTimestamp"] == min(u["delayedTimeMs"] for u in messages)
    # Not enqueued yet: the queue past masterTimerQueueOffset, due by TIMER_OUT_MS.
    behind = [c for c in t["cq"] if c["cqOffset"] >= t["master"]]
    assert got["enqueue"]["behindMessages"] == len(behind) == t["queue_max"] - t["master"]
    assert got["pending"]["notEnqueued"] == sum(not c["cancel"] for c in behind)
    by_due = {k: 0 for k in ("dueNow", "nextMinute", "nextHour", "nextDay", "later")}
    for c in behind:
        if not c["cancel"]:
            by_due[bucket(int(c["timerOutMs"]), now)] += 1
    assert got["pending"]["notEnqueuedByDue"] == by_due
    # Dequeue: how far behind the clock, and TimerWheel.getAllNum from the read time.
    live = [s for s in t["slots"] if s["timeMs"] >= t["read"]]
    assert got["dequeue"] == {"lastReadTimeMs": t["read"], "behindMs": now - t["read"],
                              "behindMessages": sum(s["num"] for s in live)}
    hot = sorted(live, key=lambda s: (-s["num"], s["timeMs"]))[:5]
    assert [(h["index"], h["timeMs"], h["num"]) for h in got["hotSlots"]] == \
        [(s["index"], s["timeMs"], s["num"]) for s in hot]
    assert got["rolls"] == {"pending": sum(u["magicRoll"] and not u["magicDelete"] for u in pending),
                            "done": sum(u["magicRoll"] and not u["magicDelete"] for u in t["units"]
                                        if u["delayedTimeMs"] < t["read"])}
    assert got["timerLog"]["units"] == len(t["units"])
    assert got["timerLog"]["endOffset"] == expected["timerlogEnd"][0]["offset"]


def test_dequeue_backlog_is_what_the_real_timer_counted(capsys, sample_store):
    """schedule.json holds TimerMessageStore.getAllNum at load (fresh) and at shutdown (partial)."""
    sched = json.loads((SAMPLES / "timer-partial" / "schedule.json").read_text())
    fresh = status(capsys, sample_store("timer-fresh"), sched["timerAfterLoad"]["currReadTimeMs"] + 1000)
    assert fresh["dequeue"]["behindMessages"] == sched["timerAfterLoad"]["congestNumFromReadTime"] == 1080
    partial = status(capsys, sample_store("timer-partial"), sched["timerBeforeShutdown"]["currReadTimeMs"] + 1000)
    assert partial["dequeue"]["behindMessages"] == sched["timerBeforeShutdown"]["congestNumFromReadTime"] == 793


def test_metrics_against_true_counts_as_the_real_checks_saw_them(timer_sample, capsys):
    name, path, expected = timer_sample
    t = truth(expected)
    got = status(capsys, path, t["read"] + 1000)
    true = {}
    for u in t["units"]:
        if u["delayedTimeMs"] >= t["read"]:
            topic = u["message"]["realTopic"]
            true[topic] = true.get(topic, 0) + (-1 if u["magicDelete"] else 1)
    rows = {m["topic"]: (m["count"], m["trueCount"]) for m in got["metrics"]}
    assert rows == {topic: (t["metrics"][topic]["count"], true[topic]) for topic in true}
    verify = json.loads((SAMPLES / name / "verify.json").read_text())
    if "pendingUnitsPerRealTopicFromWheel" in verify["timer"]:
        assert {k: v[1] for k, v in rows.items()} == verify["timer"]["pendingUnitsPerRealTopicFromWheel"]
    if name == "timer-partial":
        assert rows["TimerTopic"] == (482, 480) and rows["TopicTest"] == (231, 227)


def test_cancellation_markers_and_whether_each_found_its_target(timer_sample, capsys):
    name, path, expected = timer_sample
    t = truth(expected)
    got = status(capsys, path, t["read"] + 1000)
    keys = {}
    for u in t["units"]:
        if not u["magicDelete"]:
            m = u["message"]
            keys.setdefault((u["delayedTimeMs"], f"{m['realTopic']}+{m['uniqKey']}"), []).append(u)
    want = {s: 0 for s in ("honoured", "willBeHonoured", "missed", "notInSlot", "rolled", "rolling")}
    for u in t["units"]:
        if not u["magicDelete"]:
            continue
        done = u["delayedTimeMs"] < t["read"]
        found = (u["delayedTimeMs"], u["message"]["timerDelUniqKey"]) in keys
        if u["magicRoll"]:
            want["rolled" if done else "rolling"] += 1
        elif found:
            want["honoured" if done else "willBeHonoured"] += 1
        else:
            want["missed" if done else "notInSlot"] += 1
    # The samples' markers are all enqueued: none waits in the queue (send adds such ones).
    assert got["cancellations"] == want | {"queued": 0, "queuedNoTarget": 0}
    assert sum(want.values()) == sum(u["magicDelete"] for u in t["units"])
    if name == "timer-partial":
        # The recalls due within the 15 s run were honoured by the real dequeue.
        assert want["honoured"] > 0 and want["missed"] == 0


def test_a_broker_restarted_after_more_than_the_wheel_span_skips_old_slots(timer_sample, capsys):
    name, path, expected = timer_sample
    t = truth(expected)
    now = t["read"] + 8 * DAY
    got = status(capsys, path, now)
    start = now // 1000 * 1000 - 604800 * 1000 + 60 * 1000
    assert got["horizon"]["readFromMs"] == start
    assert got["horizon"]["skipped"] == sum(1 for u in t["units"] if not u["magicDelete"]
                                            and t["read"] <= u["delayedTimeMs"] < start)
    assert got["horizon"]["skipped"] > 0
    assert status(capsys, path, t["read"] + 1000)["horizon"]["skipped"] == 0


def test_checkpoint_and_settings_as_the_files_show_them(timer_sample, capsys):
    name, path, expected = timer_sample
    got = status(capsys, path, truth(expected)["read"] + 1000)
    raw = expected["timercheck"][0]["raw"]
    assert got["checkpoint"] == {k: raw[k] for k in got["checkpoint"]}
    assert got["precisionInFiles"] == expected["meta"][0]["timerConfig"]["timerPrecisionMs"]
    assert got["rollWindowSlotsInFiles"] == expected["meta"][0]["timerConfig"]["timerRollWindowSlotConfigured"]
    assert got["timerLog"]["flushPosLag"] == expected["timerlogEnd"][0]["offset"] - raw["lastTimerLogFlushPos"]


def test_broker_config_sets_the_roll_window_and_the_congestion_limit(timer_sample, capsys, tmp_path):
    name, path, expected = timer_sample
    conf = tmp_path / "broker.conf"
    conf.write_text("# timer\ntimerRollWindowSlot=60\ntimerCongestNumEachSlot = 20\n")
    got = status(capsys, path, truth(expected)["read"] + 1000, "--broker-config", conf)
    assert got["config"]["rollWindowSlots"] == 60 and got["config"]["sources"]["timerRollWindowSlot"] == "brokerConfig"
    for h in got["hotSlots"]:
        assert h["congestion"] == ("rejecting" if h["num"] >= 40 else "throttled" if h["num"] > 20 else None)
    assert any(h["congestion"] == "rejecting" for h in got["hotSlots"])


def test_units_listing_is_the_dump_field_by_field(timer_sample, capsys):
    name, path, expected = timer_sample
    result = run_cli(capsys, "inspect", "timer", path, "--units", "--json")
    assert result.code == 0, result.err
    rows = result.json_lines()
    assert len(rows) == len(expected["timerlog"])
    for row, exp in zip(rows, expected["timerlog"]):
        for k in ("file", "filePos", "offset", "size", "prevPos", "magic", "currWriteTime", "delayedTime", "offsetPy",
                  "sizePy", "hashCodeOfRealTopic", "reservedValue", "slotIndex"):
            assert row[k] == exp[k], (k, exp["offset"])
        assert (row["slotTimeMs"], row["roll"], row["delete"]) == (exp["delayedTimeMs"], exp["magicRoll"],
                                                                   exp["magicDelete"])
        m, e = row["message"], exp["message"]
        assert (m["topic"], m["queueId"], m["queueOffset"], m["sizeMatches"], m["realTopic"], m["uniqKey"],
                m["delUniqKey"]) == (e["topic"], e["queueId"], e["queueOffset"], e["sizeMatches"], e["realTopic"],
                                     e["uniqKey"], e["timerDelUniqKey"])
        assert m["timerOutMs"] == int(e["timerOutMs"])
        assert m["rollTimes"] == (None if e["timerRollTimes"] is None else int(e["timerRollTimes"]))


def test_units_filters_by_slot_time_topic_key_and_limit(timer_sample, capsys):
    name, path, expected = timer_sample
    units = expected["timerlog"]
    lo, hi = units[10]["delayedTimeMs"], units[10]["delayedTimeMs"] + 5000
    result = run_cli(capsys, "inspect", "timer", path, "--units", "--json", "--since", str(lo), "--until", str(hi),
                     "--topic", "TopicTest")
    assert [r["offset"] for r in result.json_lines()] == \
        [u["offset"] for u in units if lo <= u["delayedTimeMs"] < hi and u["message"]["realTopic"] == "TopicTest"]
    key = units[3]["message"]["uniqKey"]
    result = run_cli(capsys, "inspect", "timer", path, "--units", "--json", "--uniq-key", key)
    assert [r["offset"] for r in result.json_lines()] == [u["offset"] for u in units if u["message"]["uniqKey"] == key]
    # The old spelling still works, with a note; a UNIQ_KEY that finds nothing exits 1, in one line.
    old = run_cli(capsys, "inspect", "timer", path, "--units", "--json", "--key", key)
    assert old.out == result.out and old.err == "rmqdelay: note: --key is now --uniq-key (the old name goes in 0.3)\n"
    miss = run_cli(capsys, "inspect", "timer", path, "--units", "--uniq-key", "NO_SUCH_KEY")
    assert miss.code == 1 and miss.out == "" and miss.err.count("\n") == 1 and "NO_SUCH_KEY" in miss.err
    result = run_cli(capsys, "inspect", "timer", path, "--units", "--json", "--limit", "7")
    assert [r["offset"] for r in result.json_lines()] == [u["offset"] for u in units[:7]]
    result = run_cli(capsys, "inspect", "timer", path, "--units", "--limit", "3")
    assert result.code == 0 and "3 unit(s)" in result.out


def test_slots_listing_is_the_dump(timer_sample, capsys):
    name, path, expected = timer_sample
    result = run_cli(capsys, "inspect", "timer", path, "--slots", "--json")
    rows = result.json_lines()
    read = truth(expected)["read"]
    assert [{k: r[k] for k in ("index", "storedTime", "timeMs", "firstPos", "lastPos", "num", "magic")} for r in rows] \
        == [{k: s[k] for k in ("index", "storedTime", "timeMs", "firstPos", "lastPos", "num", "magic")}
            for s in expected["timerwheel"]]
    assert [r["state"] for r in rows] == ["done" if s["timeMs"] < read else "pending" for s in expected["timerwheel"]]


def test_the_screen_names_what_an_operator_acts_on(capsys, sample_store):
    path = sample_store("timer-fresh")
    result = run_cli(capsys, "inspect", "timer", path, "--now", "1795450330000")
    assert result.code == 0, result.err
    for text in ("pending: 1160 timer message(s)", "dequeue: read up to", "40 s behind",
                 "enqueue: 30 message(s)", "pending by due time", "hot slots", "cancellations:", "timermetrics",
                 "roll window of 60 slots"):
        assert text in " ".join(result.out.split()), text


def test_the_headline_counts_what_the_tables_show(capsys, sample_store):
    # The pending total of the headline is the total row of the table under it; each hot slot's
    # units are its messages, rolls and markers; the wheel's own counts are named as such.
    path = sample_store("timer-partial")
    got = status(capsys, path, 1795450329969)
    p = got["pending"]
    total = p["units"] + p["notEnqueued"]
    screen = " ".join(run_cli(capsys, "inspect", "timer", path, "--now", "1795450329969", "--wide").out.split())
    assert f"pending: {total} timer message(s)" in screen
    assert f"total {p['units']} {p['notEnqueued']} {total}" in screen.replace("│", "").replace("  ", " ")
    for h in got["hotSlots"]:
        assert h["messages"] + h["rolls"] + h["markers"] > 0
    assert f"the wheel's own slot counts add up to {got['dequeue']['behindMessages']}" in screen


def test_a_restart_that_would_skip_messages_leads_the_screen_and_exits_1(capsys, sample_store):
    path = sample_store("timer-partial")
    result = run_cli(capsys, "inspect", "timer", path, "--now", str(1795450329969 + 8 * DAY), "--wide")
    assert result.code == 1
    third = result.out.splitlines()[2]  # under the headline (what is there, what is pending)
    assert third.startswith("warning: a broker starting now") and "SKIPS 828 pending message(s)" in third
    assert result.out.count("SKIPS") == 1


def test_a_4x_store_has_no_timer_store_to_inspect(capsys, sample_store):
    result = run_cli(capsys, "inspect", "timer", sample_store("delay-partial"))
    assert result.code == 2 and "timer store" in result.err and "Traceback" not in result.err


@pytest.mark.parametrize("args", [["--slots", "--units"], ["--topic", "TopicTest"], ["--slots", "--uniq-key", "K"],
                                  ["--verify", "--units"], ["--units", "--limit", "-1"], ["--hot", "-2"],
                                  ["--units", "--since", "yesterday"]])
def test_usage_errors_are_one_line(capsys, sample_store, args):
    result = run_cli(capsys, "inspect", "timer", sample_store("timer-fresh"), *args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err


def test_a_damaged_timer_store_is_refused_naming_the_command_that_repairs_it(capsys, store_copy):
    path = store_copy("timer-partial")
    (path / "config" / "timercheck").write_bytes(b"garbage\n")
    hint = f"`rmqdelay timer repair {path}` shows how it would be repaired"
    for args in (["inspect", "timer", path], ["run", path, "--once"]):
        result = run_cli(capsys, *args, "--now", "1795450329969")
        assert result.code == 2 and result.err.count("\n") == 1, result.err
        assert "config/timercheck at byte 8" in result.err and hint in result.err, result.err
    # The metrics say it too, and still reach the collector (exit 0).
    metrics = run_cli(capsys, "inspect", "timer", path, "--format", "prometheus", "--now", "1795450329969")
    assert metrics.code == 0 and hint in metrics.err and 'rmqdelay_problems{store=' in metrics.out
    assert run_cli(capsys, "timer", "repair", path, "--now", "1795450329969").code == 1  # changes to make


def test_a_clock_before_the_read_time_says_past_not_a_negative_behind(capsys, sample_store):
    out = run_cli(capsys, "inspect", "timer", sample_store("timer-partial"), "--now", "2026-11-23T12:00:00Z").out
    dequeue = next(line for line in out.splitlines() if line.startswith("dequeue:"))
    assert "4h 12m past --now" in dequeue and "-4h" not in dequeue
