"""Compare the deliveries in harness reports with a reference run.

    python compare.py REPORT.json [REPORT2.json ...] --reference samples/timer-partial/deliver-all.json.gz
    python compare.py REPORT.json --rmqdelay-store END STORE   (first what `rmqdelay run` wrote into STORE past END)
    python compare.py REPORT.json --properties-vs END STORE    (the same deliveries' properties: real vs rmqdelay)

Several reports (or a `rmqdelay run` and then a harness report) are taken together, in order: a
store handed from one run to the next must deliver each message once over all of them. A delivery
is keyed by (topic, UNIQ_KEY, reconsumeTimes); prints counts per kind, deliveries missing from or
extra to the reference, duplicates, and timer deliveries whose TIMER_OUT_MS or queue differ.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
from collections import Counter

DELIVERED = {"timer-delivered", "timer-delivered-never-enqueued", "delay-delivered"}


def report_deliveries(path):
    with open(path, encoding="utf-8") as fh:
        rep = json.load(fh)
    out = []
    for r in rep["put"]:
        if r.get("kind") in DELIVERED:
            p = r.get("properties") or {}
            out.append({"kind": r["kind"], "topic": r["topic"], "queueId": r["queueId"], "uniqKey": r["uniqKey"],
                        "reconsumeTimes": r.get("reconsumeTimes", 0), "timerOutMs": p.get("TIMER_OUT_MS"),
                        "rollTimes": p.get("TIMER_ROLL_TIMES"), "source": path})
    return out, rep


def rmqdelay_deliveries(before_end, store, upto=None):
    """Records rmqdelay wrote past the commit log end `before_end` (and before `upto`: where the
    harness started, when it ran on this same store), read with rmqdelay's own decoder."""
    proc = subprocess.run([sys.executable, "-m", "rmqdelay", "inspect", "commitlog", store, "--json"],
                          capture_output=True, text=True, check=True)
    out = []
    for line in proc.stdout.splitlines():
        o = json.loads(line)
        if o.get("commitLogOffset", -1) < before_end or (upto is not None and o["commitLogOffset"] >= upto):
            continue
        p = o.get("properties") or {}
        topic = o["topic"]
        if topic in ("rmq_sys_wheel_timer", "SCHEDULE_TOPIC_XXXX"):
            continue
        kind = ("timer-delivered-never-enqueued" if p.get("TIMER_ENQUEUE_MS") == str(2**63 - 1) else "timer-delivered") \
            if "TIMER_DEQUEUE_MS" in p else "delay-delivered" if "DELAY" in p and "REAL_TOPIC" in p else "other"
        if kind in DELIVERED:
            out.append({"kind": kind, "topic": topic, "queueId": o["queueId"], "uniqKey": p.get("UNIQ_KEY"),
                        "reconsumeTimes": o.get("reconsumeTimes", 0), "timerOutMs": p.get("TIMER_OUT_MS"),
                        "rollTimes": p.get("TIMER_ROLL_TIMES"), "source": "rmqdelay", "properties": p,
                        "record": o})
    return out


def properties_vs(report, end, store):
    """Per property name, how many deliveries the real code and rmqdelay both made differ in it
    (TIMER_DEQUEUE_MS, the dequeuing wall clock, left out), and in the record fields."""
    with open(report, encoding="utf-8") as fh:
        real = {(r["topic"], r["uniqKey"], r["reconsumeTimes"]): r for r in json.load(fh)["put"]
                if r.get("kind") in DELIVERED}
    diff, fields, n, examples = Counter(), Counter(), 0, []
    for d in rmqdelay_deliveries(end, store):
        r = real.get(key(d))
        if r is None:
            continue
        n += 1
        rp, mp = r["properties"], d["properties"]
        for name in sorted(set(rp) | set(mp)):
            if name != "TIMER_DEQUEUE_MS" and rp.get(name) != mp.get(name):
                diff[name] += 1
                if len(examples) < 5:
                    examples.append((key(d), name, rp.get(name), mp.get(name)))
        for f in ("queueId", "flag", "sysFlag", "bornTimestamp", "bornHost", "storeHost", "reconsumeTimes", "bodyCRC"):
            a, b = r[f], d["record"][f]
            if f in ("bornHost", "storeHost"):
                a = a.lstrip("/")
            if str(a) != str(b):
                fields[f] += 1
    print("deliveries made by both:", n, "property differences:", dict(diff), "field differences:", dict(fields))
    for e in examples:
        print("  ", e)


def key(d):
    return (d["topic"], d["uniqKey"], d.get("reconsumeTimes") or 0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("reports", nargs="+")
    ap.add_argument("--reference")
    ap.add_argument("--rmqdelay-store", nargs=2, metavar=("COMMITLOG_END_BEFORE", "STORE"),
                    help="also count what rmqdelay wrote into STORE past this commit log offset (first)")
    ap.add_argument("--properties-vs", nargs=2, metavar=("COMMITLOG_END_BEFORE", "STORE"),
                    help="compare the properties of deliveries in REPORT with those rmqdelay wrote into STORE")
    a = ap.parse_args()
    if a.properties_vs:
        properties_vs(a.reports[0], int(a.properties_vs[0]), a.properties_vs[1])
        return 0
    got = []
    if a.rmqdelay_store:
        with open(a.reports[0], encoding="utf-8") as fh:
            first = json.load(fh)
        same = "store" in first and os.path.exists(first["store"]) and os.path.samefile(first["store"], a.rmqdelay_store[1])
        got += rmqdelay_deliveries(int(a.rmqdelay_store[0]), a.rmqdelay_store[1],
                                   first.get("commitLogEndBeforeByScan") if same else None)
    for r in a.reports:
        got += report_deliveries(r)[0]
    print("delivered:", dict(Counter((d["source"].rsplit("/", 1)[-1], d["kind"]) for d in got)))
    c = Counter(key(d) for d in got)
    dups = [k for k, n in c.items() if n > 1]
    print("delivered more than once:", len(dups), dups[:10])
    if a.reference:
        with gzip.open(a.reference, "rt", encoding="utf-8") as fh:
            ref = json.load(fh)
        refd = {}
        for d in ref["deliveries"]:
            if d["origin"].startswith(("timer-delivered", "delay-delivered")):
                refd[(d["topic"], d["uniqKey"], d.get("reconsumeTimes") or 0)] = d
        # reference deliveries carry no reconsumeTimes: match on (topic, uniqKey)
        ref2 = {(k[0], k[1]): v for k, v in refd.items()}
        got2 = {}
        for d in got:
            got2.setdefault((d["topic"], d["uniqKey"]), d)
        missing = sorted(set(ref2) - set(got2))
        extra = sorted(set(got2) - set(ref2))
        print("reference deliveries:", len(ref2), "matched:", len(set(ref2) & set(got2)))
        print("missing (reference delivered, not here):", len(missing), missing[:10])
        print("extra (here, not in reference):", len(extra), extra[:10])
        diff = []
        for k in set(ref2) & set(got2):
            r, g = ref2[k], got2[k]
            if r["queueId"] != g["queueId"] or (r.get("timerOutMs") is not None
                                                and str(r["timerOutMs"]) != str(g["timerOutMs"])):
                diff.append((k, r["queueId"], g["queueId"], r.get("timerOutMs"), g["timerOutMs"]))
        print("queue or TIMER_OUT_MS differ:", len(diff), diff[:5])
    return 0


if __name__ == "__main__":
    sys.exit(main())
