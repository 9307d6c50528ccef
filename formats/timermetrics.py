"""config/timermetrics (TimerMetrics): per real topic, how many timer messages the timer
believes it holds.

TimerMetrics.persist writes it every second with fastjson's compact text and
SerializerFeature.BrowserCompatible, fields in alphabetical order, ``timingCount`` in the
ConcurrentHashMap's order, no trailing newline (through ``.tmp``, the old file copied to
``.bak``). The counts are advisory: in 5.3.3 they drift from the truth (cancellations
re-counted, immediate re-puts of rolls counted twice), so readers compare, never trust.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .delayoffset import DataVersion, parse_fastjson_object
from .errors import FormatError


@dataclass(slots=True, frozen=True)
class TopicCount:
    count: int
    timeStamp: int  # when the count last changed


@dataclass(slots=True)
class TimerMetrics:
    timingCount: dict[str, TopicCount] = field(default_factory=dict)
    dataVersion: DataVersion = field(default_factory=lambda: DataVersion(0, 0, 0))


def _long(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(0, f"an integer for {what}, found {value!r}")
    if not -2**63 <= value < 2**63:
        raise FormatError(0, f"a long for {what}, found {value}")
    return value


def parse_timer_metrics(text: str) -> TimerMetrics:
    """TimerMetrics.decode of the file's text (fields absent from the file keep their defaults,
    as fastjson leaves them)."""
    doc = parse_fastjson_object(text)
    counts: dict[str, TopicCount] = {}
    table = doc.get("timingCount", {})
    if table is None:
        table = {}
    if not isinstance(table, dict):
        raise FormatError(0, f'a "timingCount" object, found {type(table).__name__}')
    for topic, metric in table.items():
        if not isinstance(topic, str) or not isinstance(metric, dict):
            raise FormatError(0, f'"timingCount" entries topic: {{"count":n,"timeStamp":ms}}, found {topic!r}')
        counts[topic] = TopicCount(_long(metric.get("count", 0), f"the count of {topic}"),
                                   _long(metric.get("timeStamp", 0), f"the timeStamp of {topic}"))
    version = DataVersion(0, 0, 0)
    dv = doc.get("dataVersion")
    if dv is not None:
        if not isinstance(dv, dict):
            raise FormatError(0, f'a "dataVersion" object, found {type(dv).__name__}')
        version = DataVersion(counter=_long(dv.get("counter", 0), "dataVersion.counter"),
                              stateVersion=_long(dv.get("stateVersion", 0), "dataVersion.stateVersion"),
                              timestamp=_long(dv.get("timestamp", 0), "dataVersion.timestamp"))
    return TimerMetrics(counts, version)


def format_timer_metrics(metrics: TimerMetrics) -> str:
    """The text TimerMetrics.persist writes, ``timingCount`` in the given order."""
    dv = metrics.dataVersion
    counts = ",".join(f'{_browser_string(topic)}:{{"count":{m.count},"timeStamp":{m.timeStamp}}}'
                      for topic, m in metrics.timingCount.items())
    return (f'{{"dataVersion":{{"counter":{dv.counter},"stateVersion":{dv.stateVersion},'
            f'"timestamp":{dv.timestamp}}},"timingCount":{{{counts}}}}}')


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                  "\r": "\\r", "\t": "\\t"}


def _browser_string(text: str) -> str:
    """A string as fastjson writes it with BrowserCompatible: '/' escaped too, control
    characters and everything from 0x7F on as \\uXXXX (UTF-16 code units)."""
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ord(ch) < 32 or ord(ch) >= 127:
            data = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{int.from_bytes(data[i:i + 2], 'big'):04X}" for i in range(0, len(data), 2))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)
