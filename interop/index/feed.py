"""Write the dispatch requests of a store's commit log as the Harness reads them."""
import sys
from rmqdelay.store import Store
def hx(s):
    return "\\N" if s is None else s.encode("utf-8", "surrogateescape").hex()
with Store(sys.argv[1]) as st, open(sys.argv[2], "w") as out:
    for m in st.commitlog.records():
        props = m.properties
        keys = props.get("KEYS") if m.propertiesRaw else ""
        out.write(f"{m.commitLogOffset}\t{m.storeTimestamp}\t{m.sysFlag}\t{hx(m.topic)}\t{hx(keys)}\t{hx(props.get('UNIQ_KEY'))}\n")
