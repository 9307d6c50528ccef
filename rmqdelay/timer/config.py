"""The timer settings of a broker: what MessageStoreConfig says (broker.conf, else the 5.3.3
defaults) and what the store's own files say.

TimerMessageStore derives: slotsTotal = 7 days of seconds (fixed, whatever the precision),
the wheel = 2 * slotsTotal slots, and the effective roll window = timerRollWindowSlot unless
it is above slotsTotal - 60 or below 2, then slotsTotal - 60.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import (
    DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG,
    DEFAULT_TIMER_CONGEST_NUM_EACH_SLOT,
    DEFAULT_TIMER_MAX_DELAY_SEC,
    DEFAULT_TIMER_PRECISION_MS,
    DEFAULT_TIMER_ROLL_WINDOW_SLOT,
    TIMER_BLANK_SLOTS,
)
from rmqdelay.formats.timerwheel import SLOTS_TOTAL, WHEEL_SLOTS

# The broker.conf keys read here, and their MessageStoreConfig defaults.
INT_SETTINGS = {
    "timerPrecisionMs": DEFAULT_TIMER_PRECISION_MS,
    "timerRollWindowSlot": DEFAULT_TIMER_ROLL_WINDOW_SLOT,
    "timerMaxDelaySec": DEFAULT_TIMER_MAX_DELAY_SEC,
    "timerCongestNumEachSlot": DEFAULT_TIMER_CONGEST_NUM_EACH_SLOT,
    "mappedFileSizeTimerLog": DEFAULT_MAPPED_FILE_SIZE_TIMER_LOG,
}
TEXT_SETTINGS = {"storeType": "default", "timerWheelEnable": "true", "enabledAppendPropCRC": "false"}

FROM_DEFAULT = "default"
FROM_BROKER_CONFIG = "brokerConfig"
FROM_FILES = "storeFiles"


def read_broker_config(path: Path) -> dict[str, str]:
    """A broker.conf (Java properties: ``key=value`` or ``key: value``, # and ! comments)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{path}: a readable broker config ({reason})") from None
    result: dict[str, str] = {}
    for line in lines:
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut > 0:
            result[line[:cut].strip()] = line[cut + 1:].strip()
    return result


@dataclass(slots=True, frozen=True)
class TimerConfig:
    precisionMs: int
    rollWindowSlotConfigured: int
    maxDelaySec: int
    congestNumEachSlot: int
    timerLogFileSize: int
    storeType: str = "default"
    timerWheelEnable: bool = True
    enabledAppendPropCRC: bool = False
    # Where each figure came from: FROM_DEFAULT, FROM_BROKER_CONFIG or FROM_FILES.
    sources: tuple[tuple[str, str], ...] = ()

    @property
    def slotsTotal(self) -> int:
        return SLOTS_TOTAL

    @property
    def wheelSlots(self) -> int:
        return WHEEL_SLOTS

    @property
    def rollWindowSlots(self) -> int:
        """TimerMessageStore.timerRollWindowSlots: the configured window, bounded."""
        slot = self.rollWindowSlotConfigured
        if slot > SLOTS_TOTAL - TIMER_BLANK_SLOTS or slot < 2:
            return SLOTS_TOTAL - TIMER_BLANK_SLOTS
        return slot

    @property
    def rollWindowMs(self) -> int:
        return self.rollWindowSlots * self.precisionMs

    def roll_slot(self, out_ms: int, write_ms: int) -> int | None:
        """doEnqueue's slot for a message due at ``out_ms`` enqueued at write clock
        ``write_ms``: None when it goes to its own slot (within the roll window), else the
        roll slot ("give enough time to next roll": half a window when the rest is short)."""
        window = self.rollWindowMs
        if out_ms - write_ms < window:
            return None
        slots = self.rollWindowSlots
        if out_ms - write_ms - window < slots // 3 * self.precisionMs:
            return write_ms + slots // 2 * self.precisionMs
        return write_ms + window

    @property
    def wheelSpanMs(self) -> int:
        """How far back recovery reaches: slotsTotal slots (7 days at 1 s)."""
        return SLOTS_TOTAL * self.precisionMs

    def source(self, name: str) -> str:
        return dict(self.sources).get(name, FROM_DEFAULT)

    def as_json(self) -> dict:
        return {"timerPrecisionMs": self.precisionMs, "slotsTotal": self.slotsTotal, "wheelSlots": self.wheelSlots,
                "timerRollWindowSlot": self.rollWindowSlotConfigured, "rollWindowSlots": self.rollWindowSlots,
                "timerMaxDelaySec": self.maxDelaySec, "timerCongestNumEachSlot": self.congestNumEachSlot,
                "mappedFileSizeTimerLog": self.timerLogFileSize, "storeType": self.storeType,
                "timerWheelEnable": self.timerWheelEnable, "enabledAppendPropCRC": self.enabledAppendPropCRC,
                "sources": dict(self.sources)}


def timer_config(broker_config: Path | None = None, *, precision_from_files: int | None = None,
                 log_file_size_from_files: int | None = None) -> TimerConfig:
    """The settings: broker.conf first, then what the files show, then the defaults."""
    conf = read_broker_config(broker_config) if broker_config is not None else {}
    values: dict[str, int] = {}
    sources: dict[str, str] = {}
    for key, default in INT_SETTINGS.items():
        if key in conf:
            try:
                values[key] = int(conf[key])
            except ValueError:
                raise UsageError(f"{broker_config}: {key}: an integer, found {conf[key]!r}") from None
            sources[key] = FROM_BROKER_CONFIG
        else:
            values[key] = default
            sources[key] = FROM_DEFAULT
    if "timerPrecisionMs" not in conf and precision_from_files is not None:
        values["timerPrecisionMs"] = precision_from_files
        sources["timerPrecisionMs"] = FROM_FILES
    if "mappedFileSizeTimerLog" not in conf and log_file_size_from_files is not None:
        values["mappedFileSizeTimerLog"] = log_file_size_from_files
        sources["mappedFileSizeTimerLog"] = FROM_FILES
    if values["timerPrecisionMs"] <= 0:
        raise UsageError(f"{broker_config}: timerPrecisionMs: more than 0, found {values['timerPrecisionMs']}")
    text = {key: conf.get(key, default) for key, default in TEXT_SETTINGS.items()}
    return TimerConfig(
        precisionMs=values["timerPrecisionMs"], rollWindowSlotConfigured=values["timerRollWindowSlot"],
        maxDelaySec=values["timerMaxDelaySec"], congestNumEachSlot=values["timerCongestNumEachSlot"],
        timerLogFileSize=values["mappedFileSizeTimerLog"], storeType=text["storeType"],
        timerWheelEnable=text["timerWheelEnable"].lower() == "true",
        enabledAppendPropCRC=text["enabledAppendPropCRC"].lower() == "true",
        sources=tuple(sorted(sources.items())))
