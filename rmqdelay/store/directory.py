"""A broker store directory as the broker lays it out, opened read-only."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rmqdelay.errors import StoreError
from rmqdelay.formats.checkpoint import Checkpoint, parse_checkpoint
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    KEY_SEPARATOR,
    PROPERTY_KEYS,
    PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX,
    RMQ_SYS_SCHEDULE_TOPIC,
)
from rmqdelay.formats.delayoffset import DelayOffsets, parse_delay_offsets
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.msgid import decode_message_id
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.consumequeue import ConsumeQueue
from rmqdelay.store.lock import lock_holder

T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class QueueInfo:
    topic: str
    queueId: int
    minOffset: int
    maxOffset: int
    maxPhysicOffset: int


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise StoreError(self.path, None, "a broker store directory (it does not exist)")
        if not self.path.is_dir():
            raise StoreError(self.path, None, "a broker store directory (this is not a directory)")
        if not (self.commitlog_dir.is_dir() or self.consumequeue_dir.is_dir()):
            raise StoreError(self.path, None, "a broker store directory holding commitlog/ and consumequeue/")
        self.commitlog = CommitLog(self.commitlog_dir)
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    # -- layout -------------------------------------------------------------------------
    @property
    def commitlog_dir(self) -> Path:
        return self.path / "commitlog"

    @property
    def consumequeue_dir(self) -> Path:
        return self.path / "consumequeue"

    @property
    def config_dir(self) -> Path:
        return self.path / "config"

    @property
    def delay_offset_path(self) -> Path:
        return self.config_dir / "delayOffset.json"

    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint"

    @property
    def lock_path(self) -> Path:
        return self.path / "lock"

    @property
    def abort_path(self) -> Path:
        return self.path / "abort"

    def close(self) -> None:
        self.commitlog.close()
        for cq in self._queues.values():
            cq.close()
        self._queues.clear()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- state --------------------------------------------------------------------------
    def lock_holder(self) -> int | None:
        return lock_holder(self.lock_path)

    @property
    def abort_present(self) -> bool:
        return self.abort_path.exists()

    def checkpoint(self) -> Checkpoint | None:
        try:
            data = self.checkpoint_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(self.checkpoint_path, None, f"a readable file ({exc.strerror})") from None
        if len(data) < 24:
            raise StoreError(self.checkpoint_path, len(data), "24 bytes of checkpoint timestamps")
        return parse_checkpoint(data[:40])

    def delay_offsets(self) -> DelayOffsets | None:
        """config/delayOffset.json, falling back to .bak as ConfigManager.load does.

        None when neither exists (a broker that never ran its scheduler). When the file is
        unreadable and the backup too, the error names the main file.
        """
        return load_config_file(self.delay_offset_path, parse_delay_offsets)

    # -- queues -------------------------------------------------------------------------
    def topics(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        try:
            topic_dirs = sorted(os.scandir(self.consumequeue_dir), key=lambda e: e.name)
        except FileNotFoundError:
            return result
        for entry in topic_dirs:
            if not entry.is_dir():
                continue
            ids = sorted(int(q.name) for q in os.scandir(entry.path) if q.is_dir() and q.name.isdigit())
            result[entry.name] = ids
        return result

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.consumequeue_dir / topic / str(queue_id), topic, queue_id)
            self._queues[key] = cq
        return cq

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return (self.consumequeue_dir / topic / str(queue_id)).is_dir()

    def queue_infos(self) -> Iterator[QueueInfo]:
        for topic, ids in self.topics().items():
            for qid in ids:
                cq = self.consume_queue(topic, qid)
                yield QueueInfo(topic, qid, cq.min_offset, cq.max_offset, cq.max_physic_offset)

    def schedule_queue(self, level: int) -> ConsumeQueue:
        return self.consume_queue(RMQ_SYS_SCHEDULE_TOPIC, level - 1)

    def max_physic_offset_in_queues(self) -> int:
        """The highest commit log offset any consume queue covers (the broker's reput start)."""
        best = self.commitlog.min_offset
        for info in self.queue_infos():
            best = max(best, info.maxPhysicOffset)
        return best

    def end_offset(self) -> int:
        return self.commitlog.end_offset(hint=self.max_physic_offset_in_queues())

    # -- look-ups -----------------------------------------------------------------------
    def message_at(self, offset: int) -> Message:
        return self.commitlog.read_message(offset)

    def message_by_id(self, msg_id: str) -> Message:
        try:
            _, _, offset = decode_message_id(msg_id)
        except FormatError as exc:
            raise StoreError("MSGID", None, f"{exc.expected}, found {msg_id!r}") from None
        return self.commitlog.read_message(offset)

    def messages_by_key(self, key: str, topic: str | None = None) -> Iterator[Message]:
        """Messages whose UNIQ_KEY is ``key`` or whose KEYS hold it as one token (a scan)."""
        for msg in self.commitlog.records():
            if topic is not None and msg.topic != topic:
                continue
            props = msg.properties
            if props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key or \
                    key in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR):
                yield msg


def load_config_file(path: Path, parse: Callable[[str], T]) -> T | None:
    """A broker config file read as ConfigManager.load does: the ``.bak`` when the file is
    missing, empty or unparsable; None when neither exists. When both are unusable, the error
    names the first file that was."""
    error: StoreError | None = None
    for candidate in (path, path.with_name(path.name + ".bak")):
        try:
            text = candidate.read_bytes().decode("utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            error = error or StoreError(candidate, None, f"readable UTF-8 text ({exc})")
            continue
        if not text.strip():
            error = error or StoreError(candidate, 0, "a JSON object; the file is empty")
            continue
        try:
            return parse(text)
        except FormatError as exc:
            error = error or StoreError(candidate, exc.offset, exc.expected)
    if error is not None:
        raise error
    return None
