"""Topic names (TopicValidator): checked before a name can become a path."""

from __future__ import annotations

from rmqdelay.errors import UsageError
from rmqdelay.formats.constants import RETRY_GROUP_TOPIC_PREFIX, TOPIC_MAX_LENGTH

BROKER_MAX_TOPIC_BYTES = 255  # HookUtils.MAX_TOPIC_LENGTH (5.x)

# TopicValidator.VALID_CHAR_BIT_MAP (4.9.4 and 5.3.3 alike): every character of the name must be
# one of these. A character test rather than a regex: '$' in Python also matches before a final
# newline, so ^[...]+$ would let 'abc\n' through.
_VALID_CHARS = frozenset("%|-_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def topic_problem(topic: str | None) -> str | None:
    """Why a topic name is not one the broker accepts (TopicValidator.validateTopic, in its
    order: blank, illegal characters, length), or None when it is."""
    if not topic or not topic.strip():
        return "an empty topic name" if not topic else f"a blank topic name: {topic!r}"
    if not _VALID_CHARS.issuperset(topic):
        return f"a topic name outside ^[%|a-zA-Z0-9_-]+$: {topic!r}"
    if len(topic) > TOPIC_MAX_LENGTH:
        return f"a topic name longer than {TOPIC_MAX_LENGTH} characters"
    return None


def validate_topic(topic: str) -> None:
    problem = topic_problem(topic)
    if problem:
        raise UsageError(f"invalid topic: {problem}")


def long_retry_topic(topic: str) -> bool:
    """A retry topic longer than 127 bytes that a 5.x broker still puts (HookUtils.
    checkBeforePutMessage allows %RETRY% topics up to 255 bytes, written as V2 records)."""
    size = len(topic.encode("utf-8", "surrogateescape"))
    return (topic.startswith(RETRY_GROUP_TOPIC_PREFIX) and TOPIC_MAX_LENGTH < size <= BROKER_MAX_TOPIC_BYTES
            and topic_problem(topic[:TOPIC_MAX_LENGTH]) is None)
