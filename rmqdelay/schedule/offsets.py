"""Persisting the delay offsets: config/delayOffset.json, and the scheduler's own record of
where in the commit log those offsets are exact (config/rmqdelay.scheduler.json).

Every file is written whole to a temporary file, fsynced, renamed over the old one, and
the directory fsynced; the previous delayOffset.json is kept as ``.bak`` as the broker does
(MixAll.string2File), so a reader never sees half a file and the broker's .bak fallback works.

The scheduler file exists because the broker's own scheme loses the last seconds of
progress on a crash (at-least-once). It is written *before* delayOffset.json:

    {"commitLogOffset": X, "offsetTable": {...}, "previousOffsetTable": {...}}

``offsetTable`` is exact at commit log offset X: every delivery appended before X is
counted, none after it. ``previousOffsetTable`` is what delayOffset.json held when the
file was written, so a crash between the two renames is recognised on the next start.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rmqdelay.errors import StoreError
from rmqdelay.formats.delayoffset import DataVersion, DelayOffsets, format_delay_offsets
from rmqdelay.formats.javanum import java_long_range, java_parse_int
from rmqdelay.store.durable import atomic_write, config_dir, fsync_dir

DELAY_OFFSET_FILE = "delayOffset.json"
SCHEDULER_STATE_FILE = "rmqdelay.scheduler.json"


@dataclass(slots=True)
class SchedulerState:
    commitLogOffset: int
    offsetTable: dict[int, int]
    previousOffsetTable: dict[int, int] | None  # None: there was no delayOffset.json


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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(path, None, f"readable UTF-8 text ({exc})") from None
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
    return SchedulerState(doc["commitLogOffset"], table, previous)


def write_scheduler_state(store_path: Path | str, state: SchedulerState) -> None:
    doc = {
        "commitLogOffset": state.commitLogOffset,
        "offsetTable": _table_json(state.offsetTable),
        "previousOffsetTable": _table_json(state.previousOffsetTable),
    }
    atomic_write(scheduler_state_path(store_path), (json.dumps(doc, indent=1) + "\n").encode())


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


def write_delay_offsets(store_path: Path | str, table: dict[int, int],
                        data_version: DataVersion | None = None) -> None:
    """delayOffset.json exactly as the broker formats it; ``.bak`` keeps the previous one."""
    text = format_delay_offsets(DelayOffsets(dict(table), data_version))
    atomic_write(delay_offset_path(store_path), text.encode("utf-8"), keep_bak=True)


class OffsetPublisher:
    """Publishes offsets in the order that makes a crash recoverable: the scheduler file
    (exact at a commit log offset), then delayOffset.json. The caller flushes the commit log
    and the queues first: write, flush, then publish."""

    def __init__(self, store_path: Path | str, published: dict[int, int] | None,
                 data_version: DataVersion | None) -> None:
        self.store_path = Path(store_path)
        self.published = None if published is None else dict(published)
        self.data_version = data_version

    def publish(self, commit_log_offset: int, table: dict[int, int]) -> None:
        table = dict(table)
        write_scheduler_state(self.store_path, SchedulerState(commit_log_offset, table, self.published))
        if table != self.published or not delay_offset_path(self.store_path).exists():
            self.data_version = next_data_version(self.data_version)
            write_delay_offsets(self.store_path, table, self.data_version)
        self.published = table
