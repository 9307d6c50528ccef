"""The timer store the generator writes beside a 5.x commit log (rmqdelay/samples/timerstore.py):
after a timeline of enqueues and dequeues it is one `inspect timer --verify` passes, and
`inspect timer` counts what the timeline left pending, rolled and cancelled."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from clirun import run_cli
from rmqdelay.formats.timerlog import UNIT_SIZE

from rmqdelay.samples.timerstore import TimerStoreBuilder
from rmqdelay.store.writer import NewMessage, StoreWriter
from rmqdelay.timer.config import timer_config

pytestmark = pytest.mark.clock  # the 5.x samples' times (tests/wallclock.py)

WHEEL = "rmq_sys_wheel_timer"
T0 = 1_767_225_600_000
STORE_HOST = (bytes([10, 10, 0, 5]), 10911)


def parked(real_topic: str, uniq: str, out_ms: int, t: int, *, delete: bool = False, rolls: int = 0) -> NewMessage:
    props = {"TIMER_OUT_MS": str(out_ms), "UNIQ_KEY": uniq, "REAL_TOPIC": real_topic, "REAL_QID": "0"}
    if delete:
        props["TIMER_DEL_UNIQKEY"] = f"{real_topic}+{uniq}"
    if rolls:
        props["TIMER_ROLL_TIMES"] = str(rolls)
    return NewMessage(WHEEL, 0, b"0" if delete else b"body-" + uniq.encode(), props, storeHost=STORE_HOST,
                      bornTimestamp=t, storeTimestamp=t)


def build(tmp_path, config, at_ms: int):
    """A timeline: messages parked each 100 ms with near, far (rolled) and shared deliver
    times, some cancelled; slots read once the clock is 1 s past them, until ``at_ms``."""
    rng = random.Random(3)
    store = tmp_path / "store"
    builder = TimerStoreBuilder(config)
    events = []  # (time, order, what, ...)
    for i in range(200):
        t = T0 + 100 * i
        if i % 10 == 9:
            out = T0 + 30_000  # shared by many
        elif i % 7 == 0:
            out = (t + rng.randrange(70_000, 200_000)) // 1000 * 1000  # beyond the 60 s roll window
        else:
            out = (t + rng.randrange(2_000, 50_000)) // 1000 * 1000
        events.append((t, i, "park", f"K{i:04d}", out, 0))
        if i % 11 == 0 and out - t < 59_000:  # a recall of a message not rolled
            events.append((t + 50, i, "cancel", f"K{i:04d}", out, 0))
    events.extend((T0 + 1000 * k, 0, "tick", "", 0, 0) for k in range((at_ms - T0) // 1000 + 1))  # the clock
    events.sort()
    done = {"delivered": 0, "cancelled": 0, "rolled": 0}
    read_ms = T0 // 1000 * 1000
    with StoreWriter(store, create=True, commitlog_file_size=65536, cq_file_size=1200, sync=False) as writer:
        pending = list(events)
        while pending:
            pending.sort()
            t, order, what, uniq, out, rolls = pending.pop(0)
            if t > at_ms:
                break
            while read_ms + 1000 <= t // 1000 * 1000:
                # The dequeue reads slot read_ms: deletes first, then the rest in append order.
                units = builder.dequeue(read_ms)
                dead = {p[0] for m, p in units if m & 4}
                now = read_ms + 1000 + 7
                for magic, (key, real, o, r) in units:
                    if magic & 4:
                        continue
                    if key in dead:
                        done["cancelled"] += 1
                    elif magic & 2:
                        done["rolled"] += 1
                        builder.delivered(real)  # re-put, then enqueued again
                        pending.append((now, -1, "park", key, o, r + 1))
                    else:
                        writer.put(NewMessage(real, 0, b"delivered", {"UNIQ_KEY": key, "TIMER_OUT_MS": str(o)},
                                              storeHost=STORE_HOST, storeTimestamp=now))
                        builder.delivered(real)
                        done["delivered"] += 1
                read_ms += 1000
            if what == "tick":
                continue
            msg = parked("TimerTopic", uniq, out, t, delete=what == "cancel", rolls=rolls)
            result = writer.put(msg)
            builder.enqueue(t // 1000 * 1000, out, result.commitLogOffset, result.storeSize, "TimerTopic",
                            what == "cancel", (uniq, "TimerTopic", out, rolls))
        writer.sync_to_disk()
    builder.write(store, read_ms, at_ms)
    return store, builder, done, read_ms


def test_a_built_timer_store_verifies_and_counts_what_the_timeline_left(tmp_path, capsys):
    config = replace(timer_config(), rollWindowSlotConfigured=60, timerLogFileSize=UNIT_SIZE * 40 + 16)
    at_ms = T0 + 75_000
    store, builder, done, read_ms = build(tmp_path, config, at_ms)
    assert done["delivered"] > 20 and done["cancelled"] > 0 and done["rolled"] > 0
    assert len(list((store / "timerlog").iterdir())) > 3  # files roll, each ending in a BLANK
    conf = tmp_path / "broker.conf"
    conf.write_text("timerRollWindowSlot=60\nmappedFileSizeTimerLog=%d\n" % config.timerLogFileSize)
    verify = run_cli(capsys, "inspect", "timer", store, "--verify", "--now", str(at_ms), "--broker-config", conf)
    assert verify.code == 0, verify.out + verify.err
    assert "drift" not in verify.out  # the metrics hold the true counts
    assert run_cli(capsys, "inspect", "commitlog", store, "--verify").code == 0
    result = run_cli(capsys, "inspect", "timer", store, "--json", "--now", str(at_ms), "--broker-config", conf)
    got = json.loads(result.out)
    assert got["dequeue"]["lastReadTimeMs"] == read_ms
    assert got["timerLog"]["units"] == builder.units
    assert got["rolls"]["done"] == done["rolled"]
    assert got["cancellations"]["honoured"] == done["cancelled"]
    waiting = sum(len(v) for v in builder._due.values())
    assert got["pending"]["units"] + got["pending"]["cancelMarkers"] == waiting


def test_the_builders_roll_placement_is_the_configs():
    """The generator keeps doEnqueue's roll placement written out (its hot path); it places
    every unit where TimerConfig.roll_slot (what run and timer repair use) says."""
    rng = random.Random(5)
    for window in (60, 600, 172800):
        config = replace(timer_config(), rollWindowSlotConfigured=window)
        builder = TimerStoreBuilder(config)
        for _ in range(2000):
            write = rng.randrange(10**6) * 1000
            out = write + rng.randrange(0, 3 * window * 1000)
            slot, magic = builder.enqueue(write, out, 0, 100, "T", False)
            want = config.roll_slot(out, write)
            assert (slot, bool(magic & 2)) == ((out, False) if want is None else (want, True))
