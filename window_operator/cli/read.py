"""``read``: print a job's results or error records from Kafka, one JSON line each.

A result is the line ``simulate`` writes for it; a retraction, a tombstone on Kafka, is
its window's key fields with ``"kind": "RETRACT"`` (a tombstone carries no
``update_seq`` nor values), a join's the unmatched row it withdraws (read before it)
with that kind. An error record is the line of ``simulate --errors`` with
the input's ``topic``, a join's ``source`` (the input that rejected it),
``raw_base64`` (the exact bytes) and the record's Kafka key (``kafka_key``, the value it
stands for in ``input.key_format``, and ``kafka_key_base64``); for an Avro input, the
``record`` its value decoded to, where it did. The output topic is
compacted: once the broker has compacted it, only the latest record of each window is
left to read.
"""

from __future__ import annotations

import argparse
import heapq
import json
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson

from window_operator.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    CliError,
    add_bootstrap_option,
    add_config_option,
    bootstrap_servers,
    load_checked_config,
    positive_number,
)
from window_operator.codecs import decode_error, error_json, result_decoder_for
from window_operator.codecs.avro_input import AvroPayloadDecoder
from window_operator.config import InputConfig, JobConfig, JoinInputConfig, JoinJobConfig
from window_operator.kafka_admin import KafkaAdmin
from window_operator.observe.logs import kafka_logger

if TYPE_CHECKING:
    from confluent_kafka import Message

    from window_operator.cli.common import Subparsers

__all__ = ["BROKER_TIMEOUT_S", "add_parsers"]

#: How long one poll waits for records (a read ends once every partition reached its end).
_POLL_S = 0.2
#: The signals that end a read (a signal handler of its own: Ctrl-C ends ``--follow``
#: even where the shell started it with SIGINT ignored, and SIGTERM too).
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
#: How long a read goes on while the broker brings nothing but errors (or, before every
#: partition's end was reached, nothing at all): ``--broker-timeout``'s default.
BROKER_TIMEOUT_S = 30.0


@dataclass
class _Counts:
    printed: int = 0
    skipped: int = 0


@dataclass
class _ClientErrors:
    """The consumer's errors since it last brought something (a lost broker shows as
    errors only: librdkafka retries for ever)."""

    since: float | None = None
    last: str = ""

    def __call__(self, err: Any) -> None:
        if self.since is None:
            self.since = time.monotonic()
        self.last = str(err.str())

    def clear(self) -> None:
        self.since, self.last = None, ""


def _cmd_read(args: argparse.Namespace) -> int:
    config = load_checked_config(args.config, user_code=False)
    bootstrap = bootstrap_servers(args, config)
    topic = config.output.errors_topic if args.errors else config.output.topic
    admin = KafkaAdmin(bootstrap, client_config=config.kafka.consumer)
    partitions = admin.partition_count(topic)
    if partitions is None:
        raise CliError(
            f"topic {topic!r} does not exist on {bootstrap}: the job creates it when it "
            "starts (`window-operator run`)",
            EXIT_CONFIG,
        )
    line = _error_line(config) if args.errors else _result_line(config)
    consumer_config = {**config.kafka.consumer, "bootstrap.servers": bootstrap}
    counts = _Counts()
    stop = threading.Event()  # set by Ctrl-C or SIGTERM: how --follow ends
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in _STOP_SIGNALS}
    try:
        follow, timeout_s = args.follow, args.broker_timeout
        messages = _messages(
            consumer_config, topic, partitions, stop, follow=follow, timeout_s=timeout_s
        )
        _print(messages, line, counts, flush=follow)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    what = "error records" if args.errors else "results"
    other = ""
    if counts.skipped:
        fmt = config.output.format if isinstance(config, JobConfig) else "json"
        hint = "" if args.errors else f" (written in another format than output.format {fmt}?)"
        other = f", {counts.skipped} records skipped that do not decode as {what}{hint}"
    print(f"read: {counts.printed} {what} from {topic}{other}", file=sys.stderr)
    return 0


def _print(
    messages: Iterator[Message],
    line: Callable[[Message], bytes | None],
    counts: _Counts,
    *,
    flush: bool,
) -> None:
    """Each message's line on stdout (``flush``: at once, for a reader that follows)."""
    out = sys.stdout.buffer
    try:
        for m in messages:
            text = line(m)
            if text is None:
                counts.skipped += 1
                continue
            out.write(text + b"\n")
            counts.printed += 1
            if flush:
                out.flush()
    finally:
        out.flush()


#: How a join's unmatched rows begin, as the job writes them: a retraction withdraws one.
_UNMATCHED: Final = (b'{"kind":"LEFT_UNMATCHED",', b'{"kind":"RIGHT_UNMATCHED",')


#: The most unmatched rows ``read`` keeps for retractions to come.
UNMATCHED_KEPT: Final = 200_000


@dataclass
class _UnmatchedRows:
    """The unmatched rows of a join's output that a later retraction can withdraw.

    A row stays stored in the job, and can be matched late, until the watermark passes
    the last event time a partner of it can have by more than ``retention.time``. The
    job emits a row unmatched only once its watermark passed that time, so the rows
    read so far of one output partition (a row's retraction shares its key, so its
    partition) bound the watermark below which that partition's rows were written. A
    batch's rows may be read before a retraction the same batch wrote at the watermark
    before it: a row is dropped once that bound passes its end by one retention more,
    and the oldest go beyond :data:`UNMATCHED_KEPT` rows (a ``read --follow`` of a join
    does not grow without end); a retraction of a row dropped prints as its key.
    """

    lo: int
    hi: int
    retention: int
    most: int = UNMATCHED_KEPT
    rows: dict[bytes, bytes] = field(default_factory=dict)  # in the order they came
    #: per output partition: a heap of (end, key), and the bound of its watermark
    ends: dict[int, list[tuple[int, bytes]]] = field(default_factory=dict)
    watermarks: dict[int, int] = field(default_factory=dict)

    def remember(self, partition: int, key: bytes, row: bytes) -> None:
        """An unmatched row read (``row`` starts with one of :data:`_UNMATCHED`)."""
        try:
            doc = orjson.loads(row)
            left = row.startswith(_UNMATCHED[0])
            last = int(doc["left_ts"]) + self.hi if left else int(doc["right_ts"]) - self.lo
        except (ValueError, KeyError, TypeError):  # not as the job writes it
            return
        bound = self.watermarks[partition] = max(self.watermarks.get(partition, last), last)
        self.rows[key] = row
        ends = self.ends.setdefault(partition, [])
        heapq.heappush(ends, (last + self.retention, key))
        while ends and ends[0][0] + self.retention < bound:
            self.rows.pop(heapq.heappop(ends)[1], None)
        while len(self.rows) > self.most:
            del self.rows[next(iter(self.rows))]
        if len(ends) > 2 * self.most:  # of rows withdrawn or dropped since
            ends[:] = [e for e in ends if e[1] in self.rows]
            heapq.heapify(ends)

    def withdrawn(self, key: bytes) -> bytes | None:
        """The line of the retraction of the row under ``key`` (None: not kept)."""
        row = self.rows.pop(key, None)
        if row is None:
            return None
        kind = next(p for p in _UNMATCHED if row.startswith(p))
        return b'{"kind":"RETRACT",' + row[len(kind) :]


def _join_result_line(config: JoinJobConfig) -> Callable[[Message], bytes | None]:
    """A join result's JSON line, or ``None`` (a record no result decodes from).

    A join's retraction is a tombstone on the key of the unmatched row it withdraws
    (``{"left": [partition, offset], "right": null}``): its line is that row again with
    ``"kind": "RETRACT"``, as ``simulate`` writes it, when the row was read before it
    (else, once the broker compacted the row away, the key with the kind)."""
    lo, hi = config.join.bounds or (0, 0)  # a rows join is inner: nothing unmatched
    unmatched = _UnmatchedRows(lo, hi, config.retention.time)

    def line(m: Message) -> bytes | None:
        key, value = m.key(), m.value()
        try:
            if value is None:
                withdrawn = None if key is None else unmatched.withdrawn(key)
                if withdrawn is not None:
                    return withdrawn
                retraction = _retraction(key)
                return None if retraction is None else orjson.dumps(retraction)
            text = _json_line(value)
            if key is not None and text.startswith(_UNMATCHED):
                unmatched.remember(m.partition() or 0, key, text)
            return text
        except ValueError:  # not JSON
            return None

    return line


def _result_line(config: JobConfig | JoinJobConfig) -> Callable[[Message], bytes | None]:
    """A result's JSON line, a retraction's, or ``None`` (a record no result decodes from)."""
    if isinstance(config, JoinJobConfig):
        return _join_result_line(config)
    decoder = None
    if config.output.format != "json":
        decoder = result_decoder_for(config)

    def line(m: Message) -> bytes | None:
        value = m.value()
        try:
            if value is None:
                retraction = _retraction(m.key())
                return None if retraction is None else orjson.dumps(retraction)
            if decoder is None:
                return _json_line(value)
            return orjson.dumps(decoder.decode(value), default=str)
        except ValueError:  # the JSON readers' and the Avro decoder's errors
            return None

    return line


def _json_line(value: bytes) -> bytes:
    """A JSON result as the job wrote it (the standard library reads what orjson does not:
    integers beyond 64 bits), on one line."""
    doc = json.loads(value)
    return value if b"\n" not in value else json.dumps(doc, separators=(",", ":")).encode()


def _retraction(key: bytes | None) -> dict[str, Any] | None:
    """A tombstone's line: its window's key fields and the kind (``None``: a key that
    names no window)."""
    doc = orjson.loads(key) if key is not None else None
    return {**doc, "kind": "RETRACT"} if isinstance(doc, dict) else None


def _error_line(config: JobConfig | JoinJobConfig) -> Callable[[Message], bytes | None]:
    """An error record's line, its input record's key read as the job reads it, and an
    Avro input's record as it decoded (``record``), where it did: ``raw`` is binary."""
    key_format = config.input.key_format if isinstance(config, JobConfig) else "string"
    avro = _avro_decoders(config)

    def line(m: Message) -> bytes | None:
        headers = m.headers()
        if isinstance(headers, dict):  # confluent-kafka gives a list; a dict is the same
            headers = list(headers.items())
        try:
            err = decode_error(m.key(), m.value(), headers)
            text = error_json(err, key_format)
        except ValueError:
            return None
        decoder = avro.get(err.source if isinstance(config, JoinJobConfig) else None)
        if decoder is None or err.raw is None:
            return text
        records, failures = decoder.decode([err.raw])
        if failures:
            return text
        return orjson.dumps({**orjson.loads(text), "record": records[0]}, default=str)

    return line


def _avro_decoders(config: JobConfig | JoinJobConfig) -> dict[str | None, AvroPayloadDecoder]:
    """The Avro decoder of each input that reads Avro (by a join side's name)."""
    if isinstance(config, JobConfig):
        sides: list[tuple[str | None, InputConfig | JoinInputConfig]] = [(None, config.input)]
    else:
        sides = [(side.name, side) for side in (config.join.left, config.join.right)]
    return {
        name: AvroPayloadDecoder(side.avro_schema, side.avro_wire)
        for name, side in sides
        if side.format == "avro" and side.avro_schema is not None
    }


def _messages(
    consumer_config: dict[str, Any],
    topic: str,
    partitions: int,
    stop: threading.Event,
    *,
    follow: bool,
    timeout_s: float,
) -> Iterator[Message]:
    """Every record of ``topic`` from its start, until each partition's end (``follow``:
    on), or until ``stop`` is set. Raises :class:`CliError` when the broker brings
    nothing for ``timeout_s`` (with ``follow``: nothing but errors)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    errors = _ClientErrors()
    consumer = Consumer(
        {
            "isolation.level": "read_committed",
            **consumer_config,
            "group.id": f"window-operator-read-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",  # records deleted while it reads: go on
            "logger": kafka_logger(),
            "error_cb": errors,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        progress = time.monotonic()
        while not stop.is_set() and (follow or len(at_end) < partitions):
            for m in consumer.consume(1_000, timeout=_POLL_S):
                err = m.error()
                if err is None or err.code() == KafkaError._PARTITION_EOF:
                    progress = time.monotonic()
                    errors.clear()
                    if err is None:
                        yield m
                    else:
                        at_end.add(m.partition() or 0)
                elif err.fatal():
                    raise CliError(f"reading {topic} failed: {err.str()}", EXIT_FAILED)
                else:
                    errors(err)
            since = errors.since if follow else progress  # a quiet topic is no stall
            if since is not None and time.monotonic() - since > timeout_s:
                cause = errors.last or "no record and no end of partition"
                raise CliError(
                    f"reading {topic}: nothing from the broker for {timeout_s:g} s ({cause})",
                    EXIT_FAILED,
                )
    finally:
        consumer.close()


def add_parsers(sub: Subparsers) -> None:
    """``read``."""
    rd = sub.add_parser("read", help="print a job's results or error records from Kafka")
    add_config_option(rd)
    rd.add_argument(
        "--errors", action="store_true", help="the error records instead of the results"
    )
    rd.add_argument("--follow", action="store_true", help="go on printing new records until Ctrl-C")
    rd.add_argument(
        "--broker-timeout",
        type=positive_number,
        default=BROKER_TIMEOUT_S,
        metavar="S",
        help="give up when the broker brings nothing but errors for S seconds (default 30)",
    )
    add_bootstrap_option(rd)
    rd.set_defaults(func=_cmd_read)
