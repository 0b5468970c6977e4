"""Reading input back from Kafka: a partition range (the map side's read, and a state
task's re-read of input its state lacks), and single records (the original bytes of a
row the operator rejected or that made it raise: the exchange carries decoded columns,
not bytes)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from window_operator.kafka_range import KafkaSourceError
from window_operator.results import ErrorCode, ErrorRecord
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.settings import KafkaConfig

__all__ = ["Original", "read_input", "read_records", "with_originals"]

#: Offsets wanted this close together are read as one range, not looked up one by one.
_RUN_GAP = 1_000


@dataclass(frozen=True, slots=True)
class Original:
    """An input record read back: its Kafka key, value and timestamp (``None``: none)."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


def with_originals(
    errors: Sequence[ErrorRecord], consumer_config: KafkaConfig, default_topic: str
) -> list[ErrorRecord]:
    """``errors`` with the original key and value of each ``OUT_OF_RETENTION`` record
    (the operator only knows its key and time); one it cannot read back keeps its
    summary. ``default_topic``: the input of errors that name none."""
    wanted: dict[tuple[str, int], list[int]] = defaultdict(list)
    for e in errors:
        if (
            e.code is ErrorCode.OUT_OF_RETENTION
            and e.partition is not None
            and e.offset is not None
        ):
            wanted[(e.topic or default_topic, e.partition)].append(e.offset)
    if not wanted:
        return list(errors)
    found = {
        tp: read_records(consumer_config, tp[0], tp[1], offsets) for tp, offsets in wanted.items()
    }
    out = []
    for e in errors:
        topic = e.topic or default_topic
        got = None
        if e.code is ErrorCode.OUT_OF_RETENTION and e.partition is not None:
            got = found.get((topic, e.partition), {}).get(e.offset if e.offset is not None else -1)
        out.append(
            e
            if got is None
            else replace(e, key=got.key, raw=got.value, topic=topic, timestamp=got.timestamp)
        )
    return out


def read_records(
    consumer_config: KafkaConfig,
    topic: str,
    partition: int,
    offsets: Iterable[int],
    *,
    timeout_s: float = 10.0,
) -> dict[int, Original]:
    """The records at ``offsets``, by offset (missing ones are left out).

    Offsets close together are read as one range (a backfill may reject many records
    of a batch), far ones each on their own.
    """
    wanted = sorted(set(offsets))
    found: dict[int, Original] = {}
    runs: list[list[int]] = []
    for offset in wanted:
        if runs and offset - runs[-1][-1] <= _RUN_GAP:
            runs[-1].append(offset)
        else:
            runs.append([offset])
    for run in runs:
        try:
            records = read_input(
                consumer_config, topic, partition, run[0], run[-1] + 1, timeout_s=timeout_s
            )
        except KafkaSourceError:
            continue  # gone (retention) or not delivered: the error keeps its summary
        at = set(run)
        for i, offset in enumerate(records.offsets):
            if offset in at:
                found[offset] = Original(records.keys[i], records.values[i], records.timestamp(i))
    return found


def read_input(
    consumer_config: KafkaConfig,
    topic: str,
    partition: int,
    start: int,
    until: int,
    *,
    timeout_s: float,
) -> InputRecords:
    """The records ``start <= offset < until`` of an input partition (``start`` may be
    :data:`~window_operator.kafka_range.EARLIEST`), with keys, values and timestamps.

    Raises :class:`~window_operator.kafka_range.KafkaSourceError` when they are gone
    (deleted by retention) or the broker delivers nothing for ``timeout_s``.
    """
    from window_operator.kafka_range import KafkaRange, range_consumer_config, read_messages

    offsets: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    stamps: list[int] = []
    rng = KafkaRange(
        topic,
        partition,
        start,
        until,
        range_consumer_config(consumer_config),
        poll_timeout_ms=int(timeout_s * 1000),
    )
    for msgs in read_messages(rng):
        for m in msgs:
            offsets.append(m.offset())
            keys.append(m.key())
            values.append(m.value())
            kind, ts = m.timestamp()
            stamps.append(ts if kind else -1)
    return InputRecords(topic, partition, offsets, keys, values, stamps)
