"""``simulate``'s output: window and join results as the lines it writes, each checked
against ``output.max_record_bytes`` as the job checks the record it writes for it.

A line is the JSON value of the result's record in the output topic (for a RETRACT,
a tombstone there, the result's document; for an Avro output, the value written with
the job's schema and read back, as ``read`` prints it). A result whose record (key and
value) is over the bound is a ``RESULT_ERROR``, not a line, as on Kafka (before,
``simulate`` wrote it, and the job failed to after deploying). A window's key repeats
fields of its value (the key and the bounds), so a batch of JSON lines none of which is
near half the bound is written without encoding its keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import orjson

from window_operator.codecs.result_avro import AvroResultEncoder
from window_operator.codecs.result_errors import encode_checked
from window_operator.codecs.result_json import JsonResultEncoder, dumps_json
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.join import JoinResultBatch
from window_operator.join.results import MAX_PAIR_KEY_BYTES
from window_operator.results import ErrorRecord, Kind, ResultBatch
from window_operator.runtime.record_limit import KafkaRecord, too_large

__all__ = ["ResultLines"]

#: A result's line, and the Kafka record the job writes for it.
ResultLine = tuple[bytes, KafkaRecord]
#: Room for what a window's key holds beyond the fields its value repeats.
_KEY_ROOM = 64
#: The JSON values of the output topic (stateless).
_JSON_OUTPUT = JsonResultEncoder()


class ResultLines:
    """How a job's results become ``simulate``'s lines (see module doc)."""

    def __init__(self, config: JobConfig | JoinJobConfig) -> None:
        self.limit = config.output.max_record_bytes
        self._lines: Callable[[ResultBatch], list[bytes]] | None = _json_lines
        self._pairs: Callable[[ResultBatch], list[ResultLine]] = _json_pairs
        if isinstance(config, JobConfig) and config.output.format == "avro":
            self._lines, self._pairs = None, _avro_pairs(config)

    def of(self, batch: ResultBatch) -> tuple[list[bytes], list[ErrorRecord]]:
        """The lines of ``batch``'s results, and the ``RESULT_ERROR`` of each that
        cannot be made or whose record is over the bound."""
        if self._lines is not None:
            checked = encode_checked(batch, self._lines)
            lines = list(checked.records)
            if 2 * max(map(len, lines), default=0) + _KEY_ROOM <= self.limit:
                return lines, checked.errors
        paired = encode_checked(batch, self._pairs)
        fitted, oversized = _fitting(paired.records, self.limit)
        return fitted, paired.errors + oversized

    def of_join(self, batch: JoinResultBatch) -> tuple[bytes, list[ErrorRecord]]:
        """The text of join results (a line each), and the ``RESULT_ERROR`` of each
        whose record is over the bound."""
        text = batch.to_json_lines()
        if len(text) + MAX_PAIR_KEY_BYTES <= self.limit:  # every one fits
            return text, []
        rows = zip(text.split(b"\n"), batch.to_records(), strict=False)
        fitted, oversized = _fitting(rows, self.limit)  # (the text ends with "\n")
        return b"".join(line + b"\n" for line in fitted), oversized


def _fitting(rows: Iterable[ResultLine], limit: int) -> tuple[list[bytes], list[ErrorRecord]]:
    """The lines of the results whose record fits ``limit``, and the ``RESULT_ERROR``
    of each that does not."""
    lines: list[bytes] = []
    errors: list[ErrorRecord] = []
    for line, record in rows:
        error = too_large(record, limit)
        if error is None:
            lines.append(line)
        else:
            errors.append(error)
    return lines, errors


def _json_lines(batch: ResultBatch) -> list[bytes]:
    """Each result's JSON line (no newline): the output topic's JSON value, from the
    same columnar encoder; for a RETRACT, its document. A value with no JSON form
    raises."""
    if batch.kind is not Kind.RETRACT:
        return cast(list[bytes], [value for _, value in _JSON_OUTPUT.encode_batch(batch)])
    return [dumps_json(r.to_dict()) for r in batch.to_results()]


def _json_pairs(batch: ResultBatch) -> list[ResultLine]:
    """:func:`_json_lines` with each result's record."""
    records = _JSON_OUTPUT.encode_batch(batch)
    if batch.kind is not Kind.RETRACT:
        return [(cast(bytes, value), (key, value)) for key, value in records]
    return list(zip(_json_lines(batch), records, strict=True))


def _avro_pairs(config: JobConfig) -> Callable[[ResultBatch], list[ResultLine]]:
    """Results written with the job's output schema and read back, as `read` prints
    them (a field the schema leaves out is not there, a default it adds is, a
    ``float`` holds what a float holds; a value the schema cannot hold raises, and is
    a ``RESULT_ERROR``), with each result's record."""
    encoder = AvroResultEncoder(config)
    decoder = encoder.decoder()

    def pairs(batch: ResultBatch) -> list[ResultLine]:
        records = encoder.encode_batch(batch)
        if batch.kind is Kind.RETRACT:
            return list(zip(_json_lines(batch), records, strict=True))
        return [
            (orjson.dumps(decoder.decode(value), default=str), (key, value))
            for key, value in records
        ]

    return pairs
