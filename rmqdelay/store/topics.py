"""Topic names (TopicValidator): checked before a name can become a path."""

from __future__ import annotations

import re

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import TOPIC_MAX_LENGTH

_VALID = re.compile(r"^[%|a-zA-Z0-9_-]+$")


def topic_problem(topic: str | None) -> str | None:
    """Why a topic name is not one the broker accepts, or None when it is."""
    if not topic:
        return "an empty topic name"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"a topic name longer than {TOPIC_MAX_LENGTH} characters"
    if not _VALID.match(topic):
        return f"a topic name outside ^[%|a-zA-Z0-9_-]+$: {topic!r}"
    return None


def validate_topic(topic: str) -> None:
    problem = topic_problem(topic)
    if problem:
        raise UsageError(f"invalid topic: {problem}")
