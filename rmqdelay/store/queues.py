"""The queue source of a store whose consume queues are files: ``consumequeue/TOPIC/QID/``
(layout.py has the contract every queue source keeps)."""

from __future__ import annotations

import os
from pathlib import Path

from rmqdelay.formats.javanum import java_parse_int
from rmqdelay.store.consumequeue import ConsumeQueue
from rmqdelay.store.problems import NOT_A_DIRECTORY, UNREADABLE, Problems, report


class FileQueues:
    def __init__(self, directory: Path, problems: Problems | None = None) -> None:
        self.directory = directory
        self.problems = problems
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}

    def describe(self) -> str:
        return f"{self.directory.name}/ (consume queue files)"

    def topics(self) -> dict[str, list[int]]:
        """{topic: queue ids} of consumequeue/, read as the broker loads it: a queue directory
        counts when Integer.parseInt takes its name, and only in the form the broker writes
        (String.valueOf of the id): for '01' the broker would open '1', never that directory."""
        result: dict[str, list[int]] = {}
        for entry in self._directory_entries(self.directory):
            if not self._is_dir(entry):
                continue
            ids = []
            for q in self._directory_entries(Path(entry.path)):
                qid = java_parse_int(q.name)
                if qid is not None and str(qid) == q.name and self._is_dir(q):
                    ids.append(qid)
            result[entry.name] = sorted(ids)
        return result

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            cq = ConsumeQueue(self.queue_path(topic, queue_id), topic, queue_id, self.problems)
            self._queues[key] = cq
        return cq

    def has_queue(self, topic: str, queue_id: int) -> bool:
        return self.queue_path(topic, queue_id).is_dir()

    def queue_path(self, topic: str, queue_id: int) -> Path:
        """Where a queue's files are (or would be): what a message about the queue names."""
        return self.directory / topic / str(queue_id)

    def close(self) -> None:
        for cq in self._queues.values():
            cq.close()
        self._queues.clear()

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
