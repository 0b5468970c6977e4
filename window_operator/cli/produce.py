"""``produce``: load a JSONL file into a job's input topics, as the job reads them.

An aggregation job's lines go to ``input.topic`` as they are, keyed by the job's key of
the record (the text of ``input.key``, or the JSON array of the texts of several key
fields). A join's lines name their input in ``source``, as in ``simulate``; each goes to
that input's topic, keyed by the join key (``join.on``), without the fields ``simulate``
takes as meta fields (``source``, ``partition``, ``offset``, ``wall_ms``,
``kafka_key``), so that the job carries the same records into its results as
``simulate`` does. A line that names its ``partition``, as ``simulate`` reads it, goes
to that partition of its topic (one the topic does not have is counted, and the line
goes by its key); any other line goes to the partition of its key. So the job sees the
partitions ``simulate`` does where every line names one (``simulate`` reads a line that
names none as one of partition 0, and skips a line whose ``offset`` repeats one before
it, which ``produce`` writes). A line of an Avro input is written with the input's
schema; one that does not fit it is written as it is (the job sends it to the errors
topic). A join line that is not JSON, or names no input, cannot be routed: it is
skipped, and counted. The literals ``NaN``, ``Infinity`` and ``-Infinity`` are read as
the job reads them, and written on as they were, so that the job takes such a record as
it takes it from any other producer. A job grouped by the Kafka record key (``key_from:
kafka``) gets each line keyed by its ``kafka_key`` (as ``simulate`` reads it; a line
without one goes without a key). For an input whose event time is the Kafka record
timestamp (``timestamp_from: kafka``), a line's ``wall_ms``, which stands for that
timestamp in ``simulate``, is written as its record's timestamp; a line without one is
stamped when written.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from window_operator.cli.common import (
    EXIT_FAILED,
    CliError,
    add_bootstrap_option,
    add_config_option,
    add_no_meta_option,
    bootstrap_servers,
    file_progress,
    input_file,
    load_simulation_runtime,
    positive_int,
)
from window_operator.codecs.json_input import JSON_WHITESPACE, InvalidJsonError, parse_json
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.events import RecordDecoder
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kafka_range import (
    EARLIEST,
    KafkaRange,
    KafkaSourceError,
    range_consumer_config,
    read_messages,
)
from window_operator.simulate_input import META_FIELDS, line_wall

if TYPE_CHECKING:
    from pathlib import Path

    from confluent_kafka import Producer

    from window_operator.cli.common import Subparsers
    from window_operator.config import InputConfig, JoinInputConfig

__all__ = ["add_parsers"]


@dataclass(frozen=True, slots=True)
class Target:
    """Where the lines of one input go: its topic, the Kafka key of a record (``None``:
    no key), the value encoding (``None``: the JSON line), whether a line's ``wall_ms``
    is its record's Kafka timestamp (the input's event time: ``timestamp_from: kafka``)
    and its ``kafka_key`` the record's key (the job's key: ``key_from: kafka``), and the
    topic's partition count (``None``: not known yet, any partition a line names is
    taken)."""

    topic: str
    key_of: Callable[[object], bytes | None]
    encode: Callable[[Any], bytes] | None
    record_time: bool = False
    line_keyed: bool = False
    partitions: int | None = None


@dataclass(frozen=True, slots=True)
class Routed:
    """Where one line goes: its input, the record's Kafka key and value, the partition
    (``None``: the partition of the key) and the record's timestamp (``None``: the time
    it is written, as Kafka's producers stamp it)."""

    target: Target
    key: bytes | None
    value: bytes
    partition: int | None = None
    timestamp: int | None = None


@dataclass(slots=True)
class Produced:
    """What a run of ``produce`` wrote, per topic, and the lines it could not route."""

    records: Counter[str] = field(default_factory=Counter)
    unfit: int = 0
    unrouted: int = 0
    not_json: int = 0
    #: lines that named a partition their topic does not have (they went by key)
    off_partition: int = 0
    #: the numbers of the lines larger than the producer's ``message.max.bytes``: skipped
    too_large: list[int] = field(default_factory=list)
    #: the numbers of the lines of an input that reads the record timestamp without a
    #: ``wall_ms`` a producer can write as one (an integer from 1 to 2^62): skipped
    unstamped: list[int] = field(default_factory=list)
    #: the numbers of the lines of a job keyed by the record key whose ``kafka_key`` is
    #: not a string: skipped
    bad_key: list[int] = field(default_factory=list)
    #: the numbers of the lines whose records were not written (the broker refused them,
    #: or they timed out), by the reason
    failed: dict[str, list[int]] = field(default_factory=dict)

    def delivered(self, line: int, err: Any, msg: Any) -> None:
        """The producer's delivery report of the record of line ``line`` (a failed one
        is not produced)."""
        if err is not None:
            self.records[msg.topic()] -= 1
            self.failed.setdefault(err.str(), []).append(line)

    def summary(self, verb: str = "produced") -> str:
        """The closing line (``verb``: what was done with the records counted)."""
        topics = ", ".join(f"{n} to {t}" for t, n in sorted(self.records.items())) or "none"
        out = f"{verb} {sum(self.records.values())} records ({topics})"
        if self.unfit:
            out += f"; {self.unfit} lines did not fit the Avro schema: produced as they are"
        if self.not_json:
            out += f"; {self.not_json} lines were not JSON (a join's line names its input): skipped"
        if self.unrouted:
            out += f"; {self.unrouted} lines named no input of the join in 'source': skipped"
        if self.off_partition:
            out += (
                f"; {self.off_partition} lines named a partition their topic does not have "
                "(or no partition number): produced to the partition of their key"
            )
        if self.too_large:
            out += (
                f"; {len(self.too_large)} lines are larger than the producer's "
                f"message.max.bytes (kafka.producer): skipped ({_numbered(self.too_large)})"
            )
        if self.unstamped:
            out += (
                f"; {len(self.unstamped)} lines have no wall_ms from 1 to 2^62, their record "
                "timestamp (timestamp_from: kafka; a Kafka producer stamps 0 with the time "
                f"it writes): skipped ({_numbered(self.unstamped)})"
            )
        if self.bad_key:
            out += (
                f"; {len(self.bad_key)} lines have a kafka_key that is not a string, their "
                f"record key (key_from: kafka): skipped ({_numbered(self.bad_key)})"
            )
        for reason, lines in sorted(self.failed.items()):
            out += f"; {len(lines)} records not written: {reason} ({_numbered(lines)})"
        return out

    @property
    def skipped(self) -> bool:
        """Whether a line was not written, which ``simulate`` reads (exit status 1)."""
        return bool(self.failed or self.too_large or self.unstamped or self.bad_key)


def _numbered(lines: list[int], most: int = 10) -> str:
    """``line 3``, ``lines 3, 7, 9``, or the first ``most`` of them and how many more."""
    shown = ", ".join(map(str, sorted(lines)[:most]))
    more = f" and {len(lines) - most} more" if len(lines) > most else ""
    return f"line{'s' if len(lines) > 1 else ''} {shown}{more}"


def targets(config: JobConfig | JoinJobConfig) -> dict[str | None, Target]:
    """The inputs of a job by the ``source`` naming them (``None``: the one input)."""
    if isinstance(config, JoinJobConfig):
        on = partial(kafka_key, fields=tuple(config.join.on))
        sides = (config.join.left, config.join.right)
        return {s.name: _target(s, s.topic_name, on) for s in sides}
    inp = config.input
    if inp.kafka_key:
        return {None: replace(_target(inp, inp.topic, _no_key), line_keyed=True)}
    if not inp.key_fields:
        return {None: _target(inp, inp.topic, _no_key)}
    decoder = RecordDecoder(key_field=inp.key_fields, timestamp_field=None)
    return {None: _target(inp, inp.topic, partial(group_key, decoder=decoder))}


def _target(
    inp: InputConfig | JoinInputConfig, topic: str, key_of: Callable[[object], bytes | None]
) -> Target:
    """The target of the input ``inp`` read from ``topic``."""
    return Target(topic, key_of, _encoder(inp), inp.timestamp_from == "kafka")


def _encoder(inp: InputConfig | JoinInputConfig) -> Callable[[Any], bytes] | None:
    """How a JSON line is written for an input that reads ``inp.format``."""
    if inp.format != "avro":
        return None
    from window_operator.codecs.avro_input import avro_payload_encoder

    assert inp.avro_schema is not None  # required with format avro
    return avro_payload_encoder(inp.avro_schema, inp.avro_wire)


def group_key(record: object, decoder: RecordDecoder) -> bytes | None:
    """An aggregation job's key of a record, as the job makes it (so that one key always
    goes to one partition); ``None`` for a record whose key the job rejects."""
    key = decoder.key_or_none(record)
    return None if key is None else key.encode()


def line_key(record: object) -> bytes | None:
    """The Kafka key a line names in ``kafka_key`` (the key of a job with ``key_from:
    kafka``, as ``simulate`` reads it; ``None``: none, or not text)."""
    key = record.get("kafka_key") if isinstance(record, dict) else None
    # a lone surrogate as its bytes: the job rejects them as BAD_KEY, as simulate does
    return key.encode("utf-8", "surrogatepass") if isinstance(key, str) else None


def _no_key(record: object) -> None:
    """A job with one global key: its records go without a Kafka key."""
    return None


def kafka_key(record: object, fields: tuple[str, ...]) -> bytes | None:
    """The key of a record: its one key field as text (``None`` when null or absent),
    several as a JSON array; ``None`` without key fields or for a line not an object."""
    if not fields or not isinstance(record, dict):
        return None
    values = [record.get(f) for f in fields]
    if len(values) == 1:
        return None if values[0] is None else str(values[0]).encode()
    return orjson.dumps(values)


def route(
    line: bytes,
    inputs: dict[str | None, Target],
    produced: Produced,
    meta: Sequence[str] = META_FIELDS,
    number: int = 0,
) -> Routed | None:
    """Where line ``number`` goes, or ``None`` for a join line that is not JSON or names
    no input, or a line whose record timestamp or key cannot be written (``meta``: the
    fields that say where a line stands, as ``simulate`` reads them)."""
    record, literals = _parse(line)
    value = line
    named = record.get("partition") if isinstance(record, dict) and "partition" in meta else None
    wall = line_wall(record) if isinstance(record, dict) and "wall_ms" in meta else -1
    if None in inputs:
        target = inputs[None]
    else:
        if record is None:
            produced.not_json += 1
            return None
        source = record.pop("source", None) if isinstance(record, dict) else None
        found = inputs.get(source) if isinstance(source, str) else None
        if found is None:
            produced.unrouted += 1
            return None
        assert isinstance(record, dict)
        for field in meta:
            record.pop(field, None)
        target, value = found, _dumps(record, literals)
    if target.encode is not None:
        try:
            value = target.encode(record)
        except ValueError:  # it does not fit the Avro schema
            produced.unfit += 1  # as it is: the job routes it to the errors
    # librdkafka writes 0 as "now"; a line that is no JSON object goes on without a time:
    # the job rejects it, as simulate does
    if target.record_time and wall <= 0 and isinstance(record, dict):
        produced.unstamped.append(number)
        return None
    key = target.key_of(record)
    if target.line_keyed and "kafka_key" in meta and isinstance(record, dict):
        named_key = record.get("kafka_key")
        if named_key is not None and not isinstance(named_key, str):
            produced.bad_key.append(number)
            return None
        key = line_key(record)
    partition = _partition(named, target, produced)
    return Routed(target, key, value, partition, wall if target.record_time and wall > 0 else None)


def _partition(named: object, target: Target, produced: Produced) -> int | None:
    """The partition a line goes to by the ``partition`` it names (``None``: by its key);
    one its topic does not have is counted."""
    if named is None:
        return None
    if isinstance(named, int) and not isinstance(named, bool) and named >= 0:
        if target.partitions is None or named < target.partitions:
            return named
    produced.off_partition += 1
    return None


def _parse(line: bytes) -> tuple[object, bool]:
    """The JSON document of a line, read as the job reads it (``None``: not JSON), and
    whether it may hold one of the literals ``NaN``, ``Infinity``, ``-Infinity``."""
    try:
        record = parse_json(line)
    except InvalidJsonError:
        return None, False
    return record, b"NaN" in line or b"Infinity" in line


def _dumps(record: dict[str, Any], literals: bool) -> bytes:
    """A join record written on: orjson, or where it may hold a non-finite number, the
    standard library, which writes the literals again (orjson would write null)."""
    if not literals:
        return orjson.dumps(record)
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


def _send(producer: Producer, routed: Routed, produced: Produced, line: int) -> None:
    from confluent_kafka import KafkaError, KafkaException

    topic, key, value = routed.target.topic, routed.key, routed.value
    options: dict[str, Any] = {"on_delivery": partial(produced.delivered, line)}
    if routed.partition is not None:
        options["partition"] = routed.partition
    if routed.timestamp is not None:
        options["timestamp"] = routed.timestamp
    while True:
        try:
            producer.produce(topic, key=key, value=value, **options)
        except BufferError:
            producer.poll(0.1)
            continue
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.MSG_SIZE_TOO_LARGE:
                message = f"producing to {topic} failed: {exc.args[0].str()}"
                raise CliError(message, EXIT_FAILED) from None
            produced.too_large.append(line)
            return
        produced.records[topic] += 1
        return


def _holds_records(admin: KafkaAdmin, consumer: dict[str, Any], topics: dict[str, int]) -> bool:
    """Whether any partition of ``topics`` (name: partitions) holds a committed record
    (read ``read_committed`` from its start: an aborted load's records do not count)."""
    every = [(t, p) for t, n in topics.items() for p in range(n)]
    if any(start > 0 for start in admin.list_offsets(every, earliest=True).values()):
        return True  # records were there, deleted since (retention): loaded before
    ends = admin.list_offsets(every, earliest=False)
    for (topic, partition), end in sorted(ends.items()):
        if end > 0:
            settings = range_consumer_config({**consumer, "isolation.level": "read_committed"})
            span = KafkaRange(topic, partition, EARLIEST, end, settings, poll_timeout_ms=30_000)
            try:
                if any(read_messages(span)):
                    return True
            except KafkaSourceError as exc:
                raise CliError(f"could not read {topic}: {exc}", EXIT_FAILED) from None
    return False


def _load_once(
    producer: Producer, admin: KafkaAdmin, consumer: dict[str, Any], partitions: dict[str, int]
) -> bool:
    """``--once``: ``True`` where the load goes on, in a transaction this call began (a
    loader of the job that died in its own is fenced hereby: its records stay unread),
    ``False`` where the input topics (name: partitions) hold records already."""
    from confluent_kafka import KafkaException

    try:
        producer.init_transactions(60)
    except KafkaException as exc:
        raise CliError(f"produce --once: {exc.args[0].str()}", EXIT_FAILED) from None
    if _holds_records(admin, consumer, partitions):
        names = ", ".join(repr(t) for t in sorted(partitions))
        print(f"produce: {names} held records already: nothing loaded (--once)", file=sys.stderr)
        return False
    producer.begin_transaction()
    return True


def _finish_once(producer: Producer, produced: Produced) -> bool:
    """Commit the ``--once`` load (``True``), or abort it where a line was not written
    (``False``): all or nothing, so that a second run loads the file whole."""
    from confluent_kafka import KafkaException

    complete = not produced.skipped
    try:
        if complete:
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    except KafkaException as exc:
        reason = exc.args[0].str()
        raise CliError(
            f"produce --once: the load failed, nothing loaded: {reason}", EXIT_FAILED
        ) from None
    return complete


def _producer(config: JobConfig | JoinJobConfig, bootstrap: str, once: bool) -> Producer:
    """The loader's producer: the job's producer settings (a secured cluster's), as the
    job's own producers; ``once``: transactional, one id per job (a second loader of the
    job fences the first)."""
    from confluent_kafka import Producer

    settings: dict[str, Any] = {"linger.ms": 20, **config.kafka.producer}
    if once:
        settings.setdefault("transaction.timeout.ms", 900_000)  # a large file: 15 min
        settings["transactional.id"] = f"{config.job}-produce"  # as the job's: "<job>-..."
    return Producer({**settings, "bootstrap.servers": bootstrap})


def _load(
    path: Path,
    inputs: dict[str | None, Target],
    producer: Producer,
    produced: Produced,
    meta: Sequence[str],
) -> None:
    """Send every line of the file at ``path`` where it goes, and wait for the broker's
    acknowledgements (counted in ``produced``)."""
    bar = file_progress(path, "produce")
    with open(path, "rb") as lines, bar if bar is not None else contextlib.nullcontext():
        for number, line in enumerate(lines, 1):
            if bar is not None:
                bar.update(len(line))
            text = line.strip(JSON_WHITESPACE)  # the form feed goes on: the job rejects it
            routed = route(text, inputs, produced, meta, number) if text else None
            if routed is not None:
                _send(producer, routed, produced, number)
    if producer.flush(60):
        raise CliError("some records were not acknowledged by the broker", EXIT_FAILED)


def _cmd_produce(args: argparse.Namespace) -> int:
    config = load_simulation_runtime(args.config).config
    input_path = input_file(args.input)
    bootstrap = bootstrap_servers(args, config)
    inputs = targets(config)
    admin = KafkaAdmin(bootstrap, client_config=config.kafka.consumer)
    partitions: dict[str, int] = {}
    for topic in sorted({t.topic for t in inputs.values()}):
        # retention.ms=-1: sample data carries historical event times
        admin.create_topic(
            topic,
            args.partitions,
            {"retention.ms": "-1"},
            replication_factor=config.kafka.replication_factor,
        )
        partitions[topic] = admin.require_topic(topic, hint="create it", kind="input topic")
    inputs = {name: replace(t, partitions=partitions[t.topic]) for name, t in inputs.items()}
    producer = _producer(config, bootstrap, args.once)
    consumer = {**config.kafka.consumer, "bootstrap.servers": bootstrap}
    if args.once and not _load_once(producer, admin, consumer, partitions):
        return 0
    produced = Produced()
    try:
        _load(input_path, inputs, producer, produced, () if args.no_meta else META_FIELDS)
    except BaseException:  # Ctrl-C too: the records stay unread, the next --once loads all
        if args.once:
            with contextlib.suppress(Exception):
                producer.abort_transaction(10)
        raise
    if args.once and not _finish_once(producer, produced):
        summary = produced.summary(verb="written")
        print(f"produce --once: nothing loaded (all or nothing): {summary}", file=sys.stderr)
        return EXIT_FAILED
    print(produced.summary(), file=sys.stderr)
    # a line not written is one the job never sees, where ``simulate`` reads it
    return EXIT_FAILED if produced.skipped else 0


def add_parsers(sub: Subparsers) -> None:
    """``produce``."""
    prod = sub.add_parser("produce", help="produce a JSONL file to a job's input topics")
    add_config_option(prod)
    prod.add_argument("--input", required=True, help="JSONL events")
    prod.add_argument(
        "--partitions", type=positive_int, default=4, help="partitions of a topic it creates"
    )
    prod.add_argument(
        "--once",
        action="store_true",
        help="load the file only where its input topics hold no record yet, in one "
        "transaction: run again (as `docker compose up` runs a loader again), it loads "
        "nothing; after a loader that died mid-load, it loads the file whole",
    )
    add_no_meta_option(prod)
    add_bootstrap_option(prod)
    prod.set_defaults(func=_cmd_produce)
