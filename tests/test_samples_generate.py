"""`rmqdelay samples generate`: what it writes decodes back exactly, one seed gives one set of
bytes, and plan.json says what a plain independent read of the store finds."""

from __future__ import annotations

import collections
import hashlib
import json
import shutil
from pathlib import Path

import pytest
from clirun import run_cli
from conftest import SAMPLES, load_plan
from rmqdelay.formats.delayoffset import parse_fastjson_object
from rmqdelay.formats.properties import format_properties, java_order

from rmqdelay.samples.generate import GenerateOptions, generate
from rmqdelay.store import Store
from rmqdelay.store.commitlog import Blank

SMALL = SAMPLES / "generated-small" / "store"
SMALL_ARGS = ("--messages", "3000", "--seed", "1", "--commitlog-file-size", "262144", "--cq-file-size", "1280",
              "--max-hash-slot-num", "1024", "--max-index-num", "8192")
SCHEDULE = "SCHEDULE_TOPIC_XXXX"
FAR_FUTURE = 4_102_444_800_000  # 2100-01-01


def tree_digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def messages(path: Path) -> list:
    with Store(path) as store:
        return list(store.commitlog.records(0))


def nearest_rank(values: list[int], num: int, den: int) -> int | None:
    values = sorted(values)
    return values[-(-num * len(values) // den) - 1] if values else None


def test_every_record_decodes_back_to_what_the_generator_put(tmp_path, capsys):
    store = tmp_path / "gen"
    written = []
    plan = generate(store, GenerateOptions(messages=2000, seed=5, commitlog_file_size=65536, cq_file_size=1280),
                    on_put=lambda new, result: written.append((new, result)))
    assert plan["messages"] == len(written) == 2000
    with Store(store) as st:
        records = list(st.commitlog.records(0, include_blanks=True))
    blanks = [r for r in records if isinstance(r, Blank)]
    decoded = [r for r in records if not isinstance(r, Blank)]
    assert len(blanks) == len(list((store / "commitlog").iterdir())) - 1 >= 5
    assert len(decoded) == len(written)
    for msg, (new, result) in zip(decoded, written):
        assert (msg.topic, msg.queueId, msg.queueOffset, msg.commitLogOffset, msg.storeSize, msg.msgId) == (
            result.topic, result.queueId, result.queueOffset, result.commitLogOffset, result.storeSize, result.msgId)
        assert (msg.storeTimestamp, msg.bornTimestamp, msg.reconsumeTimes, msg.flag) == (
            new.storeTimestamp, new.bornTimestamp, new.reconsumeTimes, new.flag)
        assert (msg.bornHostAddress, msg.bornPort) == new.bornHost
        assert (msg.storeHostAddress, msg.storePort) == new.storeHost
        assert msg.sysFlag == (0x10 if len(new.bornHost[0]) == 16 else 0)
        assert msg.body == new.body and msg.bodyCrcOk
        assert msg.propertiesRaw == result.propertiesRaw
        if result.topic == SCHEDULE:
            # putMessage's rewrite: the map plus REAL_TOPIC / REAL_QID, serialised again.
            want = dict(new.properties, REAL_TOPIC=new.topic, REAL_QID=str(new.queueId))
            assert msg.propertiesRaw == format_properties(java_order(want))
            assert msg.properties["DELAY"] == str(result.queueId + 1)
        elif new.propertiesRaw is not None:  # kept as given: the broker's string (WAIT-less, DELAY kept)
            assert msg.propertiesRaw == new.propertiesRaw
        else:  # a DLQ record: DELAY=0, no rewrite
            assert msg.propertiesRaw == format_properties(java_order(new.properties))
    # Store time order, as a broker appends; at_ms is the last record's store time.
    times = [m.storeTimestamp for m in decoded]
    assert times == sorted(times) and plan["at_ms"] == times[-1] and plan["start_ms"] == times[0]
    assert times[-1] - times[0] > 4 * 3_600_000  # spread over hours
    verify = run_cli(capsys, "inspect", "commitlog", store, "--verify")
    assert verify.code == 0, verify.out + verify.err


@pytest.mark.slow  # byte identity on a store of real size: CI runs it, the quick loop does not
def test_the_fast_paths_write_what_the_producer_and_the_writers_put_write(tmp_path):
    """Producer messages come from templates and send-backs are appended without put();
    watched through ``on_put`` every message goes through the producer code and the writer's
    put() instead: the same store, byte for byte (DLQ send-backs and file ends included)."""
    options = GenerateOptions(messages=12000, seed=3, commitlog_file_size=65536, cq_file_size=1280)
    fast = generate(tmp_path / "fast", options)
    seen = []
    slow = generate(tmp_path / "slow", options, on_put=lambda new, result: seen.append(result.topic))
    assert fast == slow and len(seen) == fast["messages"]
    assert fast["records"]["send_back"] > 0 and fast["records"]["dlq"] > 0
    assert tree_digest(tmp_path / "fast") == tree_digest(tmp_path / "slow")


def test_the_same_seed_gives_the_same_bytes_and_the_committed_sample_is_current(tmp_path, capsys, local_time_zone):
    local_time_zone("UTC")  # the index file's name is a local time
    again = tmp_path / "again"
    result = run_cli(capsys, "samples", "generate", again, *SMALL_ARGS)
    assert result.code == 0, result.err
    assert tree_digest(again) == tree_digest(SMALL)  # regenerate samples/generated-small when this fails
    other = tmp_path / "other"
    assert run_cli(capsys, "samples", "generate", other, *SMALL_ARGS[:2], "--seed", "2",
                   *SMALL_ARGS[4:]).code == 0
    assert (other / "commitlog" / "00000000000000000000").read_bytes() != \
           (SMALL / "commitlog" / "00000000000000000000").read_bytes()


def test_the_plan_matches_an_independent_read_of_the_store():
    plan = load_plan(SMALL)
    msgs = messages(SMALL)
    assert plan["messages"] == len(msgs) and plan["at_ms"] == max(m.storeTimestamp for m in msgs)
    with Store(SMALL) as store:
        units = {}
        max_offsets = {}
        for level in range(1, 19):
            cq = store.schedule_queue(level)
            max_offsets[level] = cq.max_offset
            for i, u in enumerate(cq.units(0, cq.max_offset)):
                units[int(u["commitLogOffset"])] = (level, i, int(u["tagsCode"]))
        delay_offsets = store.delay_offsets().offsetTable
        queue_max = {(t, q): store.consume_queue(t, q).max_offset for t, ids in store.topics().items() for q in ids}

    def key(m):
        return m.properties.get("UNIQ_KEY"), m.properties.get("REAL_TOPIC"), m.reconsumeTimes

    schedule = [m for m in msgs if m.topic == SCHEDULE]
    copies = collections.defaultdict(list)
    for m in msgs:
        if m.topic != SCHEDULE and m.properties.get("REAL_TOPIC") == m.topic and "DELAY" in m.properties:
            copies[key(m)].append(m.storeTimestamp)
    assert all(len(v) == 1 for v in copies.values())  # delivered once each
    by_level = collections.defaultdict(list)
    for m in schedule:
        level, index, intended = units[m.commitLogOffset]
        got = copies.get(key(m))
        by_level[level].append((index, None if got is None else got[0] - intended))
    for level in range(1, 19):
        p = plan["levels"][str(level)]
        rows = sorted(by_level[level])
        late = [x for _, x in rows if x is not None]
        assert p["put"] == len(rows) == max_offsets[level]
        assert p["delivered"] == len(late) == p["delay_offset"] == delay_offsets[level]
        assert p["pending"] == len(rows) - len(late)
        assert [x is not None for _, x in rows] == [True] * len(late) + [False] * p["pending"]  # a prefix
        assert p["lateness"] == {"count": len(late), "min": min(late, default=None), "max": max(late, default=None),
                                 "p50": nearest_rank(late, 1, 2), "p90": nearest_rank(late, 9, 10),
                                 "p99": nearest_rank(late, 99, 100), "early": sum(x < 0 for x in late)}
    assert sum(p["pending"] for p in plan["levels"].values()) > 0
    assert all(p["put"] > 0 for p in plan["levels"].values())  # all 18 levels used

    # Retry chains: send-backs (schedule records for %RETRY%), retry copies, DLQ records.
    chains = collections.defaultdict(lambda: {"sendbacks": set(), "copies": set(), "dlq": 0})
    for m in msgs:
        real = m.properties.get("REAL_TOPIC", "")
        if m.topic == SCHEDULE and real.startswith("%RETRY%"):
            group, kind = real[7:], "sendbacks"
        elif m.topic.startswith("%RETRY%"):
            group, kind = m.topic[7:], "copies"
        elif m.topic.startswith("%DLQ%"):
            group, kind = m.topic[5:], "dlq"
        else:
            continue
        chain = chains[(group, m.properties.get("ORIGIN_MESSAGE_ID") or m.properties["UNIQ_KEY"])]
        if kind == "dlq":
            chain["dlq"] += 1
            assert m.reconsumeTimes == 17 and m.properties["DELAY"] == "0"
        else:
            chain[kind].add(m.reconsumeTimes)
    assert sum(c["dlq"] for c in chains.values()) > 0
    for group, p in plan["groups"].items():
        mine = [c for (g, _), c in chains.items() if g == group and (c["sendbacks"] or c["dlq"])]
        attempts = collections.Counter(max(c["sendbacks"], default=0) for c in mine)
        assert p["chains"] == len(mine)
        assert p["attempts"] == {str(k): v for k, v in sorted(attempts.items())}
        assert p["dlq"] == sum(1 for c in mine if c["dlq"])
        assert p["pending"] == sum(1 for c in mine if not c["dlq"] and max(c["sendbacks"]) not in c["copies"])
        for c in mine:
            assert sorted(c["sendbacks"]) == list(range(1, len(c["sendbacks"]) + 1))
            assert not c["dlq"] or len(c["sendbacks"]) == 16
    offsets = parse_fastjson_object((SMALL / "config" / "consumerOffset.json").read_text())["offsetTable"]
    for topic, queues in plan["retry_queues"].items():
        group = topic[7:]
        assert queues["0"]["max_offset"] == queue_max[(topic, 0)]
        assert queues["0"]["consumer_offset"] == offsets[f"{topic}@{group}"][0] <= queue_max[(topic, 0)]
    assert any(q["0"]["lag"] > 0 for q in plan["retry_queues"].values())
    for key_, table in offsets.items():
        topic = key_.rpartition("@")[0]
        assert all(0 <= offset <= queue_max.get((topic, int(q)), 0) for q, offset in table.items())
    # Every topic written has an entry in topics.json, with enough queues.
    topics = parse_fastjson_object((SMALL / "config" / "topics.json").read_text())["topicConfigTable"]
    for topic, qid in queue_max:
        if topic != SCHEDULE:
            assert topics[topic]["writeQueueNums"] > qid and topics[topic]["perm"] == 6


def test_running_the_scheduler_far_ahead_delivers_every_pending_message_once(tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(SMALL, store)
    plan = load_plan(SMALL)
    before = messages(store)
    result = run_cli(capsys, "run", store, "--until-empty", "--now", str(FAR_FUTURE), "--json")
    assert result.code == 0, result.err
    after = messages(store)
    new = after[len(before):]
    assert len(new) == sum(p["pending"] for p in plan["levels"].values())
    assert all(m.storeTimestamp == FAR_FUTURE and m.topic != SCHEDULE for m in new)
    delivered = collections.Counter((m.properties["UNIQ_KEY"], m.properties["REAL_TOPIC"], m.reconsumeTimes)
                                    for m in after if m.topic != SCHEDULE and m.properties.get("REAL_TOPIC") == m.topic
                                    and "DELAY" in m.properties)
    scheduled = {(m.properties["UNIQ_KEY"], m.properties["REAL_TOPIC"], m.reconsumeTimes)
                 for m in after if m.topic == SCHEDULE}
    assert set(delivered) == scheduled and set(delivered.values()) == {1}
    with Store(store) as st:
        assert all(st.delay_offsets().offsetTable[level] == st.schedule_queue(level).max_offset
                   for level in range(1, 19))
    verify = run_cli(capsys, "inspect", "commitlog", store, "--verify")
    assert verify.code == 0, verify.out + verify.err


@pytest.mark.parametrize("args, expected", [
    ((), "--messages: required"),
    (("--messages", "0"), "--messages"),
    (("--messages", "ten"), "--messages: an integer"),
    (("--messages", "10", "--seed", "x"), "--seed"),
    (("--messages", "10", "--span", "0s"), "--span"),
    (("--messages", "10", "--cq-file-size", "30"), "--cq-file-size"),
    (("--messages", "10", "--commitlog-file-size", "100"), "--commitlog-file-size"),
])
def test_bad_arguments_get_one_line_and_exit_2(tmp_path, capsys, args, expected):
    target = tmp_path / "gen"
    result = run_cli(capsys, "samples", "generate", target, *args)
    assert result.code == 2
    assert result.err.startswith("rmqdelay: ") and result.err.count("\n") == 1 and expected in result.err
    assert not target.exists()


def test_a_directory_with_files_in_it_is_refused(tmp_path, capsys):
    (tmp_path / "keep.txt").write_text("mine")
    result = run_cli(capsys, "samples", "generate", tmp_path, "--messages", "10")
    assert result.code == 2 and result.err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
