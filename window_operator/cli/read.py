"""``read``: print a job's results or error records from Kafka, as ``simulate`` writes
them (a result a JSON line; an error record the JSON line of ``simulate --errors``), so
what the job sent can be compared with what ``simulate`` makes of the same input."""

from __future__ import annotations

import argparse
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import orjson

from window_operator.cli.common import (
    EXIT_CONFIG,
    CliError,
    add_bootstrap_option,
    add_config_option,
    bootstrap_servers,
    load_checked_config,
)
from window_operator.codecs import result_decoder_for
from window_operator.codecs.errors import decode_error, error_json
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kafka_range import range_consumer_config

if TYPE_CHECKING:
    from confluent_kafka import Message

    from window_operator.cli.common import Subparsers

__all__ = ["add_parsers"]

#: How long one poll waits for records (a read ends once every partition reached its end).
_POLL_S = 0.2


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
    line = _error_line if args.errors else _result_line(config)
    consumer_config = {**config.kafka.consumer, "bootstrap.servers": bootstrap}
    printed = skipped = 0
    out = sys.stdout.buffer
    for m in _messages(consumer_config, topic, partitions, follow=args.follow):
        text = line(m)
        if text is None:
            skipped += 1
            continue
        out.write(text + b"\n")
        printed += 1
        if args.follow:
            out.flush()
    out.flush()
    what = "error records" if args.errors else "results"
    other = f", {skipped} records that are not" if skipped else ""
    print(f"read: {printed} {what} from {topic}{other}", file=sys.stderr)
    return 0


def _result_line(config: JobConfig | JoinJobConfig) -> Callable[[Message], bytes | None]:
    """A result's JSON line (``None``: a tombstone, or a record no result decodes from)."""
    if config.output.format == "json":
        return lambda m: _json_value(m.value())
    assert isinstance(config, JobConfig)  # a join writes JSON only
    decoder = result_decoder_for(config)

    def line(m: Message) -> bytes | None:
        try:
            doc = decoder.decode(m.value())
        except ValueError:
            return None
        return None if doc is None else orjson.dumps(doc, default=str)

    return line


def _json_value(value: bytes | None) -> bytes | None:
    if value is None:
        return None
    try:
        orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    return value


def _error_line(m: Message) -> bytes | None:
    headers = m.headers()
    if isinstance(headers, dict):  # confluent-kafka gives a list; a dict is the same
        headers = list(headers.items())
    try:
        return error_json(decode_error(m.key(), m.value(), headers))
    except ValueError:
        return None


def _messages(
    consumer_config: dict[str, Any], topic: str, partitions: int, *, follow: bool
) -> Iterator[Message]:
    """Every record of ``topic`` from its start, until each partition's end (``follow``:
    until Ctrl-C)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    conf = range_consumer_config(consumer_config)
    conf["group.id"] = f"window-operator-read-{uuid.uuid4().hex}"
    consumer = Consumer(conf)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        at_end: set[int] = set()
        while follow or len(at_end) < partitions:
            for m in consumer.consume(1_000, timeout=_POLL_S):
                err = m.error()
                if err is None:
                    yield m
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition() or 0)
                elif err.fatal():
                    raise CliError(f"reading {topic} failed: {err.str()}")
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
    add_bootstrap_option(rd)
    rd.set_defaults(func=_cmd_read)
