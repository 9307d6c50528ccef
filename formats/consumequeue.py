"""Consume queue units (ConsumeQueue.CQ_STORE_UNIT_SIZE = 20 bytes)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from construct import Int32sb, Int64sb, Struct

from .constants import CQ_PRE_BLANK_SIZE, CQ_STORE_UNIT_SIZE
from .errors import FormatError

CQ_UNIT = Struct(
    "commitLogOffset" / Int64sb,
    "size" / Int32sb,
    "tagsCode" / Int64sb,
)

# The same layout for bulk decoding: millions of units at once.
CQ_UNIT_DTYPE = np.dtype([("commitLogOffset", ">i8"), ("size", ">i4"), ("tagsCode", ">i8")])
assert CQ_UNIT_DTYPE.itemsize == CQ_STORE_UNIT_SIZE

# ConsumeQueueExt.MAX_ADDR: tagsCode at or below it is an address into the ext file.
CQ_EXT_MAX_ADDR = -2147483649  # Integer.MIN_VALUE - 1


@dataclass(slots=True, frozen=True)
class CqUnit:
    commitLogOffset: int
    size: int
    tagsCode: int

    @property
    def is_empty(self) -> bool:
        """All zero: space the queue has not written yet."""
        return self.commitLogOffset == 0 and self.size == 0 and self.tagsCode == 0

    @property
    def is_pre_blank(self) -> bool:
        """A ConsumeQueue.fillPreBlank unit, standing for units that were never there."""
        return self.commitLogOffset == 0 and self.size == CQ_PRE_BLANK_SIZE and self.tagsCode == 0

    @property
    def is_ext_address(self) -> bool:
        return is_ext_address(self.tagsCode)


def is_ext_address(tags_code: int) -> bool:
    """ConsumeQueueExt.isExtAddr."""
    return tags_code <= CQ_EXT_MAX_ADDR


def parse_unit(data: bytes) -> CqUnit:
    if len(data) < CQ_STORE_UNIT_SIZE:
        raise FormatError(0, f"a consume queue unit of {CQ_STORE_UNIT_SIZE} bytes, found {len(data)}")
    parsed = CQ_UNIT.parse(data)
    return CqUnit(parsed.commitLogOffset, parsed.size, parsed.tagsCode)


def build_unit(unit: CqUnit) -> bytes:
    return CQ_UNIT.build(dict(commitLogOffset=unit.commitLogOffset, size=unit.size, tagsCode=unit.tagsCode))


def decode_units(data) -> np.ndarray:
    """The fast path: a whole buffer of units as a structured array."""
    usable = len(data) - len(data) % CQ_STORE_UNIT_SIZE
    return np.frombuffer(data, dtype=CQ_UNIT_DTYPE, count=usable // CQ_STORE_UNIT_SIZE)


def encode_units(units: np.ndarray) -> bytes:
    return units.astype(CQ_UNIT_DTYPE, copy=False).tobytes()
