"""Input decoding of a job: payload decoder + record decoder -> event batch + error records.

:func:`decode_payloads` chains a payload decoder with the job's
:class:`~window_operator.events.RecordDecoder` and returns a
:class:`~window_operator.events.DecodeResult` whose errors carry ``BAD_JSON``/``BAD_AVRO``
(payload level) or the record-level codes, each with the original bytes. A null payload
(a tombstone) is always a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from window_operator.codecs.avro_input import AvroPayloadDecoder
from window_operator.codecs.avro_schema import AvroSchemaError
from window_operator.codecs.decoding import PayloadDecoder
from window_operator.codecs.json_input import JsonPayloadDecoder
from window_operator.config import JobConfig
from window_operator.events import DecodeResult, RecordDecoder
from window_operator.results import ErrorRecord

__all__ = ["decode_payloads", "payload_decoder_for"]


def payload_decoder_for(config: JobConfig) -> PayloadDecoder:
    """The payload decoder of the job's ``input.format`` (and Avro schema and wire)."""
    inp = config.input
    if inp.format == "json":
        return JsonPayloadDecoder()
    if inp.avro_schema is None:  # the config validation requires it
        raise AvroSchemaError("input.format is avro but input.avro_schema is not set")
    return AvroPayloadDecoder(inp.avro_schema, wire=inp.avro_wire)


def decode_payloads(
    payloads: Sequence[bytes | None],
    payload_decoder: PayloadDecoder,
    record_decoder: RecordDecoder,
    *,
    partitions: Sequence[int] | None = None,
    offsets: Sequence[int] | None = None,
    wall_ms: Sequence[int] | None = None,
    default_partition: int = 0,
    topic: str | None = None,
) -> DecodeResult:
    """Parse and decode message values into an event batch and error records.

    Payload failures become errors with the decoder's code (``BAD_JSON``/``BAD_AVRO``)
    and the parser's reason; records the record decoder rejects keep its code. Every
    error carries the original bytes as ``raw`` and ``topic`` when given; errors are in
    input order and ``kept`` holds the input index of every batch row.
    """
    records, failures = payload_decoder.decode(payloads)
    if not failures:
        result = record_decoder.decode_records(
            records,
            partitions=partitions,
            offsets=offsets,
            raws=payloads,
            wall_ms=wall_ms,
            default_partition=default_partition,
        )
        if topic is not None:
            result.errors = [replace(err, topic=topic) for err in result.errors]
        return result
    failed = {i for i, _ in failures}
    good = [i for i in range(len(records)) if i not in failed]
    result = record_decoder.decode_records(
        [records[i] for i in good],
        partitions=None if partitions is None else [partitions[i] for i in good],
        offsets=None if offsets is None else [offsets[i] for i in good],
        raws=[payloads[i] for i in good],
        wall_ms=None if wall_ms is None else [wall_ms[i] for i in good],
        default_partition=default_partition,
    )
    kept = [good[j] for j in result.kept]
    kept_set = set(kept)
    rejected = [i for i in good if i not in kept_set]
    indexed: list[tuple[int, ErrorRecord]] = [
        (i, err if topic is None else replace(err, topic=topic))
        for i, err in zip(rejected, result.errors, strict=True)
    ]
    code = payload_decoder.error_code
    for i, reason in failures:
        indexed.append(
            (
                i,
                ErrorRecord(
                    code=code,
                    reason=reason,
                    partition=partitions[i] if partitions is not None else default_partition,
                    offset=offsets[i] if offsets is not None else None,
                    raw=payloads[i],
                    topic=topic,
                ),
            )
        )
    indexed.sort(key=lambda item: item[0])
    return DecodeResult(result.batch, [err for _, err in indexed], kept)
