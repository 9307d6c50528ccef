"""Queries over a store for the Harness: every message's topic#UNIQ_KEY and topic#key, some
with a small maxNum or a time window, and keys that are not there."""
import random, sys
from rmqdelay.store import Store
rng = random.Random(14)
hx = lambda s: s.encode("utf-8", "surrogateescape").hex()
rows = []
with Store(sys.argv[1]) as st:
    for m in st.commitlog.records():
        keys = [m.properties.get("UNIQ_KEY")] + (m.properties.get("KEYS") or "").split(" ")
        for k in keys:
            if not k:
                continue
            r = rng.random()
            if r < 0.6:
                rows.append((m.topic, k, 64, 0, 2**63 - 1))
            elif r < 0.75:
                rows.append((m.topic, k, rng.choice([1, 2, 3]), 0, 2**63 - 1))
            else:
                lo = m.storeTimestamp - rng.choice([0, 500, 1500, 4000])
                rows.append((m.topic, k, 64, lo, lo + rng.choice([0, 999, 1000, 3000, 10_000])))
    for i in range(50):
        rows.append((rng.choice(["TopicTest", "OrderTopic", "SCHEDULE_TOPIC_XXXX", "Nope"]), f"missing-{i}", 64, 0, 2**63 - 1))
with open(sys.argv[2], "w") as out:
    for t, k, n, b, e in rows:
        out.write(f"{hx(t)}\t{hx(k)}\t{n}\t{b}\t{e}\n")
print(len(rows))
