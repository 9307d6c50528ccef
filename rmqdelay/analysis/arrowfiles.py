"""Files of Arrow data (Parquet output, spill files) opened by their paths' bytes.

pyarrow takes a ``str`` path as UTF-8 only, so a directory whose name is not UTF-8 (Python
holds its bytes as surrogate escapes) would fail there; a path given as bytes reaches the file
system as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def arrow_file(path: Path | str, mode: str) -> pa.NativeFile:
    """``path`` opened for Arrow to read (``"rb"``) or write (``"wb"``)."""
    return pa.OSFile(os.fsencode(path), mode)


def write_parquet(table: pa.Table, path: Path | str) -> None:
    with arrow_file(path, "wb") as sink:
        pq.write_table(table, sink)


def read_parquet(path: Path | str, columns: list[str] | None = None) -> pa.Table:
    """One Parquet file, or a directory of parts (as Spark's writer leaves them: its paths are
    UTF-8, as Spark takes no other)."""
    if os.path.isdir(path):
        return pq.read_table(os.fsdecode(path), columns=columns)
    with arrow_file(path, "rb") as source:
        return pq.read_table(source, columns=columns)


class ParquetParts:
    """A Parquet file written table by table; ``close`` finishes it."""

    def __init__(self, path: Path | str, schema: pa.Schema) -> None:
        self._sink = arrow_file(path, "wb")
        try:
            self._writer = pq.ParquetWriter(self._sink, schema)
        except BaseException:
            self._sink.close()
            raise

    def write_table(self, table: pa.Table) -> None:
        self._writer.write_table(table)

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._sink.close()
