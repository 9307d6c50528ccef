"""message_timeup and consumer_send_back rebuild what the real 4.9.4 broker stored."""

from conftest import SAMPLES

from rmqdelay.schedule.redelivery import consumer_send_back, message_timeup
from rmqdelay.store import Store
from rmqdelay.store.writer import StoreWriter

RECORD_FIELDS = ["topic", "queueId", "flag", "sysFlag", "bornTimestamp", "bornHost", "storeHost",
                 "reconsumeTimes", "body", "bodyCRC", "propertiesRaw", "storeSize"]


def fields(msg):
    return {f: getattr(msg, f) for f in RECORD_FIELDS}


def test_delivered_copies_match_the_broker_byte_for_byte(tmp_path):
    with Store(SAMPLES / "delay-partial" / "store") as store:
        msgs = list(store.commitlog.records())
    schedule = {m.properties["UNIQ_KEY"]: m for m in msgs if m.topic == "SCHEDULE_TOPIC_XXXX"}
    delivered = [m for m in msgs if m.topic != "SCHEDULE_TOPIC_XXXX" and "REAL_TOPIC" in m.properties]
    assert len(delivered) == 249
    with StoreWriter(tmp_path / "out", create=True, commitlog_file_size=1 << 20) as writer:
        results = [writer.put(message_timeup(schedule[m.properties["UNIQ_KEY"]])) for m in delivered]
    with Store(tmp_path / "out") as out:
        for m, r in zip(delivered, results):
            ours = out.message_at(r.commitLogOffset)
            assert fields(ours) == fields(m)
            assert "DELAY" in ours.properties  # the 4.9.4 quirk
            assert r.tagsCode == (0 if "TAGS" not in m.properties else r.tagsCode)


def test_consumer_send_back_matches_the_broker_retry_and_dlq_records(tmp_path):
    with Store(SAMPLES / "retry" / "store") as store:
        msgs = list(store.commitlog.records())
    by_key = {}
    for m in msgs:
        by_key.setdefault(m.properties["UNIQ_KEY"], []).append(m)
    # Each sent-back record follows the message the consumer received: the original (first
    # retry) or the previous %RETRY% delivery.
    checked = 0
    with StoreWriter(tmp_path / "out", create=True, commitlog_file_size=1 << 20) as writer:
        for chain in by_key.values():
            received = [m for m in chain if m.topic in ("TopicPay", "%RETRY%GID_ORDER")]
            sent_back = [m for m in chain if m.topic == "SCHEDULE_TOPIC_XXXX" or m.topic.startswith("%DLQ%")]
            for got, want in zip(received, sent_back):
                r = writer.put(consumer_send_back(got, "GID_ORDER"))
                writer.flush()
                with Store(tmp_path / "out") as out:
                    assert fields(out.message_at(r.commitLogOffset)) == fields(want)
                checked += 1
    # every retry put (368 delivered + 20 still pending) and every dead letter (10)
    assert checked == sum(m.topic == "SCHEDULE_TOPIC_XXXX" or m.topic.startswith("%DLQ%") for m in msgs) == 398
