"""The broker's config files that rmqdelay writes besides delayOffset.json:
config/topics.json (TopicConfigManager) and config/consumerOffset.json (ConsumerOffsetManager).

Read like ConfigManager.load (the ``.bak`` when the file is missing, empty or unparsable);
written in fastjson's pretty text through a temp file + fsync + rename, the old file kept as
``.bak`` (offsetstore.atomic_write). Entries rmqdelay does not know are kept as they are.
"""

from __future__ import annotations

import time
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.delayoffset import parse_fastjson_object
from rmqdelay.formats.fastjson import format_fastjson_pretty
from rmqdelay.store.directory import load_config_file
from rmqdelay.store.durable import atomic_write, config_dir

TOPICS_FILE = "topics.json"
CONSUMER_OFFSET_FILE = "consumerOffset.json"
PERM_READ_WRITE = 4 | 2  # PermName.PERM_READ | PermName.PERM_WRITE
DEFAULT_TOPIC_QUEUE_NUMS = 4  # a producer's defaultTopicQueueNums: what auto-creation gives


def load_config(path: Path) -> dict | None:
    """The document of a fastjson config file, with the broker's ``.bak`` fallback; None when
    neither exists."""
    return load_config_file(path, parse_fastjson_object)


def write_config(path: Path, doc: dict) -> None:
    atomic_write(path, format_fastjson_pretty(doc).encode("utf-8"), keep_bak=True)


def topic_config(topic: str, queue_nums: int, perm: int = PERM_READ_WRITE) -> dict:
    """TopicConfig as fastjson writes it: its getters' names in sorted order."""
    return {
        "order": False,
        "perm": perm,
        "readQueueNums": queue_nums,
        "topicFilterType": "SINGLE_TAG",
        "topicName": topic,
        "topicSysFlag": 0,
        "writeQueueNums": queue_nums,
    }


def topics_path(store_path: Path | str) -> Path:
    return config_dir(store_path) / TOPICS_FILE


def consumer_offset_path(store_path: Path | str) -> Path:
    return config_dir(store_path) / CONSUMER_OFFSET_FILE


def read_topic_table(store_path: Path | str) -> dict[str, dict]:
    """topicConfigTable of config/topics.json; {} when there is none."""
    path = topics_path(store_path)
    doc = load_config(path)
    if doc is None:
        return {}
    table = doc.get("topicConfigTable", {})
    if not isinstance(table, dict):
        raise StoreError(path, 0, 'a "topicConfigTable" object')
    return table


def queue_nums(entry: dict, key: str = "writeQueueNums") -> int:
    """A topic entry's ``writeQueueNums`` (or ``readQueueNums``); 0 when it holds no number."""
    value = entry.get(key, 0) if isinstance(entry, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def write_queue_nums(entry: dict) -> int:
    return queue_nums(entry, "writeQueueNums")


def add_topics(store_path: Path | str, queue_nums: dict[str, int], now_ms: int | None = None) -> list[str]:
    """Give every topic of ``queue_nums`` an entry in config/topics.json, as the broker's
    auto-creation would (read/write queues, perm 6); a topic with too few queues for what
    was written gets more. Returns the topics added or changed; writes only when there are
    any. DataVersion moves on as TopicConfigManager's does on every change."""
    path = topics_path(store_path)
    doc = load_config(path) or {}
    table = doc.setdefault("topicConfigTable", {})
    if not isinstance(table, dict):
        raise StoreError(path, 0, 'a "topicConfigTable" object')
    changed = []
    for topic in sorted(queue_nums):
        wanted = queue_nums[topic]
        entry = table.get(topic)
        if entry is None:
            table[topic] = topic_config(topic, wanted)
        elif write_queue_nums(entry) < wanted:
            entry["readQueueNums"] = max(wanted, entry.get("readQueueNums", 0) or 0)
            entry["writeQueueNums"] = wanted
        else:
            continue
        changed.append(topic)
    if changed:
        version = doc.get("dataVersion")
        stamp = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        if isinstance(version, dict):
            version["counter"] = int(version.get("counter", 0) or 0) + 1
            version["timestamp"] = stamp
        else:
            version = {"counter": 1, "timestamp": stamp}
        # fastjson writes the wrapper's properties sorted: dataVersion, topicConfigTable.
        ordered = {"dataVersion": version, "topicConfigTable": table}
        ordered.update((k, v) for k, v in doc.items() if k not in ordered)
        write_config(path, dict(sorted(ordered.items())))
    return changed


def write_consumer_offsets(store_path: Path | str, table: dict[str, dict[int, int]]) -> None:
    """config/consumerOffset.json: {"offsetTable": {"TOPIC@GROUP": {queueId: offset}}}."""
    doc = {"offsetTable": {key: {qid: table[key][qid] for qid in sorted(table[key])} for key in table}}
    write_config(consumer_offset_path(store_path), doc)
