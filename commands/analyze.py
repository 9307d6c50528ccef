"""`rmqdelay analyze KIND STORE...`: backlog, lateness and the retry path, embedded or on Spark.

The analysis engine (pyarrow, numba) and Spark are imported inside the command: `--help`
must not load them (tests/test_startup.py)."""

from __future__ import annotations

import contextlib
import inspect
import shutil
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from rmqdelay.errors import EXIT_PROBLEMS, RmqDelayError, UsageError

from . import options
from .group import typer_app
from .common import clock_ms, emit_json, err_console, progress, writable_directory

if TYPE_CHECKING:
    from rmqdelay.analysis import AnalysisResult, Skipped, StoreRef

DEFAULT_ROWS = 20  # a screenful of each table on a terminal


class Kind(str, Enum):
    backlog = "backlog"
    lateness = "lateness"
    retries = "retries"
    all = "all"


app = typer_app("Backlog (what waits, when it falls due), lateness (delivered vs due) and retries (the "
                "16-retry path into the DLQ) over one store or many.\n\n"
                "Each KIND has its own -h (rmqdelay analyze lateness -h); every KIND takes the same options.\n\n"
                "Example: rmqdelay analyze all broker-a=/data/a/store broker-b=/data/b/store --report fleet.html")

# What each kind's own --help says first (docs/analyze.md has every figure).
_KIND_HELP = {
    Kind.backlog: "What waits and when it falls due: per delay level and the timer wheel, pending, due now, "
                  "overdue (1s, 1m, 1h), the oldest due; the drain by minute; the retry queues' lag.",
    Kind.lateness: "Delivered against due: per level, topic and timer topic the lateness percentiles (p50 to "
                   "p999, min, max), early and duplicate deliveries, what is overdue and not delivered; the timer's "
                   "rolls and cancellations.",
    Kind.retries: "The 16-retry path into the DLQ: per consumer group the chains, how many reached the DLQ and "
                  "how fast, the attempts they took, and the anomalies (a send-back at the wrong level, a gap, an "
                  "early DLQ).",
    Kind.all: "Backlog, lateness and retries in one pass over the stores.",
}
_KIND_EXAMPLE = {
    Kind.backlog: "rmqdelay analyze backlog /data/broker-a/store --now 2026-11-23T16:00:00Z",
    Kind.lateness: "rmqdelay analyze lateness broker-a=/data/a/store broker-b=/data/b/store --output out/",
    Kind.retries: "rmqdelay analyze retries /data/broker-a/store --json",
    Kind.all: "rmqdelay analyze all broker-a=/data/a/store broker-b=/data/b/store --report fleet.html",
}


def analyze(
    kind: Kind,
    stores: list[str] = typer.Argument(..., metavar="STORE...", show_default=False,
                                       help="Store directories: PATH or NAME=PATH (the name labels the store's rows)."),
    now: str = options.now("the figures hold for"),
    message_delay_level: str = options.message_delay_level(),
    broker_config: Path = options.broker_config(),
    keep_going: bool = typer.Option(False, "--keep-going", help="Skip the rest of a commit log file at a bad record "
                                                                "and say how much was skipped (exit 1)."),
    json_out: bool = options.json_out("Every row of every table as JSON lines, with 'analysis' and 'table' fields "
                                      "(docs/cli.md lists the fields)."),
    output: Path = typer.Option(None, "--output", metavar="DIR", show_default=False,
                                help="Write every result table and the per-message tables as Parquet into DIR."),
    report: Path = typer.Option(None, "--report", metavar="FILE.html", show_default=False,
                                help="Write one self-contained HTML page with the charts of the analyses run."),
    limit: str = typer.Option(str(DEFAULT_ROWS), "--limit", metavar="N",
                              help="Rows of each table on the terminal; --json, --output and --report have them all."),
    wide: bool = options.wide(),
    spark: bool = typer.Option(False, "--spark", help="Run on Spark instead of in this process (Java 17 or later)."),
    master: str = typer.Option(None, "--master", metavar="URL", show_default=False,
                               help="With --spark: local[N], local-cluster[W,C,MB] or spark://HOST:PORT. Default: "
                                    "local[*], or spark-submit's."),
) -> None:
    """One analysis (or all three) over the stores; each KIND's command calls it."""
    if master is not None and not spark:
        raise UsageError("--master goes with --spark")
    if spark:
        from rmqdelay.spark.errors import check_master_url

        check_master_url(master)
    from rmqdelay.analysis import KINDS, check_stores, checked_request, store_ref
    from rmqdelay.analysis.arrowfiles import write_parquet
    from rmqdelay.analysis.names import public_table

    refs = [store_ref(s) for s in stores]
    at_ms = clock_ms(now)
    levels = options.delay_level_table(message_delay_level, broker_config)
    rows = options.parse_count(limit, "--limit")
    kinds = list(KINDS) if kind is Kind.all else [kind.value]
    checked_request(kinds[0], refs, levels)  # two stores of one name are refused before any work
    # Where the results go is checked before any work, not after it.
    if output is not None:
        if spark and not _utf8(output):
            # Spark's own writer names files through the JVM, which takes text paths only.
            raise UsageError(f"--output {output}: a directory Spark can write into; its path is not UTF-8 "
                             f"(give one that is, or leave out --spark)")
        writable_directory(output, "--output")
    if report is not None:
        writable_directory(report.parent, "--report")
    check_stores(refs)

    if spark:
        results, log = _on_spark(kinds, refs, at_ms, levels, keep_going, master, output)
    else:
        results, log = _embedded(kinds, refs, at_ms, levels, keep_going, output, report), None
    if output is not None:
        for name, result in results.items():
            for table_name, table in result.tables.items():
                write_parquet(public_table(table), output / f"{name}_{table_name}.parquet")

    if json_out:
        for name, result in results.items():
            for table_name, table in result.tables.items():
                for row in public_table(table).to_pylist():
                    emit_json({"analysis": name, "table": table_name, **row})
    findings = None
    if not json_out or report is not None:
        from rmqdelay.analysis.findings import inspect_findings

        findings = inspect_findings(refs, at_ms)  # what `inspect timer` warns of, for the headline and the report
    if not json_out:
        _show(results, at_ms, rows, wide, refs, findings)
    if report is not None:
        _write_report(report, results, at_ms, output, refs, findings)
        if not json_out:
            err_console.print(f"report: {report}", highlight=False)
    if log is not None:
        log.unlink(missing_ok=True)  # the JVM's log: kept only when something failed

    skipped = _unique_skips(results)
    if skipped:
        files = {s.file for s in skipped}
        err_console.print(f"rmqdelay: skipped {sum(s.bytes for s in skipped)} bytes in {len(files)} file(s)",
                          markup=False, highlight=False, soft_wrap=True)
        for s in skipped:
            err_console.print(f"  {s.file} at byte {s.offset}: {s.reason} ({s.bytes} bytes skipped)",
                              markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_PROBLEMS)


def _utf8(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _embedded(kinds: list[str], refs: list[StoreRef], at_ms: int, levels: dict[int, int], keep_going: bool,
              output: Path | None, report: Path | None) -> dict[str, AnalysisResult]:
    """The analyses in this process, within RMQDELAY_ANALYZE_MEMORY (analysis/spill.py): the
    per-message tables go to --output as they are made, and are made at all only for
    --output or a --report without it (which charts them)."""
    from rmqdelay.analysis import analyze as embedded_analyze
    from rmqdelay.analysis.spill import memory_budget

    memory = memory_budget()
    results: dict[str, AnalysisResult] = {}
    weights = {ref.name: _commitlog_bytes(ref) for ref in refs}
    with progress(f"analyzing {len(refs)} store(s)", sum(weights.values()) * len(kinds)) as advance:
        for name in kinds:
            # Store by store, so the progress bar moves per store.
            results[name] = embedded_analyze(
                name, refs, at_ms, delay_levels=levels, keep_going=keep_going, memory=memory,
                done=lambda ref: advance(weights[ref.name]),
                messages_to=output / f"{name}_messages.parquet" if output is not None else None,
                with_messages=output is not None or report is not None)
    return results


def _on_spark(kinds: list[str], refs: list[StoreRef], at_ms: int, levels: dict[int, int], keep_going: bool,
              master: str | None, output: Path | None) -> tuple[dict[str, AnalysisResult], Path]:
    """The analyses on Spark: the JVM's output in a log file, a progress bar over the tasks,
    every failure one line (spark/errors.py)."""
    from rmqdelay.spark.errors import one_line_errors
    from rmqdelay.spark.jobs import analyze as spark_analyze
    from rmqdelay.spark.progress import task_progress
    from rmqdelay.spark.session import get_session, log_path

    log = log_path()
    results: dict[str, AnalysisResult] = {}
    with one_line_errors(log), _task_bar(f"starting Spark ({master or 'local[*]'})") as bar:
        session = get_session(master, log=log)
        for name in kinds:
            bar(f"{name} on Spark", 0, 0)
            messages_path = output / f"{name}_messages.parquet" if output is not None else None
            for path in (messages_path, output / f"{name}_timer_messages.parquet" if output is not None else None):
                if path is not None and path.exists():
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
            with task_progress(session, lambda done, total, name=name: bar(f"{name} on Spark", done, total)):
                results[name] = spark_analyze(name, refs, at_ms, delay_levels=levels, keep_going=keep_going,
                                              spark=session, messages_to=messages_path)
    return results, log


@contextlib.contextmanager
def _task_bar(description: str):
    """A progress bar of tasks done on a terminal (nothing in a pipe); yields
    ``update(description, done, total)``."""
    if not err_console.is_terminal:
        yield lambda *_: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("tasks"),
                  TimeElapsedColumn(), console=err_console.made(), transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(text: str, done: int, total: int) -> None:
            bar.update(task, description=text, completed=done, total=total or None)

        yield update


def _show(results: dict[str, AnalysisResult], at_ms: int, rows: int | None, wide: bool,
          refs: list[StoreRef], findings: dict[str, dict[str, int]]) -> None:
    from rich.text import Text

    from .analyze_view import TIMER_TABLES, Screen, headline, restart_warnings
    from .common import console

    skipped = {name: f["restartSkipped"] for name, f in findings.items() if f["restartSkipped"]}
    screen = Screen(DEFAULT_ROWS if rows is None else rows, wide, at_ms, [])
    for i, (name, result) in enumerate(results.items()):
        has_timer = result.timer_messages is not None and result.timer_messages.num_rows > 0 or any(
            result.tables[t].num_rows for t in TIMER_TABLES if t in result.tables)
        console.print(headline(name, result.tables, at_ms, sum(skipped.values())))
        if i == 0:  # what changes what an operator does leads the screen (docs/cli.md)
            for line in restart_warnings(skipped, {ref.name: ref.path for ref in refs}):
                console.print(Text(line, style="bold red"))
        for table_name, table in result.tables.items():
            if table_name in TIMER_TABLES and not has_timer:
                continue  # a store without a timer wheel has none of these
            screen.table(f"{name}: {table_name}", table)
    screen.close()


def _write_report(report: Path, results: dict[str, AnalysisResult], at_ms: int, output: Path | None,
                  refs: list[StoreRef], findings: dict[str, dict[str, int]]) -> None:
    from rmqdelay.analysis.arrowfiles import read_parquet
    from rmqdelay.analysis.names import internal_names
    from rmqdelay.analysis.report import render_report

    lateness_values = timer_values = None
    if output is not None and "lateness" in results:
        # The per-message tables went to --output (from Spark's executors, or as the embedded
        # engine made them): read back what the charts need.
        def read(path: Path, columns: list[str]):
            table = read_parquet(path, columns)
            return table.rename_columns(list(internal_names(columns).values()))

        lateness_values = read(output / "lateness_messages.parquet", ["store", "level", "latenessMs"])
        timer_values = read(output / "lateness_timer_messages.parquet", ["store", "realTopic", "latenessMs"])
    page = render_report(results, [r.name for r in refs], at_ms, lateness_values, timer_values, findings)
    try:
        report.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--report {report}: a file to write the page to ({exc.strerror})") from None


def _commitlog_bytes(ref: StoreRef) -> int:
    from rmqdelay.store.scan import commitlog_files

    try:
        return sum(file.size for file in commitlog_files(ref.path))
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


def _kind_command(kind: Kind):
    """`analyze KIND`: analyze() with its kind given, its own help page."""

    def command(**given) -> None:
        analyze(kind, **given)

    signature = inspect.signature(analyze)
    command.__signature__ = signature.replace(parameters=[p for n, p in signature.parameters.items() if n != "kind"])
    command.__annotations__ = {n: a for n, a in analyze.__annotations__.items() if n != "kind"}
    command.__doc__ = (f"{_KIND_HELP[kind]}\n\nWithout --spark, the rows held and their matching take about "
                       "RMQDELAY_ANALYZE_MEMORY (default 256M), whatever the stores' size; the rest waits in a "
                       f"temporary directory.\n\nExample: {_KIND_EXAMPLE[kind]}")
    return command


for _kind in Kind:
    app.command(_kind.value)(_kind_command(_kind))
