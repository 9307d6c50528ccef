"""Numbers and topic names read exactly as the broker reads them: Integer.parseInt and
Long.parseLong for REAL_QID, DELAY, queue directory names and delayOffset.json keys;
TopicValidator for topics. Where a JDK is on PATH, the JVM itself is the judge."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from rmqdelay.formats.delayoffset import parse_delay_offsets
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.javanum import java_parse_int, java_parse_long

from rmqdelay.errors import UsageError
from rmqdelay.store.topics import topic_problem, validate_topic

# Inputs where Python's int() and Java disagree, and plain ones.
CASES = ["0", "3", "+7", "-0", "-2147483648", "2147483647", "2147483648", "-2147483649", " 3", "3 ", "1_0",
         "²", "٣", "١٢", "３", "𝟏", "", "+", "-", "00000000001", "0" * 40 + "12", "9" * 30, "12a", "0x1F",
         "9223372036854775807", "9223372036854775808", "-9223372036854775808", "1e3", "٣٣٣٣٣٣٣٣٣٣٣",
         "1795450290000", "999999999999999999", "000000000000000007", "2147483647" + "0" * 8]


def test_int_rules_where_python_and_java_disagree():
    assert [java_parse_int(t) for t in (" 3", "3 ", "1_0", "²", "𝟏")] == [None] * 5
    assert [java_parse_int(t) for t in ("٣", "+7", "00000000001", "３")] == [3, 7, 1, 3]
    assert java_parse_int("2147483648") is None and java_parse_long("2147483648") == 2147483648
    assert java_parse_long("9223372036854775808") is None and java_parse_long("-9223372036854775808") == -(1 << 63)
    assert java_parse_int("9" * 5000) is None and java_parse_int("0" * 5000 + "5") == 5  # int() refuses 5000 digits


JAVA_PROGRAM = """
public class ParseAll {
  public static void main(String[] args) throws Exception {
    java.io.BufferedReader in = new java.io.BufferedReader(new java.io.InputStreamReader(System.in, "UTF-8"));
    String line;
    while ((line = in.readLine()) != null) {
      String text = new String(java.util.Base64.getDecoder().decode(line), "UTF-8");
      String i, l;
      try { i = String.valueOf(Integer.parseInt(text)); } catch (NumberFormatException e) { i = "-"; }
      try { l = String.valueOf(Long.parseLong(text)); } catch (NumberFormatException e) { l = "-"; }
      System.out.println(i + " " + l);
    }
  }
}
"""


@pytest.mark.skipif(shutil.which("java") is None, reason="no JDK on PATH")
def test_the_jvm_agrees(tmp_path):
    import base64

    source = tmp_path / "ParseAll.java"
    source.write_text(JAVA_PROGRAM)
    lines = "\n".join(base64.b64encode(t.encode()).decode() for t in CASES) + "\n"
    proc = subprocess.run(["java", str(source)], input=lines, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for text, answer in zip(CASES, proc.stdout.split("\n")):
        java_int, java_long = answer.split(" ")
        ours = java_parse_int(text), java_parse_long(text)
        assert (str(ours[0]) if ours[0] is not None else "-", str(ours[1]) if ours[1] is not None else "-") == \
            (java_int, java_long), text


def test_delay_offset_keys_and_values_are_java_ints_and_longs():
    assert parse_delay_offsets('{"offsetTable":{"3":5,4:9223372036854775807}}').offsetTable == \
        {3: 5, 4: (1 << 63) - 1}
    for text, byte in (('{"offsetTable":{"1_0":83}}', 16), ('{"offsetTable":{" 1":83}}', 16),
                       ('{"offsetTable":{1:9223372036854775808}}', 18), ('{"offsetTable":{2147483648:1}}', 16)):
        with pytest.raises(FormatError) as info:
            parse_delay_offsets(text)
        assert info.value.offset == byte, text


@pytest.mark.parametrize("topic", ["abc\n", "abc\r", "a b", "tópico", "a\tb", " ", "a/b", "x" * 128, ""])
def test_topic_names_the_broker_refuses(topic):
    assert topic_problem(topic) is not None
    with pytest.raises(UsageError):
        validate_topic(topic)


@pytest.mark.parametrize("topic", ["TopicTest", "%RETRY%group_1", "a|b-c", "x" * 127, "SCHEDULE_TOPIC_XXXX"])
def test_topic_names_the_broker_accepts(topic):
    assert topic_problem(topic) is None
