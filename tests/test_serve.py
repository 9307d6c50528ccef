"""`rmqdelay serve`: /metrics over loopback, scraped with a real HTTP client (urllib) and parsed
with the Prometheus client's parser; the same figures as `inspect ... --format prometheus`;
a reading shared within --cache; a slow store served from its last reading within
--scrape-timeout; a store that cannot be read a metric and one line on stderr; SIGTERM exits 0."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import threading
import urllib.request

import pytest
import yaml
from clirun import CONSOLE_SCRIPT, broker_holding_lock, console
from conftest import SAMPLES
from prometheus_client.parser import text_string_to_metric_families
from rmqdelay.commands.serve import Exporter, make_server, parse_listen, store_reader
from rmqdelay.errors import UsageError
from rmqdelay.store.levels import parse_delay_levels
from wallclock import PINNED_MS

DELAY_STORE = SAMPLES / "delay-partial" / "store"
OWN = {"rmqdelay_store_up", "rmqdelay_scrape_timeout", "rmqdelay_scrape_duration_seconds",
       "rmqdelay_store_readings"}


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        return response.read().decode("utf-8")


def samples(text: str, skip=()) -> set[tuple]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value)
            for f in text_string_to_metric_families(text) if f.name not in skip for s in f.samples}


def value(text: str, name: str, **labels) -> float:
    [v] = [s.value for f in text_string_to_metric_families(text) for s in f.samples
           if s.name == name and all(s.labels.get(k) == x for k, x in labels.items())]
    return v


def tree(*stores) -> list:
    """Every file of the stores with its size and modification time: what a reading must leave."""
    return sorted((root, name, os.stat(os.path.join(root, name)).st_size, os.stat(os.path.join(root, name)).st_mtime_ns)
                  for store in stores for root, _, names in os.walk(store) for name in names)


@pytest.fixture
def served(sample_store):
    """An exporter of delay-partial (4.x) and timer-partial (5.x) on 127.0.0.1, a free port,
    served from a thread: (exporter, port)."""
    timer_store = sample_store("timer-partial")
    readers = [store_reader("a", DELAY_STORE, PINNED_MS, parse_delay_levels()),
               store_reader("t", timer_store, PINNED_MS, parse_delay_levels())]
    exporter = Exporter(readers, timeout_s=30, cache_s=600)
    server = make_server(exporter, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield exporter, server.server_address[1], timer_store
    server.shutdown()
    server.server_close()


def test_the_metrics_of_format_prometheus_served_and_a_reading_shared(served, capsys):
    exporter, port, timer_store = served
    before = tree(DELAY_STORE, timer_store)
    first = scrape(port)
    second = scrape(port)  # within --cache: the same reading, byte for byte
    assert second == first
    for store in ("a", "t"):
        assert value(first, "rmqdelay_store_readings_total", store=store) == 1
        assert value(first, "rmqdelay_store_up", store=store) == 1
        assert value(first, "rmqdelay_scrape_timeout", store=store) == 0
    # Every family has its HELP; the figures are those of inspect's --format prometheus, store by store.
    assert all(f.documentation for f in text_string_to_metric_families(first))
    expected = set()
    for store, path, sources in (("a", DELAY_STORE, ("delay", "consumers", "dlq", "store")),
                                 ("t", timer_store, ("delay", "timer", "consumers", "dlq", "store"))):
        for source in sources:
            proc = console("inspect", source, path, "--format", "prometheus", "--now", PINNED_MS, "--store-name", store)
            assert proc.returncode == 0, proc.stderr
            expected |= samples(proc.stdout)
    # rmqdelay_problems{source="store"}: what the store's opening and retention found (inspect store
    # lists it under problems).
    store_problems = {s for s in samples(first) if s[0] == "rmqdelay_problems" and ("source", "store") in s[1]}
    assert {(s[1], s[2]) for s in store_problems} == {((("source", "store"), ("store", n)), 0) for n in "at"}
    assert samples(first, skip=OWN) - store_problems == expected
    assert value(first, "rmqdelay_timer_pending_messages", store="t", due="roll") > 0
    assert tree(DELAY_STORE, timer_store) == before  # read-only
    assert capsys.readouterr().err == ""


@pytest.mark.skipif("faketime" in os.environ.get("LD_PRELOAD", ""),
                    reason="libfaketime moves the monotonic clock a timed wait's deadline is counted on: "
                           "the scrape's 0.2 s wait would end 400 days on")
def test_a_slow_store_is_served_from_its_last_reading_within_the_timeout(served, capsys):
    exporter, port, _ = served
    first = scrape(port)
    slow, quick = exporter.readers[1], exporter.readers[0]
    release, entered = threading.Event(), threading.Event()
    read = slow._read

    def stuck():
        entered.set()
        release.wait(30)
        return read()

    slow._read = stuck
    # The quick store's reading is one real reading handed back at once: on a loaded machine a
    # real read may itself take longer than the 0.2 s this scrape waits.
    taken = quick._read()
    quick._read = lambda: taken
    exporter.cache_s, exporter.timeout_s = 0, 0.2
    try:
        late = scrape(port)
        assert value(late, "rmqdelay_scrape_timeout", store="t") == 1
        assert value(late, "rmqdelay_scrape_timeout", store="a") == 0
        assert value(late, "rmqdelay_store_readings_total", store="t") == 1  # its last figures, still there
        assert value(late, "rmqdelay_store_readings_total", store="a") == 2
        t_only = {"rmqdelay_timer_skipped_messages", "rmqdelay_timer_pending_messages"}
        assert {s for s in samples(late) if s[0] in t_only} == {s for s in samples(first) if s[0] in t_only}
        again = scrape(port)  # the reading still runs: shared, not started again
        assert entered.is_set() and value(again, "rmqdelay_scrape_timeout", store="t") == 1
    finally:
        release.set()
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("rmqdelay: serve: store t: a reading of ") \
        and "did not finish within 0.2s; serving its last reading" in err[0], err
    exporter.timeout_s = 30
    done = scrape(port)
    assert value(done, "rmqdelay_scrape_timeout", store="t") == 0
    assert value(done, "rmqdelay_store_readings_total", store="t") >= 2


def test_the_listen_address():
    assert parse_listen("127.0.0.1:9877") == ("127.0.0.1", 9877)
    assert parse_listen(":0") == ("0.0.0.0", 0)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("127.0.0.1", "localhost:http", "::1:80", "h:70000"):
        with pytest.raises(UsageError):
            parse_listen(bad)
    proc = console("serve", DELAY_STORE, "--listen", "nowhere")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--listen" in proc.stderr
    proc = console("serve", DELAY_STORE, "--cache", "15")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--cache" in proc.stderr


def test_the_command_serves_says_what_it_cannot_read_and_ends_on_sigterm(tmp_path, store_copy):
    missing = tmp_path / "gone"
    live = store_copy("delay-partial")  # a broker holds its lock: the exporter reads it all the same
    with broker_holding_lock(live):
        child = subprocess.Popen([CONSOLE_SCRIPT, "serve", live, f"lost={missing}", "--listen", "127.0.0.1:0",
                                  "--cache", "0s", "--now", str(PINNED_MS)],
                                 stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        served_and_stopped(child, missing)
    rest = child.stderr.read().splitlines()
    assert rest == [f"rmqdelay: serve: store lost: {missing}: a broker store directory (it does not exist)"]
    assert child.stdout.read() == ""


def served_and_stopped(child: subprocess.Popen, missing) -> None:
    try:
        line = child.stderr.readline()
        assert line.startswith("rmqdelay: serve: serving http://127.0.0.1:"), line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        for n in (1, 2):
            body = scrape(port)
            assert value(body, "rmqdelay_store_up", store="delay-partial") == 1
            assert value(body, "rmqdelay_store_up", store="lost") == 0
            assert value(body, "rmqdelay_problems", store="lost", source="store") == 1
            assert value(body, "rmqdelay_store_readings_total", store="lost") == n  # --cache 0s: read each time
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


# -- docs/grafana-dashboard.json and docs/prometheus-rules.yml ------------------------------------
DOCS = SAMPLES.parent / "docs"
PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
                "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers, less functions (a name
    before '('), keywords, label matchers, grouping clauses, ranges and strings."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word, rest = match.group(0), text[match.end():].lstrip()
        if rest.startswith("(") or word.lower() in PROMQL_WORDS or re.fullmatch(r"\d+[smhdwy]", word):
            continue
        if match.start() and text[match.start() - 1] in "0123456789.$":
            continue  # 1e3, 5m, $store
        names.add(word)
    return names


def test_metric_names_of_an_expression():
    assert metric_names('max by (store, level) (rmqdelay_x{store=~"$store",kind!="dlq"}) > 600') == {"rmqdelay_x"}
    assert metric_names("time() - max by (store) (a_b) and on (store) deriv(c[5m]) > 1e3") == {"a_b", "c"}
    assert metric_names("up == 0") == {"up"}


def test_the_dashboard_and_the_rules_use_only_what_the_exporter_serves(served):
    _, port, _ = served
    body = scrape(port)
    served_names = {f.name for f in text_string_to_metric_families(body)} | \
        {s.name for f in text_string_to_metric_families(body) for s in f.samples}

    dashboard = json.loads((DOCS / "grafana-dashboard.json").read_text(encoding="utf-8"))
    # Grafana's dashboard model, as an import takes it: the fields it needs, the data source an input.
    assert isinstance(dashboard["title"], str) and dashboard["title"]
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]
    assert dashboard["__inputs"][0]["pluginId"] == "prometheus" and dashboard["__inputs"][0]["type"] == "datasource"
    [store_var] = dashboard["templating"]["list"]
    assert store_var["name"] == "store" and store_var["type"] == "query"
    assert store_var["datasource"]["uid"] == "${DS_PROMETHEUS}"
    exprs = {store_var["query"]["query"].removeprefix("label_values(").split(",")[0]}
    ids, shown = set(), 0
    for panel in dashboard["panels"]:
        assert panel["id"] not in ids and isinstance(panel["title"], str) and panel["title"]
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert {"h", "w", "x", "y"} <= set(grid) and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["type"] in ("stat", "timeseries") and panel["datasource"]["uid"] == "${DS_PROMETHEUS}"
        assert panel["targets"] and all(t["expr"] and t["refId"] for t in panel["targets"])
        exprs |= {t["expr"] for t in panel["targets"]}
        shown += 1
    assert shown >= 6
    used = set().union(*map(metric_names, exprs))
    assert used and used <= served_names, used - served_names
    for wanted in ("rmqdelay_delay_level_pending_messages", "rmqdelay_delay_level_oldest_due_age_seconds",
                   "rmqdelay_timer_pending_messages", "rmqdelay_timer_skipped_messages", "rmqdelay_problems",
                   "rmqdelay_consumer_lag_messages", "rmqdelay_dlq_messages"):
        assert wanted in used

    text = (DOCS / "prometheus-rules.yml").read_text(encoding="utf-8")
    rules = yaml.safe_load(text)
    alerts = [rule for group in rules["groups"] for rule in group["rules"]]
    assert all(g["name"] and g["rules"] for g in rules["groups"])
    for rule in alerts:
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"])
        assert re.fullmatch(r"(\d+[smhdwy])+", rule["for"])
        assert rule["labels"]["severity"] in ("critical", "warning")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        names = metric_names(rule["expr"])
        assert names and names <= served_names, (rule["alert"], names - served_names)
    paged = {metric_names(r["expr"]).pop() for r in alerts}
    assert {"rmqdelay_problems", "rmqdelay_timer_skipped_messages", "rmqdelay_delay_level_oldest_due_age_seconds",
            "rmqdelay_timer_oldest_due_age_seconds", "rmqdelay_dlq_messages", "rmqdelay_consumer_lag_seconds"} <= paged
    promtool = shutil.which("promtool")
    if promtool:  # Debian's prometheus package; absent, the structure and the names above are the check
        proc = subprocess.run([promtool, "check", "rules", str(DOCS / "prometheus-rules.yml")], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr
