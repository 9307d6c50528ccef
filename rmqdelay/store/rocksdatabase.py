"""A broker's RocksDB database, read from a private snapshot and never from where it lies.

RocksDB (through any binding) writes into every database it opens, even read-only ones
(rocksdict writes ``rocksdict-config.json``, RocksDB may start a LOG), and a live broker
keeps changing its own. So ``RocksDatabase`` copies the directory into a temporary one first
and opens that: the SST files, which RocksDB never changes once written, as hard links where
the file system allows (else copies), the rest (CURRENT, MANIFEST, OPTIONS, IDENTITY, the
WAL) as copies. The WAL is copied first and the SSTs last, so that a flush or compaction of
a live broker in between leaves a snapshot that is whole or one that fails to open (then it
is taken again). The snapshot is removed on ``close`` (or when the object goes).

The library is ``rocksdict`` (the ``rocksdb`` extra); a store that needs it without it, or a
database it cannot read, is one line.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.errors import StoreError

_SNAPSHOT_TRIES = 3
_OPTIONS_FILE = re.compile(r"OPTIONS-(\d+)$")
_CF_SECTION = re.compile(r'\[CFOptions "(.*)"\]')


def _rocksdict():
    try:
        import rocksdict
    except ImportError:
        return None
    return rocksdict


@dataclass(slots=True)
class DatabaseFacts:
    """What `inspect store` says of one database: read from its files, without opening it."""
    path: Path
    rocksdb_version: str | None  # from the newest OPTIONS file: the RocksDB that wrote it
    column_families: list[str]
    files: dict[str, int] = field(default_factory=dict)  # name -> bytes

    def as_json(self, root: Path | None = None) -> dict:
        path = self.path.relative_to(root) if root is not None and self.path.is_relative_to(root) else self.path
        return {"directory": path.as_posix(), "rocksdbVersion": self.rocksdb_version,
                "columnFamilies": self.column_families,
                "sstFiles": sum(1 for n in self.files if n.endswith(".sst")),
                "bytes": sum(self.files.values())}


def database_facts(path: Path) -> DatabaseFacts:
    """The version of RocksDB and the column families named in the newest OPTIONS file."""
    files: dict[str, int] = {}
    try:
        for entry in os.scandir(path):
            if entry.is_file(follow_symlinks=False):
                files[entry.name] = entry.stat().st_size
    except OSError as exc:
        raise StoreError(path, None, f"a readable RocksDB database directory ({exc.strerror})") from None
    options = sorted((int(m.group(1)), n) for n in files if (m := _OPTIONS_FILE.match(n)))
    version, families = None, []
    if options:
        try:
            text = (path / options[-1][1]).read_text("utf-8", errors="replace")
        except OSError as exc:
            raise StoreError(path / options[-1][1], None, f"a readable OPTIONS file ({exc.strerror})") from None
        for line in text.splitlines():
            line = line.strip()
            if line.startswith("rocksdb_version="):
                version = line.split("=", 1)[1]
            elif m := _CF_SECTION.fullmatch(line):
                families.append(m.group(1))
    return DatabaseFacts(path, version, families, dict(sorted(files.items())))


def _snapshot_files(source: Path, target: Path) -> None:
    """The database at ``source`` into the empty directory ``target``: WAL first, then the
    small files, then the SSTs (linked where possible)."""
    names = sorted(os.listdir(source))

    def order(name: str) -> int:
        if name.endswith(".log"):
            return 0
        if name.endswith(".sst"):
            return 2
        return 1

    for name in sorted(names, key=order):
        if name == "LOCK" or name.startswith("LOG") or name == "rocksdict-config.json":
            continue  # the live instance's lock and info logs; the binding's own file
        src, dst = source / name, target / name
        if not src.is_file():
            continue
        if name.endswith(".sst"):
            try:
                os.link(src, dst)
                continue
            except FileNotFoundError:
                continue  # compacted away meanwhile: the open says whether it was still needed
            except OSError:
                pass  # another file system, or no links here: a copy
        try:
            shutil.copyfile(src, dst)
        except FileNotFoundError:
            continue
    (target / "LOCK").touch()


class RocksDatabase:
    """One RocksDB database of the store, opened read-only from a private snapshot."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp: str | None = None
        self._db = None
        self._families: dict[str, object] = {}
        self._cleanup = None

    # -- opening ------------------------------------------------------------------------
    def _open(self):
        if self._db is not None:
            return self._db
        rocksdict = _rocksdict()
        if rocksdict is None:
            raise StoreError(self.path, None, "a RocksDB database that rmqdelay reads with rocksdict, which is not "
                                              "installed: pip install 'rmqdelay[rocksdb]'")
        if not (self.path / "CURRENT").is_file():
            raise StoreError(self.path, None, "a RocksDB database (its CURRENT file is missing)")
        last_error = None
        for _ in range(_SNAPSHOT_TRIES):
            tmp = tempfile.mkdtemp(prefix="rmqdelay-rocksdb-")
            self._cleanup = weakref.finalize(self, shutil.rmtree, tmp, True)
            try:
                _snapshot_files(self.path, Path(tmp))
                families = rocksdict.Rdict.list_cf(tmp)
                raw = rocksdict.Options(raw_mode=True)
                db = rocksdict.Rdict(tmp, raw, column_families={n: rocksdict.Options(raw_mode=True)
                                                                  for n in families if n != "default"},
                                     access_type=rocksdict.AccessType.read_only())
            except OSError as exc:
                self._cleanup()
                raise StoreError(self.path, None, f"a readable RocksDB database ({exc.strerror})") from None
            except Exception as exc:  # the binding's own errors: corruption, a newer format, ...
                self._cleanup()
                last_error = exc
                continue
            self._tmp, self._db = tmp, db
            self._families = {n: (db if n == "default" else db.get_column_family(n)) for n in families}
            return db
        message = str(last_error).splitlines()[0] if str(last_error) else type(last_error).__name__
        raise StoreError(self.path, None, f"a RocksDB database that RocksDB 8 (rocksdict) reads; it says: {message}")

    def column_families(self) -> list[str]:
        self._open()
        return list(self._families)

    def family(self, name: str):
        """The column family ``name`` (None when the database has none of that name)."""
        self._open()
        return self._families.get(name)

    def read_options(self, lower: bytes | None = None, upper: bytes | None = None):
        rocksdict = _rocksdict()
        opts = rocksdict.ReadOptions()
        if lower is not None:
            opts.set_iterate_lower_bound(lower)
        if upper is not None:
            opts.set_iterate_upper_bound(upper)
        return opts

    def items(self, family: str = "default", start: bytes | None = None,
              stop: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of ``family`` in key order, from ``start`` up to ``stop`` (excluded)."""
        cf = self.family(family)
        if cf is None:
            return iter(())
        return iter(cf.items(from_key=start, read_opt=self.read_options(start, stop)))

    def values(self, family: str, start: bytes, stop: bytes) -> list[bytes]:
        cf = self.family(family)
        if cf is None:
            return []
        return list(cf.values(from_key=start, read_opt=self.read_options(start, stop)))

    def keys(self, family: str, start: bytes, stop: bytes) -> list[bytes]:
        cf = self.family(family)
        if cf is None:
            return []
        return list(cf.keys(from_key=start, read_opt=self.read_options(start, stop)))

    def get(self, family: str, key: bytes) -> bytes | None:
        cf = self.family(family)
        return None if cf is None else cf.get(key)

    def seek(self, family: str, key: bytes | None) -> tuple[bytes, bytes] | None:
        """The first (key, value) at or after ``key`` (None past the end)."""
        cf = self.family(family)
        if cf is None:
            return None
        it = cf.iter(self.read_options())
        if key is None:
            it.seek_to_first()
        else:
            it.seek(key)
        return (it.key(), it.value()) if it.valid() else None

    def close(self) -> None:
        if self._db is not None:
            try:
                self._db.close()
            except Exception:
                pass
            self._db = None
            self._families = {}
        if self._cleanup is not None:
            self._cleanup()
            self._cleanup = None
        self._tmp = None
