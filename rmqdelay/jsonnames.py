"""One naming style for every JSON rmqdelay writes (docs/cli.md: camelCase): a field name in
snake_case as its camelCase, for what the core builds under Python's names (the generator's
plan.json) and the commands print."""

from __future__ import annotations

import re

_SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)+$")


def camel(name: str) -> str:
    """A lower snake_case field name in camelCase (``at_ms`` -> ``atMs``); any other key as it
    is (a group, a topic, a level: data, not a field name)."""
    if not _SNAKE.match(name):
        return name
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(obj):
    """A JSON value with its field names in camelCase (docs/cli.md: one naming style)."""
    if isinstance(obj, dict):
        return {camel(k) if isinstance(k, str) else k: camel_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [camel_keys(v) for v in obj]
    return obj
