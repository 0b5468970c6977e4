"""A long-running worker's input: one consumer over its partitions, read in chunks.

Each read returns, per partition that had records, a chunk: the records and the offset
range they cover. Consecutive chunks of a partition tile its offsets (a chunk starts
where the previous one ended, so transaction markers and compaction gaps fall inside
chunks), which is what a state task's replay positions and gap check expect. An
``available_now`` run stops reading a partition at its end offset; running out of
records the state continues from is an error, never a silent skip.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from window_operator.errors import AFRESH
from window_operator.kafka_range import KafkaSourceError, log_ends, range_consumer_config
from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputPartition, InputRange
from window_operator.runtime.gaps import InputGapError, past_end_message
from window_operator.runtime.inputs import InputRecords
from window_operator.runtime.settings import KafkaConfig

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message

__all__ = ["CHUNK_RECORDS", "Chunked", "InputReader"]

log = logging.getLogger(__name__)

#: The most records one read takes from the consumer (one chunk per partition in it).
CHUNK_RECORDS = 20_000


@dataclass(frozen=True, slots=True)
class Chunked:
    """One partition's records of one read, the offsets they cover, the read's time."""

    partition: InputPartition
    range: InputRange
    records: InputRecords
    seconds: float


class InputReader:
    """Reads a worker's input partitions (see module doc)."""

    def __init__(
        self,
        name: str,
        partitions: Sequence[InputPartition],
        consumer_config: KafkaConfig,
        ends: Mapping[InputPosition, int] | None = None,
    ) -> None:
        self.name = name
        self.partitions = {p.position: p for p in partitions}
        self.config = consumer_config
        self.ends = ends
        #: the positions that read each topic partition: two in a self-join, whose
        #: inputs read one topic (the consumer is assigned each partition once)
        self._by_tp: dict[tuple[str | None, int | None], list[InputPosition]] = {}
        for p in partitions:
            self._by_tp.setdefault((p.topic, p.partition), []).append(p.position)
        #: where the next chunk of each partition starts
        self.next_offset: dict[InputPosition, int] = {}
        #: the partitions still read (``available_now``: not past their end yet)
        self.reading: set[InputPosition] = set()
        #: the partitions read to their end since :meth:`take_caught_up` last asked
        self.caught_up: set[InputPosition] = set()
        #: the offset of each partition's latest end-of-partition event
        self.end_seen: dict[InputPosition, int] = {}
        self.consumer: Consumer | None = None

    def assign(self, begin: Mapping[InputPosition, int]) -> None:
        """Start reading every partition at ``begin``."""
        from confluent_kafka import Consumer, TopicPartition

        ends = self.ends
        self.next_offset = {pos: begin[pos] for pos in self.partitions}
        self.reading = {
            pos for pos, at in self.next_offset.items() if ends is None or at < ends[pos]
        }
        if not self.reading:
            return
        self.consumer = Consumer(range_consumer_config(self.config))
        # a partition two inputs read (a self-join) is assigned once, from the lower of
        # their positions: each input's chunks start at its own (see _chunk)
        starts: dict[tuple[str, int], int] = {}
        for pos in sorted(self.reading):
            tp = (self.partitions[pos].topic, pos.partition)
            starts[tp] = min(begin[pos], starts.get(tp, begin[pos]))
        self._check_past_end(begin, starts)
        self.consumer.assign([TopicPartition(t, p, at) for (t, p), at in starts.items()])

    def _check_past_end(
        self, begin: Mapping[InputPosition, int], starts: Mapping[tuple[str, int], int]
    ) -> None:
        """Raise :class:`InputGapError` where a self-join's input starts past its
        partition's end, while the other starts lower: the partition is assigned from the
        lower position, so the consumer's own check (``OFFSET_OUT_OF_RANGE`` for an
        assignment past the end) does not see it, and records written there later would
        be skipped as ones the state applied."""
        from confluent_kafka import KafkaException

        ahead = {
            pos: begin[pos]
            for pos in self.reading
            if begin[pos] > starts[(self.partitions[pos].topic, pos.partition)]
        }
        if not ahead:
            return
        tps = sorted({(self.partitions[pos].topic, pos.partition) for pos in ahead})
        try:
            ends = log_ends(self.config, tps)
        except KafkaException as exc:
            raise KafkaSourceError(
                f"{self.name}: could not learn where {tps} end: {exc.args[0].str()}"
            ) from None
        for pos, at in sorted(ahead.items()):
            topic = self.partitions[pos].topic
            end = ends[(topic, pos.partition)]
            if at > end:
                raise InputGapError(past_end_message(self.name, topic, pos.partition, at - 1, end))

    def stop(self) -> None:
        """Read no more."""
        self.reading.clear()

    def read(self, timeout_s: float, max_records: int = CHUNK_RECORDS) -> list[Chunked]:
        """One read of at most ``max_records``: a chunk per partition that had records
        (waits up to ``timeout_s``)."""
        if self.consumer is None or not self.reading:
            return []
        t0 = time.perf_counter()
        msgs: list[Message] = self.consumer.consume(max_records, timeout=timeout_s)
        if not msgs:
            return []
        failed = [m for m in msgs if m.error() is not None]  # end-of-partition events mostly
        if failed:
            msgs = [m for m in msgs if m.error() is None]
        # a consume returns runs of one partition's records: group them by partition
        runs: dict[InputPosition, list[Message]] = {}
        for tp, run in _runs(msgs):
            readers = self._by_tp.get(tp)
            if readers is None:
                raise KafkaSourceError(f"{self.name} got {tp}: not its input")
            for pos in readers:
                if pos in self.reading:
                    runs.setdefault(pos, []).extend(run)
        seconds = (time.perf_counter() - t0) / max(len(runs), 1)
        chunks = [c for pos, run in runs.items() if (c := self._chunk(pos, run, seconds))]
        for m in failed:  # after the records: an end-of-partition event follows them
            self._on_error(m, cast("KafkaError", m.error()))
        return chunks

    def _chunk(self, pos: InputPosition, run: list[Message], seconds: float) -> Chunked | None:
        source = self.partitions[pos]
        records = _from(_records(source, run), self.next_offset[pos])
        if not len(records):  # the other input of a self-join was further behind
            return None
        end_at = None if self.ends is None else self.ends[pos]
        if end_at is not None and records.offsets[-1] >= end_at:
            records = _until(records, end_at)
            self._read_to_run_end(pos)
            # a record at or past the run's end came: every one below it came before
            self.end_seen[pos] = max(self.end_seen.get(pos, 0), end_at)
            if not len(records):
                return None
        start, end = self.next_offset[pos], records.offsets[-1] + 1
        self.next_offset[pos] = end
        if end_at is not None and end >= end_at:
            self._read_to_run_end(pos)
        rng = source.span(start, end)
        return Chunked(source, rng, records, seconds)

    def _read_to_run_end(self, pos: InputPosition) -> None:
        """An ``available_now`` run reads no more of ``pos``: it is caught up (records
        written since the run began wait for the next run), also when the run's end lies
        past a transaction marker no record comes before."""
        self.reading.discard(pos)
        self.caught_up.add(pos)

    def _on_error(self, m: Message, err: KafkaError) -> None:
        from confluent_kafka import KafkaError

        code = err.code()
        if code == KafkaError._PARTITION_EOF:
            for pos in self._by_tp.get((m.topic(), m.partition()), ()):
                self.end_seen[pos] = max(self.end_seen.get(pos, 0), m.offset() or 0)
                # a consume may return an end, then records written after it: that end
                # is stale (records come after it), only one at or past those read counts
                if (m.offset() or 0) >= self.next_offset.get(pos, 0):
                    self.caught_up.add(pos)
                if self.ends is not None and (m.offset() or 0) >= self.ends[pos]:
                    self.reading.discard(pos)
        elif code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
            raise InputGapError(self._gone(m, err))
        elif err.fatal():
            raise KafkaSourceError(f"{self.name}: reading input failed: {err.str()}")
        else:
            log.warning("%s: reading input: %s", self.name, err.str())

    def _gone(self, m: Message, err: KafkaError) -> str:
        """Why the records a partition's state continues from cannot be read: deleted
        before they were read, or past the partition's end (the broker lost them)."""
        from confluent_kafka import KafkaException

        topic, partition = m.topic() or "", m.partition() or 0
        readers = self._by_tp.get((topic, partition), [])
        wanted = min((self.next_offset[p] for p in readers if p in self.next_offset), default=None)
        try:
            end = log_ends(self.config, [(topic, partition)])[(topic, partition)]
        except KafkaException:
            end = None
        if wanted is not None and end is not None and wanted > end:
            return past_end_message(self.name, topic, partition, wanted - 1, end)
        return (
            f"{self.name}: {topic}[{partition}] no longer holds the records the state "
            f"continues from ({err.str()}): they were deleted before they were read; start "
            f"the job afresh ({AFRESH}) to accept the loss"
        )

    def take_caught_up(self) -> list[InputPartition]:
        """The partitions read to their end since the last call: to the partition's end
        (nothing waited in it then), or, in an ``available_now`` run, to the run's end.

        The state tasks count a partition as active from its last chunk until its reader
        reached its end, so that it does not go idle while records its reader has not come
        back to wait in it; a partition whose last offsets hold no record to read
        (transaction markers, an aborted transaction) brings no chunk, and this is how
        they learn it."""
        caught_up, self.caught_up = self.caught_up, set()
        return [self.partitions[pos] for pos in sorted(caught_up)]

    def past_markers(self, pos: InputPosition) -> int:
        """Move a partition read to its end past what lies between its last record and
        that end (commit markers of transactional input, aborted records), up to the
        run's end: every record below an end-of-partition event came before it. Where
        the next chunk starts now: a range of no record before it lets the state and
        the driver's progress reach the partition's end (its lag stayed at the markers'
        count for ever)."""
        at = max(self.next_offset[pos], self.end_seen.get(pos, 0))
        if self.ends is not None:
            at = min(at, max(self.ends[pos], self.next_offset[pos]))
        self.next_offset[pos] = at
        return at

    def waiting(self) -> set[InputPosition]:
        """The partitions read in which records may wait now: their end, as the
        consumer's latest fetch (it goes on in the background) saw it, lies past where
        the reader is and past its latest end-of-partition event (transaction markers lie
        between); a partition whose end no fetch has told counts as waiting."""
        from confluent_kafka import KafkaException, TopicPartition

        if self.consumer is None:
            return set()
        out: set[InputPosition] = set()
        for pos in self.reading:
            tp = TopicPartition(self.partitions[pos].topic, pos.partition)
            try:
                _, end = self.consumer.get_watermark_offsets(tp, cached=True)
            except KafkaException:
                end = -1
            if end < 0 or end > max(self.next_offset[pos], self.end_seen.get(pos, 0)):
                out.add(pos)
        return out

    def close(self) -> None:
        """Close the consumer."""
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None


def _runs(msgs: list[Message]) -> list[tuple[tuple[str | None, int | None], list[Message]]]:
    """The runs of one partition's messages in ``msgs``, in order (a consume returns a
    few long runs: the partitions are told apart column by column, not per message)."""
    from confluent_kafka import Message

    n = len(msgs)
    if n == 0:  # a consume of end-of-partition events only
        return []
    topics = list(map(Message.topic, msgs))
    partitions = np.fromiter(map(Message.partition, msgs), dtype=np.int64, count=n)
    codes = partitions
    if topics.count(topics[0]) != n:
        ids = {t: i for i, t in enumerate(dict.fromkeys(topics))}
        topic_ids = np.fromiter(map(ids.__getitem__, topics), dtype=np.int64, count=n)
        codes = topic_ids << 32 | partitions
    starts = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist()]
    ends = [*starts[1:], n]
    return [((topics[a], int(partitions[a])), msgs[a:b]) for a, b in zip(starts, ends, strict=True)]


def _records(source: InputPartition, run: list[Message]) -> InputRecords:
    """A run of one partition's messages as input records (column by column: a list
    comprehension per column costs far less than a loop over the records)."""
    from confluent_kafka import Message

    # messages without an error always have an offset
    offsets = cast(list[int], list(map(Message.offset, run)))
    return InputRecords(
        source.topic,
        source.partition,
        offsets,
        list(map(Message.key, run)),
        list(map(Message.value, run)),
        [ts if kind else -1 for kind, ts in map(Message.timestamp, run)],
    )


def _from(records: InputRecords, start: int) -> InputRecords:
    """The records at or after offset ``start``."""
    if not records.offsets or records.offsets[0] >= start:
        return records
    n = bisect.bisect_left(records.offsets, start)
    stamps = None if records.timestamps is None else records.timestamps[n:]
    return InputRecords(
        records.topic,
        records.partition,
        records.offsets[n:],
        records.keys[n:],
        records.values[n:],
        stamps,
    )


def _until(records: InputRecords, end: int) -> InputRecords:
    """The records before offset ``end``."""
    n = bisect.bisect_left(records.offsets, end)
    stamps = None if records.timestamps is None else records.timestamps[:n]
    return InputRecords(
        records.topic,
        records.partition,
        records.offsets[:n],
        records.keys[:n],
        records.values[:n],
        stamps,
    )
