"""broker.conf: the properties file a broker starts with (``mqbroker -c``), read as
java.util.Properties reads it, for the few settings rmqdelay follows (messageDelayLevel,
maxHashSlotNum, maxIndexNum, messageIndexEnable)."""

from __future__ import annotations

from pathlib import Path

from rmqdelay.errors import UsageError

_SEPARATORS = "=: \t\f"


def read_broker_properties(path: Path | str) -> dict[str, str]:
    """Every ``key=value`` (or ``key: value``, ``key value``) of the file; comments (# !) and
    blank lines skipped, a line ending in an odd number of backslashes continued on the
    next; a later key wins, as in Properties.load."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{path}: a readable broker config ({reason})") from None
    result: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip(" \t\f")
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        result[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        result[key] = value
    return result


def _split(line: str) -> tuple[str, str]:
    i = 0
    while i < len(line) and line[i] not in _SEPARATORS:
        i += 2 if line[i] == "\\" else 1
    key = line[:i].replace("\\", "")
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest.rstrip()


def int_property(props: dict[str, str], name: str, path: Path | str, default: int) -> int:
    """An int setting (MixAll.properties2Object: Integer.parseInt of the trimmed value)."""
    text = props.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip(), 10)
    except ValueError:
        raise UsageError(f"{path}: {name}: an integer, found {text!r}") from None
    if value <= 0:
        raise UsageError(f"{path}: {name}: a number above 0, found {value}")
    return value


def bool_property(props: dict[str, str], name: str, path: Path | str, default: bool) -> bool:
    """A boolean setting (Boolean.parseBoolean: "true" in any case is true, all else false)."""
    text = props.get(name)
    if text is None:
        return default
    return text.strip().lower() == "true"
