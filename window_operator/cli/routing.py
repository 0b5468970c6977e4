"""How ``produce`` writes a JSONL line: the record it becomes, where it goes, and what
was counted (the module doc of :mod:`window_operator.cli.produce` says the rules).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from window_operator.codecs.json_input import InvalidJsonError, parse_json
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.durations import format_duration_ms
from window_operator.eventkey import KeyFormat, kafka_key_bytes
from window_operator.events import RecordDecoder
from window_operator.jsonbytes import json_text
from window_operator.simulate_input import META_FIELDS, line_wall

if TYPE_CHECKING:
    from window_operator.config import InputConfig, JoinInputConfig

__all__ = ["Produced", "Routed", "Target", "kafka_key", "route", "targets"]


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
    #: how the record keys of a job keyed by them are written (``input.key_format``)
    key_format: KeyFormat = "string"
    #: the topic's ``retention.ms`` and the oldest record timestamp it keeps when the
    #: lines are written (``None``: it keeps every record, or the broker stamps them)
    retention: tuple[int, int] | None = None


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
    #: not a key of its ``key_format``: skipped
    bad_key: list[int] = field(default_factory=list)
    #: that key format
    key_format: KeyFormat = "string"
    #: the numbers of the lines whose records were not written (the broker refused them,
    #: or they timed out), by the reason
    failed: dict[str, list[int]] = field(default_factory=dict)
    #: per topic: its ``retention.ms``, and how many records were written with a
    #: timestamp older than it keeps
    expiring: dict[str, tuple[int, int]] = field(default_factory=dict)

    #: the reason of the first record that timed out unacknowledged (``None``: none
    #: did): the broker answered nothing for ``message.timeout.ms``
    timed_out: str | None = None

    def delivered(self, line: int, err: Any, msg: Any) -> None:
        """The producer's delivery report of the record of line ``line`` (a failed one
        is not produced)."""
        if err is not None:
            from confluent_kafka import KafkaError

            self.records[msg.topic()] -= 1
            self.failed.setdefault(err.str(), []).append(line)
            if self.timed_out is None and err.code() == KafkaError._MSG_TIMED_OUT:
                self.timed_out = err.str()

    def summary(self, verb: str = "produced") -> str:
        """The closing line (``verb``: what was done with the records counted)."""
        topics = ", ".join(f"{n} to {t}" for t, n in sorted(self.records.items())) or "none"
        out = f"{verb} {_n(sum(self.records.values()), 'record')} ({topics})"
        if self.unfit:
            out += f"; {_n(self.unfit, 'line')} did not fit the Avro schema: produced as they are"
        if self.not_json:
            out += (
                f"; {_n(self.not_json, 'line')} {'was' if self.not_json == 1 else 'were'} not "
                "JSON (a join's line names its input): skipped"
            )
        if self.unrouted:
            out += f"; {_n(self.unrouted, 'line')} named no input of the join in 'source': skipped"
        if self.off_partition:
            out += (
                f"; {_n(self.off_partition, 'line')} named a partition their topic does not have "
                "(or no partition number): produced to the partition of their key"
            )
        if self.too_large:
            n = len(self.too_large)
            out += (
                f"; {_n(n, 'line')} {'is' if n == 1 else 'are'} larger than the producer's "
                f"message.max.bytes (kafka.producer): skipped ({_numbered(self.too_large)})"
            )
        if self.unstamped:
            n = len(self.unstamped)
            out += (
                f"; {_n(n, 'line')} {_have(n)} no wall_ms from 1 to 2^62, their record "
                "timestamp (timestamp_from: kafka; a Kafka producer stamps 0 with the time "
                f"it writes): skipped ({_numbered(self.unstamped)})"
            )
        if self.bad_key:
            n = len(self.bad_key)
            out += (
                f"; {_n(n, 'line')} {_have(n)} a kafka_key that is not "
                f"{_KEY_VALUES[self.key_format]}, their record key (key_from: kafka, "
                f"key_format {self.key_format}): skipped ({_numbered(self.bad_key)})"
            )
        for topic, (retention, n) in sorted(self.expiring.items()):
            out += (
                f"; {_n(n, 'record')} to {topic} {'carries' if n == 1 else 'carry'} a "
                f"timestamp (wall_ms) older than its retention.ms "
                f"({format_duration_ms(retention)}): the broker deletes them, "
                "maybe before the job reads them (give the topic retention.ms -1, as "
                "produce does with a topic it creates)"
            )
        for reason, lines in sorted(self.failed.items()):
            out += f"; {_n(len(lines), 'record')} not written: {reason} ({_numbered(lines)})"
        return out

    @property
    def skipped(self) -> bool:
        """Whether a line was not written, which ``simulate`` reads (exit status 1)."""
        return bool(self.failed or self.too_large or self.unstamped or self.bad_key)


#: What a line's ``kafka_key`` is for each key format (see :mod:`window_operator.eventkey`).
_KEY_VALUES: dict[KeyFormat, str] = {
    "string": "a string",
    "long": "an integer that fits 8 signed bytes",
    "int": "an integer that fits 4 signed bytes",
    "bytes": "hexadecimal text",
}


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
        keyed = replace(_target(inp, inp.topic, _no_key), line_keyed=True)
        return {None: replace(keyed, key_format=inp.key_format)}
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


def line_key(value: object, key_format: KeyFormat) -> bytes | None:
    """The Kafka key bytes of a line whose ``kafka_key`` is ``value`` (the key of a job
    with ``key_from: kafka``, as ``simulate`` reads it), written as ``key_format``;
    ``None``: not a key of that format."""
    if key_format == "string" and isinstance(value, str):
        # a lone surrogate as its bytes: the job rejects them as BAD_KEY, as simulate does
        return value.encode("utf-8", "surrogatepass")
    return kafka_key_bytes(value, key_format)


def _no_key(record: object) -> None:
    """A job with one global key: its records go without a Kafka key."""
    return None


def kafka_key(record: object, fields: tuple[str, ...]) -> bytes | None:
    """The key of a record: its one key field as text (a string as it is, any other
    value as JSON; ``None`` when null or absent), several as a JSON array; ``None``
    without key fields or for a line not an object."""
    if not fields or not isinstance(record, dict):
        return None
    values = [record.get(f) for f in fields]
    one = values[0]
    if len(values) > 1:
        return json_text(values)
    return None if one is None else one.encode() if isinstance(one, str) else json_text(one)


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
        key = None if named_key is None else line_key(named_key, target.key_format)
        if named_key is not None and key is None:
            produced.bad_key.append(number)
            produced.key_format = target.key_format
            return None
    # counted for the lines routed, not those skipped above
    if target.record_time and target.retention is not None and 0 < wall < target.retention[1]:
        retention, n = produced.expiring.get(target.topic, (target.retention[0], 0))
        produced.expiring[target.topic] = (retention, n + 1)
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


def _n(count: int, noun: str) -> str:
    """``1 line``, ``2 lines``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _have(count: int) -> str:
    return "has" if count == 1 else "have"
