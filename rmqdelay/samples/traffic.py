"""Who writes what into a sample store: the broker, the topics (queues, tags, keys), the
consumer groups (how often they fail, how far they lag), the producers' user properties and
bodies, and the way a failed message goes round the retry path. Fixed here, so that one seed
always gives one store."""

from __future__ import annotations

import random
from dataclasses import dataclass

from rmqdelay.uniqkey import UniqKeyFactory

STORE_HOST = (bytes([10, 10, 0, 5]), 10911)
BASE_TIME_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z; the seed picks a start in the 30 days after


@dataclass(frozen=True)
class TopicSpec:
    name: str
    queues: int
    weight: float
    tags: tuple[str | None, ...]
    key_prefix: str


@dataclass(frozen=True)
class GroupSpec:
    name: str
    topics: tuple[str, ...]
    fail_rate: float  # share of the messages it consumes that fail the first time
    lag_ms: int  # from store (or delivery) to consumption
    retry_lag_ms: int  # mean extra wait before a %RETRY% copy is consumed (pulled less eagerly)


TOPICS = (
    TopicSpec("TopicOrder", 8, 0.4, ("TagCreate", "TagPay", "TagCancel"), "ORDER_"),
    TopicSpec("TopicPay", 4, 0.25, ("pay", "refund"), "PAY_"),
    TopicSpec("TopicLogistics", 4, 0.2, ("ship", "sign", "return"), "WAYBILL_"),
    TopicSpec("TopicNotify", 2, 0.15, ("sms", "mail", None), "NOTE_"),
)
GROUPS = (
    GroupSpec("GID_ORDER", ("TopicOrder",), 0.04, 40, 15_000),
    GroupSpec("GID_PAY", ("TopicPay",), 0.07, 25, 5_000),
    # A consumer short of instances: its retries wait minutes, so its retry queue lags.
    GroupSpec("GID_LOGISTICS", ("TopicLogistics",), 0.05, 120, 300_000),
)
CARRIERS = ("SF", "YTO", "ZTO", "DHL")
REGIONS = ("cn-hangzhou", "cn-shanghai", "cn-beijing", "ap-southeast-1", "eu-central-1")
WORDS = ("order", "payment", "delay", "retry", "queue", "offset", "commitlog", "schedule",
         "消息", "订单", "延迟", "支付成功", "Ünïcödé", "emoji✓", "alpha", "beta", "gamma")
USER_KEYS = {"TopicOrder": ("orderId", "region"), "TopicPay": ("amount", "备注"), "TopicLogistics": ("carrier",),
             "TopicNotify": ()}


def body_pool(rng: random.Random, count: int = 256) -> list[bytes]:
    """A pool of bodies (shared by reference): ~600 bytes on average, most of them smaller."""
    pool = []
    for i in range(count):
        # Mostly small business payloads (a JSON order, a payment notice), a few large ones.
        size = rng.choice((40, 80, 120, 160, 200, 240, 300, 400, 600, 1800, 4000))
        words = []
        length = 0
        while length < size:
            w = rng.choice(WORDS)
            words.append(w)
            length += len(w.encode("utf-8")) + 1
        pool.append(f"msg-{i}: {' '.join(words)}".encode("utf-8")[:size])
    return pool


@dataclass
class Producer:
    host: tuple[bytes, int]
    uniq: UniqKeyFactory


class RetryChain:
    """One message's way round the retry path for one group."""

    __slots__ = ("group", "target", "sendbacks", "copied", "dlq", "folded")

    def __init__(self, group: int, target: int) -> None:
        self.group = group
        self.target = target  # send-backs it will need; 17 (16 retries + 1) ends in the DLQ
        self.sendbacks = 0  # reconsumeTimes of the last send-back written
        self.copied = 0  # reconsumeTimes of the last %RETRY% copy written
        self.dlq = False
        self.folded = False
