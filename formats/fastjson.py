"""The broker's config files as fastjson writes them (JSON.toJSONString(obj, prettyFormat)).

Tabs for indent; every string key on its own line; non-string (Integer) map keys bare and
on the same line as the previous entry; a newline before the closing brace of a non-empty
object. consumerOffset.json, topics.json and delayOffset.json all come out of this one
serializer in the broker, so one writer serves them all here.
"""

from __future__ import annotations

import json


def format_fastjson_pretty(value, indent: int = 0) -> str:
    """``value`` (dicts, lists, str, int, bool, None) in fastjson's pretty text."""
    if isinstance(value, dict):
        if not value:
            return "{}"
        inner = "\t" * (indent + 1)
        parts = ["{"]
        for i, (key, item) in enumerate(value.items()):
            if i:
                parts.append(",")
            if isinstance(key, str):
                parts.append(f"\n{inner}{_string(key)}")
            else:
                parts.append(str(int(key)))
            parts.append(":" + format_fastjson_pretty(item, indent + 1))
        parts.append("\n" + "\t" * indent + "}")
        return "".join(parts)
    if isinstance(value, (list, tuple)):
        if not value:
            return "[]"
        inner = "\t" * (indent + 1)
        items = ",".join(f"\n{inner}{format_fastjson_pretty(v, indent + 1)}" for v in value)
        return "[" + items + "\n" + "\t" * indent + "]"
    if isinstance(value, str):
        return _string(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"no fastjson text for {type(value).__name__}")


def _string(text: str) -> str:
    # fastjson writes non-ASCII characters as they are and escapes control characters.
    return json.dumps(text, ensure_ascii=False)
