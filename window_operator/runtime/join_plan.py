"""The plan of a join job: two inputs routed by join key into the same state tasks.

Rows cross the exchange as their join key's store encoding (the equal fields), event
time, input position and the record JSON carried into results; they are routed by a
stable hash of that encoding, so both sides of a key meet in one task. Results go to
the output topic keyed by the positions of the messages they pair (``{"left":
[partition, offset], "right": [...]}``, ``null`` for the side an unmatched row lacks),
so a consumer can tell every pair once; a ``RETRACT`` is a tombstone under the key of
the unmatched record it withdraws.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from stores.keys import decode_fields, encode_fields
from stores.rocks import TaskStore
from window_operator.arrays import IntArray
from window_operator.arrival import future_error
from window_operator.codecs import (
    AvroPayloadDecoder,
    CheckedResults,
    JsonPayloadDecoder,
    PayloadDecoder,
)
from window_operator.config import JoinInputConfig, JoinJobConfig
from window_operator.join import JoinRuntime, build_join_runtime
from window_operator.join.common import JoinKey
from window_operator.join.decoding import JoinRows
from window_operator.join.results import JoinResultBatch
from window_operator.kernel import WindowOperator
from window_operator.results import ErrorRecord
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plan import DecodedInput, KafkaRecord, SourceSpec
from window_operator.runtime.routing import task_of_bytes

__all__ = ["JoinPlan"]


def _payload_decoder(side: JoinInputConfig) -> PayloadDecoder:
    if side.format == "json":
        return JsonPayloadDecoder()
    assert side.avro_schema is not None  # the config requires it for avro
    return AvroPayloadDecoder(side.avro_schema, wire=side.avro_wire)


@dataclass(frozen=True)
class JoinPlan:
    """The plan of a join job (see module doc)."""

    runtime: JoinRuntime
    payloads: tuple[PayloadDecoder, PayloadDecoder]

    @classmethod
    def of(cls, config: JoinJobConfig) -> JoinPlan:
        """Build the plan of ``config``."""
        j = config.join
        return cls(
            build_join_runtime(config), (_payload_decoder(j.left), _payload_decoder(j.right))
        )

    @property
    def job(self) -> str:
        """The job name."""
        return self.runtime.config.job

    @property
    def sources(self) -> tuple[SourceSpec, ...]:
        """Left (0) and right (1)."""
        j = self.runtime.config.join
        return (
            SourceSpec(0, j.left.name, j.left.topic_name),
            SourceSpec(1, j.right.name, j.right.topic_name),
        )

    @property
    def partition_keyed(self) -> bool:
        """Joins are keyed by join key."""
        return False

    def decode(self, source: int, records: InputRecords) -> DecodedInput[JoinRows]:
        """Decode a range of one input; far-future events (by Kafka timestamp) rejected."""
        parsed, failures = self.payloads[source].decode(records.values)
        failed = dict(failures)
        good = [i for i in range(len(records)) if i not in failed]
        topic, part = records.topic, records.partition
        stamps = records.timestamps
        good_stamps = None if stamps is None else [stamps[i] for i in good]
        result = self.runtime.decoders[source].decode_records(
            [parsed[i] for i in good],
            partitions=[part] * len(good),
            offsets=[records.offsets[i] for i in good],
            wall_ms=good_stamps,
            record_times=good_stamps,
        )
        errors = {
            i: ErrorRecord(self.payloads[source].error_code, reason, part, records.offsets[i])
            for i, reason in failed.items()
        }
        kept = set(result.kept)
        for j, err in zip(
            [j for j in range(len(good)) if j not in kept], result.errors, strict=True
        ):
            errors[good[j]] = err
        rows = result.rows
        rows = self._reject_future(rows, [good[j] for j in result.kept], records, errors)
        name = self.sources[source].name
        out = [
            ErrorRecord(
                e.code,
                e.reason,
                part,
                records.offsets[i],
                records.values[i],
                topic,
                records.keys[i],
                name,
                records.timestamp(i),
            )
            for i, e in sorted(errors.items())
        ]
        max_ts = int(rows.ts.max()) if len(rows) else None
        return DecodedInput(rows, out, max_ts)

    def _reject_future(
        self,
        rows: JoinRows,
        inputs: list[int],
        records: InputRecords,
        errors: dict[int, ErrorRecord],
    ) -> JoinRows:
        max_future = self.runtime.config.watermark.max_future
        stamps = records.timestamps
        if max_future is None or stamps is None or not len(rows):
            return rows
        arrival = np.asarray([stamps[i] for i in inputs], dtype=np.int64)
        late = (arrival >= 0) & (rows.ts - arrival > max_future)
        if not late.any():
            return rows
        for r in np.flatnonzero(late).tolist():
            code, reason = future_error(int(rows.ts[r]), int(arrival[r]), max_future)
            errors[inputs[r]] = ErrorRecord(code, reason, records.partition, int(rows.offset[r]))
        return self.take(rows, np.flatnonzero(~late))

    def route(self, batch: JoinRows, n_tasks: int) -> IntArray:
        """By a stable hash of the join key's encoding: both sides of a key meet."""
        return task_of_bytes([_encode_key(k) for k in batch.keys], n_tasks)

    def source_of(self, batch: JoinRows) -> int:
        """The input of the rows."""
        return batch.source

    def take(self, batch: JoinRows, idx: IntArray) -> JoinRows:
        """The rows ``idx``."""
        il = idx.tolist()
        return JoinRows(
            batch.source,
            [batch.keys[i] for i in il],
            batch.ts[idx],
            [batch.records[i] for i in il],
            batch.partition[idx],
            batch.offset[idx],
            None if batch.wall_ms is None else batch.wall_ms[idx],
        )

    def positions(self, batch: JoinRows) -> tuple[IntArray, IntArray]:
        """Every row's input partition and offset."""
        return batch.partition, batch.offset

    def to_arrow(self, batch: JoinRows, idx: IntArray) -> pa.RecordBatch:
        """The rows ``idx`` as Arrow: encoded join key, ts, partition, offset, arrival (the
        Kafka timestamp, -1: none), record JSON."""
        il = idx.tolist()
        arrival = batch.wall_ms[idx] if batch.wall_ms is not None else np.full(len(il), -1)
        return pa.RecordBatch.from_arrays(
            [
                pa.array([_encode_key(batch.keys[i]) for i in il], pa.binary()),
                pa.array(batch.ts[idx]),
                pa.array(batch.partition[idx]),
                pa.array(batch.offset[idx]),
                pa.array(np.asarray(arrival, dtype=np.int64)),
                pa.array([batch.records[i] for i in il], pa.binary()),
            ],
            names=["key", "ts", "partition", "offset", "arrival", "record"],
        )

    def arrange(self, parts: dict[int, list[pa.RecordBatch]]) -> list[JoinRows]:
        """Left rows, then right rows; for a rows join (where arrival order decides) the
        rows of both inputs by arrival time (Kafka timestamp), then input and position,
        cut into runs of one input. A self-join's record reaches the left input, then the
        right, before the next record (by time, then position) does, as ``simulate``
        takes a line."""
        tables = {s: pa.Table.from_batches(p) for s, p in parts.items() if p}
        if not tables:
            return []
        if self.runtime.spec.rows is None:
            return [self._rows(s, _ordered(t)) for s, t in sorted(tables.items())]
        order = ("arrival", "source", "partition", "offset")
        if self.runtime.self_join:
            order = ("arrival", "partition", "offset", "source")
        both = pa.concat_tables(
            [t.append_column("source", pa.array(np.full(t.num_rows, s))) for s, t in tables.items()]
        ).sort_by([(c, "ascending") for c in order])
        source = both.column("source").to_numpy()
        cuts = np.flatnonzero(np.diff(source)) + 1
        bounds = [0, *cuts.tolist(), both.num_rows]
        runs = zip(bounds[:-1], bounds[1:], strict=True)
        return [self._rows(int(source[a]), both.slice(a, b - a)) for a, b in runs]

    def _rows(self, source: int, table: pa.Table) -> JoinRows:
        single = len(self.runtime.spec.on) == 1
        keys: list[JoinKey] = []
        for enc in table.column("key").to_pylist():
            fields = decode_fields(enc)
            keys.append(fields[0] if single else tuple(fields))
        return JoinRows(
            source,
            keys,
            np.asarray(table.column("ts").to_numpy(), dtype=np.int64),
            table.column("record").to_pylist(),
            np.asarray(table.column("partition").to_numpy(), dtype=np.int64),
            np.asarray(table.column("offset").to_numpy(), dtype=np.int64),
        )

    def operator(self, store: TaskStore) -> WindowOperator[JoinRows, JoinResultBatch, object]:
        """The join operator over ``store``."""
        op: WindowOperator[JoinRows, JoinResultBatch, object] = self.runtime.operator(store)
        return op

    def encode_results(self, results: JoinResultBatch) -> CheckedResults[KafkaRecord]:
        """Output records keyed by the pair's positions; a RETRACT is a tombstone (a
        pair's records are decoded JSON: every one can be written)."""
        return CheckedResults(results.to_records(), [])


def _ordered(table: pa.Table) -> pa.Table:
    return table.sort_by([("partition", "ascending"), ("offset", "ascending")])


def _encode_key(key: JoinKey) -> bytes:
    return encode_fields(key if isinstance(key, tuple) else (key,))
