"""`rmqdelay serve STORE...`: a Prometheus exporter. It serves /metrics over HTTP with what
`--format prometheus` prints of each store (storemetrics.py), read-only and without the lock, so
it can run beside the broker on its store.

Each store is read in a thread of its own, at most one reading per store at a time; a reading is
reused for ``--cache`` (scrapes inside it, and scrapes that come while it runs, share it), and a
scrape waits at most ``--scrape-timeout`` for it: a store that takes longer is served with its
last finished reading and rmqdelay_scrape_timeout 1, the reading going on for the next scrape.
A store that cannot be read is rmqdelay_store_up 0 and its one line on stderr, said once until
it reads again; the exporter goes on serving the others.

The store modules, prometheus_client and the HTTP server are imported when it runs
(`serve --help` loads none of them)."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from rmqdelay.errors import UsageError

from . import options
from .options import parse_duration_ms

DEFAULT_PORT = 9877
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT``, ``[IPv6]:PORT`` or ``:PORT`` (every IPv4 interface); port 0 takes a free one."""
    host, sep, port = text.strip().rpartition(":")
    bare_ipv6 = ":" in host and not (host.startswith("[") and host.endswith("]"))  # its port cannot be told apart
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not port.isdigit() or int(port) > 65535 or bare_ipv6:
        raise UsageError(f"--listen: HOST:PORT such as 127.0.0.1:{DEFAULT_PORT}, [::1]:{DEFAULT_PORT} or "
                         f":{DEFAULT_PORT} (every interface), found {text!r}")
    return host or "0.0.0.0", int(port)


def _say(line: str) -> None:
    sys.stderr.write(f"rmqdelay: serve: {line}\n")
    sys.stderr.flush()


@dataclass(slots=True)
class _Done:
    reading: object  # storemetrics.Reading
    finished: float  # time.monotonic() at its end
    seconds: float  # how long it took


class StoreReader:
    """One store's readings: the last finished one and the one running, if any."""

    def __init__(self, label: str, path: Path, read) -> None:
        self.label, self.path = label, path
        self._read = read  # () -> Reading
        self._lock = threading.Lock()
        self.last: _Done | None = None
        self.running: threading.Event | None = None  # set when the running reading ends
        self.readings = 0  # finished readings, a counter
        self._said: set[str] = set()  # problems said on stderr and not gone since
        self._late_said = False

    def fresh(self, cache_s: float) -> tuple[_Done | None, threading.Event | None]:
        """The last reading when it is younger than ``cache_s``; else the event of the reading
        that will replace it (started here unless one is running)."""
        with self._lock:
            if self.last is not None and time.monotonic() - self.last.finished < cache_s:
                return self.last, None
            if self.running is None:
                self.running = threading.Event()
                self._late_said = False
                threading.Thread(target=self._run, args=(self.running,), name=f"read {self.label}",
                                 daemon=True).start()
            return None, self.running

    def _run(self, done: threading.Event) -> None:
        from .storemetrics import Reading
        from .prometheus import problems_family

        start = time.monotonic()
        try:
            reading = self._read()
        except Exception as exc:  # noqa: BLE001 - what the readers did not foresee: a problem, not a dead exporter
            line = f"{self.path}: {type(exc).__name__}: {' '.join(str(exc).split())}"
            reading = Reading([problems_family(self.label, "store", [line])], [line], opened=False)
        end = time.monotonic()
        with self._lock:
            self.last = _Done(reading, end, end - start)
            self.readings += 1
            self.running = None
            new = [p for p in reading.problems if p not in self._said]
            self._said = set(reading.problems)
        for line in new:  # a failure is said once, when it is found, not at every scrape
            _say(f"store {self.label}: {line}")
        done.set()

    def late(self, timeout_s: float) -> None:
        """The running reading took longer than the scrape may wait: said once per reading."""
        with self._lock:
            if self._late_said:
                return
            self._late_said = True
        _say(f"store {self.label}: a reading of {self.path} did not finish within {timeout_s:g}s; serving "
             + ("its last reading" if self.last is not None else "no figures yet") + " (the reading goes on)")


class Exporter:
    """What each scrape of /metrics collects: every store's reading (fresh, shared or
    stale), and the exporter's own figures of each."""

    def __init__(self, readers: list[StoreReader], timeout_s: float, cache_s: float) -> None:
        self.readers, self.timeout_s, self.cache_s = readers, timeout_s, cache_s

    def families(self) -> list:
        from .prometheus import Family
        from .storemetrics import merged

        deadline = time.monotonic() + self.timeout_s
        wanted = [(r, *r.fresh(self.cache_s)) for r in self.readers]  # every store's reading starts at once
        up = Family("rmqdelay_store_up",
                    "1 when the figures of the store come from a reading that opened it; 0 when it could not be "
                    "opened (rmqdelay_problems{source=\"store\"} and a line on stderr say why) or no reading has "
                    "finished yet.")
        timed_out = Family("rmqdelay_scrape_timeout",
                           "1 when this scrape's reading of the store did not finish within --scrape-timeout: the "
                           "figures are those of its last finished reading (their rmqdelay_reading_timestamp_seconds "
                           "says when), or none yet; the reading goes on for the next scrape.")
        duration = Family("rmqdelay_scrape_duration_seconds", "How long the last finished reading of the store took.")
        readings = Family("rmqdelay_store_readings_total",
                          "Readings of the store finished since the exporter started (scrapes within --cache share "
                          "one).", "counter")
        out = []
        for reader, done, event in wanted:
            late = False
            if done is None:
                late = not event.wait(max(deadline - time.monotonic(), 0))
                done = reader.last
                if late:
                    reader.late(self.timeout_s)
            labels = {"store": reader.label}
            up.add(labels, int(done is not None and done.reading.opened))
            timed_out.add(labels, int(late))
            if done is not None:
                duration.add(labels, done.seconds)
                out += done.reading.families
            readings.add(labels, reader.readings)
        return merged([up, timed_out, duration, readings, *out])


def _registry(exporter: Exporter):
    from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily

    class Collector:
        def collect(self):
            for family in exporter.families():
                names = _label_names(family)
                if family.type == "counter":
                    metric = CounterMetricFamily(family.name.removesuffix("_total"), family.help,
                                                 labels=names)
                else:
                    metric = GaugeMetricFamily(family.name, family.help or family.name, labels=names)
                for labels, value in family.samples:
                    metric.add_metric([labels.get(k, "") for k in names], value)
                yield metric

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Collector())
    return registry


def _label_names(family) -> list[str]:
    names: list[str] = []
    for labels, _ in family.samples:
        names += [k for k in labels if k not in names]
    return names


def make_server(exporter: Exporter, host: str, port: int):
    """An HTTP server (not yet serving) answering /metrics from ``exporter``, and / with a
    line pointing there; each request in a thread of its own."""
    import socket
    from socketserver import ThreadingMixIn
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server as wsgi_server

    from prometheus_client import make_wsgi_app

    metrics = make_wsgi_app(_registry(exporter))

    def app(environ, start_response):
        if environ.get("PATH_INFO") in ("/metrics", "/metrics/"):
            return metrics(environ, start_response)
        body = b"rmqdelay exporter: the metrics are at /metrics\n"
        status = "200 OK" if environ.get("PATH_INFO") == "/" else "404 Not Found"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    class Server(ThreadingMixIn, WSGIServer):
        daemon_threads = True
        allow_reuse_address = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    class Quiet(WSGIRequestHandler):
        def log_message(self, format, *args):  # noqa: A002 - no access log on stderr: that is for failures
            pass

    return wsgi_server(host, port, app, server_class=Server, handler_class=Quiet)


def serve(
    stores: list[str] = typer.Argument(..., metavar="STORE...", show_default=False,
                                       help="Store directories: PATH or NAME=PATH (the name is the metrics' store "
                                            "label; default the directory's name, or its parent's for "
                                            ".../BROKER/store)."),
    listen: str = typer.Option(DEFAULT_LISTEN, "--listen", metavar="HOST:PORT",
                               help="Where to serve /metrics: HOST:PORT, [::1]:PORT, or :PORT for every interface; "
                                    "port 0 takes a free one (said on stderr)."),
    scrape_timeout: str = options.duration("--scrape-timeout",
                                           "How long a scrape waits for a store's reading; a store that takes longer "
                                           "is served with its last reading and rmqdelay_scrape_timeout 1. Keep it "
                                           "below Prometheus' scrape_timeout (10s by default)", "8s"),
    cache: str = options.duration("--cache", "How long a reading is reused: scrapes within it, and scrapes while "
                                             "it runs, share one reading. About the scrape interval; 0s reads at "
                                             "every scrape", "15s"),
    now: Optional[str] = options.now("every reading is judged at"),
    message_delay_level: Optional[str] = options.message_delay_level(),
    broker_config: Optional[Path] = options.broker_config("messageDelayLevel and the timer settings"),
) -> None:
    """Serve the metrics of `--format prometheus` for each STORE over HTTP at /metrics, for
    Prometheus to scrape: read-only and without the lock (safe beside the running broker),
    each scrape bounded by --scrape-timeout, a reading reused for --cache. Runs until SIGTERM
    or Ctrl-C, then exits 0.

    Example: rmqdelay serve /data/broker-a/store b=/data/broker-b/store --listen 0.0.0.0:9877
    """
    import signal

    from rmqdelay.store.ref import store_ref

    from .common import parse_time_ms

    host, port = parse_listen(listen)
    timeout_ms = parse_duration_ms(scrape_timeout, "--scrape-timeout")
    cache_ms = parse_duration_ms(cache, "--cache")
    if timeout_ms <= 0:
        raise UsageError(f"--scrape-timeout: more than 0s, found {scrape_timeout!r}")
    fixed_ms = parse_time_ms(now, "--now") if now else None
    levels = options.delay_level_table(message_delay_level, broker_config)
    refs = [store_ref(s) for s in stores]
    names = [r.name for r in refs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise UsageError(f"two stores named {dupes[0]!r}; name them NAME=PATH")
    exporter = Exporter([store_reader(r.name, r.path, fixed_ms, levels, broker_config) for r in refs],
                        timeout_ms / 1000, cache_ms / 1000)
    try:
        server = make_server(exporter, host, port)
    except OSError as exc:
        raise UsageError(f"--listen: cannot listen on {listen!r}: {exc.strerror or exc}") from None
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="http", daemon=True)
    thread.start()
    shown = f"[{server.server_address[0]}]" if ":" in server.server_address[0] else server.server_address[0]
    _say(f"serving http://{shown}:{server.server_address[1]}/metrics for {len(refs)} store(s): {', '.join(names)}")
    while not stop.wait(1):
        pass
    server.shutdown()
    server.server_close()


def store_reader(label: str, path: Path, fixed_ms: int | None, levels: dict[int, int],
                 broker_config: Path | None = None) -> StoreReader:
    """The reader of one store: each reading at ``fixed_ms`` (--now), else at the wall clock."""
    def read():
        from .storemetrics import read_store

        return read_store(path, label, fixed_ms if fixed_ms is not None else time.time_ns() // 1_000_000, levels,
                          broker_config)

    return StoreReader(label, path, read)
