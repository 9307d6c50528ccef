"""The HTML report: one page that opens without a network, whose charts show the figures the
samples are known to hold (generated-small's plan.json, the retry fixture's ground truth)."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute  # noqa: F401 (pa.compute)
import pytest
from conftest import SAMPLES, TIMER_SAMPLES, load_plan

from rmqdelay.analysis import StoreRef, analyze
from rmqdelay.analysis.report import (
    BANDS,
    THRESHOLDS,
    drain_curve,
    lateness_bands,
    render_report,
    retry_funnel,
    store_summary,
    timer_outcomes,
)

GENERATED = SAMPLES / "generated-small" / "store"
RETRY = SAMPLES / "retry" / "store"


@pytest.fixture(scope="module")
def plan() -> dict:
    return load_plan(GENERATED)


@pytest.fixture(scope="module")
def generated(plan) -> dict:
    stores = [StoreRef("generated-small", GENERATED)]
    return {kind: analyze(kind, stores, plan["at_ms"]) for kind in ("backlog", "lateness", "retries")}


def charts(page: str) -> dict[str, ET.Element]:
    """Each inline SVG of the page by its id, parsed (so it must be well-formed)."""
    return {svg.get("id"): svg for svg in (ET.fromstring(m) for m in re.findall(r"<svg\b.*?</svg>", page, re.S))}


def texts(svg: ET.Element) -> list[str]:
    return [t.text for t in svg.iter("text")]


def test_the_page_needs_no_network_and_holds_the_three_charts(generated, plan):
    page = render_report(generated, ["generated-small"], plan["at_ms"])
    assert not re.search(r"https?:|//[\w.-]+\.\w", page)
    assert not re.search(r"<(script|link|img|iframe|object|embed)\b|@import|url\(", page)
    assert set(charts(page)) == {"lateness-chart", "drain-chart", "retry-funnel"}
    for heading in ("Lateness per level", "Backlog drain", "Retry funnel"):
        assert re.search(rf"<h2[^>]*>{heading}</h2>", page)


def test_lateness_chart_counts_every_delivered_message_in_the_band_of_its_lateness(generated, plan):
    messages = generated["lateness"].messages
    delivered = messages.filter(messages.column("lateness_ms").is_valid())
    bands = lateness_bands(delivered.column("level").to_numpy(), delivered.column("lateness_ms").to_numpy())
    edges = [edge for edge, _ in BANDS]
    for level, known in plan["levels"].items():
        figures = known["lateness"]
        counts = bands.get(int(level), [0] * len(BANDS))
        assert sum(counts) == figures["count"], level
        assert counts[0] == figures["early"], level
        if figures["count"]:
            # The plan's smallest and largest lateness sit in the first and last band used.
            used = [i for i, c in enumerate(counts) if c]
            for i, value in ((used[0], figures["min"]), (used[-1], figures["max"])):
                low = edges[i - 1] if i else None
                assert (low is None or value >= low) and (edges[i] is None or value < edges[i]), (level, value)
    heat = texts(charts(render_report(generated, ["g"], plan["at_ms"]))["lateness-chart"])
    assert [t for t in heat if t.startswith("level ")] == [f"level {n}" for n in sorted(map(int, plan["levels"]))
                                                           if plan["levels"][str(n)]["lateness"]["count"]]


def drain_figures(page: str, chart: str = "drain-chart") -> dict[str, int]:
    """The figures beside a drain chart: due now and later than the chart."""
    block = page[page.rindex('<div class="drain">', 0, page.index(f'id="{chart}"')):]
    return {key: int(value) for key, value in
            re.findall(r'<div class="dfig ([\w-]+)".*?<div class="figure"[^>]*>(\d+)</div>', block)[:2]}


def bar_values(svg: ET.Element, wheel: bool = False) -> list[int]:
    return [int(r.find("title").text.rsplit(": ", 1)[1]) for r in svg.iter("rect")
            if r.find("title") is not None and (r.get("class") == "wheel") == wheel]


def test_drain_curve_holds_every_pending_message_once(generated, plan):
    due = drain_curve(generated["backlog"].tables["drain"])
    assert sum(due) == sum(level["pending"] for level in plan["levels"].values())
    # Nothing can fall due later than the longest delay ahead of the analysis time.
    longest = max(level["delay_ms"] for level in plan["levels"].values())
    assert max(m for m, n in enumerate(due) if n) <= -(-longest // 60_000)
    page = render_report(generated, ["g"], plan["at_ms"])
    svg = charts(page)["drain-chart"]
    # Each minute ahead is a bar on one axis; due now and the far tail are figures beside it.
    assert bar_values(svg) == [n for n in due[1:-1] if n]
    assert drain_figures(page) == {"due-now": due[0], "later": due[-1]}
    ticks = [int(t) for t in texts(svg) if t.isdigit()]
    assert ticks[0] == 0 and ticks[-1] >= max(due[1:-1])  # the axis reaches the tallest bar, no further than a step


def test_a_due_now_pile_never_flattens_the_minutes_ahead():
    # 12,432 due now and a tail past three hours: both are figures; the bars keep their own scale.
    drain = pa.table({"store": ["s"] * 4, "level": [1] * 4, "minute": [0, 1, 2, 400], "due": [12432, 3, 7, 50]})
    from rmqdelay.analysis.report_svg import drain_svg

    html = drain_svg(drain_curve(drain))
    svg = charts(html)["drain-chart"]
    assert bar_values(svg) == [3, 7]
    assert drain_figures(html) == {"due-now": 12432, "later": 50}
    heights = [float(r.get("height")) for r in svg.iter("rect")]
    assert max(heights) > 150  # the tallest minute fills the plot: a readable scale
    everything_overdue = drain_svg(drain_curve(drain.slice(0, 1)))
    assert "nothing falls due in the next 3 hours" in everything_overdue


def test_retry_funnel_follows_the_plan_from_attempt_1_to_the_dlq(generated, plan):
    funnel = retry_funnel(generated["retries"].tables["attempts"], generated["retries"].tables["groups"])
    attempts = [(int(a), n) for group in plan["groups"].values() for a, n in group["attempts"].items()]
    expected = [(f"attempt {k}", sum(n for a, n in attempts if a >= k)) for k in range(1, 17)]
    expected.append(("DLQ", sum(group["dlq"] for group in plan["groups"].values())))
    assert funnel == expected
    svg = charts(render_report(generated, ["g"], plan["at_ms"]))["retry-funnel"]
    shown = texts(svg)
    assert list(zip(shown[0::2], map(int, shown[1::2]))) == expected


def test_retry_funnel_of_the_real_broker_sample(tmp_path):
    """90 chains were retried; 10 went through all 16 attempts into the DLQ."""
    at_ms = 1_900_000_000_000
    result = analyze("retries", [StoreRef("retry", RETRY)], at_ms)
    funnel = dict(retry_funnel(result.tables["attempts"], result.tables["groups"]))
    assert (funnel["attempt 1"], funnel["attempt 16"], funnel["DLQ"]) == (90, 10, 10)
    assert all(a >= b for a, b in zip(list(funnel.values())[:16], list(funnel.values())[1:16]))


def test_only_the_charts_of_the_analyses_run_and_names_are_escaped(plan):
    at_ms = plan["at_ms"]
    backlog = analyze("backlog", [StoreRef("<b>broker</b>", RETRY)], at_ms)
    oldest = [t for t in backlog.tables["levels"].column("oldest_due_ms").to_pylist() if t is not None]
    assert oldest  # the retry sample still has due send-backs then
    page = render_report({"backlog": backlog}, ["<b>broker</b>"], at_ms)
    assert set(charts(page)) == {"drain-chart"}
    assert "<b>broker</b>" not in page and "&lt;b&gt;broker&lt;/b&gt;" in page
    # Times in the tables are shown as UTC times, not epoch milliseconds.
    assert str(oldest[0]) not in page
    assert "<td>" + datetime.fromtimestamp(oldest[0] / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") in \
        page.replace('<td class="">', "<td>")


@pytest.fixture(scope="module")
def timer_results(sample_store) -> tuple[dict, int]:
    stores = [StoreRef(name, sample_store(name)) for name in TIMER_SAMPLES]
    at_ms = 1795450329969  # the end of timer-partial's run
    return {kind: analyze(kind, stores, at_ms) for kind in ("backlog", "lateness")}, at_ms


def test_the_drain_curve_stacks_the_wheel_on_the_delay_levels(timer_results):
    results, at_ms = timer_results
    page = render_report(results, list(TIMER_SAMPLES), at_ms)
    svg = charts(page)["drain-chart"]
    backlog = results["backlog"]
    wheel = drain_curve(backlog.tables["timerDrain"])
    due = [a + b for a, b in zip(drain_curve(backlog.tables["drain"]), wheel)]
    assert bar_values(svg, wheel=True) == [n for n in wheel[1:-1] if n]
    assert bar_values(svg) == [n for n in due[1:-1] if n]
    assert drain_figures(page) == {"due-now": due[0], "later": due[-1]}
    assert sum(wheel) == sum(backlog.tables["timer"].column("pending").to_pylist())
    assert sum(due) == sum(wheel) + sum(backlog.tables["levels"].column("pending").to_pylist())
    assert "timer wheel" in texts(svg)


def test_the_summary_band_counts_each_store_and_colours_it_by_the_documented_thresholds(timer_results, plan):
    results, at_ms = timer_results
    page = render_report(results, list(TIMER_SAMPLES), at_ms)
    for name in TIMER_SAMPLES:
        s = store_summary(results, name, at_ms, None)
        levels = results["backlog"].tables["levels"].filter(pa.compute.equal(results["backlog"].tables["levels"]
                                                                             .column("store"), name))
        timer = results["backlog"].tables["timer"].filter(pa.compute.equal(results["backlog"].tables["timer"]
                                                                           .column("store"), name))
        assert s["pending"] == sum(levels.column("pending").to_pylist()) + sum(timer.column("pending").to_pylist())
        card = re.search(rf'<div class="card" data-store="{name}">(.*?)</div></div></div>', page, re.S).group(1)
        assert f'<div class="v">{s["pending"]}</div>' in card
        amber, red = THRESHOLDS["timerBehindMs"]
        level = "bad" if s["timerBehindMs"] >= red else "warn" if s["timerBehindMs"] >= amber else "ok"
        assert f'<div class="fig {level}" data-figure="timerBehindMs">' in card
    # The retry sample: every chain's deliveries came early (1 s levels): p99 by its size; 10 of 90 in the DLQ.
    retry = {"retries": analyze("retries", [StoreRef("retry", RETRY)], 1_900_000_000_000)}
    s = store_summary(retry, "retry", 1_900_000_000_000, None)
    assert s["dlqRate"] == 10 / 90 and s["problems"] == 0
    card = render_report(retry, ["retry"], 1_900_000_000_000)
    assert '<div class="fig bad" data-figure="dlqRate"><div class="k">DLQ rate</div><div class="v">11.1%</div>' in card


def test_a_fleet_report_has_a_section_per_store_and_wide_tables_scroll(timer_results):
    results, at_ms = timer_results
    page = render_report(results, list(TIMER_SAMPLES), at_ms)
    for name in TIMER_SAMPLES:
        section = re.search(rf'<section class="store" id="store-{name}">(.*?)</section>', page, re.S).group(1)
        assert f'id="drain-chart-{name}"' in section and f'id="timer-outcomes-{name}"' in section
        for other in TIMER_SAMPLES:
            if other != name:
                assert f">{other}<" not in section  # its tables hold its own rows only
    assert 'href="#store-timer-fresh"' in page
    # Every table sits in a container that scrolls sideways instead of running off the page.
    assert page.count("<table>") == page.count('<div class="scroll"><table>') > 0


def test_timer_charts_count_every_delivered_timer_message_and_every_cancellation(timer_results):
    results, at_ms = timer_results
    lateness = results["lateness"]
    page = render_report({"lateness": lateness}, list(TIMER_SAMPLES), at_ms)
    found = charts(page)
    # All stores together, then each store's own (its name after the chart's).
    assert {c for c in found if not c.endswith(tuple(TIMER_SAMPLES))} == {"lateness-chart", "timer-lateness-chart",
                                                                           "timer-outcomes"}
    heat = texts(found["timer-lateness-chart"])
    topics = {}
    for row in lateness.tables["timerTopics"].to_pylist():
        topics[row["real_topic"]] = topics.get(row["real_topic"], 0) + row["delivered"]
    # Each topic's label is followed by its n, the sum of its bands: every delivered timer
    # message of the topic (all stores) is in one band.
    assert [t for t in heat if t in topics] == sorted(topics)
    for topic, delivered in topics.items():
        assert int(heat[heat.index(topic) + 1]) == delivered
    outcomes = dict(timer_outcomes(lateness.tables["timerRolls"], lateness.tables["timerCancellations"]))
    assert outcomes["rolled 0×"] + outcomes["rolled 1×"] == sum(r["messages"] for r in lateness.tables["timerTopics"].to_pylist())
    assert outcomes["cancel honoured"] == 15  # timer-partial's 15 recalls that fell due in its run
    shown = texts(found["timer-outcomes"])
    assert list(zip(shown[0::2], map(int, shown[1::2]))) == list(outcomes.items())


def test_the_band_says_what_inspect_warns_of_first_a_restart_that_would_skip(timer_results, sample_store):
    from rmqdelay.analysis.findings import inspect_findings

    results, at_ms = timer_results
    later = at_ms + 10 * 86_400_000  # the wheel's read clock more than 7 days behind: a restart skips
    findings = inspect_findings([StoreRef(name, sample_store(name)) for name in TIMER_SAMPLES], later)
    skipped = findings["timer-partial"]["restartSkipped"]
    assert skipped == 828
    s = store_summary(results, "timer-partial", at_ms, None, findings["timer-partial"])
    assert s["restartSkipped"] == skipped and s["problems"] >= skipped
    card = re.search(r'<div class="card" data-store="timer-partial">(.*?)</div></div></div>',
                     render_report(results, list(TIMER_SAMPLES), at_ms, findings=findings), re.S).group(1)
    first = re.search(r'<div class="fig ([a-z]*)" data-figure="([A-Za-z]+)"><div class="k">[^<]*</div>'
                      r'<div class="v">([^<]*)</div>', card)
    assert first.groups() == ("bad", "restartSkipped", str(skipped))  # it leads the card
    assert f"{skipped} skipped by a restart now" in card and "none found" not in card


def test_a_wheel_read_past_the_analysis_time_is_not_a_negative_backlog(timer_results):
    from rmqdelay.analysis.report import _card

    results, at_ms = timer_results
    s = dict(store_summary(results, "timer-partial", at_ms, None), timerBehindMs=-(4 * 3_600_000 + 12 * 60_000))
    card = _card(s)
    assert '<div class="fig ok" data-figure="timerBehindMs">' in card
    assert "read 4h 12m past the analysis time" in card and "-4h" not in card
