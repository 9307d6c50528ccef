"""`run` warns about a delivery's REAL_QID from the store's config/topics.json, as the broker
knows a topic's queues: nothing for a queue the topic has there (4 write queues, or 1,100), one
line per topic and queue for one beyond them however many messages go there."""

from __future__ import annotations

import json

from clirun import console

FAR = "4102444800000"


def set_queues(store, topic: str, count: int) -> None:
    path = store / "config" / "topics.json"
    doc = json.loads(path.read_text()) if path.exists() else {"topicConfigTable": {},
                                                               "dataVersion": {"counter": 1, "timestamp": 1}}
    doc["topicConfigTable"][topic] = {"topicName": topic, "readQueueNums": count, "writeQueueNums": count,
                                      "perm": 6, "topicFilterType": "SINGLE_TAG", "topicSysFlag": 0,
                                      "order": False, "attributes": {}}
    path.write_text(json.dumps(doc))


def send(store, topic: str, queue: int, count: int) -> None:
    result = console("send", store, "--topic", topic, "--queue", str(queue), "--delay-level", "1", "--body", "x",
                     "--count", str(count))
    assert result.returncode == 0, result.stderr


def warnings(store) -> list[str]:
    result = console("run", store, "--until-empty", "--now", FAR)
    assert result.returncode == 0, result.stderr[-2000:]
    return [line for line in result.stderr.splitlines() if "beyond the queues" in line]


def test_a_queue_the_topic_has_in_topics_json_is_not_warned_about(store_copy):
    store = store_copy("delay-partial")
    set_queues(store, "Big", 4)
    set_queues(store, "Huge", 1100)
    send(store, "Big", 0, 40)  # no consume queue for Big/0 on disk yet
    send(store, "Huge", 1050, 40)
    assert warnings(store) == []


def test_a_queue_beyond_the_topic_is_said_once_per_topic_and_queue(store_copy):
    store = store_copy("delay-partial")
    set_queues(store, "Big", 8)
    send(store, "Big", 5, 60)
    send(store, "Big", 6, 60)
    set_queues(store, "Big", 4)  # the topic shrank: queues 5 and 6 are beyond it now
    found = warnings(store)
    assert len(found) == 2, found
    assert any("REAL_QID 5" in line and "Big" in line for line in found)
    assert any("REAL_QID 6" in line and "Big" in line for line in found)
