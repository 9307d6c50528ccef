"""A problem found in a store, reported instead of raised: by `--verify` and `inspect store`."""

from __future__ import annotations

from dataclasses import dataclass

from rmqdelay.errors import StoreError

# Kinds of the store's layout, found while listing it (the record and unit kinds are in verify).
UNREADABLE = "unreadable"
FILE_SIZE = "fileSize"
GAP = "gap"
NOT_A_DIRECTORY = "notADirectory"


@dataclass(slots=True, frozen=True)
class Problem:
    kind: str
    file: str
    offset: int | None  # byte offset in ``file``
    expected: str
    physicalOffset: int | None = None  # where in the whole commit log, when it is about a record

    def as_json(self) -> dict:
        # Offsets found by numpy may come as its integers: JSON takes Python's.
        return {"kind": self.kind, "file": self.file, "offset": _int(self.offset),
                "expected": self.expected, "physicalOffset": _int(self.physicalOffset)}

    def __str__(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at byte {self.offset}"
        return f"{where}: {self.expected}"

    def error(self) -> StoreError:
        return StoreError(self.file, self.offset, self.expected)


def _int(value: int | None) -> int | None:
    return None if value is None else int(value)


class Problems(list):
    """Where a lenient reader puts what a strict one raises."""

    def add(self, kind: str, path, offset: int | None, expected: str) -> None:
        problem = Problem(kind, str(path), offset, expected)
        if problem not in self:  # the same directory listed twice is one problem
            self.append(problem)


def report(problems: Problems | None, kind: str, path, offset: int | None, expected: str) -> None:
    """Raise the problem as a StoreError (strict: ``problems`` is None) or note it."""
    if problems is None:
        raise StoreError(path, offset, expected)
    problems.add(kind, path, offset, expected)
