"""The broker's files, offline: mapped file queues, the commit log, consume queues, the lock,
the checkpoint, the broker's config files, and the one writer that appends to them."""

from rmqdelay.store.directory import QueueInfo, Store

__all__ = ["QueueInfo", "Store"]
