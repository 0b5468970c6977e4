"""Kafka payload codecs: input events in, window results and error records out.

Input
    A :class:`PayloadDecoder` turns raw message values into Python records (dicts) one
    message at a time and reports failures as data: ``decode`` returns the records, with
    :data:`DECODE_FAILED` in the place of each payload it could not read, and the
    ``(index, reason)`` of every failure. :func:`decode_payloads` chains a payload
    decoder with the job's :class:`~window_operator.events.RecordDecoder` and returns a
    :class:`~window_operator.events.DecodeResult` whose errors carry
    ``BAD_JSON``/``BAD_AVRO`` (payload level) or the record-level codes, each with the
    original bytes. A null payload (a tombstone) is always a failure.
    :class:`JsonPayloadDecoder` (:mod:`.json_input`) reads JSON, :class:`AvroPayloadDecoder`
    (:mod:`.avro_input`) Avro written with a local schema, bare or in the Confluent wire
    format; :class:`ColumnarJsonDecoder` (:mod:`.fastjson`) decodes clean JSON chunks
    column-wise with Arrow.

Output
    Every output record is keyed by the window (:func:`result_key`, :mod:`.result_json`).
    :class:`JsonResultEncoder` writes the value as JSON, :class:`AvroResultEncoder`
    (:mod:`.result_avro`) as Avro with the job's ``output.avro_schema`` or the schema
    :func:`derive_result_schema` (:mod:`.result_schema`) derives from the aggregations.
    :func:`encode_checked` (:mod:`.result_errors`) writes a batch but the results that
    cannot be written (a user ``finish`` that raised, a value the format cannot hold),
    which become ``RESULT_ERROR`` records.

Errors
    :func:`encode_error` (:mod:`.errors`) gives the Kafka record of a rejected input for
    the errors topic (the dead-letter-queue convention), :func:`decode_error` reads it
    back, and :func:`error_json` is its one-line JSON form.
"""

from window_operator.codecs.avro_input import AvroPayloadDecoder, AvroWire
from window_operator.codecs.avro_schema import AvroSchemaError
from window_operator.codecs.decoding import DECODE_FAILED, PayloadDecoder
from window_operator.codecs.errors import (
    HEADER_ERROR_CODE,
    HEADER_ERROR_REASON,
    HEADER_SOURCE_OFFSET,
    HEADER_SOURCE_PARTITION,
    HEADER_SOURCE_TIMESTAMP,
    HEADER_SOURCE_TOPIC,
    decode_error,
    encode_error,
    error_json,
)
from window_operator.codecs.fastjson import ColumnarJsonDecoder
from window_operator.codecs.inputs import decode_payloads, payload_decoder_for
from window_operator.codecs.json_input import JsonPayloadDecoder
from window_operator.codecs.result_avro import (
    AvroResultDecoder,
    AvroResultEncoder,
    decode_result_value,
    result_decoder_for,
    result_encoder_for,
)
from window_operator.codecs.result_errors import CheckedResults, encode_checked
from window_operator.codecs.result_json import (
    JsonResultDecoder,
    JsonResultEncoder,
    ResultDecoder,
    ResultEncoder,
    ResultKey,
    decode_result_key,
    result_key,
)
from window_operator.codecs.result_schema import derive_result_schema

__all__ = [
    "DECODE_FAILED",
    "HEADER_ERROR_CODE",
    "HEADER_ERROR_REASON",
    "HEADER_SOURCE_OFFSET",
    "HEADER_SOURCE_TIMESTAMP",
    "HEADER_SOURCE_PARTITION",
    "HEADER_SOURCE_TOPIC",
    "AvroPayloadDecoder",
    "AvroResultDecoder",
    "AvroResultEncoder",
    "AvroSchemaError",
    "AvroWire",
    "CheckedResults",
    "ColumnarJsonDecoder",
    "JsonPayloadDecoder",
    "JsonResultDecoder",
    "JsonResultEncoder",
    "PayloadDecoder",
    "ResultDecoder",
    "ResultEncoder",
    "ResultKey",
    "decode_error",
    "decode_payloads",
    "decode_result_key",
    "decode_result_value",
    "derive_result_schema",
    "encode_checked",
    "encode_error",
    "error_json",
    "payload_decoder_for",
    "result_decoder_for",
    "result_encoder_for",
    "result_key",
]
