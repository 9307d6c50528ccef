"""`consumers reset`: a consumer group's offsets moved offline, on stores written end to end by
real 4.9.4 and 5.3.3 brokers (samples/broker-e2e, samples/broker5-e2e), and
config/consumerOffset.json written byte for byte as the broker's ConsumerOffsetManager does."""

from __future__ import annotations

import json

import pytest
from clirun import broker_holding_lock, run_cli
from rmqdelay.formats.consumeroffset import format_consumer_offsets, parse_consumer_offset_file, set_offsets
from rmqdelay.formats.delayoffset import parse_fastjson_object

from rmqdelay.store import Store

BROKERS = ["broker-e2e", "broker5-e2e"]


def offsets_file(store):
    return store / "config" / "consumerOffset.json"


def _lines(store):
    from clirun import console
    proc = console("inspect", "consumers", store, "--json")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.mark.parametrize("name", BROKERS)
@pytest.mark.parametrize("file", ["consumerOffset.json", "consumerOffset.json.bak"])
def test_the_brokers_own_files_come_out_byte_for_byte(sample_store, name, file):
    text = (sample_store(name) / "config" / file).read_text(encoding="utf-8")
    assert format_consumer_offsets(parse_consumer_offset_file(parse_fastjson_object(text))) == text


def test_new_keys_go_where_the_brokers_maps_put_them(sample_store):
    doc = parse_consumer_offset_file(parse_fastjson_object(offsets_file(sample_store("broker5-e2e")).read_text()))
    set_offsets(doc, "TopicNew", "GID_NEW", {1: 6, 0: 5})
    text = format_consumer_offsets(doc)
    # The 1024-bin ConcurrentHashMap of offsetTable, the 128-bin HashMap of groupTopicMap.
    assert text.index('"%RETRY%GID_FAIL@GID_FAIL"') < text.index('"TopicNew@GID_NEW":{0:5,1:6\n\t\t}') \
        < text.index('"TopicOrders@GID_ORDERS"')
    assert '"groupTopicMap":{\n\t\t"GID_NEW":["TopicNew"],\n\t\t"GID_ORDERS"' in text


def test_dry_run_says_what_moves_and_writes_nothing(sample_store, capsys):
    store = sample_store("broker-e2e")
    before = offsets_file(store).read_bytes()
    result = run_cli(capsys, "consumers", "reset", store, "--group", "GID_ORDERS", "--all-topics", "--to-earliest",
                     "--json")
    assert result.code == 0, result.err
    rows = result.json_lines()
    assert [(r["topic"], r["queueId"], r["before"], r["after"], r["consumedAgain"]) for r in rows] == \
        [("TopicOrders", q, 25, 0, 25) for q in range(4)]
    assert not any(r["executed"] for r in rows)
    assert offsets_file(store).read_bytes() == before
    table = run_cli(capsys, "consumers", "reset", store, "--group", "GID_ORDERS", "--all-topics", "--to-earliest")
    assert "would get 100 message(s) again, 0 skipped (dry run" in table.out


@pytest.mark.parametrize("name", BROKERS)
def test_execute_writes_what_the_dry_run_said_and_keeps_the_bak(store_copy, capsys, name):
    store = store_copy(name)
    old = offsets_file(store).read_text()
    args = ["consumers", "reset", store, "--group", "GID_FAIL", "--topic", "TopicFail", "--include-retry",
            "--shift-by", "-1", "--json"]
    planned = run_cli(capsys, *args).json_lines()
    done = run_cli(capsys, *args, "--execute").json_lines()
    assert [{**r, "executed": True} for r in planned] == done
    assert {(r["topic"], r["after"]) for r in done} == {("TopicFail", 1), ("%RETRY%GID_FAIL", 15)}
    assert (store / "config" / "consumerOffset.json.bak").read_text() == old
    new = parse_consumer_offset_file(parse_fastjson_object(offsets_file(store).read_text()))
    assert new.table["TopicFail@GID_FAIL"] == {0: 1, 1: 1, 2: 1, 3: 1}
    assert new.table["%RETRY%GID_FAIL@GID_FAIL"] == {0: 15}
    was = parse_consumer_offset_file(parse_fastjson_object(old))
    assert list(new.table) == list(was.table)  # every key where it was
    if was.dataVersion is not None:
        assert new.dataVersion.counter == was.dataVersion.counter + 1
        assert new.dataVersion.timestamp > was.dataVersion.timestamp
    else:
        assert new.dataVersion is None and '"dataVersion"' not in offsets_file(store).read_text()
    # What inspect consumers reads back is the plan.
    rows = {(r["topic"], r["queueId"]): r for r in map(json.loads, _lines(store)) if r["group"] == "GID_FAIL"}
    assert all(rows[(r["topic"], r["queueId"])]["consumerOffset"] == r["after"] for r in done)


def test_to_datetime_is_the_first_message_stored_at_or_after(sample_store, capsys):
    store = sample_store("broker-e2e")
    with Store(store) as s:
        cq = s.consume_queue("TopicOrders", 1)
        times = [s.commitlog.read_message(int(u["commitLogOffset"]), int(u["size"])).storeTimestamp
                 for u in cq.units(cq.min_offset, cq.max_offset)]
    for instant in sorted(set(times))[::3] + [times[0] - 1, times[-1] + 1, times[4] + 1]:
        expected = next((i for i, t in enumerate(times) if t >= instant), len(times))
        rows = run_cli(capsys, "consumers", "reset", store, "--group", "GID_ORDERS", "--topic", "TopicOrders",
                       "--queues", "1", "--to-datetime", str(instant), "--json").json_lines()
        assert [r["after"] for r in rows] == [expected], instant


def test_a_new_group_and_targets_clamped_with_a_warning(store_copy, capsys):
    store = store_copy("broker-e2e")
    result = run_cli(capsys, "consumers", "reset", store, "--group", "GID_NEW", "--topic", "TopicOrders",
                     "--queues", "0-1", "--to-offset", "999", "--execute", "--json")
    assert result.code == 0, result.err
    assert [(r["queueId"], r["before"], r["after"], r["skipped"]) for r in result.json_lines()] == \
        [(0, None, 25, 25), (1, None, 25, 25)]
    assert result.err.count("clamped to 25") == 2
    assert '\t\t"TopicOrders@GID_NEW":{0:25,1:25\n\t\t},\n' in offsets_file(store).read_text()


def test_refused_while_a_broker_holds_the_store(store_copy, capsys):
    store = store_copy("broker-e2e")
    before = offsets_file(store).read_bytes()
    with broker_holding_lock(store):
        result = run_cli(capsys, "consumers", "reset", store, "--group", "GID_ORDERS", "--all-topics",
                         "--to-earliest", "--execute")
    assert result.code == 3 and len(result.err.strip().splitlines()) == 1
    assert offsets_file(store).read_bytes() == before


def test_a_failed_write_leaves_the_file_as_it_was(store_copy, capsys, monkeypatch):
    from rmqdelay.errors import StoreWriteError
    from rmqdelay.store import fileio

    store = store_copy("broker5-e2e")
    before = offsets_file(store).read_bytes()
    names = sorted(p.name for p in (store / "config").iterdir())

    def no_space(fd, path):
        raise StoreWriteError(path, None, "fsync failed: No space left on device")

    monkeypatch.setattr(fileio, "fsync", no_space)
    result = run_cli(capsys, "consumers", "reset", store, "--group", "GID_ORDERS", "--all-topics", "--to-earliest",
                     "--execute")
    assert result.code != 0 and len(result.err.strip().splitlines()) == 1, result.err
    assert offsets_file(store).read_bytes() == before
    assert sorted(p.name for p in (store / "config").iterdir()) == names  # no temporary file left


@pytest.mark.parametrize("args, says", [
    (["--to-latest"], "--topic TOPIC or --all-topics"),
    (["--topic", "TopicOrders", "--all-topics", "--to-latest"], "--topic TOPIC or --all-topics"),
    (["--topic", "%DLQ%GID_FAIL", "--to-latest"], "dead-letter topic"),
    (["--topic", "NoSuchTopic", "--to-latest"], "no topic NoSuchTopic"),
    (["--topic", "TopicOrders", "--queues", "7", "--to-latest"], "--queues"),
    (["--topic", "TopicOrders", "--queues", "x", "--to-latest"], "--queues: queue ids"),
    (["--topic", "TopicOrders"], "exactly one of"),
])
def test_usage_errors_are_one_line(sample_store, capsys, args, says):
    result = run_cli(capsys, "consumers", "reset", sample_store("broker-e2e"), "--group", "GID_ORDERS", *args)
    assert result.code == 2 and says in result.err and len(result.err.strip().splitlines()) == 1, result.err


def test_consumers_show_is_inspect_consumers(sample_store, capsys):
    store = sample_store("broker-e2e")
    shown = run_cli(capsys, "consumers", "show", store, "--group", "GID_FAIL", "--json", "--now", "2026-11-27T12:00:00Z")
    inspected = run_cli(capsys, "inspect", "consumers", store, "--group", "GID_FAIL", "--json",
                        "--now", "2026-11-27T12:00:00Z")
    assert shown.code == 0 and shown.out == inspected.out
