"""A store as a command names it: ``PATH`` or ``NAME=PATH``, the name labelling its rows
(`analyze`) and its metrics (`inspect delay --format prometheus`)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# A directory name that is not UTF-8 reaches Python as surrogate escapes, one per byte.
_SURROGATES = range(0xD800, 0xE000)


@dataclass(frozen=True)
class StoreRef:
    name: str
    path: Path


def store_ref(arg: str) -> StoreRef:
    """A STORE argument: ``PATH`` or ``NAME=PATH``. The name defaults to the directory's name,
    or, for the broker's usual ``.../BROKER/store``, to the directory above it."""
    name, sep, path = arg.partition("=")
    if sep and name and "/" not in name:
        return StoreRef(label(name), Path(path))
    path = Path(arg)
    resolved = path.resolve()
    if resolved.name == "store" and resolved.parent.name:
        return StoreRef(label(resolved.parent.name), path)
    return StoreRef(label(resolved.name or str(path)), path)


def label(name: str) -> str:
    """A store's name as text every output takes (Arrow strings, JSON, Parquet): the bytes of
    a directory name that are not UTF-8 become U+FFFD (docs/cli.md); the path keeps them."""
    if name.isascii() or not any(ord(ch) in _SURROGATES for ch in name):
        return name
    return "".join("\ufffd" if ord(ch) in _SURROGATES else ch for ch in name)


def path_bytes(path: Path | str) -> bytes:
    """A path as the bytes the file system holds, for a column or a task that carries it
    (an Arrow or Spark string cannot hold bytes that are not UTF-8); ``os.fsdecode`` undoes it."""
    return os.fsencode(path)
