"""Sample stores kept compressed in the repository (``samples/NAME/store.tar.xz``).

A 5.x store carries a 38.7 MB ``timerwheel`` that is nearly all zeros; packed with xz the
whole store is a few hundred KB. ``unpack`` writes it back with the zero runs left as holes
(sparse files), so an unpacked store takes little more disk than its data.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

from rmqdelay.errors import StoreError, UsageError

ARCHIVE_NAME = "store.tar.xz"
_BLOCK = 1 << 16
_MTIME = 1_700_000_000  # fixed, so that packing the same store gives the same bytes


def samples_dir() -> Path:
    """The project's samples/ folder (beside the package in a source checkout)."""
    return Path(__file__).resolve().parents[2] / "samples"


def packed_samples(root: Path | None = None) -> dict[str, Path]:
    """Name -> archive of every packed sample store."""
    root = samples_dir() if root is None else root
    if not root.is_dir():
        return {}
    return {p.parent.name: p for p in sorted(root.glob(f"*/{ARCHIVE_NAME}"))}


def resolve_archive(name: str, root: Path | None = None) -> Path:
    """A sample's archive by name, or an archive path as given."""
    candidate = Path(name)
    if candidate.is_file():
        return candidate
    known = packed_samples(root)
    if name in known:
        return known[name]
    names = ", ".join(known) or "none found"
    raise UsageError(f"NAME: a packed sample store ({names}) or a .tar.xz file, found {name!r}")


def pack(store: Path, archive: Path) -> None:
    """Write ``store``'s files (relative names, sorted, fixed owner and time) to ``archive``."""
    store = Path(store)
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for path in sorted(store.rglob("*")):
            rel = path.relative_to(store).as_posix()
            info = tarfile.TarInfo(rel)
            info.mtime = _MTIME
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if path.is_dir():
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            elif path.is_file():
                info.size = path.stat().st_size
                info.mode = 0o644
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)


def unpack(archive: Path, dest: Path) -> list[Path]:
    """Extract ``archive`` into ``dest`` (new, or an empty directory); returns the files written.

    Members must be plain files and directories inside ``dest``; anything else is refused.
    """
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest}: a new or empty directory to unpack into")
    try:
        tar = tarfile.open(archive, "r:xz")
    except (OSError, tarfile.TarError, EOFError) as exc:
        raise StoreError(archive, None, f"an xz-compressed tar of a store ({exc})") from None
    written = []
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    with tar:
        try:
            for member in tar:
                target = (root / member.name).resolve()
                if root != target and root not in target.parents:
                    raise StoreError(archive, None, f"members inside the store, found {member.name!r}")
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    _write_sparse(tar.extractfile(member), target, member.size)
                    written.append(target)
                else:
                    raise StoreError(archive, None, f"plain files and directories, found {member.name!r}")
        except (OSError, tarfile.TarError, EOFError) as exc:
            raise StoreError(archive, None, f"an xz-compressed tar of a store ({exc})") from None
    return written


def _write_sparse(source: io.BufferedReader, target: Path, size: int) -> None:
    zero = bytes(_BLOCK)
    with open(target, "wb") as out:
        done = 0
        while done < size:
            block = source.read(min(_BLOCK, size - done))
            if not block:
                raise EOFError(f"{target.name} ends early")
            if block == zero[:len(block)]:
                out.seek(len(block), os.SEEK_CUR)  # a hole: reads as zeros
            else:
                out.write(block)
            done += len(block)
        out.truncate(size)
