"""The timer tables of `rmqdelay analyze` on the real 5.3.3 samples, every figure recomputed
here in plain Python from the dumps (expected.jsonl.gz: the records, the timer log units, the
queue, the checkpoint) and the real broker's own later run (deliver-all.json.gz)."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from conftest import SAMPLES, TIMER_SAMPLES, load_expected

from rmqdelay.analysis import StoreRef, analyze

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

WHEEL_TOPIC = "rmq_sys_wheel_timer"
PARTIAL_END = 1795450329969  # schedule.json stoppedAtMs: the partial run's last moment


def rank(values: list[int], num: int, den: int):
    if not values:
        return None
    values = sorted(values)
    return values[math.ceil(num * len(values) / den) - 1]


def props(msg: dict) -> dict:
    return msg.get("properties") or {}


@pytest.fixture(scope="module")
def truth():
    return {name: load_expected(name) for name in TIMER_SAMPLES}


@pytest.fixture(scope="module")
def stores(sample_store):
    return [StoreRef(name, sample_store(name)) for name in TIMER_SAMPLES]


# -- backlog ----------------------------------------------------------------------------------
def expected_backlog(name: str, truth: dict, at_ms: int) -> tuple[dict, list[dict]]:
    check = truth["timercheck"][0]["raw"]
    read_ms, master = check["lastReadTimeMs"], check["masterTimerQueueOffset"]
    units = [u for u in truth["timerlog"] if u["delayedTimeMs"] >= read_ms]
    markers = [u for u in units if u["magicDelete"]]
    # A marker (not rolled) drops the message of its key in its own slot.
    dropped = set()
    for m in markers:
        if m["magicRoll"]:
            continue
        for u in units:
            msg = u["message"]
            if (not u["magicDelete"] and u["delayedTimeMs"] == m["delayedTimeMs"]
                    and f'{msg["realTopic"]}+{msg["uniqKey"]}' == m["message"]["timerDelUniqKey"]):
                dropped.add(u["offset"])
                break
    due = [int(u["message"]["timerOutMs"]) if u["magicRoll"] else u["delayedTimeMs"]
           for u in units if not u["magicDelete"] and u["offset"] not in dropped]
    rolling = sum(1 for u in units if u["magicRoll"] and not u["magicDelete"] and u["offset"] not in dropped)
    queued = [c for c in truth["cq"] if c["topic"] == WHEEL_TOPIC and c["cqOffset"] >= master]
    due += [int(c["timerOutMs"]) for c in queued if not c["cancel"]]
    is_due = [d for d in due if d <= at_ms]
    row = {"store": name, "read_ms": read_ms, "behind_ms": at_ms - read_ms, "pending": len(due),
           "due_now": len(is_due), "overdue_1s": sum(at_ms - d > 1000 for d in due),
           "overdue_1m": sum(at_ms - d > 60_000 for d in due), "overdue_1h": sum(at_ms - d > 3_600_000 for d in due),
           "oldest_due_ms": min(is_due, default=None), "rolling": rolling,
           "not_enqueued": sum(1 for c in queued if not c["cancel"]), "cancel_markers": len(markers),
           "cancelled": len(dropped)}
    minutes: dict[int, int] = {}
    for d in due:
        minute = 0 if d <= at_ms else math.ceil((d - at_ms) / 60_000)
        minutes[minute] = minutes.get(minute, 0) + 1
    return row, [{"store": name, "minute": m, "due": n} for m, n in sorted(minutes.items())]


@pytest.mark.parametrize("ahead_ms", [0, 90_000, 3 * 86_400_000])
def test_timer_backlog_recomputed_from_the_timer_log_and_the_queue(stores, truth, ahead_ms):
    at_ms = PARTIAL_END + ahead_ms
    result = analyze("backlog", stores, at_ms)
    rows, drain = [], []
    for name in TIMER_SAMPLES:
        row, minutes = expected_backlog(name, truth[name], at_ms)
        rows.append(row)
        drain += minutes
    assert result.tables["timer"].to_pylist() == rows
    assert result.tables["timerDrain"].to_pylist() == drain


def test_fresh_backlog_facts(stores):
    """timer-fresh: 1180 units (50 markers) enqueued, 30 messages stuck in the queue after
    timerStopEnqueue, 20 of them overdue 1.6 s later; 15 markers wait in their target's slot."""
    row = analyze("backlog", stores[:1], 1795450335000).tables["timer"].to_pylist()[0]
    assert (row["cancel_markers"], row["not_enqueued"], row["cancelled"]) == (50, 30, 15)
    assert row["pending"] == 1130 - 15 + 30


def test_partial_pending_is_what_the_real_broker_delivered_after_it(stores, truth):
    """Every message the real timer delivered when run on to the end from timer-partial is
    pending in the wheel; the rest pending are the targets of cancellations that rolled with
    them (the timer honoured all 48 in that run)."""
    result = analyze("backlog", stores[1:], PARTIAL_END)
    with gzip.open(SAMPLES / "timer-partial" / "deliver-all.json.gz", "rt") as fh:
        later = json.load(fh)
    delivered = {(d["topic"], d["uniqKey"]) for d in later["deliveries"] if d["origin"] == "timer-delivered"}
    assert len(delivered) == later["check"]["timerDelivered"] - 317 == 795  # 317 delivered within partial
    records = {m["commitLogOffset"]: props(m) for m in truth["timer-partial"]["msg"]}
    pending = [r for r in result.timer_messages.to_pylist() if not r["cancel"] and not r["cancelled"]]
    keys = {(records[r["commitlog_offset"]]["REAL_TOPIC"], records[r["commitlog_offset"]]["UNIQ_KEY"]) for r in pending}
    assert len(keys) == len(pending) == result.tables["timer"].column("pending")[0].as_py()
    assert delivered <= keys
    cancelled = {tuple(props(m)["TIMER_DEL_UNIQKEY"].rsplit("+", 1)) for m in truth["timer-partial"]["msg"]
                 if "TIMER_DEL_UNIQKEY" in props(m)}
    assert keys - delivered <= cancelled and len(keys - delivered) == 31


# -- lateness, rolls, cancellations -----------------------------------------------------------
def expected_lateness(name: str, truth: dict, at_ms: int) -> tuple[list[dict], list[dict], list[dict]]:
    msgs = truth["msg"]
    read_ms = truth["timercheck"][0]["raw"]["lastReadTimeMs"]
    copies, parked, rolls, markers = {}, {}, {}, {}
    for m in msgs:
        p, origin = props(m), m.get("origin", "")
        if origin.startswith("timer-delivered"):
            copies.setdefault((m["topic"], p["UNIQ_KEY"]), []).append(m)
        elif origin.startswith("timer-parked (") or (origin.startswith("timer-roll") and "TIMER_DEL_UNIQKEY" not in p):
            key = (p["REAL_TOPIC"], p["UNIQ_KEY"])
            parked.setdefault(key, int(p["TIMER_OUT_MS"]))
            if origin.startswith("timer-roll"):
                rolls[key] = max(rolls.get(key, 0), int(p["TIMER_ROLL_TIMES"]))
        elif "TIMER_DEL_UNIQKEY" in p:
            markers.setdefault(tuple(p["TIMER_DEL_UNIQKEY"].rsplit("+", 1)), []).append(origin)
    topics = sorted({t for t, _ in parked} | {t for t, _ in copies})
    table, roll_rows, cancel_rows = [], [], []
    for topic in topics:
        keys = [k for k in set(parked) | set(copies) if k[0] == topic]
        got = [k for k in keys if k in copies]
        stored = [min(c["storeTimestamp"] for c in copies[k]) - int(props(copies[k][0])["TIMER_OUT_MS"]) for k in got]
        dequeued = [min(int(props(c)["TIMER_DEQUEUE_MS"]) for c in copies[k]) - int(props(copies[k][0])["TIMER_OUT_MS"])
                    for k in got]
        waiting = [parked[k] for k in keys if k not in copies and k not in markers and parked[k] < at_ms]
        row = {"store": name, "real_topic": topic, "messages": len(keys), "delivered": len(got)}
        for prefix, values in (("", stored), ("dequeue_", dequeued)):
            row |= {f"{prefix}p50": rank(values, 1, 2), f"{prefix}p90": rank(values, 9, 10),
                    f"{prefix}p99": rank(values, 99, 100), f"{prefix}p999": rank(values, 999, 1000),
                    f"{prefix}max": max(values, default=None), f"{prefix}min": min(values, default=None),
                    f"{prefix}early": sum(v < 0 for v in values)}
        row |= {"duplicates": sum(len(copies[k]) - 1 for k in got),
                "never_enqueued": sum(1 for k in got if any(c["origin"].startswith("timer-delivered-never")
                                                            for c in copies[k])),
                "rolled": sum(1 for k in keys if rolls.get(k, 0) > 0),
                "undelivered_overdue": len(waiting), "oldest_undelivered_ms": min(waiting, default=None)}
        table.append(row)
        per_rolls: dict[int, list[int]] = {}
        for k in keys:
            per_rolls.setdefault(rolls.get(k, 0), [0, 0])
            per_rolls[rolls.get(k, 0)][0] += 1
            per_rolls[rolls.get(k, 0)][1] += k in copies
        roll_rows += [{"store": name, "real_topic": topic, "rolls": r, "messages": n, "delivered": d}
                      for r, (n, d) in sorted(per_rolls.items())]
    states: dict[tuple[str, str], int] = {}
    for key in markers:
        if key in copies:
            state = "missed"
        elif key not in parked:
            state = "noTarget"
        elif parked[key] < read_ms:
            state = "honoured"
        else:
            state = "pending"
        states[(key[0], state)] = states.get((key[0], state), 0) + 1
    cancel_rows = [{"store": name, "real_topic": t, "state": s, "cancellations": n} for (t, s), n in sorted(states.items())]
    return table, roll_rows, cancel_rows


@pytest.mark.parametrize("at_ms", [PARTIAL_END, PARTIAL_END + 86_400_000])
def test_timer_lateness_rolls_and_cancellations_recomputed_from_the_records(stores, truth, at_ms):
    result = analyze("lateness", stores, at_ms)
    topics, rolls, cancels = [], [], []
    for name in TIMER_SAMPLES:
        t, r, c = expected_lateness(name, truth[name], at_ms)
        topics, rolls, cancels = topics + t, rolls + r, cancels + c
    assert result.tables["timerTopics"].to_pylist() == topics
    assert result.tables["timerRolls"].to_pylist() == rolls
    assert result.tables["timerCancellations"].to_pylist() == cancels


def test_partial_lateness_facts(stores):
    """FIXTURES facts of timer-partial: 297 delivered through the wheel and the 20 overdue
    backlog straight away (TIMER_ENQUEUE_MS = Long.MAX_VALUE); stored 1013 ms to ~16 s after
    TIMER_OUT_MS, never early; 48 rolls re-put (46 messages, 2 markers); 15 cancellations
    honoured in the window, and the 2 recalls of ids never sent found no target."""
    result = analyze("lateness", stores[1:], PARTIAL_END)
    topics = result.tables["timerTopics"].to_pylist()
    assert sum(t["delivered"] for t in topics) == 317
    assert sum(t["never_enqueued"] for t in topics) == 20
    assert min(t["min"] for t in topics) == 1013 and all(t["early"] == 0 for t in topics)
    assert sum(t["rolled"] for t in topics) == 46
    states = {}
    for row in result.tables["timerCancellations"].to_pylist():
        states[row["state"]] = states.get(row["state"], 0) + row["cancellations"]
    assert states == {"honoured": 15, "noTarget": 2, "pending": 33}
    messages = result.timer_messages.to_pylist()
    assert len(messages) == sum(t["messages"] for t in topics) == 1160
    assert all(m["lateness_ms"] == m["actual_ms"] - m["out_ms"] for m in messages if m["deliveries"])


def test_stores_without_a_timer_have_no_timer_rows(stores):
    store = StoreRef("delay-partial", SAMPLES / "delay-partial" / "store")
    for kind in ("backlog", "lateness"):
        result = analyze(kind, [store], PARTIAL_END)
        assert all(t.num_rows == 0 for n, t in result.tables.items() if n.startswith("timer"))
        assert result.timer_messages.num_rows == 0
        mixed = analyze(kind, [store, *stores], PARTIAL_END)
        assert {r["store"] for r in mixed.tables[f"timer{'Topics' if kind == 'lateness' else ''}"].to_pylist()} \
            == set(TIMER_SAMPLES)


def test_a_bad_timer_wheel_stops_the_run_in_one_line_before_any_work(store_copy, capsys):
    from clirun import run_cli

    path = store_copy("timer-fresh")
    with open(path / "timerwheel", "r+b") as fh:
        fh.truncate(1000)
    result = run_cli(capsys, "analyze", "backlog", str(path), "--now", str(PARTIAL_END))
    assert result.code == 2 and "timerwheel" in result.err and len(result.err.strip().splitlines()) == 1
