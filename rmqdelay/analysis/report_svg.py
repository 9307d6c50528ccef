"""The report's charts as inline SVG (report.py puts them on the page): the lateness heat map,
the drain chart and the funnels. Each scales to the width of the page (a viewBox, drawn at
100 % up to its natural width) but not below a width where its text still reads: a narrower
screen scrolls it sideways, as it does a wide table."""

from __future__ import annotations

import html

# Lateness bands (ms, upper bound exclusive) and their labels.
BANDS = [(0, "early"), (10, "0–10 ms"), (100, "10–100 ms"), (1_000, "0.1–1 s"), (10_000, "1–10 s"),
         (60_000, "10 s–1 min"), (600_000, "1–10 min"), (None, "≥ 10 min")]
MAX_DRAIN_MINUTES = 180
_DELAY, _WHEEL, _NOW, _LATER = "#5b9bd5", "#e08e0b", "#1f5f99", "#7f8c9a"


def _svg(svg_id: str, width: float, height: float, least: float = 720) -> str:
    return (f'<div class="scroll"><svg id="{svg_id}" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
            f'style="width:100%;min-width:{min(least, width):.0f}px;max-width:{width:.0f}px;height:auto" role="img">')


_END = "</svg></div>"


def heat_svg(rows: dict, svg_id: str = "lateness-chart", label: str = "level {}") -> str:
    cell_w, cell_h, top = 96, 20, 24
    names = {key: label.format(key) for key in rows}
    left = max(70, 7 * max((len(n) for n in names.values()), default=0) + 12)
    peak = max((c for counts in rows.values() for c in counts), default=0) or 1
    width = left + cell_w * len(BANDS) + 70
    height = top + cell_h * len(rows) + 10
    parts = [_svg(svg_id, width, height)]
    for i, (_, band) in enumerate(BANDS):
        parts.append(f'<text x="{left + i * cell_w + cell_w / 2}" y="16" text-anchor="middle">{html.escape(band)}</text>')
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
    parts.append(_END)
    return "".join(parts)


def funnel_svg(funnel: list[tuple[str, int]], svg_id: str = "retry-funnel") -> str:
    bar_h, left, width = 18, 130, 720
    peak = max((n for _, n in funnel), default=0) or 1
    height = bar_h * len(funnel) + 10
    parts = [_svg(svg_id, left + width + 60, height, 600)]
    for i, (label, value) in enumerate(funnel):
        y = 4 + i * bar_h
        w = width * value / peak
        fill = "#b03a2e" if label == "DLQ" or label.startswith("cancel") else "#7a4fb0"
        parts.append(f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{html.escape(label)}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 4}" fill="{fill}"/>')
        parts.append(f'<text x="{left + w + 6:.1f}" y="{y + 13}">{value}</text>')
    parts.append(_END)
    return "".join(parts)


def _ticks(peak: int, most: int = 5) -> list[int]:
    """Round values from 0 to at least ``peak`` for a count axis: steps of 1, 2 or 5 × 10^k."""
    step, i = 1, 0
    while peak / step > most:
        step = round(step * (2, 2.5, 2)[i % 3])  # 1, 2, 5, 10, 20, 50, ...
        i += 1
    top = -(-max(peak, 1) // step) * step
    return list(range(0, top + 1, step))


def _minute_step(minutes: int) -> int:
    for step in (1, 2, 5, 10, 15, 30, 60):
        if minutes / step <= 12:
            return step
    return 60


def drain_svg(due: list[int], wheel: list[int] | None = None, svg_id: str = "drain-chart") -> str:
    """Pending messages by when they fall due (``due[m]``: minute m ahead; 0 = due now,
    MAX_DRAIN_MINUTES + 1 = later than that). The minutes ahead are bars on one count axis
    (their own scale, every minute its bar); what is due now and what falls due later than the
    chart are figures beside it (HTML, so they read at any width), never bars that would
    flatten the rest. ``wheel``: the part of each minute waiting in the timer wheel, at the
    foot of its bar."""
    due = due + [0] * (MAX_DRAIN_MINUTES + 2 - len(due))
    wheel = (wheel or []) + [0] * (MAX_DRAIN_MINUTES + 2 - len(wheel or []))
    ahead = due[1:MAX_DRAIN_MINUTES + 1]
    last = max((m for m, n in enumerate(ahead, start=1) if n), default=0)
    minutes = max(last, 10)  # the x axis: to the last minute with anything due, ten at least
    left, plot_w, plot_h, top, bottom, right = 58, 820, 200 if last else 60, 30, 44, 30
    width, height = left + plot_w + right, top + plot_h + bottom
    base = top + plot_h
    ticks = _ticks(max(ahead[:minutes], default=0))
    scale = plot_h / ticks[-1] if ticks[-1] else 0
    bar_w = plot_w / minutes
    parts = [_svg(svg_id, width, height)]
    for t in ticks:
        y = base - t * scale
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e3e8ee"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{t}</text>')
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#8795a6"/>')
    parts.append(f'<text x="12" y="{top + plot_h / 2}" transform="rotate(-90 12 {top + plot_h / 2})" '
                 f'text-anchor="middle">due in the minute</text>')
    for m in range(1, minutes + 1):
        n, w = ahead[m - 1], wheel[m]
        x = left + (m - 1) * bar_w
        label = f"+{m} min"
        if n:
            h = n * scale
            parts.append(f'<rect x="{x + 0.5:.1f}" y="{base - h:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}" '
                         f'fill="{_DELAY}"><title>{label}: {n}</title></rect>')
            if w:
                parts.append(f'<rect class="wheel" x="{x + 0.5:.1f}" y="{base - w * scale:.1f}" '
                             f'width="{max(bar_w - 1, 1):.1f}" height="{w * scale:.1f}" fill="{_WHEEL}">'
                             f'<title>{label} in the timer wheel: {w}</title></rect>')
        if m == 1 or m % _minute_step(minutes) == 0:
            parts.append(f'<text x="{x + bar_w / 2:.1f}" y="{base + 16}" text-anchor="middle">{label}</text>')
    if not last:
        parts.append(f'<text x="{left + plot_w / 2}" y="{top + plot_h / 2}" text-anchor="middle">nothing falls due in '
                     f'the next {MAX_DRAIN_MINUTES // 60} hours</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{base + 36}" text-anchor="middle">minutes ahead of the analysis '
                 f'time</text>')
    if any(wheel):  # the legend above the plot, clear of every bar
        parts.append(f'<rect x="{left}" y="6" width="10" height="10" fill="{_DELAY}"/>'
                     f'<text x="{left + 14}" y="15">delay levels</text>'
                     f'<rect x="{left + 110}" y="6" width="10" height="10" fill="{_WHEEL}"/>'
                     f'<text x="{left + 124}" y="15">timer wheel</text>')
    parts.append(_END)

    def figure(key: str, title: str, value: int, part: int, colour: str) -> str:
        return (f'<div class="dfig {key}" style="border-color:{colour}"><div class="k">{html.escape(title)}</div>'
                f'<div class="figure" style="color:{colour}">{value}</div>'
                + (f'<div class="s">{part} in the timer wheel</div>' if part else "") + "</div>")

    return ('<div class="drain">' + figure("due-now", "due now (overdue too)", due[0], wheel[0], _NOW)
            + '<div class="plot">' + "".join(parts) + "</div>"
            + figure("later", f"later than {MAX_DRAIN_MINUTES // 60} h", due[-1], wheel[-1], _LATER) + "</div>")
