"""A broker store directory as the broker lays it out, opened read-only.

The layout (plain, DLedger, RocksDB) is found once, here, and the store's log, queues and
configs are opened from it (layout.py holds the contract of each source); everything above
reads records and units through ``Store.commitlog``, ``Store.queues`` and ``Store.configs``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

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
from rmqdelay.store.configs import JsonConfigs, load_config_file
from rmqdelay.store.dledger import DLedgerCommitLog
from rmqdelay.store.consumequeue import ConsumeQueue
from rmqdelay.store.fileio import read_file
from rmqdelay.store.kind import refuse_unsupported
from rmqdelay.store.layout import COMMITLOG_DIR, CONSUMEQUEUE_DIR, DLEDGER, ROCKSDB, Layout, find_layout
from rmqdelay.store.lock import lock_holder
from rmqdelay.store.problems import NOT_A_DIRECTORY, UNREADABLE, Problems, report
from rmqdelay.store.queues import FileQueues
from rmqdelay.store.rocksconfigs import RocksConfigs
from rmqdelay.store.rocksqueues import RocksQueues

__all__ = ["QueueInfo", "Store", "check_store_directory", "load_config_file"]


@dataclass(slots=True, frozen=True)
class QueueInfo:
    topic: str
    queueId: int
    minOffset: int
    maxOffset: int
    maxPhysicOffset: int


def check_store_directory(path: Path) -> None:
    """A one-line StoreError unless ``path`` is a directory (it may be empty)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise StoreError(path, None, "a broker store directory (it does not exist)") from None
    except OSError as exc:
        raise StoreError(path, None, f"a broker store directory ({exc.strerror})") from None
    if not stat.S_ISDIR(mode):
        raise StoreError(path, None, "a broker store directory (this is a file, not a directory)")


class Store:
    def __init__(self, path: Path | str, *, lenient: bool = False) -> None:
        """``lenient``: what is wrong with the layout of the store (unreadable entries, gaps,
        files of the wrong size) is noted in ``problems`` instead of raised, and the rest is
        read (``--verify``, ``inspect store``)."""
        self.path = Path(path)
        check_store_directory(self.path)
        self.layout: Layout = find_layout(self.path)
        if self.layout.log != DLEDGER and not (self.commitlog_dir.is_dir() or self.consumequeue_dir.is_dir()):
            raise StoreError(self.path, None, "a broker store directory holding commitlog/ and consumequeue/ "
                                              "(or dledger-<selfId>/data/)")
        refuse_unsupported(self.path)  # batch consume queues
        self.problems: Problems | None = Problems() if lenient else None
        for sub in (self.commitlog_dir, self.consumequeue_dir):
            try:
                mode = os.stat(sub).st_mode
            except FileNotFoundError:
                continue
            except OSError as exc:  # a symlink loop, ...
                report(self.problems, UNREADABLE, sub, None, f"a readable directory ({exc.strerror})")
                continue
            if not stat.S_ISDIR(mode):
                report(self.problems, NOT_A_DIRECTORY, sub, None, "a directory (found a file)")
        self.commitlog = self._open_log()
        self.queues = self._open_queues()
        self.configs = self._open_configs()

    def _open_log(self) -> CommitLog | DLedgerCommitLog:
        if self.layout.log == DLEDGER:
            return DLedgerCommitLog(self.path, self.layout.dledger_dir, self.commitlog_dir, self.problems)
        return CommitLog(self.commitlog_dir, self.problems)

    def _open_queues(self) -> FileQueues | RocksQueues:
        if self.layout.queues == ROCKSDB:
            return RocksQueues(self.consumequeue_dir, lambda: self.commitlog.min_offset, self.problems)
        return FileQueues(self.consumequeue_dir, self.problems)

    def _open_configs(self) -> JsonConfigs | RocksConfigs:
        if self.layout.configs == ROCKSDB:
            return RocksConfigs(self.config_dir)
        return JsonConfigs(self.config_dir)

    # -- layout -------------------------------------------------------------------------
    @property
    def commitlog_dir(self) -> Path:
        return self.path / COMMITLOG_DIR

    @property
    def consumequeue_dir(self) -> Path:
        return self.path / CONSUMEQUEUE_DIR

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
        self.queues.close()
        self.configs.close()

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
        data = read_file(self.checkpoint_path)
        if data is None:
            return None
        if len(data) < 24:
            raise StoreError(self.checkpoint_path, len(data), "24 bytes of checkpoint timestamps")
        return parse_checkpoint(data[:40])

    def delay_offsets(self, *, fallback: bool = True) -> DelayOffsets | None:
        """config/delayOffset.json, falling back to .bak as ConfigManager.load does (with a
        ``ConfigFallbackWarning``); ``fallback=False`` refuses a file that is there but
        unusable, for writers that must not guess (see ``load_config_file``).

        None when neither exists (a broker that never ran its scheduler). When the file is
        unreadable and the backup too, the error names the main file.
        """
        return load_config_file(self.delay_offset_path, parse_delay_offsets, fallback=fallback)

    # -- queues -------------------------------------------------------------------------
    def topics(self) -> dict[str, list[int]]:
        """{topic: queue ids} of the store's queues (queues.py: as the broker loads them)."""
        return self.queues.topics()

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        return self.queues.queue(topic, queue_id)

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return self.queues.has_queue(topic, queue_id)

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
        """Messages whose UNIQ_KEY is ``key`` or whose KEYS hold it as one token (a scan).
        An empty key matches nothing: the broker indexes no empty KEYS token."""
        if not key:
            return
        for msg in self.commitlog.records():
            if topic is not None and msg.topic != topic:
                continue
            props = msg.properties
            if props.get(PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX) == key or \
                    key in props.get(PROPERTY_KEYS, "").split(KEY_SEPARATOR):
                yield msg
