"""What kind of store a directory is: the 4.x layout, a 5.x one (and which 5.x features it
shows), or a store type rmqdelay does not read.

5.x stores are told by what 5.x writes: the timer store's files, V2 records (topics longer
than 127 bytes), the ``__CRC32#`` property (enabledAppendPropCRC), delayOffset.json's
dataVersion, the checkpoint's masterFlushedOffset / confirmPhyOffset, ``compaction/``.
The timer store's files are known here by name only: what they hold is rmqdelay.timer's to
read (``timer.store.timer_summary`` adds the timer settings and sizes to the features).
Batch consume queues live in ``batchconsumequeue/``: they are not read, and a store holding
them is refused in one line. How the log, queues and configs are laid out (plain, DLedger,
RocksDB) is layout.py's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.commitlog import Message
from rmqdelay.formats.constants import (
    MESSAGE_MAGIC_CODE_V2,
    PROPERTY_CRC32,
    TOPIC_MAX_LENGTH,
)

_CRC_SAMPLE_FILES = 16

# The timer store's files (TimerMessageStore: timerlog/, timerwheel, config/timercheck,
# config/timermetrics).
TIMER_LOG_DIR = "timerlog"
TIMER_WHEEL_FILE = "timerwheel"
TIMER_CHECK_FILE = "timercheck"
TIMER_METRICS_FILE = "timermetrics"
# Where `timer repair --execute` stages its files, and the journal naming its renames: while
# it exists, a repair is half applied (every file whole, old or new).
TIMER_REPAIR_STAGING = ".timer-repair"
TIMER_REPAIR_JOURNAL = "journal.json"


def timer_paths(store_path: Path) -> dict[str, Path]:
    store_path = Path(store_path)
    return {"timerlog": store_path / TIMER_LOG_DIR, "timerwheel": store_path / TIMER_WHEEL_FILE,
            "timercheck": store_path / "config" / TIMER_CHECK_FILE,
            "timermetrics": store_path / "config" / TIMER_METRICS_FILE}


def refuse_half_repaired(store_path: Path) -> None:
    """StoreError when an interrupted `timer repair --execute` left renames to finish: the
    timer files are then a mix of old and new ones, whole each, but not one state."""
    journal = Path(store_path) / TIMER_REPAIR_STAGING / TIMER_REPAIR_JOURNAL
    if journal.exists():
        raise StoreError(journal, None, "no interrupted timer repair; found one with renames left to finish: "
                                        "run `rmqdelay timer repair STORE --execute` to finish it first")


def timer_files_present(store_path: Path) -> list[str]:
    """Which of the timer store's files a store has (none: a 4.x store, or a 5.x broker whose
    timer never started)."""
    return [name for name, path in timer_paths(store_path).items() if path.exists()]


def refuse_unsupported(store_path: Path) -> None:
    """StoreError when the store keeps its consume queues where rmqdelay cannot read them
    (batch consume queues; the RocksDB consume queue is the queue source's to read)."""
    batch = Path(store_path) / "batchconsumequeue"
    try:
        batch_topics = [n for n in os.listdir(batch) if (batch / n).is_dir()]
    except OSError:
        batch_topics = []
    if batch_topics:
        raise StoreError(batch, None, f"no batch consume queues; found {len(batch_topics)} topic(s) "
                                      f"(e.g. {sorted(batch_topics)[0]}) in batch consume queues, which rmqdelay "
                                      f"does not read")


@dataclass(slots=True)
class StoreFeatures:
    version: str  # "4.x" or "5.x"
    signs: list[str] = field(default_factory=list)  # what shows 5.x
    v2Topics: list[str] = field(default_factory=list)  # topics written as V2 records
    propCrc: bool = False  # records carry __CRC32# (enabledAppendPropCRC)
    propCrcSampled: int = 0  # how many records were looked at for it
    timerFiles: list[str] = field(default_factory=list)
    timer: dict | None = None  # precision, wheel and timer log sizes (timer.store.timer_summary)

    def as_json(self) -> dict:
        return {"version": self.version, "signs": list(self.signs), "v2Topics": list(self.v2Topics),
                "propCrc": self.propCrc, "propCrcSampled": self.propCrcSampled,
                "timerFiles": list(self.timerFiles), "timer": self.timer}


def store_features(store) -> StoreFeatures:
    """The 4.x / 5.x features ``store`` (a Store) shows. Reads a few records, never a scan.

    What cannot be read is left out of the signs (whoever reads those files reports them).
    ``timer`` stays None: the timer store's settings are rmqdelay.timer's to read."""
    signs = []
    timer_files = timer_files_present(store.path)
    if timer_files:
        signs.append("timer store files (" + ", ".join(timer_files) + ")")
    v2 = v2_topics(store)
    if v2:
        signs.append(f"V2 records ({len(v2)} topic(s) longer than {TOPIC_MAX_LENGTH} bytes)")
    crc, sampled = _prop_crc(store)
    if crc:
        signs.append("__CRC32# property (enabledAppendPropCRC)")
    offsets = _or_none(store.delay_offsets)
    if offsets is not None and offsets.dataVersion is not None:
        signs.append("delayOffset.json with dataVersion")
    cp = _or_none(store.checkpoint)
    if cp is not None and (cp.masterFlushedOffset or cp.confirmPhyOffset):
        signs.append("checkpoint with masterFlushedOffset/confirmPhyOffset")
    if (store.path / "compaction").is_dir():
        signs.append("compaction/")
    return StoreFeatures("5.x" if signs else "4.x", signs, v2, crc, sampled, timer_files)


def _or_none(read):
    try:
        return read()
    except StoreError:
        return None


def v2_topics(store) -> list[str]:
    """Topics whose names need V2's two-byte length, confirmed by their first record's magic."""
    found = []
    for topic, ids in store.topics().items():
        if len(os.fsencode(topic)) <= TOPIC_MAX_LENGTH:  # a directory name: its bytes, whatever they are
            continue
        for qid in ids:
            cq = store.consume_queue(topic, qid)
            if cq.max_offset <= cq.min_offset:
                continue
            unit = cq.unit(cq.min_offset)
            try:
                msg = store.commitlog.read_message(unit.commitLogOffset, unit.size)
            except StoreError:
                continue  # behind the log's start after retention, or damaged: verify says which
            if msg.magicCode == MESSAGE_MAGIC_CODE_V2:
                found.append(topic)
            break
    return found


def _prop_crc(store) -> tuple[bool, int]:
    """Whether the first record of (up to 16, spread) commit log files carries __CRC32#."""
    files = store.commitlog.files
    step = max(1, len(files) // _CRC_SAMPLE_FILES)
    sampled = 0
    for mf in files[::step][:_CRC_SAMPLE_FILES]:
        try:
            record = store.commitlog.read_record(mf.start)
        except StoreError:
            continue
        if isinstance(record, Message):
            sampled += 1
            if PROPERTY_CRC32 in record.properties:
                return True, sampled
    return False, sampled
