"""A store as a command names it: ``PATH`` or ``NAME=PATH``, the name labelling its rows
(`analyze`) and its metrics (`inspect delay --format prometheus`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StoreRef:
    name: str
    path: Path


def store_ref(arg: str) -> StoreRef:
    """A STORE argument: ``PATH`` or ``NAME=PATH``. The name defaults to the directory's name,
    or, for the broker's usual ``.../BROKER/store``, to the directory above it."""
    name, sep, path = arg.partition("=")
    if sep and name and "/" not in name:
        return StoreRef(name, Path(path))
    path = Path(arg)
    resolved = path.resolve()
    if resolved.name == "store" and resolved.parent.name:
        return StoreRef(resolved.parent.name, path)
    return StoreRef(resolved.name or str(path), path)
