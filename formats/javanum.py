"""Integers written as text, read by Java's Integer.parseInt / Long.parseLong rules.

The broker reads REAL_QID, DELAY, the queue directory names under consumequeue/ and the keys
of delayOffset.json with these two, so rmqdelay must accept exactly what they accept.
Python's int() is wider: it strips whitespace (' 3', '3 '), takes underscores ('1_0') and
digits outside the Basic Multilingual Plane. Java takes an optional '+' or '-' and then one
or more characters for which Character.digit(ch, 10) is a digit: any Unicode decimal digit
(Nd) in the BMP, so '١٢' is 12 but '²' is no digit; and the value must fit the type.
"""

from __future__ import annotations

import unicodedata

INT_MIN, INT_MAX = -(1 << 31), (1 << 31) - 1
LONG_MIN, LONG_MAX = -(1 << 63), (1 << 63) - 1


def _java_parse(text: str, low: int, high: int) -> int | None:
    if not isinstance(text, str) or not text:
        return None
    if len(text) <= 18 and text.isascii() and text.isdigit():
        value = int(text)  # the common case (a timestamp, a queue id): no sign, no overflow
        return value if value <= high else None
    sign, digits = 1, text
    if text[0] in "+-":
        sign, digits = (-1 if text[0] == "-" else 1), text[1:]
    if not digits:
        return None
    if digits.isascii():
        if not digits.isdigit():
            return None
        # Leading zeros are fine in Java; more than 19 significant digits never fit, and int()
        # refuses strings of thousands of digits.
        significant = digits.lstrip("0")
        value = int(significant) if 0 < len(significant) <= 19 else (0 if not significant else high + 2)
    else:
        value = 0
        for ch in digits:
            # String.charAt sees UTF-16 units: a character beyond the BMP is two surrogates,
            # neither of them a digit.
            if ord(ch) > 0xFFFF or unicodedata.category(ch) != "Nd":
                return None
            value = min(value * 10 + unicodedata.decimal(ch), high + 2)  # bounded: past the range is past it
    value *= sign
    return value if low <= value <= high else None


def java_parse_int(text: str) -> int | None:
    """Integer.parseInt(text), or None where it throws NumberFormatException."""
    return _java_parse(text, INT_MIN, INT_MAX)


def java_parse_long(text: str) -> int | None:
    """Long.parseLong(text), or None where it throws NumberFormatException."""
    return _java_parse(text, LONG_MIN, LONG_MAX)


def java_int_range(value: int) -> bool:
    return INT_MIN <= value <= INT_MAX


def java_long_range(value: int) -> bool:
    return LONG_MIN <= value <= LONG_MAX
