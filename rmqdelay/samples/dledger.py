"""A DLedger store made from a plain one, as a broker switched to ``enableDLegerCommitLog``
would lay it out: for tests and benchmarks of the DLedger log source (never for a broker to
serve; rmqdelay does not write DLedger stores).

The records of the plain commit log from file ``divide_files`` on are laid into DLedger
entries in ``dledger-<selfId>/data/`` (files of the plain log's size, each closed by an end
mark when the next entry does not fit), each record's physicalOffset rewritten to its
entry's pos + 48, every entry's unit written to the index; the first ``divide_files`` files
stay in ``commitlog/`` byte for byte, below ``dividedCommitlogOffset`` (a migrated store:
DLedgerCommitLog.recover starts the data files at the old log's end). The consume queue
units are moved to the records' new offsets; ``config/`` and the checkpoint are copied;
``index/`` is not (its offsets would be the old ones). The checkpoint commits every entry.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path

import numpy as np

from rmqdelay.formats.commitlog import RECORD_HEAD
from rmqdelay.formats.constants import BLANK_MAGIC_CODE
from rmqdelay.formats.consumequeue import decode_units
from rmqdelay.formats.dledger import BODY_OFFSET, END_MARK_MAGIC, ENTRY_HEADER_FAST, ENTRY_MAGIC, INDEX_UNIT_FAST
from rmqdelay.store import Store
from rmqdelay.store.fileio import map_for_read

# DLedgerConfig.mappedFileSizeForEntryIndex (not settable from broker.conf in 4.9.4).
INDEX_FILE_SIZE = 167_772_160
_OFFSET = struct.Struct(">q")
_END_MARK = struct.Struct(">ii")


def convert_to_dledger(plain: Path | str, dest: Path | str, *, divide_files: int = 0, self_id: str = "n0",
                       term: int = 0) -> dict:
    """Write the DLedger store of ``plain`` into ``dest`` (new); returns what it wrote."""
    plain, dest = Path(plain), Path(dest)
    with Store(plain) as store:
        files = list(store.commitlog.files)
    if not files:
        raise ValueError(f"{plain}: no commit log to convert")
    divide_files = max(0, min(divide_files, len(files)))
    file_size = files[0].size
    node = dest / f"dledger-{self_id}"
    (node / "data").mkdir(parents=True)
    (node / "index").mkdir()
    if divide_files:
        (dest / "commitlog").mkdir()
        for f in files[:divide_files]:
            shutil.copyfile(f.path, dest / "commitlog" / f.path.name)
    divided = files[divide_files].start if divide_files < len(files) else files[-1].end
    old_offsets: list[int] = []
    new_offsets: list[int] = []
    index_fd = os.open(node / "index" / f"{0:020d}", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    os.ftruncate(index_fd, INDEX_FILE_SIZE)
    units = bytearray()
    data_start = divided
    data = bytearray(file_size)
    at = 0  # position in the current data file
    entry = 0
    for f in files[divide_files:]:
        view = map_for_read(f.path)
        pos = 0
        while pos + 8 <= len(view):
            total, magic = RECORD_HEAD.unpack_from(view, pos)
            if total == 0 or magic == BLANK_MAGIC_CODE:
                break
            size = total + BODY_OFFSET
            if at + size > file_size:  # MmapFileList.preAppend: the end mark, then the next file
                _END_MARK.pack_into(data, at, END_MARK_MAGIC, file_size - at)
                _write(node / "data" / f"{data_start:020d}", data)
                data_start += file_size
                data = bytearray(file_size)
                at = 0
            entry_pos = data_start + at
            ENTRY_HEADER_FAST.pack_into(data, at, ENTRY_MAGIC, size, entry, term, entry_pos, 0, 0, 0, total)
            data[at + BODY_OFFSET:at + size] = view[pos:pos + total]
            _OFFSET.pack_into(data, at + BODY_OFFSET + 28, entry_pos + BODY_OFFSET)  # PHYSICALOFFSET
            units += INDEX_UNIT_FAST.pack(ENTRY_MAGIC, entry_pos, size, entry, term)
            if len(units) >= 1 << 22:
                os.pwrite(index_fd, units, (entry + 1) * 32 - len(units))
                units.clear()
            old_offsets.append(f.start + pos)
            new_offsets.append(entry_pos + BODY_OFFSET)
            entry += 1
            at += size
            pos += total
        view.release()
    _write(node / "data" / f"{data_start:020d}", data)
    if units:
        os.pwrite(index_fd, units, entry * 32 - len(units))
    os.close(index_fd)
    (node / "checkpoint").write_text(f"committedIndex={entry - 1}\nendIndex={entry - 1}\n")
    (node / "currterm").write_text(f"voteLeader={self_id}\ncurrTerm={term}\n")
    _queues(plain / "consumequeue", dest / "consumequeue", np.asarray(old_offsets, dtype=np.int64),
            np.asarray(new_offsets, dtype=np.int64), divided)
    if (plain / "config").is_dir():
        shutil.copytree(plain / "config", dest / "config")
    if (plain / "checkpoint").is_file():
        shutil.copyfile(plain / "checkpoint", dest / "checkpoint")
    (dest / "broker.conf").write_text(f"enableDLegerCommitLog=true\ndLegerGroup=broker-a\n"
                                      f"dLegerPeers={self_id}-127.0.0.1:40911\ndLegerSelfId={self_id}\n"
                                      f"mappedFileSizeCommitLog={file_size}\n")
    return {"entries": entry, "dividedCommitlogOffset": divided, "committedPosition": data_start + at,
            "oldFiles": divide_files}


def _write(path: Path, data: bytearray) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _queues(src: Path, dst: Path, old: np.ndarray, new: np.ndarray, divided: int) -> None:
    """Every consume queue file with its units moved to the records' new offsets."""
    for root, _, names in os.walk(src):
        out = dst / Path(root).relative_to(src)
        out.mkdir(parents=True, exist_ok=True)
        for name in names:
            raw = (Path(root) / name).read_bytes()
            units = decode_units(raw).copy()
            offsets = units["commitLogOffset"].astype(np.int64)
            moved = (offsets >= divided) & (units["size"] != 0)
            at = np.minimum(np.searchsorted(old, offsets[moved]), max(len(old) - 1, 0))
            if len(old):
                hit = old[at] == offsets[moved]
                shifted = offsets[moved]
                shifted[hit] = new[at[hit]]
                offsets[moved] = shifted
            units["commitLogOffset"] = offsets
            (out / name).write_bytes(units.tobytes() + raw[len(units) * 20:])
