"""rmqdelay: the delay machinery of a RocketMQ broker store, offline."""

__version__ = "0.2.0"
