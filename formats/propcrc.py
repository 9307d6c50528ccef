"""The ``__CRC32#`` property a 5.x broker appends with ``enabledAppendPropCRC`` (5.2.0+).

CommitLog's encoder reserves ``CRC32_RESERVED_LEN`` = 20 bytes at the very end of the record's
properties: ``__CRC32#`` 0x01, ten ASCII digits, 0x02 (a 0x02 is added before it when the
properties do not already end with one). After the queue offset, physical offset and store
timestamp are filled in, it computes UtilAll.crc32 (CRC-32 with the sign bit masked off) over
the whole record but those 20 bytes, and MessageDecoder.createCrc32 writes the digits least
significant first, padded with '0' to ten. The broker checks it only with
``forceVerifyPropCRC``; a writer into such a store must compute it for every record it writes.
"""

from __future__ import annotations

import zlib

from .constants import NAME_VALUE_SEPARATOR, PROPERTY_CRC32, PROPERTY_SEPARATOR

CRC32_RESERVED_LEN = len(PROPERTY_CRC32) + 1 + 10 + 1  # CommitLog.CRC32_RESERVED_LEN
_PREFIX = (PROPERTY_CRC32 + NAME_VALUE_SEPARATOR).encode("ascii")


def record_crc(record: bytes) -> int:
    """UtilAll.crc32 over a whole record but its last 20 bytes (the reserved CRC property)."""
    return zlib.crc32(memoryview(record)[:len(record) - CRC32_RESERVED_LEN]) & 0x7FFFFFFF


def crc_digits(crc: int) -> str:
    """MessageDecoder.createCrc32's ten digits: the CRC in decimal, least significant first."""
    digits = []
    for _ in range(10):
        digits.append(str(crc % 10) if crc > 0 else "0")
        crc //= 10
    return "".join(digits)


def crc_from_digits(text: str) -> int:
    """CommitLog.checkMessageAndReturnSize's reading of the digits back (last digit most
    significant). Characters other than digits count as Java's ``c - '0'`` does."""
    value = 0
    for ch in reversed(text):
        value = (value * 10 + (ord(ch) - ord("0"))) & 0xFFFFFFFF
    return value - 2**32 if value & 0x80000000 else value


def crc_property(crc: int) -> bytes:
    """The 20 bytes the broker writes at the end of the properties."""
    return _PREFIX + crc_digits(crc).encode("ascii") + PROPERTY_SEPARATOR.encode("ascii")


def reserved_properties(properties: str) -> str:
    """The properties text a broker with enabledAppendPropCRC stores before the CRC is known:
    a 0x02 added when missing, then 20 reserved bytes (filled by ``seal_record``)."""
    text = properties
    if text and not text.endswith(PROPERTY_SEPARATOR):
        text += PROPERTY_SEPARATOR
    return text + _PREFIX.decode("ascii") + "0" * 10 + PROPERTY_SEPARATOR


def seal_record(record: bytes) -> bytes:
    """A record whose properties end with the reserved CRC property, with its digits filled in
    from the rest of the record (call after every other field is final)."""
    return record[:len(record) - CRC32_RESERVED_LEN] + crc_property(record_crc(record))


def check_record(record: bytes, properties: dict[str, str]) -> tuple[int, int] | None:
    """(stored CRC, computed CRC) of a record that carries ``__CRC32#``; None when it has none.
    They differ when the record changed after the broker sealed it."""
    text = properties.get(PROPERTY_CRC32)
    if text is None:
        return None
    return crc_from_digits(text), record_crc(record)
