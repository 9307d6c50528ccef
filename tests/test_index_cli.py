"""What rmqdelay writes is indexed as the broker indexes it: `run` on a real-broker store, the
look-ups of `inspect index` and `inspect message --key`, and `inspect index --verify`."""

import json
import shutil

import pytest
from clirun import run_cli
from conftest import SAMPLES
from rmqdelay.formats.constants import RMQ_SYS_SCHEDULE_TOPIC

from rmqdelay.store import Store
from rmqdelay.store.index import IndexSettings, StoreIndex, list_index_files
from rmqdelay.store.indexer import rebuild_index
from rmqdelay.store.keylookup import query_messages

FAR_AHEAD = "4102444800000"
ROLLED = SAMPLES / "delay-partial" / "index-64x512"


def index_bytes(directory) -> list[bytes]:
    return [p.read_bytes() for p in list_index_files(directory)]


def rebuilt(store_path, tmp_path, settings) -> list[bytes]:
    out = tmp_path / "rebuilt" / "index"
    with Store(store_path) as store:
        rebuild_index(store.commitlog, out, settings)
    return index_bytes(out)


def drain(capsys, store, *extra) -> list[dict]:
    result = run_cli(capsys, "run", store, "--until-empty", "--now", FAR_AHEAD, "--json", *extra)
    assert result.code == 0, result.err
    return result.json_lines()


def delivered_after(store, offset: int):
    with Store(store) as s:
        return [m for m in s.commitlog.records() if m.commitLogOffset >= offset]


def test_run_indexes_every_delivered_message_under_its_real_topic_keys_and_uniq_key(store_copy, capsys, tmp_path):
    store = store_copy("delay-partial")
    with Store(store) as s:
        end = s.end_offset()
    events = drain(capsys, store)
    assert events[-1]["delivered"] == 1251
    new = delivered_after(store, end)
    assert len(new) == 1251 and all(m.topic != RMQ_SYS_SCHEDULE_TOPIC for m in new)
    # The broker's own file, appended to: the same bytes as indexing the whole log from scratch.
    assert index_bytes(store / "index") == rebuilt(store, tmp_path, IndexSettings(1024, 8192))
    with Store(store) as s, StoreIndex(store) as index:
        for msg in new:
            uniq = msg.properties["UNIQ_KEY"]
            found = query_messages(s, index, msg.topic, uniq, unique=True)
            assert [m.commitLogOffset for m in found.messages] == [msg.commitLogOffset]
            for key in filter(None, msg.properties.get("KEYS", "").split(" ")):
                found = query_messages(s, index, msg.topic, key)
                assert msg.commitLogOffset in [m.commitLogOffset for m in found.messages]
    # And the command line answers the same, for a few of them.
    with_keys = [m for m in new if m.properties.get("KEYS")]
    assert len(with_keys) > 1000
    for msg in with_keys[::125]:
        by_uniq = run_cli(capsys, "inspect", "index", store, "--uniq-key", msg.properties["UNIQ_KEY"],
                          "--topic", msg.topic, "--json")
        assert by_uniq.code == 0 and [m["commitLogOffset"] for m in by_uniq.json_lines()] == [msg.commitLogOffset]
        by_key = run_cli(capsys, "inspect", "index", store, "--key", msg.properties["KEYS"].split()[0],
                         "--topic", msg.topic, "--json")
        assert msg.commitLogOffset in [m["commitLogOffset"] for m in by_key.json_lines()]
    verify = run_cli(capsys, "inspect", "index", store, "--verify")
    assert verify.code == 0, verify.out
    assert "no problems" in verify.out
    with Store(store) as s:
        cp = s.checkpoint()
    assert cp.indexMsgTimestamp == int(FAR_AHEAD)  # the index's end, committed


def test_run_on_a_5x_store_indexes_what_it_delivers(store_copy, capsys, tmp_path):
    store = store_copy("timer-partial")
    with Store(store) as s:
        end = s.end_offset()
    drain(capsys, store)
    new = delivered_after(store, end)
    assert len(new) > 200
    assert index_bytes(store / "index") == rebuilt(store, tmp_path, IndexSettings(1024, 8192))
    with Store(store) as s, StoreIndex(store) as index:
        for msg in new:
            found = query_messages(s, index, msg.topic, msg.properties["UNIQ_KEY"], unique=True)
            if "TIMER_DEQUEUE_MS" in msg.properties:
                # a timer delivery shares its key with the parked copy the index also holds
                assert msg.commitLogOffset in [m.commitLogOffset for m in found.messages]
            else:
                assert [m.commitLogOffset for m in found.messages] == [msg.commitLogOffset]
    assert run_cli(capsys, "inspect", "index", store, "--verify").code == 0


def test_run_rolls_full_index_files_as_the_broker_would(store_copy, capsys, tmp_path):
    store = store_copy("delay-partial")
    shutil.rmtree(store / "index")
    shutil.copytree(ROLLED, store / "index")
    drain(capsys, store)
    files = list_index_files(store / "index")
    assert len(files) > 13
    names = [p.name for p in files]
    assert names == sorted(names)
    assert index_bytes(store / "index") == rebuilt(store, tmp_path, IndexSettings(64, 512))
    assert run_cli(capsys, "inspect", "index", store, "--verify").code == 0


def test_an_index_left_behind_is_completed_by_the_next_run(store_copy, capsys, tmp_path):
    store = store_copy("delay-partial")
    conf = tmp_path / "broker.conf"
    conf.write_text("messageIndexEnable=false\n")
    with Store(store) as s:
        end = s.end_offset()
    drain(capsys, store, "--levels", "4,5", "--broker-config", str(conf))
    before = index_bytes(store / "index")
    assert before == index_bytes(SAMPLES / "delay-partial" / "store" / "index")  # nothing indexed
    lagging = delivered_after(store, end)
    assert len(lagging) == 166
    # inspect message --key still finds them: the log past the index is scanned.
    msg = lagging[-1]
    result = run_cli(capsys, "inspect", "message", store, "--key", msg.properties["UNIQ_KEY"], "--json")
    assert msg.commitLogOffset in [m["commitLogOffset"] for m in result.json_lines()]
    assert "not in the index: scanned" in result.err
    # inspect index --key does not (the broker would not), and says why.
    result = run_cli(capsys, "inspect", "index", store, "--key", msg.properties["UNIQ_KEY"], "--topic", msg.topic)
    assert result.code == 1 and "messages after it are not indexed" in result.err
    verify = run_cli(capsys, "inspect", "index", store, "--verify", "--json")
    *problems, summary = verify.json_lines()
    assert verify.code == 1 and {p["kind"] for p in problems} == {"indexMissing"}
    assert len(problems) == 166 and summary["kind"] == "summary" and summary["problems"] == 166
    # The next run indexes what the index lacks before it delivers anything.
    events = drain(capsys, store)
    assert any(e["event"] == "notice" and e.get("kind") == "index" for e in events), events[:3]
    assert index_bytes(store / "index") == rebuilt(store, tmp_path, IndexSettings(1024, 8192))
    assert run_cli(capsys, "inspect", "index", store, "--verify").code == 0


def test_time_windows_and_limits_are_the_brokers(capsys):
    store = SAMPLES / "delay-partial" / "store"
    with Store(store) as s:
        msg = next(m for m in s.commitlog.records() if m.topic == "TopicTest" and " " not in m.properties.get("KEYS", " "))
    key, ts = msg.properties["KEYS"], msg.storeTimestamp
    inside = run_cli(capsys, "inspect", "index", store, "--key", key, "--topic", "TopicTest",
                     "--since", str(ts - 5000), "--until", str(ts + 5000), "--json")
    assert [m["commitLogOffset"] for m in inside.json_lines()] == [msg.commitLogOffset]
    later = run_cli(capsys, "inspect", "index", store, "--key", key, "--topic", "TopicTest",
                    "--since", str(ts + 10_000))
    assert later.code == 1 and "no message with key" in later.err


def test_the_index_files_are_listed_with_their_geometry(capsys):
    result = run_cli(capsys, "inspect", "index", SAMPLES / "delay-fresh" / "store", "--json")
    info = json.loads(result.out)
    assert [(f["hashSlotNum"], f["indexNum"], f["entries"], f["indexCount"]) for f in info["files"]] == \
        [(1024, 8192, 3833, 3834)]
    assert info["coverage"] == {"beginPhyOffset": 0, "endPhyOffset": 1956148}
    text = run_cli(capsys, "inspect", "index", SAMPLES / "delay-fresh" / "store")
    assert "3833 of 8191" in text.out


def test_verify_reports_one_line_per_problem_and_exits_1(store_copy, capsys):
    store = store_copy("retry")
    path = list_index_files(store / "index")[0]
    with open(path, "r+b") as fh:
        fh.seek(40 + 4 * 1024 + 20 * 5 + 4)  # entry 5's phyOffset
        fh.write((123).to_bytes(8, "big"))
    result = run_cli(capsys, "inspect", "index", store, "--verify")
    assert result.code == 1
    lines = [line for line in result.out.splitlines() if line.startswith("index")]
    assert any(line.startswith(f"indexEntry: {path} at byte {40 + 4096 + 100}") for line in lines), lines
    assert any(line.startswith("indexMissing: ") and "commitlog" in line for line in lines), lines


@pytest.mark.parametrize("args, expected", [
    (("--key", "a", "--verify"), "give one of"),
    (("--since", "0"), "go with --key"),
    (("--key", "a", "--limit", "0"), "--limit: an integer >= 1"),
    (("--key", "a", "--topic", "bad topic!"), "topic"),
    (("--key", "a b"), "without spaces"),
])
def test_bad_arguments_get_one_line_and_exit_2(capsys, args, expected):
    result = run_cli(capsys, "inspect", "index", SAMPLES / "retry" / "store", *args)
    assert result.code == 2 and expected in result.err and "Traceback" not in result.err
