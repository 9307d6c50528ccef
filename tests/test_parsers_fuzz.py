"""Property-based tests of every parser in formats/: random and mutated bytes raise
FormatError and nothing else, and build -> parse gives back what was built."""

from __future__ import annotations

import numpy as np
from conftest import SAMPLES
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rmqdelay.formats.checkpoint import (
    CHECKPOINT_FILE_SIZE,
    Checkpoint,
    build_checkpoint,
    parse_checkpoint,
)
from rmqdelay.formats.commitlog import (
    Message,
    body_crc,
    build_message_construct,
    decode_message,
    encode_message,
    message_size,
    parse_blank,
    parse_message_construct,
)
from rmqdelay.formats.constants import (
    BLANK_MAGIC_CODE,
    BORNHOST_V6_FLAG,
    MESSAGE_MAGIC_CODE,
    MESSAGE_MAGIC_CODE_V2,
    STOREHOSTADDRESS_V6_FLAG,
)
from rmqdelay.formats.consumequeue import (
    CqUnit,
    build_unit,
    decode_units,
    encode_units,
    parse_unit,
)
from rmqdelay.formats.delayoffset import (
    DataVersion,
    DelayOffsets,
    format_delay_offsets,
    parse_delay_offsets,
)
from rmqdelay.formats.errors import FormatError
from rmqdelay.formats.msgid import create_message_id, decode_message_id
from rmqdelay.formats.properties import (
    format_properties,
    java_order,
    parse_properties,
    reformat_properties,
)

# Enough examples to find the classic mistakes, few enough to keep these under ~20 s.
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
THOROUGH = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
# Text as a broker would hold it: any Unicode except lone surrogates (Java would not encode them).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
PROP_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x01\x02"),
                    min_size=1, max_size=20)


def _real_records(limit: int = 40) -> list[bytes]:
    """The first records of a real-broker commit log, as seeds for mutation."""
    data = (SAMPLES / "delay-fresh" / "store" / "commitlog" / "00000000000000000000").read_bytes()
    records, pos = [], 0
    while len(records) < limit:
        total = int.from_bytes(data[pos:pos + 4], "big", signed=True)
        records.append(data[pos:pos + total])
        pos += total
    return records


REAL_RECORDS = _real_records()


def decode_both(buf: bytes):
    """Run the fast and the reference decoder; each gives a Message or a FormatError, nothing else."""
    outcomes = []
    for decoder in (decode_message, parse_message_construct):
        try:
            outcomes.append(decoder(buf, 0, len(buf)))
        except FormatError as exc:
            outcomes.append(exc)
    return outcomes


# -- random and mutated bytes ----------------------------------------------------------------

@THOROUGH
@given(st.binary(max_size=400))
@example(b"")
@example(b"\x00\x00\x00\x60\xda\xa3\x20\xa7" + bytes(88))
# IPv6 born and store hosts (sysFlag 0x30) in a record only big enough for IPv4 ones
@example(b"\x00\x00\x00\x64\xda\xa3\x20\xa7" + bytes(28) + b"\x00\x00\x00\x30" + bytes(60))
def test_commit_log_decoders_on_random_bytes(data):
    fast, reference = decode_both(data)
    assert isinstance(fast, FormatError) == isinstance(reference, FormatError)
    if isinstance(fast, Message):
        assert fast == reference


@THOROUGH
@given(st.sampled_from(REAL_RECORDS), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)),
                                               min_size=1, max_size=6))
def test_commit_log_decoders_on_mutated_real_records(record, mutations):
    data = bytearray(record)
    for where, value in mutations:
        data[where % len(data)] = value
    fast, reference = decode_both(bytes(data))
    # Both decoders accept exactly the same records and read them the same.
    assert isinstance(fast, FormatError) == isinstance(reference, FormatError), (fast, reference)
    if isinstance(fast, Message):
        assert fast == reference


@FAST
@given(st.sampled_from(REAL_RECORDS), st.integers(0, 2000))
def test_commit_log_decoders_on_truncated_real_records(record, cut):
    fast, reference = decode_both(record[:cut % len(record)])
    assert isinstance(fast, FormatError) and isinstance(reference, FormatError)


@FAST
@given(st.binary(max_size=16))
def test_blank_on_random_bytes(data):
    try:
        total = parse_blank(data)
    except FormatError:
        return
    assert data[4:8] == BLANK_MAGIC_CODE.to_bytes(4, "big", signed=True)
    assert total == int.from_bytes(data[:4], "big", signed=True)


@FAST
@given(st.binary(max_size=45))
def test_consume_queue_on_random_bytes(data):
    try:
        unit = parse_unit(data)
    except FormatError:
        assert len(data) < 20
        return
    assert build_unit(unit) == data[:20]
    units = decode_units(data)
    assert len(units) == len(data) // 20
    assert int(units[0]["tagsCode"]) == unit.tagsCode


@FAST
@given(st.binary(max_size=40))
def test_checkpoint_on_random_bytes(data):
    try:
        cp = parse_checkpoint(data)
    except FormatError:
        assert len(data) < 24
        return
    assert build_checkpoint(cp)[:24] == data[:24]


DELAY_ALPHABET = st.sampled_from(list('{}[]:,"\t\n -0123456789offsetTabledataVersion\\u²١x') + ["true", "null"])


@THOROUGH
@given(st.one_of(st.text(max_size=80), st.lists(DELAY_ALPHABET, max_size=60).map("".join)))
@example("[" * 5000)
@example('{"offsetTable":{²:1}}')
def test_delay_offsets_on_random_text(text):
    try:
        parsed = parse_delay_offsets(text)
    except FormatError:
        return
    assert all(isinstance(k, int) and isinstance(v, int) for k, v in parsed.offsetTable.items())


@THOROUGH
@given(st.sampled_from(['{\n\t"offsetTable":{1:83,2:83,3:83\n\t}\n}',
                        '{\n\t"dataVersion":{\n\t\t"counter":3,\n\t\t"stateVersion":0,\n\t\t"timestamp":1700000000000\n'
                        '\t},\n\t"offsetTable":{"1":5,"2":7\n\t}\n}']),
       st.lists(st.tuples(st.integers(0, 200), st.sampled_from(list('{}:,"x1- \t')) | st.just("")),
                min_size=1, max_size=4))
def test_delay_offsets_on_mutated_broker_text(text, mutations):
    chars = list(text)
    for where, value in mutations:
        chars[where % len(chars)] = value
    try:
        parse_delay_offsets("".join(chars))
    except FormatError:
        pass


@FAST
@given(st.text(max_size=60))
@example("0" * 32)
@example("Z" * 56)
@example("０" * 32)
def test_message_id_on_random_text(text):
    try:
        address, port, offset = decode_message_id(text)
    except FormatError:
        return
    assert create_message_id(address, port, offset) == text.upper()


# -- build -> parse round trips --------------------------------------------------------------

@st.composite
def messages(draw) -> Message:
    sys_flag = draw(st.integers(0, 0x7FF) | st.sampled_from([0, 0x1, 0x10, 0x20, 0x30, 0x301, 0x4, 0x8, 0xC]))
    magic = draw(st.sampled_from([MESSAGE_MAGIC_CODE, MESSAGE_MAGIC_CODE_V2]))
    topic = draw(TEXT if magic == MESSAGE_MAGIC_CODE_V2 else
                 st.text(st.characters(blacklist_categories=("Cs",)), max_size=30))
    if magic == MESSAGE_MAGIC_CODE:
        # a one-byte signed length: at most 127 bytes of UTF-8
        while len(topic.encode()) > 127:
            topic = topic[:-1]
    props = format_properties(draw(st.dictionaries(PROP_TEXT, PROP_TEXT, max_size=6)))
    body = draw(st.binary(max_size=300))
    born = draw(st.binary(min_size=16, max_size=16) if sys_flag & BORNHOST_V6_FLAG else st.binary(min_size=4, max_size=4))
    store = draw(st.binary(min_size=16, max_size=16) if sys_flag & STOREHOSTADDRESS_V6_FLAG
                 else st.binary(min_size=4, max_size=4))
    size = message_size(sys_flag, len(body), len(topic.encode()), len(props.encode()), magic)
    return Message(
        storeSize=size, magicCode=magic, bodyCRC=draw(st.sampled_from([body_crc(body), 0]) | INT32),
        queueId=draw(INT32), flag=draw(INT32), queueOffset=draw(INT64), commitLogOffset=draw(INT64),
        sysFlag=sys_flag, bornTimestamp=draw(INT64), bornHostAddress=born, bornPort=draw(INT32),
        storeTimestamp=draw(INT64), storeHostAddress=store, storePort=draw(INT32),
        reconsumeTimes=draw(INT32), preparedTransactionOffset=draw(INT64), body=body, topic=topic,
        propertiesRaw=props, properties=parse_properties(props),
    )


@THOROUGH
@given(messages())
def test_message_round_trip(msg):
    data = encode_message(msg)
    assert data == build_message_construct(msg)
    assert len(data) == msg.storeSize
    assert decode_message(data, 0, len(data)) == msg
    assert parse_message_construct(data, 0, len(data)) == msg
    # Inside a larger buffer, at an offset, as in a commit log file.
    padded = b"\x00" * 7 + data + b"\x00" * 9
    assert decode_message(padded, 7, 7 + len(data)) == msg


@FAST
@given(st.dictionaries(PROP_TEXT, PROP_TEXT, max_size=8))
def test_properties_round_trip(props):
    assert parse_properties(format_properties(props)) == props


@THOROUGH
@given(st.lists(st.one_of(st.sampled_from(["DELAY", "TAGS", "KEYS", "UNIQ_KEY", "REAL_TOPIC", "REAL_QID", "",
                                           "\x01", "a\x01", "\x01b"]),
                          st.tuples(st.sampled_from(["DELAY", "TAGS", "KEYS", "UNIQ_KEY", "WAIT", "x"]),
                                    st.sampled_from(["1", "TagA", "", "v\x01w"])).map("\x01".join)),
                max_size=12).map("\x02".join))
@example("TAGS\x01a\x02TAGS\x01b")  # a repeated key: the broker's map keeps one
@example("WAIT\x01true\x02\x02DELAY\x013")  # an empty segment the parse skips
def test_delivered_properties_string_is_the_hashmap_text_of_the_parsed_map(stored):
    """message_timeup's properties string: the stored one when it already is the map's
    HashMap-order text, else that text rebuilt; never anything else."""
    props = parse_properties(stored)
    assert reformat_properties(props, stored) == format_properties(java_order(props))


@FAST
@given(st.lists(st.tuples(INT64, INT32, INT64), max_size=20))
def test_consume_queue_round_trip(rows):
    units = [CqUnit(*row) for row in rows]
    for unit in units:
        assert parse_unit(build_unit(unit)) == unit
    array = np.array(rows, dtype=[("commitLogOffset", "i8"), ("size", "i4"), ("tagsCode", "i8")])
    data = encode_units(array)
    assert data == b"".join(build_unit(u) for u in units)
    assert decode_units(data).tolist() == rows


@FAST
@given(st.dictionaries(st.integers(1, 40), st.integers(0, 2**63 - 1), max_size=18),
       st.none() | st.builds(DataVersion, st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1),
                             st.integers(0, 2**63 - 1)))
def test_delay_offsets_round_trip(table, version):
    offsets = DelayOffsets(table, version)
    text = format_delay_offsets(offsets)
    assert parse_delay_offsets(text) == offsets
    assert format_delay_offsets(parse_delay_offsets(text)) == text


@FAST
@given(INT64, INT64, INT64)
def test_checkpoint_round_trip(physic, logics, index):
    cp = Checkpoint(physic, logics, index)
    data = build_checkpoint(cp)
    assert len(data) == CHECKPOINT_FILE_SIZE
    assert parse_checkpoint(data) == cp


@FAST
@given(st.binary(min_size=4, max_size=4) | st.binary(min_size=16, max_size=16), st.integers(0, 2**31 - 1), INT64)
def test_message_id_round_trip(address, port, offset):
    msg_id = create_message_id(address, port, offset)
    assert len(msg_id) == (32 if len(address) == 4 else 56)
    assert decode_message_id(msg_id) == (address, port, offset)
    assert decode_message_id(msg_id.lower()) == (address, port, offset)
