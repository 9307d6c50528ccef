"""A broker store directory as the broker lays it out, opened read-only."""

from __future__ import annotations

import os
import stat
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from rmqdelay.errors import ConfigFallbackWarning, NotRegularFileError, StoreError
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
from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.formats.msgid import decode_message_id
from rmqdelay.store.commitlog import CommitLog
from rmqdelay.store.consumequeue import ConsumeQueue
from rmqdelay.store.fileio import read_file
from rmqdelay.store.kind import refuse_unsupported
from rmqdelay.store.lock import lock_holder
from rmqdelay.store.problems import NOT_A_DIRECTORY, UNREADABLE, Problems, report

T = TypeVar("T")


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
        if not (self.commitlog_dir.is_dir() or self.consumequeue_dir.is_dir()):
            raise StoreError(self.path, None, "a broker store directory holding commitlog/ and consumequeue/")
        refuse_unsupported(self.path)  # RocksDB or batch consume queues
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
        self.commitlog = CommitLog(self.commitlog_dir, self.problems)
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
        """{topic: queue ids} of consumequeue/, read as the broker loads it: a queue directory
        counts when Integer.parseInt takes its name, and only in the form the broker writes
        (String.valueOf of the id): for '01' the broker would open '1', never that directory."""
        result: dict[str, list[int]] = {}
        topic_dirs = self._directory_entries(self.consumequeue_dir)
        for entry in topic_dirs:
            if not self._is_dir(entry):
                continue
            ids = []
            for q in self._directory_entries(Path(entry.path)):
                qid = java_parse_int(q.name)
                if qid is not None and str(qid) == q.name and self._is_dir(q):
                    ids.append(qid)
            result[entry.name] = sorted(ids)
        return result

    def _directory_entries(self, directory: Path) -> list[os.DirEntry]:
        try:
            return sorted(os.scandir(directory), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        except NotADirectoryError:
            report(self.problems, NOT_A_DIRECTORY, directory, None, "a directory (found a file)")
        except OSError as exc:
            report(self.problems, UNREADABLE, directory, None, f"a readable directory ({exc.strerror})")
        return []

    def _is_dir(self, entry: os.DirEntry) -> bool:
        try:
            return entry.is_dir()
        except OSError as exc:  # a symlink loop (ELOOP), ...
            report(self.problems, UNREADABLE, entry.path, None, f"a readable directory ({exc.strerror})")
            return False

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.consumequeue_dir / topic / str(queue_id), topic, queue_id, self.problems)
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


def load_config_file(path: Path, parse: Callable[[str], T], *, fallback: bool = True) -> T | None:
    """A broker config file read as ConfigManager.load does: the ``.bak`` when the file is
    missing, empty or unparsable; None when neither exists. When both are unusable, the error
    names the first file that was.

    Using the ``.bak`` for a file that is there but unusable is never silent: a
    ``ConfigFallbackWarning`` names the file and what was wrong with it. A FIFO or a
    directory in its place is refused at once. ``fallback=False``
    raises that problem instead (a missing file still falls back, as the broker's does):
    what a writer wants, since an older ``.bak`` means work done again."""
    error: StoreError | None = None
    missing: StoreError | None = None
    for candidate in (path, path.with_name(path.name + ".bak")):
        problem: StoreError | None = None
        try:
            data = read_file(candidate)
            if data is None:
                if candidate == path:
                    missing = StoreError(path, None, "missing")
                continue
            text = data.decode("utf-8")
        except NotRegularFileError:
            raise  # a FIFO or a directory here is no file to fall back from: refused at once
        except StoreError as exc:
            problem = exc
        except UnicodeDecodeError as exc:
            problem = StoreError(candidate, exc.start, "UTF-8 text")
        else:
            if not text.strip():
                problem = StoreError(candidate, 0, "a JSON object; the file is empty")
            else:
                try:
                    value = parse(text)
                except FormatError as exc:
                    problem = StoreError(candidate, exc.offset, exc.expected)
                else:
                    if candidate != path:
                        warnings.warn(ConfigFallbackWarning(
                            f"{error or missing}; read {candidate.name} instead, as the broker would"), stacklevel=2)
                    return value
        if candidate == path and not fallback:
            raise StoreError(problem.path, problem.offset,
                             f"{problem.expected} (the broker would fall back to {path.name}.bak, an older "
                             f"state; repair or remove the file first)")
        error = error or problem
    if error is not None:
        raise error
    return None
