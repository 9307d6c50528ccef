"""One self-contained HTML page of the analyses, read in ten seconds: a summary band at the top
(per store: pending, overdue and the oldest overdue, lateness p99, DLQ rate, timer backlog,
problems found; coloured by the thresholds of docs/analyze.md), then the charts of all stores
together, then a section per store with its charts and tables. Charts (report_svg.py):
lateness per level (delivered messages by lateness band), the drain chart (pending messages
by the minute they fall due, due now and the far tail as figures beside it), the retry funnel
(chains reaching attempt 1..16, then the DLQ); for 5.x stores the timer messages' lateness per
real topic and their rolls and cancellations.

Nothing is fetched to view it (no scripts, no fonts, no links off the page), so it can be
mailed or attached to a ticket. Wide tables scroll inside the page instead of being cut.
"""

from __future__ import annotations

import html
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from rmqdelay.analysis import AnalysisResult
from rmqdelay.units import format_date_ms, format_duration_ms

from .names import DURATION, INSTANT, RATE, TEXT, VIEWS
from .report_svg import BANDS, MAX_DRAIN_MINUTES, drain_svg, funnel_svg, heat_svg

__all__ = ["BANDS", "THRESHOLDS", "drain_curve", "lateness_bands", "render_report", "retry_funnel", "store_summary",
           "timer_outcomes"]

RETRY_ATTEMPTS = 16
TABLE_ROWS = 200  # rows of a table on the page; --json and --output have them all

# The summary band's colours (docs/analyze.md, "The report"): (amber from, red from).
THRESHOLDS = {
    "oldestOverdueMs": (60_000, 600_000),  # the oldest message due and not delivered: 1 min, 10 min
    "latenessP99Ms": (1_000, 10_000),  # delivered delay messages: 1 s, 10 s
    "dlqRate": (0.01, 0.05),  # retried chains that ended in the DLQ: 1 %, 5 %
    "timerBehindMs": (10_000, 60_000),  # the timer's read position behind the analysis time: 10 s, 1 min
    "problems": (1, 1),  # any problem found is red
    "restartSkipped": (1, 1),  # a restart now would skip timer messages: red
}

_STYLE = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;padding:16px;color:#1d2733;
max-width:1280px}
h1{font-size:22px;margin:0 0 4px}h3{font-size:13px;margin:14px 0 4px;color:#3a4654}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dee6;padding-bottom:4px}
section.store>h2{font-size:19px;border-bottom:2px solid #1f5f99}
p.meta{color:#5b6878;margin:0 0 12px;font-size:13px}
nav{font-size:13px;margin:6px 0 0}nav a{margin-right:12px}
.band{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0 8px}
.card{flex:1 1 360px;border:1px solid #d8dee6;border-radius:8px;padding:10px 12px;background:#fbfcfd}
.card h3{margin:0 0 8px;font-size:15px;color:#1d2733}
.figs{display:grid;grid-template-columns:repeat(auto-fit,minmax(110px,1fr));gap:8px}
.fig{border-radius:6px;padding:6px 8px;background:#eef1f5}
.fig .k{font-size:11px;color:#5b6878}.fig .v{font-size:18px;font-weight:600}.fig .s{font-size:11px;color:#3a4654}
.fig.ok{background:#e3f4e8}.fig.warn{background:#fdf1d8}.fig.bad{background:#fbe0dd}
.scroll{overflow-x:auto;max-width:100%}
.drain{display:flex;flex-wrap:wrap;gap:12px;align-items:stretch}.drain .plot{flex:1 1 560px;min-width:0}
.dfig{flex:0 0 150px;border:2px solid;border-radius:8px;background:#f4f6f9;padding:10px;text-align:center;
display:flex;flex-direction:column;justify-content:center}
.dfig .k{font-size:12px}.dfig .figure{font-size:28px;font-weight:600}.dfig .s{font-size:11px;color:#3a4654}
@media (max-width:700px){.dfig{flex:1 1 40%}.drain .plot{order:3;flex-basis:100%}}
table{border-collapse:collapse;font-size:12px;margin:6px 0 14px}
th,td{border:1px solid #d8dee6;padding:3px 7px;text-align:right;white-space:nowrap}th{background:#f1f4f8}
td.t,th.t{text-align:left}
svg text{font-size:11px;fill:#1d2733}
.note{color:#5b6878;font-size:12px}
"""


# -- the figures the charts and the band show ---------------------------------------------------
def lateness_bands(levels: np.ndarray, lateness: np.ndarray) -> dict:
    """Per level (or any key: the timer's real topics), how many delivered messages fall in
    each band of BANDS."""
    edges = np.array([b for b, _ in BANDS[:-1]], dtype=np.int64)
    band = np.searchsorted(edges, lateness, side="right")
    counts: dict = {}
    for level in np.unique(levels):
        key = level.item() if isinstance(level, np.generic) else level
        counts[key] = np.bincount(band[levels == level], minlength=len(BANDS)).tolist()
    return counts


def drain_curve(drain: pa.Table) -> list[int]:
    """Messages due per minute ahead (0 = due now), summed over stores and levels; the last
    entry holds everything beyond MAX_DRAIN_MINUTES."""
    due = [0] * (MAX_DRAIN_MINUTES + 2)
    for minute, count in zip(drain.column("minute").to_pylist(), drain.column("due").to_pylist()):
        due[min(minute, MAX_DRAIN_MINUTES + 1)] += count
    return due


def timer_outcomes(rolls: pa.Table, cancellations: pa.Table) -> list[tuple[str, int]]:
    """Timer messages by how often they rolled, then cancellations by what became of them
    (all stores and topics together)."""
    by_rolls: dict[int, int] = {}
    for n, count in zip(rolls.column("rolls").to_pylist(), rolls.column("messages").to_pylist()):
        by_rolls[n] = by_rolls.get(n, 0) + count
    states: dict[str, int] = {}
    for state, count in zip(cancellations.column("state").to_pylist(), cancellations.column("cancellations").to_pylist()):
        states[state] = states.get(state, 0) + count
    return ([(f"rolled {n}×", count) for n, count in sorted(by_rolls.items())]
            + [(f"cancel {state}", count) for state, count in sorted(states.items())])


def retry_funnel(attempts: pa.Table, groups: pa.Table) -> list[tuple[str, int]]:
    """Chains that reached attempt 1..16 (attempts ≥ k), then those in the DLQ."""
    reached = [0] * (RETRY_ATTEMPTS + 1)
    for a, n in zip(attempts.column("attempts").to_pylist(), attempts.column("chains").to_pylist()):
        for k in range(1, min(a, RETRY_ATTEMPTS) + 1):
            reached[k] += n
    funnel = [(f"attempt {k}", reached[k]) for k in range(1, RETRY_ATTEMPTS + 1)]
    funnel.append(("DLQ", sum(groups.column("dlq").to_pylist())))
    return funnel


def _of(table: pa.Table | None, store: str | None) -> pa.Table | None:
    if table is None or store is None:
        return table
    return table.filter(pc.equal(table.column("store"), store))


def _sum(table: pa.Table | None, column: str) -> int:
    return 0 if table is None else sum(v for v in table.column(column).to_pylist() if v is not None)


def _least(*columns: list) -> int | None:
    values = [v for column in columns for v in column if v is not None]
    return min(values) if values else None


def _p99(values: np.ndarray) -> int | None:
    """Nearest rank, as every percentile of the analyses (docs/analyze.md)."""
    if not len(values):
        return None
    return int(np.sort(values)[math.ceil(99 * len(values) / 100) - 1])


def store_summary(results: dict[str, AnalysisResult], store: str, at_ms: int,
                  lateness_values: pa.Table | None, findings: dict[str, int] | None = None) -> dict:
    """The band's figures of one store, under the names docs/analyze.md gives them (None: the
    analysis that has it did not run, or the store has none); ``findings``: what `inspect
    timer` warns of there (analysis/findings.py), counted among the problems."""
    backlog, lateness, retries = results.get("backlog"), results.get("lateness"), results.get("retries")
    out: dict = {"store": store}
    if backlog is not None:
        levels, timer = _of(backlog.tables["levels"], store), _of(backlog.tables.get("timer"), store)
        has_timer = timer is not None and timer.num_rows > 0
        oldest = _least(levels.column("oldest_due_ms").to_pylist(),
                        timer.column("oldest_due_ms").to_pylist() if has_timer else [])
        out.update(pending=_sum(levels, "pending") + _sum(timer, "pending"), timerPending=_sum(timer, "pending")
                   if has_timer else None, overdue=_sum(levels, "due_now") + _sum(timer, "due_now"),
                   oldestOverdueMs=None if oldest is None else max(at_ms - oldest, 0),
                   timerBehindMs=max(timer.column("behind_ms").to_pylist()) if has_timer else None)
    if lateness is not None:
        values = lateness_values if lateness_values is not None else lateness.messages
        values = _of(values.filter(values.column("lateness_ms").is_valid()), store)
        out["latenessP99Ms"] = _p99(values.column("lateness_ms").to_numpy())
        out["duplicates"] = _sum(_of(lateness.tables["levels"], store), "duplicates")
        cancels = _of(lateness.tables.get("timerCancellations"), store)
        out["missedCancellations"] = 0 if cancels is None else _sum(
            cancels.filter(pc.equal(cancels.column("state"), "missed")), "cancellations")
    if retries is not None:
        groups = _of(retries.tables["groups"], store)
        chains = _sum(groups, "messages")
        out["dlqRate"] = _sum(groups, "dlq") / chains if chains else None
        out["anomalies"] = _of(retries.tables["anomalies"], store).num_rows
    skipped = {s.file for r in results.values() for s in r.skipped if s.store == store}
    out["skippedFiles"] = len(skipped)
    if findings is not None:
        out["restartSkipped"] = findings["restartSkipped"]
        out["unmatchedCancellations"] = findings["unmatchedCancellations"]
        out["precisionMismatch"] = findings["precisionMismatch"]
        if out.get("missedCancellations") is None:
            out["missedCancellations"] = findings["missedCancellations"]
    out["problems"] = sum(out.get(k) or 0 for k in PROBLEMS)
    return out


# What the problems figure adds up, with the words its line gives each.
PROBLEMS = {"restartSkipped": "skipped by a restart now", "skippedFiles": "file(s) skipped",
            "anomalies": "retry anomalies", "duplicates": "duplicate deliveries",
            "missedCancellations": "missed cancellations",
            "unmatchedCancellations": "cancellations with no target in their slot",
            "precisionMismatch": "wheel written with another timerPrecisionMs"}


def _level(key: str, value) -> str:
    """ok, warn or bad by THRESHOLDS; a lateness by its size, early (negative) or late."""
    if value is None or key not in THRESHOLDS:
        return ""
    amber, red = THRESHOLDS[key]
    value = abs(value)
    return "bad" if value >= red else "warn" if value >= amber else "ok"


# -- HTML ---------------------------------------------------------------------------------------
def _fig(label: str, value: str, key: str | None = None, raw=None, sub: str = "") -> str:
    level = _level(key, raw) if key else ""
    return (f'<div class="fig {level}" data-figure="{key or label}"><div class="k">{html.escape(label)}</div>'
            f'<div class="v">{html.escape(value)}</div><div class="s">{html.escape(sub)}</div></div>')


def _card(s: dict) -> str:
    figs = []
    if s.get("restartSkipped") is not None:  # what changes what an operator does comes first
        skipped = s["restartSkipped"]
        figs.append(_fig("restart", str(skipped), "restartSkipped", skipped,
                         "timer messages a restart now would skip" if skipped else "a restart now skips nothing"))
    if "pending" in s:
        figs.append(_fig("pending", str(s["pending"]), sub=f"{s['timerPending']} in the timer wheel"
                         if s.get("timerPending") else "delay levels"))
        oldest = s["oldestOverdueMs"]
        figs.append(_fig("overdue", str(s["overdue"]), "oldestOverdueMs", oldest,
                         f"oldest {format_duration_ms(oldest)}" if oldest is not None else "none"))
    if "latenessP99Ms" in s:
        p99 = s["latenessP99Ms"]
        figs.append(_fig("lateness p99", format_duration_ms(p99) if p99 is not None else "-", "latenessP99Ms", p99,
                         "delivered delay messages"))
    if "dlqRate" in s:
        rate = s["dlqRate"]
        figs.append(_fig("DLQ rate", f"{100 * rate:.1f}%" if rate is not None else "-", "dlqRate", rate,
                         "of retried chains"))
    if s.get("timerBehindMs") is not None:
        behind = s["timerBehindMs"]  # negative: the wheel was read past the analysis time (an earlier --now)
        figs.append(_fig("timer backlog", str(s["timerPending"]), "timerBehindMs", max(behind, 0),
                         f"read {format_duration_ms(behind)} behind" if behind >= 0
                         else f"read {format_duration_ms(-behind)} past the analysis time"))
    what = [f"{s[k]} {w}" for k, w in PROBLEMS.items() if s.get(k)]
    figs.append(_fig("problems", str(s["problems"]), "problems", s["problems"], "; ".join(what) or "none found"))
    name = html.escape(s["store"])
    return f'<div class="card" data-store="{name}"><h3>{name}</h3><div class="figs">{"".join(figs)}</div></div>'


def _cell(name: str, value) -> str:
    view = VIEWS.get(name)
    if value is None:
        return "–"
    kind = view.kind if view else ""
    if kind == DURATION:
        return format_duration_ms(value)
    if kind == INSTANT:
        return format_date_ms(value).replace("Z", " UTC")
    if kind == RATE:
        return f"{100 * value:.1f}%"
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _table_html(caption: str, table: pa.Table | None, drop_store: bool = False) -> str:
    title = f"<h3>{html.escape(caption)}</h3>"
    if table is None or table.num_rows == 0:
        return title + '<p class="note">no rows</p>'
    names = [n for n in table.column_names if not (drop_store and n == "store")]
    text_cols = {n for n in names if VIEWS.get(n) is not None and VIEWS[n].kind == TEXT}
    head = "".join(f'<th class="{"t" if n in text_cols else ""}">{html.escape(VIEWS[n].header if n in VIEWS else n)}'
                   f'</th>' for n in names)
    body = []
    for row in table.slice(0, TABLE_ROWS).to_pylist():
        body.append("<tr>" + "".join(f'<td class="{"t" if n in text_cols else ""}">{html.escape(_cell(n, row[n]))}</td>'
                                     for n in names) + "</tr>")
    more = (f'<p class="note">the first {TABLE_ROWS} of {table.num_rows} rows; --json and --output have them all</p>'
            if table.num_rows > TABLE_ROWS else "")
    return f'{title}<div class="scroll"><table><tr>{head}</tr>{"".join(body)}</table></div>{more}'


def _anchor(store: str) -> str:
    return "store-" + re.sub(r"[^A-Za-z0-9_-]", "_", store)


def _charts_and_tables(results: dict[str, AnalysisResult], store: str | None, lateness_values: pa.Table | None,
                       timer_values: pa.Table | None, tables: bool) -> list[str]:
    """The sections of one store (or of all together, ``store`` None): its charts, and with
    ``tables`` its result tables."""
    key = "" if store is None else "-" + _anchor(store)[6:]
    own = store is not None
    sections = []
    if "lateness" in results:
        result = results["lateness"]
        values = lateness_values if lateness_values is not None else result.messages.select(["store", "level",
                                                                                            "lateness_ms"])
        values = _of(values.filter(values.column("lateness_ms").is_valid()), store)
        bands = lateness_bands(values.column("level").to_numpy(), values.column("lateness_ms").to_numpy())
        chart = heat_svg(bands, "lateness-chart" + key) if bands else '<p class="note">no delivered delay message</p>'
        part = (f'<h2 id="lateness{key}">Lateness per level</h2>' "<p class=\"note\">Delivered messages by lateness (store time of the "
                "delivered copy − deliver time of its schedule unit); early deliveries in orange, n = delivered."
                "</p>" + chart)
        if tables:
            part += (_table_html("lateness: levels", _of(result.tables["levels"], store), own)
                     + _table_html("lateness: topics", _of(result.tables["topics"], store), own))
        sections.append(part)
        timer_topics = _of(result.tables.get("timerTopics"), store)
        if timer_topics is not None and timer_topics.num_rows:
            sections.append(_timer_section(result, store, key, timer_values, tables))
    if "backlog" in results:
        result = results["backlog"]
        due = drain_curve(_of(result.tables["drain"], store))
        timer = _of(result.tables.get("timer"), store)
        wheel = drain_curve(_of(result.tables["timerDrain"], store)) if timer is not None and timer.num_rows else None
        if wheel is not None:
            due = [a + b for a, b in zip(due, wheel)]
        chart = drain_svg(due, wheel, "drain-chart" + key) if any(due) else '<p class="note">nothing pending</p>'
        part = (f'<h2 id="drain{key}">Backlog drain</h2>' "<p class=\"note\">Pending messages by when they fall due: each minute ahead "
                "of the analysis time its bar; what is due now (overdue included) and what falls due later than "
                f"{MAX_DRAIN_MINUTES // 60} hours beside them.</p>" + chart)
        if tables:
            part += (_table_html("backlog: levels", _of(result.tables["levels"], store), own)
                     + _table_html("backlog: retryLag", _of(result.tables["retryLag"], store), own)
                     + (_table_html("backlog: timer", timer, own) if wheel is not None else ""))
        sections.append(part)
    if "retries" in results:
        result = results["retries"]
        funnel = retry_funnel(_of(result.tables["attempts"], store), _of(result.tables["groups"], store))
        chart = (funnel_svg(funnel, "retry-funnel" + key) if funnel[0][1] or funnel[-1][1]
                 else '<p class="note">no message entered the retry path</p>')
        part = (f'<h2 id="retries{key}">Retry funnel</h2>' "<p class=\"note\">Chains that reached each attempt through %RETRY%group, "
                "then the dead-letter queue.</p>" + chart)
        if tables:
            part += (_table_html("retries: groups", _of(result.tables["groups"], store), own)
                     + _table_html("retries: anomalies", _of(result.tables["anomalies"], store), own))
        sections.append(part)
    return sections


def _timer_section(result: AnalysisResult, store: str | None, key: str, timer_values: pa.Table | None,
                   tables: bool) -> str:
    values = timer_values if timer_values is not None else result.timer_messages.select(["store", "real_topic",
                                                                                        "lateness_ms"])
    values = _of(values.filter(values.column("lateness_ms").is_valid()), store)
    topics = np.array(values.column("real_topic").to_pylist(), dtype=object)
    bands = lateness_bands(topics, values.column("lateness_ms").to_numpy()) if values.num_rows else {}
    heat = (heat_svg(bands, "timer-lateness-chart" + key, "{}") if bands
            else '<p class="note">no delivered timer message</p>')
    outcomes = timer_outcomes(_of(result.tables["timerRolls"], store), _of(result.tables["timerCancellations"], store))
    own = store is not None
    return (f'<h2 id="timer{key}">Timer messages</h2>' "<p class=\"note\">Delivered timer messages by lateness (store time of the "
            "delivered copy − its TIMER_OUT_MS) per real topic; early ones in orange.</p>" + heat
            + "<p class=\"note\">Timer messages by how often the wheel rolled them, and the cancellations by "
            "what became of them.</p>" + funnel_svg(outcomes, "timer-outcomes" + key)
            + ((_table_html("lateness: timerTopics", _of(result.tables["timerTopics"], store), own)
                + _table_html("lateness: timerRolls", _of(result.tables["timerRolls"], store), own)
                + _table_html("lateness: timerCancellations", _of(result.tables["timerCancellations"], store), own))
               if tables else ""))


def render_report(results: dict[str, AnalysisResult], stores: list[str], at_ms: int,
                  lateness_values: pa.Table | None = None, timer_values: pa.Table | None = None,
                  findings: dict[str, dict[str, int]] | None = None) -> str:
    """The page for the analyses that ran. ``lateness_values`` (store, level, lateness_ms) and
    ``timer_values`` (store, real_topic, lateness_ms) stand in for the lateness per-message
    tables when those were written elsewhere."""
    names = sorted(stores)
    band = ('<div class="band">' + "".join(_card(store_summary(results, s, at_ms, lateness_values, (findings or {}).get(s)))
                                     for s in names)
            + "</div>")
    body = [band]
    if len(names) > 1:
        body.append('<nav>Stores: ' + "".join(f'<a href="#{_anchor(s)}">{html.escape(s)}</a>' for s in names)
                    + "</nav>")
        body.append('<section class="fleet"><h2>All stores</h2>'
                    + "".join(_charts_and_tables(results, None, lateness_values, timer_values, tables=False))
                    + "</section>")
        for s in names:
            body.append(f'<section class="store" id="{_anchor(s)}"><h2>Store {html.escape(s)}</h2>'
                        + "".join(_charts_and_tables(results, s, lateness_values, timer_values, tables=True))
                        + "</section>")
    else:
        body += _charts_and_tables(results, None, lateness_values, timer_values, tables=True)
    title = "rmqdelay analysis"
    meta = f"stores: {html.escape(', '.join(names))} · as of {html.escape(format_date_ms(at_ms).replace('Z', ' UTC'))}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{title}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{title}</h1><p class=\"meta\">{meta}</p>"
            + "".join(body) + "</body></html>\n")
