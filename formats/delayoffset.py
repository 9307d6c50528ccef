"""config/delayOffset.json in the broker's own JSON dialect (fastjson, pretty format).

fastjson writes the map's Integer keys unquoted, which plain JSON parsers refuse, so the
text is read by a small parser of that dialect that knows byte offsets for its errors.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FormatError
from .javanum import java_int_range, java_long_range, java_parse_int


@dataclass(slots=True)
class DataVersion:
    """5.x DataVersion, as it sits before offsetTable."""

    counter: int
    stateVersion: int
    timestamp: int


@dataclass(slots=True)
class DelayOffsets:
    offsetTable: dict[int, int]
    dataVersion: DataVersion | None = None  # None: the 4.x form


# Deeper nesting than this is no delayOffset.json; refusing it keeps recursion bounded.
_MAX_DEPTH = 64


def _is_digit(ch: str) -> bool:
    # str.isdigit() is true for '²' and other digits int() refuses.
    return "0" <= ch <= "9" and len(ch) == 1


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.depth = 0
        # id(object) -> {key: byte offset of the key}, for errors about a key found later.
        self.key_offsets: dict[int, dict] = {}

    def byte_offset(self, pos: int) -> int:
        # Report the byte offset, not the character index.
        return len(self.text[:pos].encode("utf-8", "surrogatepass"))

    def fail(self, expected: str) -> FormatError:
        return FormatError(self.byte_offset(self.pos), expected)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1

    def peek(self) -> str:
        self.skip_ws()
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            raise self.fail(f"'{char}'")
        self.pos += 1

    def value(self):
        self.depth += 1
        try:
            if self.depth > _MAX_DEPTH:
                raise self.fail(f"JSON nested at most {_MAX_DEPTH} deep")
            return self._value()
        finally:
            self.depth -= 1

    def _value(self):
        ch = self.peek()
        if ch == "{":
            return self.obj()
        if ch == "[":
            self.pos += 1
            items = []
            if self.peek() == "]":
                self.pos += 1
                return items
            while True:
                items.append(self.value())
                if self.peek() == ",":
                    self.pos += 1
                    continue
                self.expect("]")
                return items
        if ch == '"':
            return self.string()
        if ch == "-" or _is_digit(ch):
            return self.number()
        for word, val in (("true", True), ("false", False), ("null", None)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return val
        raise self.fail("a JSON value")

    def string(self) -> str:
        import json

        start = self.pos
        self.pos += 1
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "\\":
                self.pos += 2
                continue
            if ch == '"':
                self.pos += 1
                try:
                    return json.loads(self.text[start:self.pos])
                except ValueError:
                    self.pos = start
                    raise self.fail("a valid string") from None
            self.pos += 1
        self.pos = start
        raise self.fail("a closing '\"'")

    def number(self) -> int:
        start = self.pos
        if self.text[self.pos] == "-":
            self.pos += 1
        while self.pos < len(self.text) and _is_digit(self.text[self.pos]):
            self.pos += 1
        if self.pos < len(self.text) and self.text[self.pos] in ".eE":
            raise self.fail("an integer")
        digits = self.text[start:self.pos]
        if digits in ("", "-"):
            self.pos = start
            raise self.fail("a number")
        if len(digits.lstrip("-").lstrip("0")) > 19 or not java_long_range(int(digits)):
            # Every number of these files is a Java long (an offset, a counter, a time).
            self.pos = start
            raise self.fail(f"an integer within a Java long (-2^63 to 2^63-1), found {digits}")
        return int(digits)

    def obj(self) -> dict:
        self.expect("{")
        result: dict = {}
        if self.peek() == "}":
            self.pos += 1
            return result
        while True:
            ch = self.peek()
            key_at = self.pos
            # fastjson writes non-string map keys bare: {1:83,2:83}
            key = self.string() if ch == '"' else self.number() if (ch == "-" or _is_digit(ch)) else None
            if key is None:
                raise self.fail("an object key")
            self.key_offsets.setdefault(id(result), {})[key] = self.byte_offset(key_at)
            self.expect(":")
            result[key] = self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return result


def parse_fastjson_object(text: str) -> dict:
    """Any config file of the broker's fastjson dialect (consumerOffset.json, ...) as a dict;
    integer map keys, written bare, come back as ints."""
    return _parse(text)[0]


def _parse(text: str) -> tuple[dict, _Parser]:
    parser = _Parser(text)
    if parser.peek() != "{":
        raise parser.fail("a JSON object ('{')")
    doc = parser.obj()
    if parser.peek() != "":
        raise parser.fail("the end of the file after the closing '}'")
    return doc, parser


def _int_value(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(0, f"an integer for {what}, found {value!r}")
    return value


def parse_delay_offsets(text: str) -> DelayOffsets:
    """Both the 4.x and the 5.x form; keys quoted or not. A level is a Java Integer (a quoted
    key is read by Integer.parseInt's rules: "1_0" and " 1" are no levels), an offset a Long."""
    doc, parser = _parse(text)
    table = doc.get("offsetTable")
    if not isinstance(table, dict):
        raise FormatError(0, "an \"offsetTable\" object")
    key_offsets = parser.key_offsets.get(id(table), {})
    offsets: dict[int, int] = {}
    for key, value in table.items():
        level = key if isinstance(key, int) and java_int_range(key) else \
            java_parse_int(key) if isinstance(key, str) else None
        if level is None:
            raise FormatError(key_offsets.get(key, 0), f"integer delay levels (Java ints) as offsetTable keys, "
                                                       f"found {key!r}")
        offsets[level] = _int_value(value, f"the offset of level {level}")
    version = None
    dv = doc.get("dataVersion")
    if isinstance(dv, dict):
        version = DataVersion(
            counter=_int_value(dv.get("counter", 0), "dataVersion.counter"),
            stateVersion=_int_value(dv.get("stateVersion", 0), "dataVersion.stateVersion"),
            timestamp=_int_value(dv.get("timestamp", 0), "dataVersion.timestamp"),
        )
    return DelayOffsets(offsets, version)


def format_delay_offsets(offsets: DelayOffsets) -> str:
    """Exactly the text the broker writes (fastjson toJSONString(obj, prettyFormat=true))."""
    table = ",".join(f"{level}:{offsets.offsetTable[level]}" for level in sorted(offsets.offsetTable))
    table_text = "{" + table + ("\n\t}" if table else "}")
    parts = []
    if offsets.dataVersion is not None:
        dv = offsets.dataVersion
        parts.append(
            '\t"dataVersion":{\n'
            f'\t\t"counter":{dv.counter},\n'
            f'\t\t"stateVersion":{dv.stateVersion},\n'
            f'\t\t"timestamp":{dv.timestamp}\n'
            "\t}"
        )
    parts.append(f'\t"offsetTable":{table_text}')
    return "{\n" + ",\n".join(parts) + "\n}"
