"""Persisting the delay offsets: config/delayOffset.json, and the scheduler's own record of
where in the commit log those offsets are exact (config/rmqdelay.scheduler.json).

Every file is written whole to a temporary file, fsynced, renamed over the old one, and
the directory fsynced; the previous delayOffset.json is kept as ``.bak`` as the broker does
(MixAll.string2File), so a reader never sees half a file and the broker's .bak fallback works.
The two files are published together (durable.publish_files): both temporary files are
written and fsynced before either is renamed, so a full disk publishes neither.

The scheduler file exists because the broker's own scheme loses the last seconds of
progress on a crash (at-least-once). It is renamed into place *before* delayOffset.json:

    {"commitLogOffset": X, "offsetTable": {...}, "previousOffsetTable": {...}, "delayLevels": {...}}

``offsetTable`` is exact at commit log offset X: every delivery appended before X is
counted, none after it. ``previousOffsetTable`` is what delayOffset.json held when the
file was written, so a crash between the two renames is recognised on the next start.
``delayLevels`` is the level table of the run that wrote it (level -> ms), so a later run
with other levels knows it (its replay covers every level of the store either way).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.delayoffset import DataVersion, DelayOffsets, format_delay_offsets
from rmqdelay.formats.javanum import java_long_range, java_parse_int
from rmqdelay.store.durable import FileUpdate, config_dir, fsync_dir, publish_files
from rmqdelay.store.fileio import read_file

DELAY_OFFSET_FILE = "delayOffset.json"
SCHEDULER_STATE_FILE = "rmqdelay.scheduler.json"


@dataclass(slots=True)
class SchedulerState:
    commitLogOffset: int
    offsetTable: dict[int, int]
    previousOffsetTable: dict[int, int] | None  # None: there was no delayOffset.json
    # messageDelayLevel of the run that wrote the file (level -> ms); None in older files.
    delayLevels: dict[int, int] | None = None


def delay_offset_path(store_path: Path | str) -> Path:
    return config_dir(store_path) / DELAY_OFFSET_FILE


def scheduler_state_path(store_path: Path | str) -> Path:
    return config_dir(store_path) / SCHEDULER_STATE_FILE


def _table_json(table: dict[int, int] | None) -> dict[str, int] | None:
    return None if table is None else {str(k): int(table[k]) for k in sorted(table)}


def _table_from_json(value, path: Path, what: str) -> dict[int, int] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise StoreError(path, None, f"an object for {what}")
    table = {java_parse_int(k) if isinstance(k, str) else None: v for k, v in value.items()}
    if None in table or len(table) != len(value) or \
            not all(isinstance(v, int) and not isinstance(v, bool) and java_long_range(v) for v in table.values()):
        raise StoreError(path, None, f"integer levels and offsets in {what}")
    return table


def read_scheduler_state(store_path: Path | str) -> SchedulerState | None:
    path = scheduler_state_path(store_path)
    data = read_file(path)
    if data is None:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StoreError(path, exc.start, "UTF-8 text") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(path, len(text[:exc.pos].encode("utf-8")), f"JSON ({exc.msg})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("commitLogOffset"), int):
        raise StoreError(path, 0, 'an object with an integer "commitLogOffset"')
    table = _table_from_json(doc.get("offsetTable"), path, '"offsetTable"')
    if table is None:
        raise StoreError(path, 0, 'an "offsetTable" object')
    previous = _table_from_json(doc.get("previousOffsetTable"), path, '"previousOffsetTable"')
    levels = _table_from_json(doc.get("delayLevels"), path, '"delayLevels"')
    return SchedulerState(doc["commitLogOffset"], table, previous, levels)


def _scheduler_state_update(store_path: Path | str, state: SchedulerState) -> FileUpdate:
    doc = {
        "commitLogOffset": state.commitLogOffset,
        "offsetTable": _table_json(state.offsetTable),
        "previousOffsetTable": _table_json(state.previousOffsetTable),
    }
    if state.delayLevels is not None:
        doc["delayLevels"] = _table_json(state.delayLevels)
    return FileUpdate(scheduler_state_path(store_path), (json.dumps(doc, indent=1) + "\n").encode())


def write_scheduler_state(store_path: Path | str, state: SchedulerState) -> None:
    publish_files([_scheduler_state_update(store_path, state)])


def remove_scheduler_state(store_path: Path | str) -> None:
    path = scheduler_state_path(store_path)
    if path.exists():
        path.unlink()
        fsync_dir(path.parent)


def next_data_version(current: DataVersion | None, now_ms: int | None = None) -> DataVersion | None:
    """DataVersion.nextVersion (5.x): counter + 1, a new timestamp. The 4.x form has none."""
    if current is None:
        return None
    stamp = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    return DataVersion(current.counter + 1, current.stateVersion, stamp)


def _delay_offsets_update(store_path: Path | str, table: dict[int, int],
                          data_version: DataVersion | None) -> FileUpdate:
    text = format_delay_offsets(DelayOffsets(dict(table), data_version))
    return FileUpdate(delay_offset_path(store_path), text.encode("utf-8"), keep_bak=True)


def write_delay_offsets(store_path: Path | str, table: dict[int, int],
                        data_version: DataVersion | None = None) -> None:
    """delayOffset.json exactly as the broker formats it; ``.bak`` keeps the previous one."""
    publish_files([_delay_offsets_update(store_path, table, data_version)])


class OffsetPublisher:
    """Publishes offsets in the order that makes a crash recoverable: the scheduler file
    (exact at a commit log offset), then delayOffset.json. Both are written to temporary
    files and fsynced before either is renamed, so a failure (a full disk) publishes
    neither. The caller flushes the commit log and the queues first: write, flush, then
    publish. ``delay_levels`` is recorded with the offsets: the table a later run's replay
    compares its own with."""

    def __init__(self, store_path: Path | str, published: dict[int, int] | None,
                 data_version: DataVersion | None, delay_levels: dict[int, int] | None = None,
                 version_step: int | None = None) -> None:
        self.store_path = Path(store_path)
        self.published = None if published is None else dict(published)
        self.data_version = data_version
        self.delay_levels = None if delay_levels is None else dict(delay_levels)
        # 5.x ScheduleMessageService.updateOffset: dataVersion.nextVersion once every
        # delayOffsetUpdateVersionStep (200) calls; None: once per changed table.
        self.version_step = version_step
        self._bumps = 0

    def _next_version(self, updates: int) -> DataVersion | None:
        if self.version_step is None or self.data_version is None:
            return next_data_version(self.data_version)
        bumps = updates // self.version_step - self._bumps
        if bumps <= 0:
            return self.data_version
        self._bumps += bumps
        current = self.data_version
        return DataVersion(current.counter + bumps, current.stateVersion, time.time_ns() // 1_000_000)

    def publish(self, commit_log_offset: int, table: dict[int, int], updates: int = 0) -> None:
        """``updates``: the broker's updateOffset calls this run stands for (one per message
        delivered or skipped), which move dataVersion with ``version_step``."""
        table = dict(table)
        updates_files = [_scheduler_state_update(self.store_path, SchedulerState(
            commit_log_offset, table, self.published, self.delay_levels))]
        version = self.data_version
        if table != self.published or not delay_offset_path(self.store_path).exists():
            version = self._next_version(updates)
            updates_files.append(_delay_offsets_update(self.store_path, table, version))
        updates = updates_files
        publish_files(updates)
        self.data_version = version
        self.published = table
