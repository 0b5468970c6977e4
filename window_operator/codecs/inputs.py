"""Input decoding of a job: payload decoder + record decoder -> event batch + error records.

:func:`decode_payloads` chains a payload decoder with the job's
:class:`~window_operator.events.RecordDecoder` and returns a
:class:`~window_operator.events.DecodeResult` whose errors carry ``BAD_JSON``/``BAD_AVRO``
(payload level) or the record-level codes, each with the original bytes. A null payload
(a tombstone) is always a failure. :class:`InputDecoder` adds the columnar path for
clean JSON chunks, with the same verdicts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from window_operator.codecs.avro_input import AvroPayloadDecoder
from window_operator.codecs.avro_schema import AvroSchemaError
from window_operator.codecs.decoding import PayloadDecoder
from window_operator.codecs.fastjson import ColumnarJsonDecoder
from window_operator.codecs.json_input import JsonPayloadDecoder
from window_operator.config import JobConfig
from window_operator.events import DecodeResult, RecordDecoder
from window_operator.results import ErrorRecord

__all__ = ["InputDecoder", "decode_payloads", "payload_decoder_for"]


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
    record_times: Sequence[int] | None = None,
    record_keys: Sequence[object] | None = None,
    default_partition: int = 0,
    topic: str | None = None,
) -> DecodeResult:
    """Parse and decode message values into an event batch and error records.

    Payload failures become errors with the decoder's code (``BAD_JSON``/``BAD_AVRO``)
    and the parser's reason; records the record decoder rejects keep its code. Every
    error carries the original bytes as ``raw`` and ``topic`` when given; errors are in
    input order and ``kept`` holds the input index of every batch row. ``record_times``
    and ``record_keys``: the Kafka records' timestamps and keys (see
    :meth:`RecordDecoder.decode_records`).
    """
    records, failures = payload_decoder.decode(payloads)
    failed = {i for i, _ in failures}
    good = [i for i in range(len(records)) if i not in failed]

    def pick(column: Sequence[int] | None) -> list[int] | None:
        return None if column is None else [column[i] for i in good]

    result = record_decoder.decode_records(
        [records[i] for i in good] if failures else records,
        partitions=pick(partitions),
        offsets=pick(offsets),
        raws=[payloads[i] for i in good],
        wall_ms=pick(wall_ms),
        record_times=pick(record_times),
        record_keys=None if record_keys is None else [record_keys[i] for i in good],
        default_partition=default_partition,
    )
    kept = [good[j] for j in result.kept]
    kept_set = set(kept)
    rejected = [i for i in good if i not in kept_set]
    indexed = list(zip(rejected, result.errors, strict=True))
    for i, reason in failures:
        partition = partitions[i] if partitions is not None else default_partition
        offset = offsets[i] if offsets is not None else None
        err = ErrorRecord(payload_decoder.error_code, reason, partition, offset, payloads[i])
        indexed.append((i, err))
    indexed.sort(key=lambda item: item[0])
    errors = [err if topic is None else replace(err, topic=topic) for _, err in indexed]
    return DecodeResult(result.batch, errors, kept)


@dataclass(frozen=True, slots=True)
class InputDecoder:
    """A job's input decoding: the columnar JSON path for clean chunks, else record by record.

    Both paths give every payload the same verdict and the same values (the columnar
    decoder declines any chunk it cannot prove clean), so the result does not depend on
    what else is in a micro-batch.
    """

    payload_decoder: PayloadDecoder
    record_decoder: RecordDecoder
    columnar: ColumnarJsonDecoder | None = None

    @classmethod
    def for_config(cls, config: JobConfig, record_decoder: RecordDecoder) -> InputDecoder:
        """The decoder of the job's ``input`` section."""
        json_input = config.input.format == "json"
        columnar = ColumnarJsonDecoder(record_decoder) if json_input else None
        return cls(payload_decoder_for(config), record_decoder, columnar)

    def decode(
        self,
        payloads: Sequence[bytes | None],
        *,
        partition: int,
        offsets: Sequence[int],
        topic: str,
        record_times: Sequence[int] | None = None,
        record_keys: Sequence[object] | None = None,
    ) -> DecodeResult:
        """Decode the payloads of ``partition`` at ``offsets``, with their Kafka
        timestamps and keys (see :func:`decode_payloads`)."""
        n = len(payloads)
        if self.columnar is not None and n and None not in payloads:
            clean = self.columnar.decode(payloads, record_times, record_keys)  # type: ignore[arg-type]
            if clean is not None:
                clean.partition[:] = partition
                clean.offset = np.asarray(offsets, dtype=np.int64)
                return DecodeResult(clean, [], list(range(n)))
        return decode_payloads(
            payloads,
            self.payload_decoder,
            self.record_decoder,
            partitions=[partition] * n,
            offsets=offsets,
            record_times=record_times,
            record_keys=record_keys,
            topic=topic,
        )
