"""The 5.x timer wheel, offline: the timer log, the wheel, the timer checkpoint and metrics
(``TimerStore``), what they say to an operator (``status``) and what is wrong with them
(``verify``)."""

from rmqdelay.timer.store import TimerStore

__all__ = ["TimerStore"]
