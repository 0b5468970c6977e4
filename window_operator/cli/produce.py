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
kafka``) gets each line keyed by its ``kafka_key`` (as ``simulate`` reads it, written
as ``input.key_format`` writes it: an integer as 8 or 4 big-endian bytes for ``long`` or
``int``, hexadecimal text as its bytes for ``bytes``; a line without one goes without a
key). For an input whose event time is the Kafka record
timestamp (``timestamp_from: kafka``), a line's ``wall_ms``, which stands for that
timestamp in ``simulate``, is written as its record's timestamp; a line without one is
stamped when written.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from window_operator.cli.common import (
    EXIT_FAILED,
    CliError,
    add_bootstrap_option,
    add_config_option,
    add_no_meta_option,
    bootstrap_servers,
    check_no_meta,
    file_progress,
    input_file,
    load_simulation_runtime,
    positive_int,
)
from window_operator.cli.routing import Produced, Routed, Target, route, targets
from window_operator.codecs.json_input import JSON_WHITESPACE
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.kafka_admin import KafkaAdmin
from window_operator.kafka_range import (
    EARLIEST,
    KafkaRange,
    KafkaSourceError,
    range_consumer_config,
    read_messages,
)
from window_operator.observe.logs import kafka_logger
from window_operator.simulate_input import META_FIELDS

if TYPE_CHECKING:
    from pathlib import Path

    from confluent_kafka import Producer

    from window_operator.cli.common import Subparsers

__all__ = ["add_parsers"]


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
            _stop_if_timed_out(producer, produced, line)
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

    settings: dict[str, Any] = {
        "linger.ms": 20,
        "logger": kafka_logger(),  # librdkafka's chatter dropped, secrets masked
        **config.kafka.producer,
    }
    if once:
        settings.setdefault("transaction.timeout.ms", 900_000)  # a large file: 15 min
        settings["transactional.id"] = f"{config.job}-produce"  # as the job's: "<job>-..."
    return Producer({**settings, "bootstrap.servers": bootstrap})


def _stop_if_timed_out(producer: Producer, produced: Produced, line: int | None) -> None:
    """Stop the load once a record timed out unacknowledged (``line``: the next line,
    ``None`` after the last): the broker answered nothing for it in
    ``message.timeout.ms``, and every record queued after it would wait as long again
    (a queueful at a time) before failing the same way. The records still queued are
    dropped and counted as not written (one already sent may have been written all the
    same: the count of records written is a lower bound)."""
    if produced.timed_out is None:
        return
    producer.purge()
    producer.flush(5)  # their delivery reports: purged
    raise CliError(
        f"produce: a record waited message.timeout.ms unacknowledged "
        f"({produced.timed_out}): stopped "
        f"{'after the last line' if line is None else f'before line {line}'}; "
        f"{produced.summary(verb='written')}",
        EXIT_FAILED,
    )


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
                producer.poll(0)  # the delivery reports so far: a timeout stops it here
                _stop_if_timed_out(producer, produced, number + 1)
    # every record is acknowledged, or fails, within message.timeout.ms: the first to
    # time out stops the wait (it waited 60 s, then said nothing of what was written)
    while producer.flush(1):
        _stop_if_timed_out(producer, produced, None)
    _stop_if_timed_out(producer, produced, None)


def _retention(admin: KafkaAdmin, topic: str) -> tuple[int, int] | None:
    """The ``retention.ms`` of ``topic`` and the oldest record timestamp it keeps now, if
    it deletes records by their producers' timestamps (``None``: it keeps every record,
    the broker stamps them, or it does not say)."""
    settings = admin.topic_config(topic)
    try:
        retention = int(settings.get("retention.ms", "-1"))
    except ValueError:
        return None
    if (
        retention < 0
        or "delete" not in settings.get("cleanup.policy", "delete")
        or settings.get("message.timestamp.type", "CreateTime") != "CreateTime"
    ):
        return None
    return retention, int(time.time() * 1000) - retention


def _cmd_produce(args: argparse.Namespace) -> int:
    config = load_simulation_runtime(args.config).config
    if args.no_meta:
        check_no_meta(config, "produce")
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
    inputs = {
        name: replace(
            t,
            partitions=partitions[t.topic],
            retention=_retention(admin, t.topic) if t.record_time else None,
        )
        for name, t in inputs.items()
    }
    producer = _producer(config, bootstrap, args.once)
    consumer = {"logger": kafka_logger(), **config.kafka.consumer, "bootstrap.servers": bootstrap}
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
