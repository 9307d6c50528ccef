"""rmqdelay.store.verify: every problem of a damaged store found, named by file and byte, nothing
reported for a healthy one."""

from __future__ import annotations

import struct
from pathlib import Path

from conftest import load_expected

from rmqdelay.store import Store, verify
from rmqdelay.store.verify import VerifyCounts, verify_store
from rmqdelay.store.writer import NewMessage, StoreWriter


def problems_of(path: Path) -> list[verify.Problem]:
    with Store(path) as store:
        return verify_store(store)


def patch(path: Path, pos: int, data: bytes) -> None:
    with open(path, "r+b") as fh:
        fh.seek(pos)
        fh.write(data)


def a_message(name: str, index: int = 5) -> dict:
    return [m for m in load_expected(name)["msg"] if m["bodyLength"] > 0][index]


def cq_file(store: Path, topic: str, queue: int, unit: int) -> tuple[Path, int]:
    byte = unit * 20
    return store / "consumequeue" / topic / str(queue) / f"{byte - byte % 1280:020d}", byte % 1280


def test_real_broker_stores_have_no_problems(real_sample):
    name, path, expected = real_sample
    counts = VerifyCounts()
    with Store(path) as store:
        assert verify_store(store, counts=counts) == []
    assert counts.messages == len(expected["msg"])
    assert counts.units == len(expected["cq"])
    assert counts.files == len(expected["meta"][0]["commitlogFiles"])


def test_a_store_written_by_the_writer_has_no_problems(tmp_path):
    path = tmp_path / "s"
    with StoreWriter(path, create=True, sync=False, commitlog_file_size=4096, cq_file_size=200) as writer:
        for i in range(60):
            writer.put(NewMessage("TopicA", i % 3, b"body %d" % i * 10,
                                  properties={"DELAY": str(i % 4)} if i % 2 else {}))
        # Transaction prepared messages get no consume queue unit; that is not a problem.
        writer.put(NewMessage("TopicA", 0, b"half", sysFlag=0x4))
    counts = VerifyCounts()
    with Store(path) as store:
        assert verify_store(store, counts=counts) == []
    assert counts.messages == 61 and counts.units == 60 and counts.files >= 3


def test_crc_mismatch_is_one_problem_at_the_crc_field(store_copy):
    path = store_copy("delay-partial")
    m = a_message("delay-partial")
    body_at = m["filePos"] + m["storeSize"] - 2 - len(m["propertiesRaw"].encode()) - 1 - len(m["topic"]) - m["bodyLength"]
    log = path / "commitlog" / m["file"]
    original = log.read_bytes()[body_at]
    patch(log, body_at, bytes([original ^ 0x55]))
    [problem] = problems_of(path)
    assert problem.kind == verify.CRC
    assert (problem.file, problem.offset, problem.physicalOffset) == (str(log), m["filePos"] + 8, m["commitLogOffset"])
    assert f"found {m['bodyCRC']}" in problem.expected


def test_bad_magic_skips_the_rest_of_the_file_and_reports_units_into_it_once_per_queue(store_copy):
    path = store_copy("delay-partial")
    m = a_message("delay-partial", 10)
    log = path / "commitlog" / m["file"]
    patch(log, m["filePos"] + 4, b"\x12\x34\x56\x78")
    problems = problems_of(path)
    assert problems[0].kind == verify.MAGIC
    assert (problems[0].file, problems[0].offset) == (str(log), m["filePos"] + 4)
    assert "found 0x12345678" in problems[0].expected
    rest = problems[1:]
    assert rest and {p.kind for p in rest} == {verify.CQ_UNREADABLE}
    assert len(rest) == len({(Path(p.file).parent) for p in rest})  # one per queue


def test_size_running_past_the_file(store_copy):
    path = store_copy("retry")
    m = a_message("retry", 3)
    log = path / "commitlog" / m["file"]
    patch(log, m["filePos"], struct.pack(">i", 10_000_000))
    problems = problems_of(path)
    assert problems[0].kind == verify.SIZE and problems[0].offset == m["filePos"]
    assert "totalSize 10000000" in problems[0].expected


def test_truncated_last_file(store_copy):
    path = store_copy("retry")
    last = sorted((path / "commitlog").iterdir())[-1]
    end = load_expected("retry")["end"][0]["filePos"]
    with open(last, "r+b") as fh:
        fh.truncate(end - 10)
    problems = problems_of(path)
    assert problems[0].kind == verify.SIZE and problems[0].file == str(last)
    assert all(p.kind == verify.CQ_UNREADABLE for p in problems[1:])


def test_unit_pointing_past_the_log(store_copy):
    path = store_copy("delay-fresh")
    cq, byte = cq_file(path, "TopicTest", 2, 7)
    patch(cq, byte, struct.pack(">q", 50_000_000))
    [problem] = [p for p in problems_of(path) if p.kind != verify.UNDISPATCHED]
    assert problem.kind == verify.CQ_PAST_LOG
    assert (problem.file, problem.offset, problem.physicalOffset) == (str(cq), byte, 50_000_000)
    assert "unit 7 of TopicTest/2" in problem.expected


def test_unit_pointing_at_the_wrong_queue_size_or_offset(store_copy):
    path = store_copy("delay-fresh")
    units = [c for c in load_expected("delay-fresh")["cq"] if c["topic"] == "TopicTest" and c["queueId"] == 1]
    other = next(c for c in load_expected("delay-fresh")["cq"] if c["topic"] == "OrderTopic")
    cq, byte = cq_file(path, "TopicTest", 1, 3)
    patch(cq, byte, struct.pack(">qi", other["phyOffset"], other["size"]))  # a message of OrderTopic
    cq4, byte4 = cq_file(path, "TopicTest", 1, 4)
    patch(cq4, byte4 + 8, struct.pack(">i", units[4]["size"] + 1))  # wrong size
    cq5, byte5 = cq_file(path, "TopicTest", 1, 5)
    patch(cq5, byte5, struct.pack(">q", units[6]["phyOffset"]))  # the next message of the queue
    patch(cq5, byte5 + 8, struct.pack(">i", units[6]["size"]))
    got = {p.kind: p for p in problems_of(path)}
    assert got[verify.CQ_QUEUE].offset == byte and "found one of OrderTopic/" in got[verify.CQ_QUEUE].expected
    assert got[verify.CQ_SIZE].offset == byte4
    assert got[verify.CQ_QUEUE_OFFSET].offset == byte5 and "found queueOffset 6" in got[verify.CQ_QUEUE_OFFSET].expected
    # The messages those units should have pointed at are now pointed at by nothing.
    lost = {p.physicalOffset for p in problems_of(path) if p.kind == verify.UNDISPATCHED}
    assert lost == {units[3]["phyOffset"], units[4]["phyOffset"], units[5]["phyOffset"]}


def test_unit_pointing_inside_a_message(store_copy):
    path = store_copy("retry")
    units = [c for c in load_expected("retry")["cq"] if c["topic"] == "TopicPay" and c["queueId"] == 0]
    cq, byte = cq_file(path, "TopicPay", 0, 2)
    patch(cq, byte, struct.pack(">q", units[2]["phyOffset"] + 4))
    kinds = sorted(p.kind for p in problems_of(path))
    assert kinds == [verify.CQ_NO_MESSAGE, verify.UNDISPATCHED]


def test_garbage_after_the_end_of_the_data(store_copy):
    path = store_copy("retry")
    end = load_expected("retry")["end"][0]
    log = path / "commitlog" / end["file"]
    patch(log, end["filePos"] + 1000, b"\x01")
    [problem] = problems_of(path)
    assert problem.kind == verify.TAIL and problem.offset == end["filePos"] + 1000


def test_a_bad_blank_record(store_copy):
    path = store_copy("retry")
    blank = load_expected("retry")["blank"][0]
    log = path / "commitlog" / blank["file"]
    patch(log, blank["filePos"], struct.pack(">i", blank["totalSize"] - 1))
    [problem] = problems_of(path)
    assert problem.kind == verify.BLANK and problem.offset == blank["filePos"]


def test_progress_counts_every_byte(store_copy):
    path = store_copy("retry")
    done = []
    with Store(path) as store:
        total = verify.verify_total(store)
        verify_store(store, advance=done.append)
    assert sum(done) == total > 0
