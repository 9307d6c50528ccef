"""What the broker's retention (CleanCommitLogService, 4.9.4 and 5.3.3) will delete, and when,
and what lives in those files before it is read or due.

The broker's rule, run every 10 s: when the hour of its clock is one of ``deleteWhen`` (``"04"``,
or ``"04;05"``), or the commit log's disk is fuller than ``diskMaxUsedSpaceRatio`` % (75; 10..95),
it deletes, oldest first, every commit log file but the last whose last-modified time is
``fileReservedTime`` hours (72) or more ago, stopping at the first one that is not (no file
goes before an older one); from 85 % full (diskSpaceCleanForciblyRatio) it deletes them
whatever their age. A file's last-modified time is its mtime, as the broker reads it (a copy
of the store that did not keep mtimes changes them); the hour is this machine's local time.

What goes with a file: messages a consumer group has not consumed yet (its committed offset
against its queues; the DLQ aside), delay-level messages still waiting in SCHEDULE_TOPIC_XXXX
whose deliver time is after the file's deletion, and 5.x timer messages whose slot time is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np

from rmqdelay.errors import StoreError
from rmqdelay.store import Store

DEFAULTS = {"fileReservedTime": 72, "deleteWhen": "04", "diskMaxUsedSpaceRatio": 75}
CLEAN_FORCIBLY_RATIO = 0.85  # rocketmq.broker.diskSpaceCleanForciblyRatio
HOUR_MS = 3_600_000


@dataclass(slots=True)
class RetentionSettings:
    fileReservedTime: int = 72  # hours
    deleteWhen: str = "04"
    diskMaxUsedSpaceRatio: int = 75  # percent
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def hours(self) -> set[int]:
        out = set()
        for part in self.deleteWhen.split(";"):
            try:
                out.add(int(part.strip()))
            except ValueError:
                continue  # UtilAll.isItTimeToDo skips what is not a number too
        return out

    @property
    def ratio(self) -> float:
        return min(max(self.diskMaxUsedSpaceRatio, 10), 95) / 100.0

    def as_json(self) -> dict:
        return {"fileReservedTime": self.fileReservedTime, "deleteWhen": self.deleteWhen,
                "diskMaxUsedSpaceRatio": self.diskMaxUsedSpaceRatio, "sources": dict(self.sources)}


def retention_settings(broker_config: Path | None) -> RetentionSettings:
    """From broker.conf where it sets them, else the broker's defaults."""
    props = {}
    if broker_config is not None:
        from rmqdelay.store.brokerprops import read_broker_properties

        props = read_broker_properties(broker_config)
    s = RetentionSettings()
    for name, default in DEFAULTS.items():
        raw = props.get(name)
        value = default
        if raw is not None:
            value = raw.strip() if name == "deleteWhen" else _int(raw, name, broker_config)
        setattr(s, name, value)
        s.sources[name] = "brokerConfig" if raw is not None else "default"
    return s


def _int(text: str, name: str, path) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise StoreError(Path(path), None, f"an integer {name}, found {text!r}") from None


def disk_used_ratio(path: Path) -> float | None:
    """UtilAll.getDiskPartitionSpaceUsedPercent: (total - free) / total of the partition."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    total = st.f_blocks * st.f_frsize
    if total <= 0:
        return None
    return (total - st.f_bfree * st.f_frsize) / total


def next_delete_hour(at_ms: int, hours: set[int]) -> int | None:
    """The first instant at or after ``at_ms`` whose local hour is one of ``hours``."""
    if not hours:
        return None
    t = datetime.fromtimestamp(at_ms / 1000).astimezone()
    if t.hour in hours:
        return at_ms
    start = t.replace(minute=0, second=0, microsecond=0)
    for n in range(1, 49):
        cand = start + timedelta(hours=n)
        if cand.hour in hours:
            return int(cand.timestamp() * 1000)
    return None


@dataclass(slots=True)
class FileFate:
    file: str
    start: int
    end: int
    lastModifiedTimestamp: int
    expireTimestamp: int
    deleteTimestamp: int | None  # None: the last file, never deleted while it is
    why: str  # deleteWhen | diskFull | forcibly | current

    def as_json(self) -> dict:
        return {"file": self.file, "lastModifiedTimestamp": self.lastModifiedTimestamp,
                "expireTimestamp": self.expireTimestamp, "deleteTimestamp": self.deleteTimestamp, "why": self.why}


def file_fates(store: Store, settings: RetentionSettings, now_ms: int, used: float | None) -> list[FileFate]:
    files = store.commitlog.files
    out = []
    before = None
    full = used is not None and used > settings.ratio
    forcibly = used is not None and used > CLEAN_FORCIBLY_RATIO
    for i, f in enumerate(files):
        try:
            mtime = int(os.stat(f.path).st_mtime * 1000)
        except OSError:
            mtime = now_ms
        expire = mtime + settings.fileReservedTime * HOUR_MS
        if i == len(files) - 1:
            out.append(FileFate(f.path.name, f.start, f.end, mtime, expire, None, "current"))
            continue
        if forcibly:
            when, why = now_ms, "forcibly"
        elif full:
            when, why = max(expire, now_ms), "diskFull"
        else:
            when, why = next_delete_hour(max(expire, now_ms), settings.hours), "deleteWhen"
        if when is not None and before is not None:
            when = max(when, before)  # no file goes before an older one
        before = when if when is not None else before
        out.append(FileFate(f.path.name, f.start, f.end, mtime, expire, when, why))
    return out


@dataclass(slots=True)
class AtRisk:
    """Messages that live in files retention deletes before they are read (or due)."""

    what: str  # a group's name, or "delay" / "timer"
    messages: int
    firstDeleteTimestamp: int | None

    def as_json(self, key: str) -> dict:
        return {key: self.what, "messages": self.messages, "firstDeleteTimestamp": self.firstDeleteTimestamp}


class _Deaths:
    """When each physical offset's file is deleted (None: never)."""

    def __init__(self, fates: list[FileFate]) -> None:
        self.starts = np.array([f.start for f in fates], dtype=np.int64)
        big = np.iinfo(np.int64).max
        self.when = np.array([big if f.deleteTimestamp is None else f.deleteTimestamp for f in fates], dtype=np.int64)

    def of(self, offsets: np.ndarray) -> np.ndarray:
        if not len(self.starts):
            return np.zeros(len(offsets), dtype=np.int64)
        i = np.clip(np.searchsorted(self.starts, offsets, side="right") - 1, 0, len(self.starts) - 1)
        return self.when[i]


def _risk(what: str, deaths: np.ndarray, mask: np.ndarray) -> AtRisk:
    hit = deaths[mask]
    return AtRisk(what, int(len(hit)), int(hit.min()) if len(hit) else None)


def consumers_at_risk(store: Store, fates: list[FileFate], now_ms: int) -> list[AtRisk]:
    """Per group: its messages not consumed yet (topic and %RETRY% queues) in files retention deletes."""
    from rmqdelay.store.consumers import consumer_lag, read_consumer_offsets

    never = np.iinfo(np.int64).max
    deaths = _Deaths(fates)
    per: dict[str, list[np.ndarray]] = {}
    for row in consumer_lag(store, read_consumer_offsets(store), now_ms):
        if row.kind == "dlq":
            continue
        per.setdefault(row.group, [])
        if not row.lag:
            continue
        cq = store.consume_queue(row.topic, row.queueId)
        units = cq.units(row.maxOffset - row.lag, row.maxOffset)
        per[row.group].append(deaths.of(units["commitLogOffset"].astype(np.int64)))
    out = []
    for group, parts in per.items():
        d = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
        out.append(_risk(group, d, d != never))
    return out


def delay_at_risk(store: Store, fates: list[FileFate]) -> AtRisk:
    """Delay-level messages waiting whose file is deleted before their deliver time."""
    from rmqdelay.schedule.replay import exact_offsets
    from rmqdelay.store.levels import parse_delay_levels

    deaths = _Deaths(fates)
    parts, due = [], []
    try:
        recovery = exact_offsets(store, parse_delay_levels())
    except StoreError:
        return AtRisk("delay", 0, None)
    for level, offset in recovery.offsets.items():
        try:
            cq = store.schedule_queue(level)
        except StoreError:
            continue
        units = cq.units(offset, cq.max_offset)
        if len(units):
            parts.append(deaths.of(units["commitLogOffset"].astype(np.int64)))
            due.append(units["tagsCode"].astype(np.int64))
    if not parts:
        return AtRisk("delay", 0, None)
    d, t = np.concatenate(parts), np.concatenate(due)
    return _risk("delay", d, d < t)


def timer_at_risk(store: Store, fates: list[FileFate], broker_config: Path | None) -> AtRisk | None:
    """5.x timer messages waiting whose parked record's file is deleted before their slot time."""
    from rmqdelay.store.kind import timer_files_present

    if not timer_files_present(store.path):
        return None
    from rmqdelay.formats.constants import TIMER_MAGIC_DELETE
    from rmqdelay.timer.store import TimerStore

    deaths = _Deaths(fates)
    parts, due = [], []
    try:
        with TimerStore(store, broker_config) as ts:
            cp = ts.checkpoint()
            read_ms = cp.lastReadTimeMs if cp is not None else 0
            for _, part in ts.log.iter_columns():
                slot = part.column("currWriteTime").astype(np.int64) + part.column("delayedTime").astype(np.int64)
                live = (slot >= read_ms) & ((part.column("magic") & TIMER_MAGIC_DELETE) == 0)
                parts.append(deaths.of(part.column("offsetPy").astype(np.int64)[live]))
                due.append(slot[live])
    except StoreError:
        return None
    if not parts:
        return AtRisk("timer", 0, None)
    d, t = np.concatenate(parts), np.concatenate(due)
    return _risk("timer", d, d < t)


def retention(store: Store, broker_config: Path | None, now_ms: int) -> dict:
    """`inspect store`'s ``retention`` object."""
    settings = retention_settings(broker_config)
    used = disk_used_ratio(store.path / "commitlog")
    fates = file_fates(store, settings, now_ms, used)
    groups = consumers_at_risk(store, fates, now_ms)
    delay = delay_at_risk(store, fates)
    timer = timer_at_risk(store, fates, broker_config)
    return {"settings": settings.as_json(), "diskUsedRatio": None if used is None else round(used, 4),
            "files": [f.as_json() for f in fates],
            "consumers": [g.as_json("group") for g in groups],
            "delay": delay.as_json("kind"), "timer": None if timer is None else timer.as_json("kind")}
