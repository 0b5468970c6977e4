"""Avro message values written with the job's schema, bare or in the Confluent wire format.

Because the schema is local, any schema id is accepted; the first one seen is kept in
:attr:`AvroPayloadDecoder.schema_id`. Values are made JSON-native (see
:mod:`window_operator.codecs.avro_schema`). A payload with bytes left over after the
record is rejected: it was written with another schema.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import fastavro
import orjson
from fastavro.validation import ValidationError, validate

from window_operator.codecs.avro_schema import (
    CONFLUENT_HEADER,
    avro_reason,
    confluent_header,
    confluent_problem,
    json_native,
    keep_raw_millis,
    load_schema_file,
    needs_json_native,
    parse_schema,
)
from window_operator.codecs.decoding import DECODE_FAILED, NULL_PAYLOAD
from window_operator.rejections import show
from window_operator.results import ErrorCode

__all__ = ["AvroPayloadDecoder", "AvroWire", "avro_payload_encoder"]

AvroWire = Literal["schemaless", "confluent"]


class AvroPayloadDecoder:
    """Avro message values written with the schema in ``schema_path``.

    ``wire`` is ``"schemaless"`` (the bare Avro body) or ``"confluent"`` (magic byte
    ``0``, 4-byte big-endian schema id, body). The schema is parsed once; each message
    is read with ``fastavro.schemaless_reader``. See the module docstring for how
    logical types are converted. Raises :class:`AvroSchemaError` if the schema file
    cannot be read or is not a valid Avro schema.
    """

    def __init__(self, schema_path: str | Path, wire: AvroWire = "schemaless") -> None:
        if wire not in ("schemaless", "confluent"):
            raise ValueError(f"wire must be 'schemaless' or 'confluent', got {wire!r}")
        self.schema_path = Path(schema_path)
        self.wire: AvroWire = wire
        self.schema: Any = load_schema_file(self.schema_path)
        self._parsed = parse_schema(keep_raw_millis(self.schema), str(self.schema_path))
        self._fixup: Callable[[Any], Any] | None = (
            json_native if needs_json_native(self.schema) else None
        )
        self._schema_id: int | None = None
        self._plain_parsed: Any = None

    @property
    def error_code(self) -> ErrorCode:
        """``BAD_AVRO``."""
        return ErrorCode.BAD_AVRO

    @property
    def schema_id(self) -> int | None:
        """The schema id of the first Confluent-framed message read (``None``: none yet)."""
        return self._schema_id

    def decode(self, payloads: Sequence[bytes | None]) -> tuple[list[Any], list[tuple[int, str]]]:
        """Read one Avro record per payload; see :meth:`PayloadDecoder.decode`.

        Failure reasons: a null payload; for the Confluent wire format a payload shorter
        than the 5-byte header or with a magic byte other than 0; ``invalid Avro: ...``
        for a truncated or corrupt body or bytes left over after the record.
        """
        records: list[Any] = []
        failures: list[tuple[int, str]] = []
        append = records.append
        read = fastavro.schemaless_reader
        schema = self._parsed
        fixup = self._fixup
        new_buffer = io.BytesIO
        framed = self.wire == "confluent"
        start = CONFLUENT_HEADER if framed else 0
        for i, payload in enumerate(payloads):
            if payload is None:
                append(DECODE_FAILED)
                failures.append((i, NULL_PAYLOAD))
                continue
            size = len(payload)
            if framed:
                problem = confluent_problem(payload)
                if problem is not None:
                    append(DECODE_FAILED)
                    failures.append((i, self._json_text(payload) or problem))
                    continue
                if self._schema_id is None:
                    self._schema_id = int.from_bytes(payload[1:CONFLUENT_HEADER], "big")
            buffer = new_buffer(payload)
            if start:
                buffer.seek(start)
            try:
                record = read(buffer, schema, None)
            except Exception as exc:  # any failure of the reader is a property of the data
                append(DECODE_FAILED)
                failures.append((i, self._why(payload, avro_reason(exc, size - start))))
                continue
            left = size - buffer.tell()
            if left:
                append(DECODE_FAILED)
                reason = (
                    f"invalid Avro: {left} byte(s) left over after the record "
                    f"({size - start}-byte body); was it written with another schema?"
                )
                failures.append((i, self._why(payload, reason)))
                continue
            append(record if fixup is None else fixup(record))
        return records, failures

    def _json_text(self, payload: bytes) -> str | None:
        """Why a value that is a JSON object is not read (``None``: it is not one): a
        JSON producer wrote it, or ``produce`` a line that does not fit the schema, as
        it is; the reason says what does not fit, as ``simulate`` says it of the line."""
        record = _json_object(payload)
        if record is None:
            return None
        try:
            validate(record, self._plain(), raise_errors=True)
        except ValidationError as exc:
            return (
                "the value is JSON text, not Avro; as a record it does not fit the input's "
                f"Avro schema either ({_misfits(exc)})"
            )
        except (RecursionError, TypeError, AttributeError, OverflowError):
            return "the value is JSON text, not Avro"
        return (
            "the value is JSON text, not Avro (it holds a record of the input's schema: "
            "a JSON producer wrote it; a topic of JSON values is read with format: json)"
        )

    def _why(self, payload: bytes, reason: str) -> str:
        """The reason of a body the reader failed on (``reason``: the reader's), unless
        the value is JSON text, or a Confluent-framed record on a schemaless input."""
        framed = None if self.wire == "confluent" else self._framed(payload)
        return self._json_text(payload) or framed or reason

    def _framed(self, payload: bytes) -> str | None:
        """Why a value a schemaless input could not read is in the Confluent wire format
        (``None``: it is not, or no record of the schema follows its header): the topic
        was written by a Confluent serializer, and every record of it fails the same way."""
        if len(payload) <= CONFLUENT_HEADER or confluent_problem(payload) is not None:
            return None
        buffer = io.BytesIO(payload)
        buffer.seek(CONFLUENT_HEADER)
        try:
            fastavro.schemaless_reader(buffer, self._parsed, None)
        except Exception:  # not a framed record of the schema either
            return None
        if buffer.tell() != len(payload):
            return None
        schema_id = int.from_bytes(payload[1:CONFLUENT_HEADER], "big")
        return (
            "invalid Avro: the value is in the Confluent wire format (magic byte 0, schema "
            f"id {schema_id}, then a record of the input's schema); set input.avro_wire: "
            "confluent to read it"
        )

    def _plain(self) -> Any:
        """The schema as ``produce`` writes with it (logical types converted)."""
        if self._plain_parsed is None:
            self._plain_parsed = parse_schema(self.schema, str(self.schema_path))
        return self._plain_parsed


def _json_object(payload: bytes) -> dict[str, Any] | None:
    """``payload`` as a JSON object (``None``: it is not one)."""
    if not payload.lstrip(b" \t\r\n")[:1] == b"{":
        return None
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def avro_payload_encoder(
    schema_path: str | Path, wire: AvroWire = "schemaless"
) -> Callable[[Any], bytes]:
    """Writes records as :class:`AvroPayloadDecoder` reads them (the Confluent framing
    with schema id 0). The encoder raises ``ValueError`` (saying why) for a record that
    does not fit the schema: it is validated first, as the writer alone would take
    ``true`` for a ``long`` (as 1) and ``-0.5`` (as 0)."""
    parsed = parse_schema(load_schema_file(Path(schema_path)), str(schema_path))
    prefix = confluent_header(0) if wire == "confluent" else b""

    def encode(record: Any) -> bytes:
        out = io.BytesIO()
        try:
            validate(record, parsed, raise_errors=True)
            fastavro.schemaless_writer(out, parsed, record)
        except ValidationError as exc:
            raise ValueError(_misfits(exc)) from exc
        except RecursionError as exc:
            raise ValueError("the record is nested too deeply to write") from exc
        except (TypeError, AttributeError, OverflowError) as exc:  # what validate let by
            raise ValueError(str(exc)) from exc
        return prefix + out.getvalue()

    return encode


def _misfits(exc: ValidationError) -> str:
    """What fastavro's validation found, one clause a field (a union's branches in one)."""
    wants: dict[str, tuple[object, list[str]]] = {}
    for e in exc.errors:
        wants.setdefault(e.field or "the record", (e.datum, []))[1].append(_schema_name(e.schema))
    return "; ".join(
        f"{name} is {show(datum)}, the schema has {' or '.join(schemas)}"
        for name, (datum, schemas) in wants.items()
    )


def _schema_name(schema: object) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, list):
        return "[" + ", ".join(_schema_name(s) for s in schema) + "]"
    if isinstance(schema, dict):
        return str(schema.get("logicalType") or schema.get("name") or schema.get("type"))
    return repr(schema)
