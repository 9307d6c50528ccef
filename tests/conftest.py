import base64
import compileall
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from wallclock import PINNED_MS, pin_wall_clock

from rmqdelay.samples.pack import ARCHIVE_NAME, unpack
from support import warmloops

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
REAL_BROKER_SAMPLES = ["delay-fresh", "delay-partial", "retry"]
# 5.3.3 stores, kept packed (samples/NAME/store.tar.xz) and unpacked once per test session.
TIMER_SAMPLES = ["timer-fresh", "timer-partial"]
ALL_SAMPLES = sorted(p.name for p in SAMPLES.iterdir()
                     if (p / "store").is_dir() or (p / ARCHIVE_NAME).is_file())


# The JVMs the tests start (Spark drivers, spark-submit, a standalone master and worker) live
# for seconds and run small jobs: compiled by C1 only and collected by the serial collector, a
# local session and three analyses take half the CPU (28 s against 60 s) and wall time they
# take under the default JIT threads and G1. Results do not change; a user's setting wins.
for _name in ("SPARK_SUBMIT_OPTS", "SPARK_DAEMON_JAVA_OPTS"):
    os.environ.setdefault(_name, "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def load_expected(name: str) -> dict[str, list[dict]]:
    by_kind: dict[str, list[dict]] = {}
    with gzip.open(SAMPLES / name / "expected.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            obj = json.loads(line)
            by_kind.setdefault(obj["kind"], []).append(obj)
    return by_kind


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def pytest_sessionstart(session):
    """The project's modules compiled to bytecode once, as installing a package compiles its
    modules: the CLI that tests start as a child process (hundreds of times) then reads them,
    even where PYTHONDONTWRITEBYTECODE (which some shells and CI set) keeps every new
    interpreter from caching what it compiled. The numba loops too, where their cache is
    missing or older than their source (support/warmloops.py)."""
    if hasattr(session.config, "workerinput"):
        return  # the controller of pytest-xdist did it
    warming = warmloops.start() if warmloops.stale() else []
    for package in ("rmqdelay", "commands", "formats", "spark"):
        compileall.compile_dir(SAMPLES.parent / package, quiet=1)
    for proc in warming:  # the numba loops compiled once, not in every process (warmloops.py)
        proc.wait()


def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker more than the cores this process may run on. Many tests wait on
    fsync and on the processes they start (the CLI under faults and kills, the JVM): with one
    worker per core, a third of the cores' time went unused."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return cores + 1


def pytest_collection_modifyitems(config, items):
    """The tests marked ``long`` (minutes each) run first. pytest-xdist hands each worker a
    contiguous share of this order and steals from the ends of the shares, so a long test
    starts at once on the first worker instead of keeping one busy after the rest are done."""
    items.sort(key=lambda item: item.get_closest_marker("long") is None)


@pytest.fixture(autouse=True)
def _wall_clock(request, monkeypatch):
    """A test marked ``clock`` runs on the pinned wall clock (wallclock.py), one marked
    ``clock(real=True)`` on the real one."""
    marker = request.node.get_closest_marker("clock")
    if marker is not None and not marker.kwargs.get("real", False):
        pin_wall_clock(monkeypatch, marker.kwargs.get("at_ms", PINNED_MS))
    yield


@pytest.fixture(scope="session")
def sample_store(tmp_path_factory):
    """The read-only store of a sample by name: samples/NAME/store, or the packed store
    unpacked once per session. Tests that write take ``store_copy``."""
    unpacked: dict[str, Path] = {}

    def get(name: str) -> Path:
        plain = SAMPLES / name / "store"
        if plain.is_dir():
            return plain
        if name not in unpacked:
            dest = tmp_path_factory.mktemp(name) / "store"
            unpack(SAMPLES / name / ARCHIVE_NAME, dest)
            unpacked[name] = dest
        return unpacked[name]

    return get


@pytest.fixture(params=TIMER_SAMPLES)
def timer_sample(request, sample_store):
    """(name, read-only store path, expected records by kind) of each 5.3.3 sample."""
    name = request.param
    return name, sample_store(name), load_expected(name)


@pytest.fixture(params=REAL_BROKER_SAMPLES)
def real_sample(request):
    """(name, read-only store path, expected records by kind) of each real-broker sample."""
    name = request.param
    return name, SAMPLES / name / "store", load_expected(name)


@pytest.fixture
def store_copy(tmp_path, sample_store):
    """A writable copy of a sample store: store_copy('delay-fresh') -> Path."""

    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(sample_store(name), dest)
        return dest

    return make


@pytest.fixture
def local_time_zone():
    """Set the local time zone (index files are named by local time) for one test: tz("UTC")."""
    import os
    import time

    saved = os.environ.get("TZ")

    def set_zone(name: str) -> None:
        os.environ["TZ"] = name
        time.tzset()

    yield set_zone
    if saved is None:
        os.environ.pop("TZ", None)
    else:
        os.environ["TZ"] = saved
    time.tzset()


def load_plan(store_dir) -> dict:
    """A generated store's plan.json, which speaks docs/cli.md's camelCase (every field name
    checked here), under the generator's own names (what generate() returns), as the tests
    compare them."""
    import json
    import re

    plan = json.loads((Path(store_dir) / "plan.json").read_text(encoding="utf-8"))

    def snake(obj):
        if isinstance(obj, list):
            return [snake(v) for v in obj]
        if not isinstance(obj, dict):
            return obj
        out = {}
        for key, value in obj.items():
            assert "_" not in key or not key.islower(), f"plan.json field {key!r} is not camelCase"
            if re.fullmatch(r"[a-z][a-zA-Z0-9]*", key):
                key = re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m.group(1).lower(), key)
            out[key] = snake(value)
        return out

    return snake(plan)
