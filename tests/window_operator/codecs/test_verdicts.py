"""One verdict per record, whatever else is in its batch, on every decode path.

A payload decoded alone by the exact path (parse, then the record decoder) is the
reference. The same payload inside a random batch of clean records, through the task's
input decoder (columnar when it can prove the chunk clean), through the columnar
decoder forced on the batch, through ``simulate``'s line decoder, and, for records that
Avro can carry, as an Avro value, must get the same verdict: accepted with the same key,
time and value, or rejected with the same code.
"""

from __future__ import annotations

import io
import json
import math
from typing import Any

import fastavro
import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from window_operator.codecs import (
    AvroPayloadDecoder,
    ColumnarJsonDecoder,
    JsonPayloadDecoder,
    decode_payloads,
)
from window_operator.codecs.inputs import InputDecoder
from window_operator.events import DecodeResult, RecordDecoder
from window_operator.simulate_input import LineDecoder

DECODERS = {
    "ms": RecordDecoder(key_field="k", timestamp_field="ts", numeric_fields=["v"]),
    "s": RecordDecoder(
        key_field="k", timestamp_field="ts", timestamp_unit="s", numeric_fields=["v"]
    ),
    # count with a field: any non-null value is counted (its column holds 1.0)
    "count": RecordDecoder(key_field="k", timestamp_field="ts", counted_fields=["v"]),
}
Verdict = tuple[Any, ...]

# -- payloads ------------------------------------------------------------------------

key_text = st.text(max_size=6)
scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=4),
)
json_value = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("abxyz"), inner, max_size=3)
    ),
    max_leaves=8,
)
number = st.one_of(
    st.integers(-(2**64), 2**64),
    st.floats(-1e15, 1e15),
    st.sampled_from([0, -0.0, 0.5, 2**53 + 1, 1e300, -1e-300]),
)
clean_record = st.fixed_dictionaries(
    {"k": key_text, "ts": st.integers(0, 2**41), "v": st.floats(-1e6, 1e6)},
    optional={"extra": json_value},
)
#: Special values written as text into a field: non-finite literals and odd numbers.
SPECIAL_LITERALS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"-0",
    b"-0.0",
    b"1e400",
    b"18446744073709551616",
    b'"\\ud800"',
    b'"\\u00e9\\n"',
    b"[]",
    b"{}",
    b"true",
    b"null",
]
INVALID_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf"]
TRAILERS = [b"", b" ", b"x", b"{}", b'{"k":"a","ts":1,"v":1}', b"1", b"\n", b" \n ", b"\r", b","]


@st.composite
def record_fields(draw: st.DrawFn) -> dict[str, Any]:
    """A record whose fields are mostly right and sometimes of any JSON type."""
    rec: dict[str, Any] = {}
    for name, good in (("k", key_text), ("ts", st.integers(-(2**62), 2**62)), ("v", number)):
        choice = draw(st.integers(0, 9))
        if choice < 7:
            rec[name] = draw(good)
        elif choice < 9:
            rec[name] = draw(json_value)
    if draw(st.booleans()):
        rec["extra"] = draw(json_value)
    return rec


MARK = "@@MARK@@"


def dumps(value: Any) -> bytes:
    """Compact JSON of any value (orjson refuses integers beyond 64 bits)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


@st.composite
def spliced(draw: st.DrawFn) -> bytes:
    """A record with raw bytes spliced into one field: literals, bad UTF-8, deep nesting."""
    rec = draw(record_fields())
    field = draw(st.sampled_from(["k", "ts", "v", "extra"]))
    kind = draw(st.integers(0, 2))
    if kind == 0:
        rec[field] = MARK
        text = dumps(rec).replace(dumps(MARK), draw(st.sampled_from(SPECIAL_LITERALS)))
    elif kind == 1:
        rec[field] = "a" + MARK + "b"
        text = dumps(rec).replace(MARK.encode(), draw(st.sampled_from(INVALID_UTF8)))
    else:
        depth = draw(st.sampled_from([1, 50, 255, 1023, 1024, 1025, 2000]))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        closer = b"]" if opener == b"[" else b"}"
        rec[field] = MARK
        nested = opener * depth + b"1" + closer * depth
        text = dumps(rec).replace(dumps(MARK), nested)
    return text


@st.composite
def python_json(draw: st.DrawFn) -> bytes:
    """A record as Python's json module writes it: spaces, escapes, NaN and Infinity."""
    rec = draw(record_fields())
    for name in ("k", "ts", "v", "extra"):
        if draw(st.integers(0, 5)) == 0:
            rec[name] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
    text = json.dumps(rec, ensure_ascii=draw(st.booleans()), allow_nan=True)
    return text.encode("utf-8", "surrogatepass")


@st.composite
def bad_payload(draw: st.DrawFn) -> bytes | None:
    body = draw(
        st.one_of(
            st.binary(max_size=40),
            record_fields().map(dumps),
            spliced(),
            python_json(),
            st.sampled_from([b"", b" ", b"\n", b"{}", b"[]", b"null", b'"s"', b"1"]),
            st.just(b'{"k":"a","k":"b","ts":1,"v":1}'),
            st.just(b'{"k":"a","ts":1,"v":1,"v":2}'),
            st.none(),
        )
    )
    if body is None or not draw(st.integers(0, 3)) == 0:
        return body
    return body + draw(st.sampled_from(TRAILERS))


# -- verdicts -------------------------------------------------------------------------


def verdicts(result: DecodeResult, n: int) -> list[Verdict]:
    """Per input: ("ok", key, ts, repr(v)) or ("error", code)."""
    out: list[Verdict | None] = [None] * n
    batch = result.batch
    for row, i in enumerate(result.kept):
        out[i] = ("ok", batch.keys[row], int(batch.ts[row]), repr(float(batch.numeric["v"][row])))
    failed = [i for i in range(n) if out[i] is None]
    assert len(failed) == len(result.errors), "every record gets exactly one verdict"
    for i, err in zip(failed, result.errors, strict=True):
        out[i] = ("error", err.code.value)
    return [v for v in out if v is not None]


def alone(decoder: RecordDecoder, payload: bytes | None) -> Verdict:
    result = decode_payloads([payload], JsonPayloadDecoder(), decoder, partitions=[0], offsets=[0])
    return verdicts(result, 1)[0]


def clean_batch(records: list[dict[str, Any]]) -> list[bytes]:
    return [dumps(r) for r in records]


# -- properties -----------------------------------------------------------------------


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    unit=st.sampled_from(sorted(DECODERS)),
    clean=st.lists(clean_record, min_size=0, max_size=8),
    bad=st.lists(st.tuples(st.integers(0, 8), bad_payload()), min_size=1, max_size=3),
)
@example(unit="ms", clean=[{"k": "a", "ts": 1, "v": 1.0}], bad=[(0, b'{"k":"x","ts":1,"v":NaN}')])
@example(unit="ms", clean=[{"k": "a", "ts": 1, "v": 1.0}], bad=[(1, b'{"k":"\xff","ts":1,"v":1}')])
@example(
    unit="ms",
    clean=[{"k": "a", "ts": 1, "v": 1.0}],
    bad=[(0, b'{"k":"a","ts":2,"v":2}{"k":"a","ts":3,"v":3}'), (1, b"")],
)
def test_every_payload_gets_the_same_verdict_in_any_batch(
    unit: str, clean: list[dict[str, Any]], bad: list[tuple[int, bytes | None]]
) -> None:
    decoder = DECODERS[unit]
    payloads: list[bytes | None] = list(clean_batch(clean))
    for position, payload in bad:
        payloads.insert(min(position, len(payloads)), payload)
    expected = [alone(decoder, p) for p in payloads]
    n = len(payloads)
    offsets = list(range(n))

    task = InputDecoder(JsonPayloadDecoder(), decoder, ColumnarJsonDecoder(decoder))
    assert verdicts(task.decode(payloads, partition=0, offsets=offsets, topic="t"), n) == expected

    if None not in payloads:
        fast = ColumnarJsonDecoder(decoder).decode(payloads)  # type: ignore[arg-type]
        if fast is not None:
            assert verdicts(DecodeResult(fast, [], offsets), n) == expected

    lines = [p.strip() for p in payloads if p is not None and b"\n" not in p and p.strip()]
    got = LineDecoder(decoder).decode(lines, {})
    by_offset = {int(o): i for i, o in enumerate(got.batch.offset.tolist())}
    sim: list[Verdict] = [("error", "?")] * len(lines)
    for err in got.errors:
        assert err.offset is not None
        sim[err.offset] = ("error", err.code.value)
    for off, row in by_offset.items():
        v = repr(float(got.batch.numeric["v"][row]))
        sim[off] = ("ok", got.batch.keys[row], int(got.batch.ts[row]), v)
    assert sim == [alone(decoder, line) for line in lines]


@settings(max_examples=100, deadline=None)
@given(st.lists(clean_record, min_size=1, max_size=20))
@example([{"k": "NaN", "ts": 1, "v": -0.0}, {"k": "-Infinity", "ts": 2, "v": 1.0, "extra": "a-0"}])
def test_clean_batches_take_the_columnar_path(records: list[dict[str, Any]]) -> None:
    """So that the property above compares two paths, not one with itself."""
    decoder = DECODERS["ms"]
    payloads = clean_batch(records)
    fast = ColumnarJsonDecoder(decoder).decode(payloads)
    assert fast is not None
    assert verdicts(DecodeResult(fast, [], list(range(len(payloads)))), len(payloads)) == [
        alone(decoder, p) for p in payloads
    ]


# -- Avro -----------------------------------------------------------------------------

AVRO_SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "k", "type": ["null", "string", "boolean", "long", "double"]},
        {"name": "ts", "type": ["null", "long", "double"]},
        {"name": "v", "type": ["null", "long", "double"]},
    ],
}
# The same layout with bytes where the key's string is: invalid UTF-8 can be written.
AVRO_BYTES_KEY = {
    **AVRO_SCHEMA,
    "fields": [{"name": "k", "type": ["null", "bytes"]}, *AVRO_SCHEMA["fields"][1:]],
}
non_finite = st.sampled_from([math.nan, math.inf, -math.inf])
avro_record = st.fixed_dictionaries(
    {
        "k": st.one_of(
            st.none(), key_text, st.integers(-(2**63), 2**63 - 1), st.floats(), st.booleans()
        ),
        "ts": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(), non_finite),
        "v": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(), non_finite),
    }
)


def avro_body(schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(avro_record)
def test_avro_values_get_the_verdict_of_the_same_record_in_json(
    tmp_path_factory: Any, record: dict[str, Any]
) -> None:
    schema_path = tmp_path_factory.mktemp("avro") / "event.avsc"
    schema_path.write_bytes(orjson.dumps(AVRO_SCHEMA))
    decoder = DECODERS["ms"]
    got = decode_payloads(
        [avro_body(AVRO_SCHEMA, record)], AvroPayloadDecoder(schema_path), decoder
    )
    text = json.dumps(record, allow_nan=True).encode("utf-8", "surrogatepass")
    assert verdicts(got, 1) == [alone(decoder, text)]


def test_invalid_utf8_in_an_avro_string_is_a_payload_error(tmp_path: Any) -> None:
    schema_path = tmp_path / "event.avsc"
    schema_path.write_bytes(orjson.dumps(AVRO_SCHEMA))
    body = avro_body(AVRO_BYTES_KEY, {"k": b"bad-\xff\xfe", "ts": 1, "v": 1.0})
    got = decode_payloads([body], AvroPayloadDecoder(schema_path), DECODERS["ms"])
    assert [e.code.value for e in got.errors] == ["BAD_AVRO"]
    assert alone(DECODERS["ms"], b'{"k":"bad-\xff\xfe","ts":1,"v":1.0}') == ("error", "BAD_JSON")


def test_the_rules_on_examples() -> None:
    """The verdicts the README documents, one example each."""
    d = DECODERS["ms"]
    cases = {
        b'{"k":"a","ts":1,"v":NaN}': ("error", "NON_FINITE_VALUE"),
        b'{"k":"a","ts":1,"v":-Infinity}': ("error", "NON_FINITE_VALUE"),
        b'{"k":"a","ts":NaN,"v":1}': ("error", "BAD_TIMESTAMP"),
        b'{"k":NaN,"ts":1,"v":1}': ("error", "BAD_KEY"),
        b'{"k":true,"ts":1,"v":1}': ("ok", "true", 1, "1.0"),
        b'{"k":7,"ts":1,"v":1}': ("ok", "7", 1, "1.0"),
        b'{"k":{"a":1},"ts":1,"v":1}': ("error", "BAD_KEY"),
        b'{"k":"a","ts":1,"v":1,"unused":NaN}': ("ok", "a", 1, "1.0"),
        b'{"k":"a","ts":1,"v":Inf}': ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1e400}': ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1}{"k":"a","ts":1,"v":1}': ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1} ': ("ok", "a", 1, "1.0"),
        b"": ("error", "BAD_JSON"),
        b'{"k":"a\xff","ts":1,"v":1}': ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1,"x":"\xff"}': ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1,"x":' + b"[" * 1025 + b"]" * 1025 + b"}": ("error", "BAD_JSON"),
        b'{"k":"a","ts":1,"v":1,"x":' + b"[" * 1023 + b"]" * 1023 + b"}": ("ok", "a", 1, "1.0"),
        b'{"k":"a","ts":1,"v":-0}': ("ok", "a", 1, "0.0"),
        b'{"k":"a","ts":1,"v":-0.0}': ("ok", "a", 1, "-0.0"),
    }
    for payload, verdict in cases.items():
        assert alone(d, payload) == verdict, payload
    assert alone(d, None) == ("error", "BAD_JSON")
    for payload, verdict in cases.items():
        fast = ColumnarJsonDecoder(d).decode([payload])
        if fast is not None:
            assert verdicts(DecodeResult(fast, [], [0]), 1) == [verdict], payload
