"""DLedger's files (io.openmessaging.storage:dledger 0.2.6, DLedgerMmapFileStore): the data
entry that wraps each commit log record, the index unit that finds an entry by its index,
the end mark closing a data file, and the text checkpoint and term files.

Every integer is big-endian (DLedgerEntryCoder). An entry is a 48-byte header and its body,
which in a broker's store is exactly one commit log message record; the record's
physicalOffset is the entry's pos + 48 (DLedgerCommitLog's append hook writes it).

Pure: bytes in, records out, no file I/O.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from construct import Int32sb, Int64sb, Struct

from .errors import FormatError

# DLedgerMmapFileStore.CURRENT_MAGIC (MAGIC_1): the first int of every entry and index unit.
ENTRY_MAGIC = 1
# MmapFileList.BLANK_MAGIC_CODE: the end mark preAppend writes when the next entry does not fit.
END_MARK_MAGIC = -1
# DLedgerEntry.BODY_OFFSET / HEADER_SIZE (the header but its bodyLen) / POS_OFFSET.
BODY_OFFSET = 48
HEADER_SIZE = 44
POS_OFFSET = 24
# DLedgerMmapFileStore.INDEX_UNIT_SIZE: the unit of entry i is at byte i * 32 of the index.
INDEX_UNIT_SIZE = 32

# DLedgerEntryCoder.encode: the header before the body.
ENTRY_HEADER = Struct(
    "magic" / Int32sb,
    "size" / Int32sb,  # the whole entry: 48 + bodyLen
    "index" / Int64sb,
    "term" / Int64sb,
    "pos" / Int64sb,  # the entry's absolute offset in the data files
    "channel" / Int32sb,
    "chainCrc" / Int32sb,  # 0: 0.2.6 does not fill it
    "bodyCrc" / Int32sb,  # 0: 0.2.6 does not fill it
    "bodyLen" / Int32sb,
)
# DLedgerEntryCoder.encodeIndex.
INDEX_UNIT = Struct(
    "magic" / Int32sb,
    "pos" / Int64sb,
    "size" / Int32sb,
    "index" / Int64sb,
    "term" / Int64sb,
)
# MmapFileList.preAppend: magic first, then the bytes left in the file, then zeros.
END_MARK = Struct("magic" / Int32sb, "size" / Int32sb)

# The same layouts for the hot paths (a test holds them to the constructs).
ENTRY_HEADER_FAST = struct.Struct(">iiqqqiiii")
INDEX_UNIT_FAST = struct.Struct(">iqiqq")


@dataclass(slots=True, frozen=True)
class EntryHeader:
    magic: int
    size: int
    index: int
    term: int
    pos: int
    channel: int
    chainCrc: int
    bodyCrc: int
    bodyLen: int

    @property
    def end(self) -> int:
        return self.pos + self.size


@dataclass(slots=True, frozen=True)
class IndexUnit:
    magic: int
    pos: int
    size: int
    index: int
    term: int


def decode_entry_header(buf, pos: int) -> EntryHeader:
    """The header of the entry at ``pos`` of ``buf`` (its fields as stored, unchecked)."""
    if pos + BODY_OFFSET > len(buf):
        raise FormatError(pos, f"a DLedger entry header of {BODY_OFFSET} bytes, found {len(buf) - pos}")
    return EntryHeader(*ENTRY_HEADER_FAST.unpack_from(buf, pos))


def decode_index_unit(buf, pos: int) -> IndexUnit:
    if pos + INDEX_UNIT_SIZE > len(buf):
        raise FormatError(pos, f"a DLedger index unit of {INDEX_UNIT_SIZE} bytes, found {len(buf) - pos}")
    return IndexUnit(*INDEX_UNIT_FAST.unpack_from(buf, pos))


def encode_entry_header(header: EntryHeader) -> bytes:
    return ENTRY_HEADER_FAST.pack(header.magic, header.size, header.index, header.term, header.pos,
                                  header.channel, header.chainCrc, header.bodyCrc, header.bodyLen)


def encode_index_unit(unit: IndexUnit) -> bytes:
    return INDEX_UNIT_FAST.pack(unit.magic, unit.pos, unit.size, unit.index, unit.term)


def entry_problem(header: EntryHeader, at: int, limit: int) -> str | None:
    """What is wrong with the header of an entry found at absolute offset ``at`` whose file
    has ``limit`` bytes left from it (DLedgerMmapFileStore.recover's checks), or None."""
    if header.magic != ENTRY_MAGIC:
        return f"a DLedger entry (magic {ENTRY_MAGIC}) or end mark (magic {END_MARK_MAGIC}), found magic {header.magic}"
    if header.size != header.bodyLen + BODY_OFFSET or header.bodyLen <= 0:
        return f"an entry size of {BODY_OFFSET} + bodyLen {header.bodyLen}, found {header.size}"
    if header.size > limit:
        return f"an entry of {header.size} bytes within the file ({limit} bytes left)"
    if header.pos != at:
        return f"the entry's pos {at} (where it is), found {header.pos}"
    return None


def parse_properties_text(text: str) -> dict[str, str]:
    """``key=value`` lines as IOUtils.string2Properties (java.util.Properties) reads the short
    files DLedger writes: ``checkpoint`` (committedIndex, endIndex) and ``currterm``
    (currTerm, voteLeader). Comments (# !) and blank lines are skipped; a later key wins."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not line or line[0] in "#!":
            continue
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key = line[:i].replace("\\", "")
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        result[key] = rest.rstrip()
    return result


@dataclass(slots=True, frozen=True)
class Checkpoint:
    """dledger-<selfId>/checkpoint: what persistCheckPoint wrote (-1 or None: not there)."""

    committedIndex: int | None
    endIndex: int | None


def parse_checkpoint(text: str) -> Checkpoint:
    props = parse_properties_text(text)
    return Checkpoint(_long(props, "committedIndex"), _long(props, "endIndex"))


def _long(props: dict[str, str], key: str) -> int | None:
    value = props.get(key, "").strip()
    if not value:
        return None
    try:
        return int(value, 10)
    except ValueError:
        raise FormatError(0, f"{key}: an integer, found {value!r}") from None


@dataclass(slots=True, frozen=True)
class Term:
    """dledger-<selfId>/currterm: the node's term and whom it voted for ("" when nobody)."""

    currTerm: int | None
    voteLeader: str | None


def parse_currterm(text: str) -> Term:
    props = parse_properties_text(text)
    return Term(_long(props, "currTerm"), props.get("voteLeader"))
