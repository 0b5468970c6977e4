"""Window results as Avro values, and the encoder/decoder of a job's output format.

:class:`AvroResultEncoder` writes schemaless Avro (or, with ``confluent_schema_id``, the
Confluent wire format) with the job's ``output.avro_schema`` or, without one, the schema
:func:`~window_operator.codecs.result_schema.derive_result_schema` derives from the
aggregations. Values whose type is open (``first``, ``last``, ``collect``, user-defined
ops) are written as their JSON text; :class:`AvroResultDecoder` parses them back.
Batches in the derived schema are encoded column by column
(:class:`~window_operator.codecs.avro_writer.ColumnarAvroWriter`); a user schema goes
through ``fastavro.schemaless_writer`` row by row.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from itertools import repeat
from typing import Any, Literal

import fastavro
import orjson

from window_operator.codecs.avro_schema import (
    CONFLUENT_HEADER,
    avro_reason,
    confluent_header,
    confluent_problem,
    keep_raw_millis,
    load_schema_file,
    parse_schema,
)
from window_operator.codecs.avro_writer import ColumnarAvroWriter, json_text_column
from window_operator.codecs.result_json import (
    JsonResultDecoder,
    JsonResultEncoder,
    ResultDecoder,
    batch_keys,
)
from window_operator.codecs.result_schema import check_user_schema, column_of, derive_result_schema
from window_operator.config import JobConfig
from window_operator.results import Kind, ResultBatch

__all__ = [
    "AvroResultDecoder",
    "AvroResultEncoder",
    "decode_result_value",
    "result_decoder_for",
    "result_encoder_for",
]


class AvroResultEncoder:
    """Window results as Avro values.

    The schema is ``output.avro_schema`` when the job sets it (used as is: its top-level
    fields must be those of a window result or have defaults, its ``values`` record's
    fields aggregation names or have defaults), otherwise :func:`derive_result_schema`.
    Aggregations of open-typed ops (``first``, ``last``, ``collect``, user-defined)
    whose field is a (nullable) string carry the value's JSON text. Values are
    schemaless Avro unless ``confluent_schema_id`` is given: then each value is framed
    in the Confluent wire format with that id (register :attr:`schema_json` first).
    ``window_start``/``window_end`` are written as longs: epoch milliseconds for time
    windows and sessions, message numbers or offsets for the other shapes.
    """

    def __init__(self, config: JobConfig, *, confluent_schema_id: int | None = None) -> None:
        path = config.output.avro_schema
        if path is not None:
            self.schema: Any = load_schema_file(path)
            source = str(path)
            self.json_text_fields = frozenset(check_user_schema(self.schema, config, source))
            self._columnar: ColumnarAvroWriter | None = None
        else:
            per_partition = config.windows_per_partition
            self.schema = derive_result_schema(
                config.aggregations,
                job=config.job,
                per_partition=per_partition,
                time_bounds=config.bounds_in_event_time,
            )
            source = f"derived result schema of job {config.job}"
            self.json_text_fields = frozenset(
                agg.name for agg in config.aggregations if column_of(agg) == "text"
            )
            self._columnar = ColumnarAvroWriter(config.aggregations, per_partition=per_partition)
        self._parsed = parse_schema(keep_raw_millis(self.schema), source)
        self.schema_id = confluent_schema_id
        self._prefix = b"" if confluent_schema_id is None else confluent_header(confluent_schema_id)

    @property
    def format(self) -> Literal["json", "avro"]:
        """``"avro"``."""
        return "avro"

    @property
    def schema_json(self) -> str:
        """The value schema as JSON text (e.g. to register it in a schema registry)."""
        return orjson.dumps(self.schema).decode()

    def encode_batch(self, batch: ResultBatch) -> list[tuple[bytes, bytes | None]]:
        """One ``(key, value)`` per row; a RETRACT batch gives tombstones."""
        keys = batch_keys(batch)
        if batch.kind is Kind.RETRACT:
            return [(key, None) for key in keys]
        if self._columnar is not None:
            values = self._columnar.encode(batch, self._prefix)
        else:
            values = self._encode_with_fastavro(batch)
        out: list[tuple[bytes, bytes | None]] = list(zip(keys, values, strict=True))
        return out

    def _encode_with_fastavro(self, batch: ResultBatch) -> list[bytes]:
        """The general path (a user schema): one ``schemaless_writer`` call per row."""
        names = list(batch.values)
        json_text = self.json_text_fields
        cols = [
            json_text_column(batch.values[n]) if n in json_text else batch.values[n] for n in names
        ]
        rows = zip(*cols, strict=True) if cols else repeat((), len(batch))
        kind = batch.kind.value
        buffer = io.BytesIO()
        write = fastavro.schemaless_writer
        schema = self._parsed
        tell = buffer.tell
        ends: list[int] = []
        parts = [None] * len(batch) if batch.partition is None else batch.partition.tolist()
        for key, start, end, part, seq, row in zip(
            batch.keys,
            batch.window_start.tolist(),
            batch.window_end.tolist(),
            parts,
            batch.update_seq.tolist(),
            rows,
            strict=True,
        ):
            record: dict[str, Any] = {"key": key, "window_start": start, "window_end": end}
            if part is not None:
                record["partition"] = part
            record.update(kind=kind, update_seq=seq, values=dict(zip(names, row, strict=True)))
            write(buffer, schema, record)
            ends.append(tell())
        data = buffer.getvalue()
        prefix = self._prefix
        return [prefix + data[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]

    def decoder(self) -> AvroResultDecoder:
        """The decoder of this encoder's values."""
        return AvroResultDecoder(
            self.schema,
            json_text_fields=self.json_text_fields,
            confluent=self.schema_id is not None,
        )


class AvroResultDecoder:
    """Reads :class:`AvroResultEncoder` values back into ``WindowResult.to_dict`` form.

    ``schema`` is the writer schema (a parsed-JSON mapping or its JSON text);
    ``json_text_fields`` the ``values`` fields holding JSON text, parsed back;
    ``confluent`` whether values carry the 5-byte Confluent header. Timestamps come
    back as epoch-ms ints. Unlike the input decoders this one raises ``ValueError`` on
    bad data: it is meant for tests and trusted consumers.
    """

    def __init__(
        self,
        schema: Mapping[str, Any] | str,
        *,
        json_text_fields: Iterable[str] = (),
        confluent: bool = False,
    ) -> None:
        loaded = orjson.loads(schema) if isinstance(schema, str) else schema
        self._parsed = parse_schema(keep_raw_millis(loaded), "result schema")
        self.json_text_fields = frozenset(json_text_fields)
        self.confluent = confluent

    @classmethod
    def for_config(cls, config: JobConfig) -> AvroResultDecoder:
        """The decoder of the values :func:`result_encoder_for` writes for ``config``."""
        return AvroResultEncoder(config).decoder()

    def decode(self, value: bytes | None) -> dict[str, Any] | None:
        """The result dict, ``None`` for a tombstone."""
        if value is None:
            return None
        buffer = io.BytesIO(value)
        if self.confluent:
            problem = confluent_problem(value)
            if problem is not None:
                raise ValueError(problem)
            buffer.seek(CONFLUENT_HEADER)
        try:
            record = fastavro.schemaless_reader(buffer, self._parsed, None)
        except Exception as exc:
            raise ValueError(avro_reason(exc, len(value))) from exc
        if not isinstance(record, dict):
            raise ValueError(f"expected an Avro record, got {type(record).__name__}")
        values = record.get("values")
        if isinstance(values, dict):
            for name in self.json_text_fields:
                text = values.get(name)
                if isinstance(text, str):
                    values[name] = orjson.loads(text)
        return record


def result_encoder_for(config: JobConfig) -> JsonResultEncoder | AvroResultEncoder:
    """The result encoder of the job's ``output.format`` (Avro: schemaless values)."""
    if config.output.format == "avro":
        return AvroResultEncoder(config)
    return JsonResultEncoder()


def result_decoder_for(config: JobConfig) -> JsonResultDecoder | AvroResultDecoder:
    """The decoder of the values :func:`result_encoder_for` writes for ``config``."""
    return result_encoder_for(config).decoder()


def decode_result_value(
    value: bytes | None, decoder: ResultDecoder | None = None
) -> dict[str, Any] | None:
    """Decode one result value (JSON unless an Avro ``decoder`` is given); tombstone -> None."""
    return (decoder if decoder is not None else JsonResultDecoder()).decode(value)
