"""How the broker of a store writes its records, so that the one writer writes the same:
the ``__CRC32#`` property (enabledAppendPropCRC, 5.2.0+), message version V2 for topics
longer than 127 characters (autoMessageVersionOnTopicLen, 5.x), and whether the broker is a
5.x one at all (the order it rebuilds a stored message's properties in, long retry topics).

Taken from broker.conf when it names a setting (``--broker-config``), else from the store:
its newest record says whether the broker appends the CRC property; the store's 5.x signs
(timer files, V2 records, the checkpoint's 5.x fields) say 5.x. Never silent:
``notes`` says what was found and where.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import PROPERTY_CRC32
from rmqdelay.store.brokerprops import read_broker_properties
from rmqdelay.store.kind import timer_files_present, v2_topics

_NEWEST_FILES = 4  # commit log files looked at, newest first, for a record that tells


@dataclass(slots=True, frozen=True)
class WriteFormat:
    """What the writer must do for this store's broker."""

    version: str = "4.x"  # "4.x" or "5.x"
    propCrc: bool = False  # append __CRC32# to every record (enabledAppendPropCRC)
    autoMessageVersionOnTopicLen: bool = False  # V2 records for topics longer than 127
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is5x(self) -> bool:
        return self.version == "5.x"

    def as_json(self) -> dict:
        return {"version": self.version, "propCrc": self.propCrc,
                "autoMessageVersionOnTopicLen": self.autoMessageVersionOnTopicLen, "notes": list(self.notes)}


FORMAT_4X = WriteFormat()
FORMAT_5X = WriteFormat("5.x", False, True)


def _signs_5x(store) -> list[str]:
    """What shows a 5.x broker wrote the store (kind.store_features' signs, less the ones that
    need config files read: those are their readers' to report, not the writer's)."""
    signs = []
    timer_files = timer_files_present(store.path)
    if timer_files:
        signs.append("timer store files (" + ", ".join(timer_files) + ")")
    v2 = v2_topics(store)
    if v2:
        signs.append(f"V2 records ({len(v2)} topic(s) longer than 127 bytes)")
    try:
        cp = store.checkpoint()
    except StoreError:
        cp = None
    if cp is not None and (cp.masterFlushedOffset or cp.confirmPhyOffset):
        signs.append("checkpoint with masterFlushedOffset/confirmPhyOffset")
    if (store.path / "compaction").is_dir():
        signs.append("compaction/")
    return signs


def _java_boolean(text: str) -> bool:
    """Boolean.parseBoolean, as MixAll.properties2Object sets a boolean field."""
    return text.strip().lower() == "true"


def _newest_record_crc(store) -> tuple[bool | None, str]:
    """Whether the newest readable record of the commit log (the first record of one of the
    last files) carries __CRC32#; None when no record tells."""
    files = store.commitlog.files
    for mf in reversed(files[-_NEWEST_FILES:]):
        try:
            record = store.commitlog.read_record(mf.start)
        except StoreError:
            continue
        if isinstance(record, Message):
            return PROPERTY_CRC32 in record.properties, mf.path.name
    return None, ""


def detect_write_format(store, broker_config: Path | None = None) -> WriteFormat:
    """The WriteFormat of ``store`` (a Store): broker.conf's settings first, the store's own
    records for what it does not set."""
    props = read_broker_properties(broker_config) if broker_config is not None else {}
    signs = _signs_5x(store)
    notes: list[str] = []
    is5x = bool(signs)
    if is5x:
        notes.append("5.x store (" + "; ".join(signs) + ")")
    if "enabledAppendPropCRC" in props:
        crc = _java_boolean(props["enabledAppendPropCRC"])
        notes.append(f"enabledAppendPropCRC={str(crc).lower()} from {broker_config}")
        is5x = is5x or crc
    else:
        found, where = _newest_record_crc(store)
        crc = bool(found)
        if found is None:
            notes.append("no record tells whether the broker appends __CRC32#: writing without it "
                         "(--broker-config with enabledAppendPropCRC says otherwise)")
        else:
            notes.append(f"records {'carry' if crc else 'do not carry'} __CRC32# (newest file checked: {where}): "
                         f"enabledAppendPropCRC={str(crc).lower()}")
    if "autoMessageVersionOnTopicLen" in props:
        auto_v2 = _java_boolean(props["autoMessageVersionOnTopicLen"])
        notes.append(f"autoMessageVersionOnTopicLen={str(auto_v2).lower()} from {broker_config}")
    else:
        auto_v2 = is5x  # the 5.x default; 4.x has no V2
    return WriteFormat("5.x" if is5x else "4.x", crc, auto_v2, tuple(notes))
