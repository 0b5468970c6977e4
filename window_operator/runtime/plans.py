"""The job plans: aggregation jobs (every window shape) and join jobs.

:func:`plan_for` builds a job's plan once per process (operations, schemas and codecs
are reusable across micro-batches).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeAlias

import numpy as np
import orjson
import pyarrow as pa

from stores.rocks import TaskStore
from window_operator.arrays import IntArray
from window_operator.arrival import reject_future
from window_operator.codecs import (
    CheckedResults,
    ResultEncoder,
    encode_checked,
    result_encoder_for,
)
from window_operator.codecs.inputs import InputDecoder
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.events import DecodeResult, EventBatch
from window_operator.job import JobRuntime, build_runtime
from window_operator.jsonbytes import json_bytes
from window_operator.kernel import StoredWindow, WindowOperator
from window_operator.results import ResultBatch
from window_operator.runtime.guard import decode_guarded
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.plan import DecodedInput, KafkaRecord, SourceSpec
from window_operator.runtime.routing import task_of_keys, task_of_partitions
from window_operator.runtime.settings import TaskSettings

if TYPE_CHECKING:
    from window_operator.runtime.join_plan import JoinPlan

__all__ = ["AggregationPlan", "Plan", "event_batch_from_arrow", "event_batch_to_arrow", "plan_for"]

Plan: TypeAlias = "AggregationPlan | JoinPlan"
"""The plan of a job of either kind (each a :class:`JobPlan` of its own row and result types)."""

_PLANS: dict[str, Plan] = {}


def plan_for(settings: TaskSettings) -> Plan:
    """The plan of the settings' job, built once per process."""
    key = settings.config.model_dump_json()
    plan = _PLANS.get(key)
    if plan is None:
        config = settings.config
        if isinstance(config, JoinJobConfig):
            from window_operator.runtime.join_plan import JoinPlan as _JoinPlan

            plan = _JoinPlan.of(config)
        else:
            plan = AggregationPlan.of(config)
        _PLANS[key] = plan
    return plan


@dataclass(frozen=True)
class AggregationPlan:
    """The plan of an aggregation job (time windows, sessions, count / offset windows)."""

    runtime: JobRuntime
    decoder: InputDecoder
    encoder: ResultEncoder

    @classmethod
    def of(cls, config: JobConfig) -> AggregationPlan:
        """Build the plan of ``config``."""
        runtime = build_runtime(config)
        decoder = InputDecoder.for_config(config, runtime.decoder)
        return cls(runtime, decoder, result_encoder_for(config))

    @property
    def job(self) -> str:
        """The job name."""
        return self.runtime.config.job

    @property
    def sources(self) -> tuple[SourceSpec, ...]:
        """The one input."""
        return (SourceSpec(0, "input", self.runtime.config.input.topic),)

    @property
    def partition_keyed(self) -> bool:
        """Offset windows and tuple sessions are defined per input partition."""
        return self.runtime.config.windows_per_partition

    def decode(self, source: int, records: InputRecords) -> DecodedInput[EventBatch]:
        """Decode a range; far-future events (by Kafka timestamp) are rejected (none where
        the Kafka timestamp is the event time)."""
        decoded = decode_guarded(
            self.decoder,
            records.values,
            topic=records.topic,
            partition=records.partition,
            offsets=records.offsets,
            record_times=records.timestamps,
            record_keys=records.keys,
        )
        max_future = self.runtime.config.watermark.max_future
        if records.timestamps is not None and max_future is not None:
            stamps = records.timestamps
            arrival = np.asarray([stamps[i] for i in decoded.kept], dtype=np.int64)
            decoded = reject_future(
                decoded, arrival, max_future, raws=records.values, topic=records.topic
            )
        return _with_keys(decoded, records)

    def route(self, batch: EventBatch, n_tasks: int) -> IntArray:
        """By a stable hash of the grouping key (or by partition, see ``partition_keyed``)."""
        if self.partition_keyed:
            return task_of_partitions(batch.partition, n_tasks)
        return task_of_keys(batch.keys, n_tasks)

    def source_of(self, batch: EventBatch) -> int:
        """The one input."""
        return 0

    def take(self, batch: EventBatch, idx: IntArray) -> EventBatch:
        """The rows ``idx`` of a batch."""
        return batch.take(idx)

    def positions(self, batch: EventBatch) -> tuple[IntArray, IntArray]:
        """Every row's input partition and offset."""
        return batch.partition, batch.offset

    def to_arrow(self, batch: EventBatch, idx: IntArray) -> pa.RecordBatch:
        """The rows ``idx`` as Arrow."""
        return event_batch_to_arrow(batch, idx)

    def arrange(self, parts: dict[int, list[pa.RecordBatch]]) -> list[EventBatch]:
        """The one input's rows, ordered by (partition, offset)."""
        fields = self.runtime.decoder.object_fields
        return [event_batch_from_arrow(p, fields) for _, p in sorted(parts.items())]

    def operator(self, store: TaskStore) -> WindowOperator[EventBatch, ResultBatch, StoredWindow]:
        """The job's operator over ``store``."""
        op: WindowOperator[EventBatch, ResultBatch, StoredWindow] = self.runtime.operator(store)
        return op

    def encode_results(self, results: ResultBatch) -> CheckedResults[KafkaRecord]:
        """Upsert-keyed output records, and the errors of results that cannot be written."""
        return encode_checked(results, self.encoder.encode_batch)


def _with_keys(decoded: DecodeResult, records: InputRecords) -> DecodedInput[EventBatch]:
    """Error records carry their Kafka key and timestamp; ``max_ts`` of the rows."""
    kept = set(decoded.kept)
    failed = [i for i in range(len(records)) if i not in kept]
    errors = [
        replace(err, key=records.keys[i], timestamp=records.timestamp(i))
        for i, err in zip(failed, decoded.errors, strict=True)
    ]
    batch = decoded.batch
    max_ts = int(batch.ts.max()) if len(batch) else None
    return DecodedInput(batch, errors, max_ts)


def event_batch_to_arrow(batch: EventBatch, idx: IntArray) -> pa.RecordBatch:
    """Rows of a decoded batch as Arrow: key, ts, partition, offset, then the values.

    Numeric value fields are float64 columns ``n:<field>``, object fields JSON text
    ``o:<field>``.
    """
    keys = batch.keys if len(idx) == len(batch) else [batch.keys[i] for i in idx.tolist()]
    arrays = [
        pa.array(keys, pa.string()),
        pa.array(batch.ts[idx]),
        pa.array(batch.partition[idx]),
        pa.array(batch.offset[idx]),
    ]
    names = ["key", "ts", "partition", "offset"]
    for f, col in batch.numeric.items():
        arrays.append(pa.array(col[idx]))
        names.append(f"n:{f}")
    for f, objs in batch.objects.items():
        arrays.append(pa.array([json_bytes(objs[i]) for i in idx.tolist()], pa.binary()))
        names.append(f"o:{f}")
    return pa.RecordBatch.from_arrays(arrays, names=names)


def event_batch_from_arrow(
    parts: list[pa.RecordBatch], object_fields: tuple[str, ...]
) -> EventBatch:
    """Inverse of :func:`event_batch_to_arrow` for many parts, ordered by (partition, offset)."""
    table = pa.Table.from_batches(parts).sort_by(
        [("partition", "ascending"), ("offset", "ascending")]
    )
    numeric = {
        name[2:]: table.column(name).to_numpy()
        for name in table.column_names
        if name.startswith("n:")
    }
    objects = {
        f: [orjson.loads(v) for v in table.column(f"o:{f}").to_pylist()] for f in object_fields
    }
    return EventBatch(
        keys=table.column("key").to_pylist(),
        ts=table.column("ts").to_numpy(),
        partition=table.column("partition").to_numpy(),
        offset=table.column("offset").to_numpy(),
        numeric={k: np.asarray(v, dtype=np.float64) for k, v in numeric.items()},
        objects=objects,
    )
