"""Fleet benchmark of `rmqdelay analyze`, measured in one run on the same files:

- raw read MB/s of the record bytes of every commit log file (page cache, 1 MiB reads, after a
  warm-up pass); all MB/s below count those bytes, not the preallocated zero tail;
- the embedded engine, Spark ``local[1]`` and Spark ``local[2]``: MB/s of commit log bytes for
  one store and for all of them, per analysis that scans the commit log (lateness, retries),
  each measured two ways: ``tables`` (the summary tables the analysis computes, nothing
  written) and ``+parquet`` (the tables and the per-message table written as Parquet: on Spark
  by the executors, as ``--output`` does; the embedded engine writes it as it makes it, as the
  CLI does); on Spark each analysis first runs once cold (printed apart), then the measured runs
  are warm, in ``--rounds`` rounds (best of each kept), the embedded engine's runs alternating
  with Spark ``local[1]``'s;
- the scan alone (every column of every record, nothing kept: what each analysis starts from),
  MB/s, and each analysis' embedded engine against it, the two timed in the same rounds
  before Spark starts (a JVM running beside them slows the one and not the other);
- the ratios: Spark local[1] vs embedded (one core's worth), local[2] vs local[1] (cores),
  and how the time grows from 1 to N stores; peak RSS of this process and of the JVM (the
  commit log is never held in the driver: it streams on the executors).

    python3 benchmarks/bench_analyze.py [--stores 4] [--messages-per-store 2500000] [--dir DIR] [--keep]
                                        [--local-cluster] [--standalone]

``--local-cluster`` also runs Spark on ``local-cluster[2,1,2048]`` (two executor processes of one
core and 2 GiB each, as a real cluster's executors are separate JVMs) beside ``local[2]``.
``--standalone`` also runs it on a real standalone cluster started for the run: a master and
two workers of one core each from pyspark's own launcher, bound to 127.0.0.1 only
(rmqdelay.spark.cluster), stopped at the end however the run ends; the driver is this
process, on loopback too.

The fleet is made with `rmqdelay samples generate` (seeds 1..N) when that command exists,
else with the scan benchmark's StoreWriter mix of ~500-byte records.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from rmqdelay.analysis import StoreRef, analyze
from rmqdelay.store import Store
from rmqdelay.store.scan import commitlog_files, scan_commitlog_file

HERE = Path(__file__).resolve().parent
KINDS = ("lateness", "retries")
STANDALONE_WORKERS, STANDALONE_CORES = 2, 2  # two workers of one core each
# tables: the summary tables only; +parquet: and the per-message table written as Parquet.
WHAT = ("tables", "+parquet")


def make_store(path: Path, messages: int, seed: int) -> str:
    generate = subprocess.run([sys.executable, "-m", "rmqdelay", "samples", "generate", "--help"],
                              capture_output=True)
    if generate.returncode == 0:
        subprocess.run([sys.executable, "-m", "rmqdelay", "samples", "generate", str(path),
                        "--messages", str(messages), "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        return "samples generate"
    sys.path.insert(0, str(HERE))
    from bench_scan import build_store

    build_store(path, messages, seed)
    return "StoreWriter mix"


def data_extents(store: Path) -> list[tuple[Path, int]]:
    """(file, bytes holding records) of each commit log file: the preallocated zero tail of
    the last file is not data."""
    with Store(store) as opened:
        end = opened.end_offset()
    return [(f.path, max(0, min(f.size, end - f.start))) for f in commitlog_files(store)]


def store_bytes(path: Path) -> int:
    return sum(n for _, n in data_extents(path))


def raw_read_seconds(stores: list[Path]) -> float:
    started = time.perf_counter()
    for store in stores:
        for path, nbytes in data_extents(store):
            with open(path, "rb", buffering=0) as fh:
                while nbytes > 0:
                    nbytes -= len(fh.read(min(1 << 20, nbytes)))
    return time.perf_counter() - started


def _peak_rss_kb(pid: int) -> int:
    """VmHWM of a process (Linux), kB; 0 when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def scan_alone(stores: list[Path]) -> None:
    """The column scan every analysis starts from: every column of every record of every
    commit log file, nothing kept (what `analyze` reads before it computes anything)."""
    for store in stores:
        for file in commitlog_files(store):
            for _ in scan_commitlog_file(file, store.parent.name):
                pass


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure_spark(masters: list[str], refs: list[StoreRef], at_ms: int, root: Path, rounds: int, spark_analyze,
                  get_session) -> tuple[dict[tuple, float], dict[tuple, float], int]:
    """(best seconds per (engine, analysis, stores, what), cold first runs, the JVM's peak RSS in
    kB) of every master, the embedded engine alternating with Spark local[1]."""
    results: dict[tuple, float] = {}
    cold = {}
    jvm_peak = 0

    def record(key: tuple, seconds: float) -> None:
        results[key] = min(results.get(key, float("inf")), seconds)

    for master in masters:
        spark = get_session(master)
        if master.startswith("spark://"):
            # A task per core of the cluster, as a local master has (Spark's 200 are for big
            # clusters); its shuffle stays compressed, as a real cluster's.
            spark.conf.set("spark.sql.shuffle.partitions", str(STANDALONE_CORES))
        # A first run of each analysis pays the JVM's code generation and JIT and the Python
        # workers' imports: timed and printed apart, then the measured runs are warm.
        spark_analyze("backlog", refs[:1], at_ms, spark=spark)
        for kind in KINDS:
            out = root / f"messages-{kind}-cold"
            cold[(f"spark {master}", kind)] = timed(
                lambda: spark_analyze(kind, refs[:1], at_ms, spark=spark, messages_to=out))
            shutil.rmtree(out, ignore_errors=True)
        for _ in range(rounds):
            for kind in KINDS:
                for n in sorted({1, len(refs)}):
                    engine = f"spark {master}"
                    record((engine, kind, n, "tables"),
                           timed(lambda: spark_analyze(kind, refs[:n], at_ms, spark=spark, with_messages=False)))
                    # The per-message table stays on the executors (written as Parquet), as the CLI does.
                    out = root / f"messages-{kind}-{n}"
                    record((engine, kind, n, "+parquet"),
                           timed(lambda: spark_analyze(kind, refs[:n], at_ms, spark=spark, messages_to=out)))
                    shutil.rmtree(out, ignore_errors=True)
                    if master == "local[1]":
                        # The embedded engine in the same rounds as Spark on one core, so the
                        # ratio compares times taken side by side on a shared machine.
                        record(("embedded", kind, n, "tables"),
                               timed(lambda: analyze(kind, refs[:n], at_ms, with_messages=False)))
                        out = root / f"messages-{kind}-{n}.parquet"
                        record(("embedded", kind, n, "+parquet"),
                               timed(lambda: analyze(kind, refs[:n], at_ms, messages_to=out)))
                        out.unlink()
        jvm_peak = max(jvm_peak, _peak_rss_kb(spark.sparkContext._gateway.proc.pid))
        spark.stop()
    return results, cold, jvm_peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=int, default=4)
    parser.add_argument("--messages-per-store", type=int, default=2_500_000)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the fleet afterwards")
    parser.add_argument("--local-cluster", action="store_true", help="also measure local-cluster[2,1,2048]")
    parser.add_argument("--standalone", action="store_true",
                        help="also measure a standalone cluster (master and two 1-core workers on 127.0.0.1)")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds; the best of each is kept")
    args = parser.parse_args()

    root = args.dir or Path(tempfile.mkdtemp(prefix="rmqdelay-fleet-"))
    paths = [root / f"broker-{i}" / "store" for i in range(args.stores)]
    started = time.perf_counter()
    how = ""
    for i, path in enumerate(paths):
        if not (path / "commitlog").is_dir():
            how = make_store(path, args.messages_per_store, seed=i + 1)
    sizes = [store_bytes(p) for p in paths]
    total = sum(sizes)
    print(f"fleet: {args.stores} stores, {total / 1e9:.2f} GB of commit log ({how or 'existing'}; "
          f"made in {time.perf_counter() - started:.0f} s) in {root}")

    refs = [StoreRef(p.parent.name, p) for p in paths]
    plans = [p / "plan.json" for p in paths if (p / "plan.json").exists()]
    # The generator's own "now" (as its plan says), so some delays are pending and most delivered.
    at_ms = max((json.loads(p.read_text())["at_ms"] for p in plans), default=1_900_000_000_000)
    raw_read_seconds(paths)  # warm the page cache as far as it goes
    raw = raw_read_seconds(paths)
    raw_one = raw_read_seconds(paths[:1])
    print(f"raw read: {total / raw / 1e6:,.0f} MB/s (all), {sizes[0] / raw_one / 1e6:,.0f} MB/s (one store)")
    scan_alone(paths[:1])  # the compiled loops loaded
    # The scan alone and each analysis' embedded engine in the same rounds, before any JVM
    # runs beside them: the analysis against the scan it starts from, on equal terms.
    scan_times: list[float] = []
    alone: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for kind in KINDS:
        analyze(kind, refs, at_ms, with_messages=False)
    for _ in range(args.rounds):
        scan_times.append(timed(lambda: scan_alone(paths)))
        for kind in KINDS:
            alone[kind].append(timed(lambda: analyze(kind, refs, at_ms, with_messages=False)))
    scan_s = min(scan_times)
    print(f"the scan alone (every column of every record): {total / scan_s / 1e6:,.0f} MB/s (all, one core)")

    from rmqdelay.spark.jobs import analyze as spark_analyze
    from rmqdelay.spark.session import get_session

    with contextlib.ExitStack() as cluster:
        masters = ["local[1]", "local[2]"] + (["local-cluster[2,1,2048]"] if args.local_cluster else [])
        if args.standalone:
            from rmqdelay.spark.cluster import LOOPBACK_ENV, standalone_cluster

            os.environ.update(LOOPBACK_ENV)  # the driver's JVM binds to loopback as well
            masters.append(cluster.enter_context(
                standalone_cluster(root / "cluster", workers=STANDALONE_WORKERS, memory="2g")))
        results, cold, jvm_peak = measure_spark(masters, refs, at_ms, root, args.rounds, spark_analyze, get_session)
    shutil.rmtree(root / "cluster", ignore_errors=True)  # its logs
    process_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    for (engine, kind), seconds in cold.items():
        print(f"first run (cold) of {engine} {kind} on 1 store: {seconds:.2f} s")
    print(f"{'engine':30} {'analysis':9} {'what':9} {'stores':>6} {'seconds':>8} {'MB/s':>8} {'vs raw':>7}")
    for (engine, kind, n, what), seconds in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][3], kv[0][0], kv[0][2])):
        nbytes = sum(sizes[:n])
        print(f"{engine:30} {kind:9} {what:9} {n:>6} {seconds:8.2f} {nbytes / seconds / 1e6:8.1f} "
              f"{(nbytes / seconds) / (total / raw):7.1%}")
    n = len(refs)
    for kind in KINDS:
        for what in WHAT:
            emb1, emb_n = results[("embedded", kind, 1, what)], results[("embedded", kind, n, what)]
            s1, s2 = results[("spark local[1]", kind, n, what)], results[("spark local[2]", kind, n, what)]
            s2_1 = results[("spark local[2]", kind, 1, what)]
            print(f"{kind} ({what}): spark local[1] / embedded (same {n} stores, one core each) = {s1 / emb_n:.2f}x time; "
                  f"spark local[2] / embedded = {s2 / emb_n:.2f}x time; "
                  f"local[2] speed-up over local[1] = {s1 / s2:.2f}x; "
                  f"1 -> {n} stores: embedded {emb_n / emb1:.2f}x time, spark local[2] {s2 / s2_1:.2f}x time "
                  f"(data {sum(sizes) / sizes[0]:.2f}x)")
            if args.local_cluster:
                lc = results[("spark local-cluster[2,1,2048]", kind, n, what)]
                print(f"{kind} ({what}): local-cluster[2,1,2048] / local[2] (same {n} stores) = {lc / s2:.2f}x time")
            if args.standalone:
                sa = results[(f"spark {masters[-1]}", kind, n, what)]
                print(f"{kind} ({what}): standalone cluster (2 workers x 1 core) / local[2] (same {n} stores) = "
                      f"{sa / s2:.2f}x time; / embedded = {sa / emb_n:.2f}x time")
    for kind in KINDS:
        emb_n = min(alone[kind])
        print(f"{kind}: embedded engine / the scan alone (same {n} stores, same rounds, no JVM running) = "
              f"{scan_s / emb_n:.0%} of its MB/s ({total / emb_n / 1e6:,.0f} vs {total / scan_s / 1e6:,.0f} MB/s; "
              f"aim >= 70 %)")
    largest = max(f.size for s in paths for f in commitlog_files(s))
    print(f"peak RSS: this process (Spark driver Python and the embedded engine) {process_peak / 1024:,.0f} MB, "
          f"Spark JVM (driver + local executors) {jvm_peak / 1024:,.0f} MB "
          f"(fleet {total / 1e6:,.0f} MB, largest commit log file {largest / 1e6:,.0f} MB)")
    if not args.keep and args.dir is None:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
