"""The outputs of the read commands that also speak Prometheus (`inspect delay`, `timer`,
`consumers`, `dlq`): `--format table|json|prometheus` (`--json` for json), `--store-name` for
the metrics' store label, and one way to print each. Light: typer only."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import TypeVar

import typer

from rmqdelay.errors import UsageError

T = TypeVar("T")


class Format(str, Enum):
    table = "table"
    json = "json"
    prometheus = "prometheus"


def format_option() -> typer.models.OptionInfo:
    return typer.Option(Format.table, "--format", metavar="table|json|prometheus",
                        help="table; json (as --json); or prometheus: the text format node_exporter's textfile "
                             "collector reads (docs/metrics.md).")


def store_name_option() -> typer.models.OptionInfo:
    return typer.Option(None, "--store-name", metavar="NAME", show_default=False,
                        help="With --format prometheus: the store label. Default: the directory's name, or its "
                             "parent's for .../store.")


def output_format(json_out: bool, chosen: Format) -> Format:
    if json_out and chosen not in (Format.table, Format.json):
        raise UsageError("--json and --format: give one of them")
    return Format.json if json_out else chosen


def store_label(store_dir: Path, store_name: str | None) -> str:
    from rmqdelay.store.ref import store_ref

    return store_name if store_name is not None else store_ref(str(store_dir)).name


def read_for(fmt: Format, problems: list[str], compute: Callable[[], T], fallback: T) -> T:
    """``compute()``; under --format prometheus a damaged store's error does not end the
    output: it is said on stderr in its one line, counted in ``problems`` (the
    rmqdelay_problems metric) and ``fallback`` stands for what could not be read, so the
    metrics that can be computed still reach the collector and the command exits 0
    (docs/metrics.md: monitoring never goes dark). Any other format raises it as always."""
    if fmt is not Format.prometheus:
        return compute()
    from rmqdelay.errors import StoreError

    try:
        return compute()
    except StoreError as exc:
        note_problem(problems, exc)
        return fallback


def note_problem(problems: list[str], exc: Exception) -> None:
    """One problem, once (a damaged file read for several levels is one problem)."""
    from .repairs import repair_hint

    line = " ".join(str(exc).split()) + repair_hint(exc)
    if line in problems:
        return
    problems.append(line)
    sys.stderr.write(f"rmqdelay: {line}\n")
    sys.stderr.flush()


def emit(fmt: Format, items: Iterable, families: Callable[[], list], table: Callable[[], None]) -> None:
    """Print ``items`` as the format asks: the metric ``families()`` give, a JSON line per
    item (its ``as_json()``), or the ``table()``."""
    if fmt is Format.prometheus:
        from .prometheus import exposition

        sys.stdout.write(exposition(families()))
    elif fmt is Format.json:
        from .common import emit_json

        for item in items:
            emit_json(item.as_json())
    else:
        table()
