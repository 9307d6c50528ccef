"""`rmqdelay analyze KIND STORE...`: backlog, lateness and the retry path, embedded or on Spark.

The analysis engine (pyarrow, numba) and Spark are imported inside the command: `--help`
must not load them (tests/test_startup.py)."""

from __future__ import annotations

import contextlib
import shutil
import time
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from rmqdelay.errors import EXIT_PROBLEMS, RmqDelayError, UsageError

from .common import (
    console,
    emit_json,
    err_console,
    format_time_ms,
    parse_time_ms,
    progress,
    writable_directory,
)
from .run import resolve_delay_levels

if TYPE_CHECKING:
    import pyarrow as pa

    from rmqdelay.analysis import AnalysisResult, Skipped, StoreRef


class Kind(str, Enum):
    backlog = "backlog"
    lateness = "lateness"
    retries = "retries"
    all = "all"




def analyze(
    kind: Kind = typer.Argument(..., metavar="KIND", help="backlog, lateness, retries, or all three."),
    stores: list[str] = typer.Argument(..., metavar="STORE", help="Store directories: PATH or NAME=PATH (the name is the 'store' column)."),
    at: str = typer.Option(None, "--at", help="The moment the figures hold for (ISO 8601 or epoch ms); default now."),
    delay_levels: str = typer.Option(None, "--delay-levels", help='The broker\'s messageDelayLevel, e.g. "1s 5s 10s"; default its 18.'),
    broker_config: Path = typer.Option(None, "--broker-config", help="Take messageDelayLevel from this broker.conf."),
    keep_going: bool = typer.Option(False, "--keep-going", help="Skip the rest of a commit log file at a bad record and say how much was skipped (exit 1)."),
    json_out: bool = typer.Option(False, "--json", help="Result rows as JSON lines, with 'analysis' and 'table' fields."),
    output: Path = typer.Option(None, "--output", help="Write every result table and the per-message table as Parquet into this directory."),
    report: Path = typer.Option(None, "--report", help="Write one self-contained HTML page with the charts of the analyses run."),
    spark: bool = typer.Option(False, "--spark", help="Run on Spark instead of in this process."),
    master: str = typer.Option(None, "--master", help="Spark master URL (with --spark): local[N], local-cluster[...], spark://host:port; default local[*], or spark-submit's."),
) -> None:
    """Backlog (what waits, when it falls due), lateness (delivered vs due) and retries (the
    16-retry path into the DLQ) over one store or many."""
    import pyarrow.parquet as pq

    from rmqdelay.analysis import KINDS, check_stores, checked_request, store_ref
    from rmqdelay.analysis import analyze as embedded_analyze
    from rmqdelay.analysis.report import render_report

    refs = [store_ref(s) for s in stores]
    at_ms = parse_time_ms(at, "--at") if at else time.time_ns() // 1_000_000
    levels = resolve_delay_levels(delay_levels, broker_config)
    kinds = list(KINDS) if kind is Kind.all else [kind.value]
    checked_request(kinds[0], refs, levels)  # two stores of one name are refused before any work
    # Where the results go is checked before any work, not after it.
    if output is not None:
        writable_directory(output, "--output")
    if report is not None:
        writable_directory(report.parent, "--report")
    check_stores(refs)

    results: dict[str, AnalysisResult] = {}
    session = None
    weights = {ref.name: _commitlog_bytes(ref) for ref in refs}
    with contextlib.ExitStack() as stack:
        if spark:
            stack.enter_context(_status(f"analyzing {len(refs)} store(s) on Spark"))
        else:
            advance = stack.enter_context(progress(f"analyzing {len(refs)} store(s)", sum(weights.values()) * len(kinds)))
        for name in kinds:
            messages_path = output / f"{name}_messages.parquet" if output is not None else None
            timer_path = output / f"{name}_timer_messages.parquet" if output is not None else None
            if spark:
                from rmqdelay.spark.jobs import analyze as spark_analyze
                from rmqdelay.spark.session import get_session

                session = session or get_session(master)
                for path in (messages_path, timer_path):
                    if path is not None and path.exists():
                        shutil.rmtree(path) if path.is_dir() else path.unlink()
                results[name] = spark_analyze(name, refs, at_ms, delay_levels=levels, keep_going=keep_going,
                                              spark=session, messages_to=messages_path)
            else:
                # Store by store, so the progress bar moves per store.
                results[name] = embedded_analyze(name, refs, at_ms, delay_levels=levels, keep_going=keep_going,
                                                 done=lambda ref: advance(weights[ref.name]))
                if messages_path is not None:
                    pq.write_table(results[name].messages, messages_path)
                    if results[name].timer_messages is not None:
                        pq.write_table(results[name].timer_messages, timer_path)
            if output is not None:
                for table_name, table in results[name].tables.items():
                    pq.write_table(table, output / f"{name}_{table_name}.parquet")

    for name, result in results.items():
        for table_name, table in result.tables.items():
            if json_out:
                for row in table.to_pylist():
                    emit_json({"analysis": name, "table": table_name, **row})
            else:
                console.print(_rich_table(f"{name}: {table_name}", table))
    if report is not None:
        lateness_values = timer_values = None
        if spark and output is not None and "lateness" in results:
            lateness_values = pq.read_table(output / "lateness_messages.parquet", columns=["level", "lateness_ms"])
            timer_values = pq.read_table(output / "lateness_timer_messages.parquet", columns=["real_topic", "lateness_ms"])
        page = render_report(results, [r.name for r in refs], at_ms, lateness_values, timer_values)
        try:
            report.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--report {report}: a file to write the page to ({exc.strerror})") from None
        if not json_out:
            err_console.print(f"report: {report}", highlight=False)

    skipped = _unique_skips(results)
    if skipped:
        files = {s.file for s in skipped}
        err_console.print(f"rmqdelay: skipped {sum(s.bytes for s in skipped)} bytes in {len(files)} file(s)",
                          markup=False, highlight=False, soft_wrap=True)
        for s in skipped:
            err_console.print(f"  {s.file} at byte {s.offset}: {s.reason} ({s.bytes} bytes skipped)",
                              markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_PROBLEMS)


def _commitlog_bytes(ref: StoreRef) -> int:
    from rmqdelay.store.scan import commitlog_files

    try:
        return sum(path.stat().st_size for path in commitlog_files(ref.path))
    except (OSError, RmqDelayError):
        return 0  # the analysis itself names what is wrong with the store


def _unique_skips(results: dict[str, AnalysisResult]) -> list[Skipped]:
    seen, unique = set(), []
    for result in results.values():
        for s in result.skipped:
            if (s.file, s.offset) not in seen:
                seen.add((s.file, s.offset))
                unique.append(s)
    return unique


@contextlib.contextmanager
def _status(text: str):
    if err_console.is_terminal:
        with err_console.status(text):
            yield
    else:
        yield


def _rich_table(title: str, table: pa.Table) -> Table:
    import pyarrow as pa

    from rmqdelay.analysis.report import TIME_COLUMNS

    view = Table(title=title, title_justify="left")
    for name in table.column_names:
        view.add_column(name, justify="left" if pa.types.is_string(table.schema.field(name).type) else "right")
    for row in table.to_pylist():
        view.add_row(*(_cell(row[name], name in TIME_COLUMNS) for name in table.column_names))
    if table.num_rows == 0:
        view.caption = "no rows"
    return view


def _cell(value, is_time: bool) -> str:
    if value is None:
        return "-"
    if is_time:
        return format_time_ms(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)
