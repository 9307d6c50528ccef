"""One self-contained HTML page of the analyses: inline SVG charts and the result tables.

Nothing is fetched to view it (no scripts, no fonts, no links off the page), so it can be
mailed or attached to a ticket. Charts: lateness distribution per level (count of delivered
messages per lateness band), backlog drain curve (messages falling due per minute ahead, the
timer wheel's pending messages stacked on the delay levels') and the retry funnel (chains
reaching attempt 1..16, then the DLQ); for 5.x stores the timer messages' lateness per real
topic and their rolls and cancellations.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone

import numpy as np
import pyarrow as pa

from rmqdelay.analysis import AnalysisResult

# Lateness bands (ms, upper bound exclusive) and their labels.
BANDS = [(0, "early"), (10, "0–10 ms"), (100, "10–100 ms"), (1_000, "0.1–1 s"), (10_000, "1–10 s"),
         (60_000, "10 s–1 min"), (600_000, "1–10 min"), (None, "≥ 10 min")]
MAX_DRAIN_MINUTES = 180
RETRY_ATTEMPTS = 16

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d2733;max-width:1100px}
h1{font-size:22px;margin:0 0 4px}h3{font-size:13px;margin:14px 0 4px;color:#3a4654}
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d8dee6;padding-bottom:4px}
p.meta{color:#5b6878;margin:0 0 12px;font-size:13px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 14px}
th,td{border:1px solid #d8dee6;padding:3px 7px;text-align:right}th{background:#f1f4f8}
td.t,th.t{text-align:left;white-space:nowrap}
svg text{font-size:11px;fill:#1d2733}
.note{color:#5b6878;font-size:12px}
"""


# Columns holding epoch milliseconds: shown as UTC times.
TIME_COLUMNS = frozenset({"oldest_due_ms", "oldest_undelivered_ms", "first_failure_ms", "last_attempt_ms", "dlq_ms",
                          "deliver_ms", "effective_ms", "intended_ms", "actual_ms", "read_ms", "slot_ms", "due_ms",
                          "out_ms", "dequeue_ms"})


def _fmt_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


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
    bar holds everything beyond MAX_DRAIN_MINUTES."""
    due = [0] * (MAX_DRAIN_MINUTES + 2)
    for minute, count in zip(drain.column("minute").to_pylist(), drain.column("due").to_pylist()):
        due[min(minute, MAX_DRAIN_MINUTES + 1)] += count
    while len(due) > 1 and due[-1] == 0:
        due.pop()
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


# -- SVG -------------------------------------------------------------------------------------
def _heat_svg(rows: dict, svg_id: str = "lateness-chart", label: str = "level {}") -> str:
    cell_w, cell_h, top = 96, 20, 24
    names = {key: label.format(key) for key in rows}
    left = max(70, 7 * max((len(n) for n in names.values()), default=0) + 12)
    peak = max((c for counts in rows.values() for c in counts), default=0) or 1
    width = left + cell_w * len(BANDS) + 70
    height = top + cell_h * len(rows) + 10
    parts = [f'<svg id="{svg_id}" width="{width}" height="{height}" role="img">']
    for i, (_, label) in enumerate(BANDS):
        parts.append(f'<text x="{left + i * cell_w + cell_w / 2}" y="16" text-anchor="middle">{html.escape(label)}</text>')
    parts.append(f'<text x="{left + cell_w * len(BANDS) + 8}" y="16">n</text>')
    for r, (level, counts) in enumerate(sorted(rows.items())):
        y = top + r * cell_h
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{html.escape(names[level])}</text>')
        parts.append(f'<text x="{left + cell_w * len(BANDS) + 8}" y="{y + 14}">{sum(counts)}</text>')
        for i, count in enumerate(counts):
            shade = 0.08 + 0.92 * (count / peak) if count else 0
            fill = f"rgba(214,96,39,{shade:.3f})" if i == 0 else f"rgba(40,110,180,{shade:.3f})"
            x = left + i * cell_w
            parts.append(f'<rect x="{x}" y="{y}" width="{cell_w - 2}" height="{cell_h - 2}" fill="{fill}" stroke="#d8dee6"/>')
            if count:
                ink = ' style="fill:#fff"' if shade > 0.6 else ""
                parts.append(f'<text x="{x + cell_w / 2}" y="{y + 14}" text-anchor="middle"{ink}>{count}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _nice_step(count: int, most: int = 12) -> int:
    """A tick step (1, 2, 5, 10, 15, 30, 60, ...) giving at most ``most`` ticks over ``count``."""
    for step in (1, 2, 5, 10, 15, 30, 60, 120, 240):
        if count / step <= most:
            return step
    return max(1, count // most)


def _drain_svg(due: list[int], beyond: bool, wheel: list[int] | None = None) -> str:
    """Bars: pending messages falling due per minute ahead (bar 0 = due now); ``wheel``: the
    part of each bar that waits in the timer wheel, drawn at its foot in another colour. A
    line: what is not yet due after each minute, against the right axis. The minutes ahead
    set the bars' scale; a "due now" bar taller than that is drawn broken, with its count, so
    one large overdue pile does not flatten the rest of the curve."""
    plot_w, plot_h, left, right, top, bottom = 880, 200, 56, 64, 22, 40
    ahead_peak = max(due[1:], default=0)
    peak = ahead_peak or due[0] or 1
    bar_w = plot_w / max(len(due), 1)
    base = top + plot_h
    later = sum(due[1:])
    width, height = left + plot_w + right, top + plot_h + bottom
    parts = [f'<svg id="drain-chart" width="{width}" height="{height}" role="img">',
             f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">{peak}</text>',
             f'<text x="{left - 6}" y="{base + 4}" text-anchor="end">0</text>',
             f'<text x="{left + plot_w + 6}" y="{top + 4}">{later}</text>',
             f'<text x="{left + plot_w + 6}" y="{base + 4}">0</text>',
             f'<text x="14" y="{top + plot_h / 2}" transform="rotate(-90 14 {top + plot_h / 2})" '
             f'text-anchor="middle">due in the minute</text>',
             f'<text x="{left + plot_w + 50}" y="{top + plot_h / 2}" '
             f'transform="rotate(90 {left + plot_w + 50} {top + plot_h / 2})" text-anchor="middle" '
             f'fill="#c0392b">not yet due</text>',
             f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#8795a6"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base}" stroke="#8795a6"/>']
    step = _nice_step(len(due))
    for minute, value in enumerate(due):
        x = left + minute * bar_w
        label = "now" if minute == 0 else (f">{MAX_DRAIN_MINUTES}m" if beyond and minute == len(due) - 1
                                           else f"+{minute}m")
        broken = value > peak
        h = plot_h if broken else plot_h * value / peak
        fill = "#1f5f99" if minute == 0 else "#5b9bd5"
        parts.append(f'<rect x="{x + 0.5:.1f}" y="{base - h:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{fill}"><title>{html.escape(label)}: {value}</title></rect>')
        if wheel and wheel[minute]:
            wh = h * wheel[minute] / value
            parts.append(f'<rect class="wheel" x="{x + 0.5:.1f}" y="{base - wh:.1f}" width="{max(bar_w - 1, 1):.1f}" '
                         f'height="{wh:.1f}" fill="#e08e0b"><title>{html.escape(label)} in the timer wheel: '
                         f'{wheel[minute]}</title></rect>')
        if broken:
            # Two white slashes across the bar: its height is not to scale.
            y = top + plot_h * 0.3
            parts.append(f'<path d="M{x - 2:.1f} {y + 6:.1f} L{x + bar_w + 2:.1f} {y:.1f} M{x - 2:.1f} {y + 12:.1f} '
                         f'L{x + bar_w + 2:.1f} {y + 6:.1f}" stroke="#fff" stroke-width="3"/>')
            parts.append(f'<text x="{x + 2:.1f}" y="{top - 6}">{value} due now</text>')
        last = beyond and minute == len(due) - 1
        crowded = beyond and not last and len(due) - 1 - minute < step  # its label would overlap the last one
        if (minute % step == 0 and not crowded) or last:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{base + 16}" text-anchor="middle">{html.escape(label)}</text>')
    remaining, points = later, []
    for minute, value in enumerate(due[1:], start=1):
        remaining -= value
        points.append(f"{left + (minute + 1) * bar_w:.1f},{base - plot_h * remaining / (later or 1):.1f}")
    if later:
        parts.append(f'<polyline points="{left + bar_w:.1f},{top} {" ".join(points)}" fill="none" stroke="#c0392b" '
                     f'stroke-width="2"/>')
    if wheel and any(wheel):
        parts.append(f'<rect x="{left + plot_w - 210}" y="{top}" width="10" height="10" fill="#5b9bd5"/>'
                     f'<text x="{left + plot_w - 196}" y="{top + 9}">delay levels</text>'
                     f'<rect x="{left + plot_w - 110}" y="{top}" width="10" height="10" fill="#e08e0b"/>'
                     f'<text x="{left + plot_w - 96}" y="{top + 9}">timer wheel</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{base + 34}" text-anchor="middle">minutes ahead of the analysis time</text>')
    parts.append("</svg>")
    return "".join(parts)


def _funnel_svg(funnel: list[tuple[str, int]], svg_id: str = "retry-funnel") -> str:
    bar_h, left, width = 18, 130, 720
    peak = max((n for _, n in funnel), default=0) or 1
    height = bar_h * len(funnel) + 10
    parts = [f'<svg id="{svg_id}" width="{left + width + 60}" height="{height}" role="img">']
    for i, (label, value) in enumerate(funnel):
        y = 4 + i * bar_h
        w = width * value / peak
        fill = "#b03a2e" if label == "DLQ" or label.startswith("cancel") else "#7a4fb0"
        parts.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{html.escape(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 4}" fill="{fill}"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 13}">{value}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table_html(caption: str, table: pa.Table, limit: int = 200) -> str:
    title = f"<h3>{html.escape(caption)}</h3>"
    if table.num_rows == 0:
        return title + '<p class="note">no rows</p>'
    names = table.column_names
    text_cols = {f.name for f in table.schema if pa.types.is_string(f.type)}
    head = "".join(f'<th class="{"t" if n in text_cols else ""}">{html.escape(n)}</th>' for n in names)
    body = []
    for row in table.slice(0, limit).to_pylist():
        cells = []
        for n in names:
            v = row[n]
            if v is None:
                text = "–"
            elif n in TIME_COLUMNS:
                text = _fmt_time(v)
            else:
                text = f"{v:.4f}" if isinstance(v, float) else str(v)
            cells.append(f'<td class="{"t" if n in text_cols else ""}">{html.escape(text)}</td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    more = f'<p class="note">{table.num_rows - limit} more rows in --output / --json</p>' if table.num_rows > limit else ""
    return f"{title}<table><tr>{head}</tr>{''.join(body)}</table>{more}"


def _timer_section(result: AnalysisResult, timer_values: pa.Table | None) -> str:
    values = timer_values if timer_values is not None else result.timer_messages.select(["real_topic", "lateness_ms"])
    values = values.filter(values.column("lateness_ms").is_valid())
    topics = np.array(values.column("real_topic").to_pylist(), dtype=object)
    bands = lateness_bands(topics, values.column("lateness_ms").to_numpy()) if values.num_rows else {}
    heat = (_heat_svg(bands, "timer-lateness-chart", "{}") if bands
            else '<p class="note">no delivered timer message</p>')
    outcomes = timer_outcomes(result.tables["timer_rolls"], result.tables["timer_cancellations"])
    return ("<h2>Timer messages</h2><p class=\"note\">Delivered timer messages by lateness (store time of "
            "the delivered copy − its TIMER_OUT_MS) per real topic, all stores together; early ones in "
            "orange.</p>" + heat
            + "<p class=\"note\">Timer messages by how often the wheel rolled them, and the cancellations by "
            "what became of them.</p>" + _funnel_svg(outcomes, "timer-outcomes")
            + _table_html("lateness: timer_topics", result.tables["timer_topics"])
            + _table_html("lateness: timer_rolls", result.tables["timer_rolls"])
            + _table_html("lateness: timer_cancellations", result.tables["timer_cancellations"]))


# -- the page --------------------------------------------------------------------------------
def render_report(results: dict[str, AnalysisResult], stores: list[str], at_ms: int,
                  lateness_values: pa.Table | None = None, timer_values: pa.Table | None = None) -> str:
    """The page for the analyses that ran. ``lateness_values`` (level, lateness_ms) and
    ``timer_values`` (real_topic, lateness_ms) stand in for the lateness per-message tables
    when those were written elsewhere."""
    sections = []
    if "lateness" in results:
        result = results["lateness"]
        values = lateness_values if lateness_values is not None else result.messages.select(["level", "lateness_ms"])
        values = values.filter(values.column("lateness_ms").is_valid())
        bands = lateness_bands(values.column("level").to_numpy(), values.column("lateness_ms").to_numpy())
        chart = _heat_svg(bands) if bands else '<p class="note">no delivered delay message</p>'
        sections.append("<h2>Lateness per level</h2><p class=\"note\">Delivered messages by lateness "
                        "(store time of the delivered copy − deliver time of its schedule unit); "
                        "all stores together; early deliveries in orange, n = delivered.</p>" + chart
                        + _table_html("lateness: levels", result.tables["levels"]) + _table_html("lateness: topics", result.tables["topics"]))
        if result.tables.get("timer_topics") is not None and result.tables["timer_topics"].num_rows:
            sections.append(_timer_section(result, timer_values))
    if "backlog" in results:
        result = results["backlog"]
        due = drain_curve(result.tables["drain"])
        wheel = None
        timer = result.tables.get("timer")
        if timer is not None and timer.num_rows:
            wheel = drain_curve(result.tables["timer_drain"])
            wheel += [0] * (len(due) - len(wheel))
            due = [a + b for a, b in zip(due + [0] * (len(wheel) - len(due)), wheel)]
        chart = (_drain_svg(due, len(due) > MAX_DRAIN_MINUTES + 1, wheel) if any(due)
                 else '<p class="note">nothing pending</p>')

        sections.append("<h2>Backlog drain curve</h2><p class=\"note\">Pending delay messages falling due "
                        "per minute ahead of the analysis time, all stores together (first bar: due now, overdue included); "
                        "the line: how many of those not yet due are still waiting after each minute.</p>" + chart
                        + _table_html("backlog: levels", result.tables["levels"]) + _table_html("backlog: retry_lag", result.tables["retry_lag"])
                        + (_table_html("backlog: timer", timer) if wheel is not None else ""))
    if "retries" in results:
        result = results["retries"]
        funnel = retry_funnel(result.tables["attempts"], result.tables["groups"])
        chart = (_funnel_svg(funnel) if funnel[0][1] or funnel[-1][1] else '<p class="note">no message entered the retry path</p>')
        sections.append("<h2>Retry funnel</h2><p class=\"note\">Chains that reached each attempt "
                        "through %RETRY%group, then the dead-letter queue.</p>" + chart
                        + _table_html("retries: groups", result.tables["groups"]) + _table_html("retries: anomalies", result.tables["anomalies"]))
    title = "rmqdelay analysis"
    meta = f"stores: {html.escape(', '.join(stores))} · as of {_fmt_time(at_ms)}"
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{_STYLE}</style></head><body><h1>{title}</h1><p class=\"meta\">{meta}</p>"
            + "".join(sections) + "</body></html>\n")

