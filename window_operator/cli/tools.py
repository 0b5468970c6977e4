"""Tools around a job: ``broker`` (a local Kafka-protocol broker), ``schema`` (the Avro
schema of a job's results) and ``nexmark generate``."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from window_operator.cli.common import (
    EXIT_CONFIG,
    CliError,
    add_bootstrap_option,
    add_config_option,
    bootstrap_servers,
    load_checked_config,
    non_negative_int,
    parse_time,
    port_number,
    positive_int,
    positive_number,
)

if TYPE_CHECKING:
    from window_operator.cli.common import Subparsers

__all__ = ["add_parsers"]


def _stop_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # the broker is stopped on the way out, as on Ctrl-C


def _cmd_broker(args: argparse.Namespace) -> int:
    """Run a local broker until Ctrl-C or SIGTERM, then stop it (its child process too)."""
    from window_operator.broker import LocalBroker

    signal.signal(signal.SIGTERM, _stop_on_sigterm)

    broker = LocalBroker(
        port=args.port or 0, data_dir=Path(args.data_dir) if args.data_dir else None
    )
    broker.start()
    print(f"KAFKA_BOOTSTRAP_SERVERS={broker.bootstrap_servers}", flush=True)
    print("broker running; Ctrl-C to stop", file=sys.stderr, flush=True)
    try:
        while broker.process is not None and broker.process.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass
    finally:
        broker.stop()
    return 0


def _add_broker(sub: Subparsers) -> None:
    brk = sub.add_parser("broker", help="run a local Kafka-protocol broker (noida-db)")
    brk.add_argument("--port", type=port_number, help="port (default: a free one)")
    brk.add_argument("--data-dir", help="data directory (default: a temporary one)")
    brk.set_defaults(func=_cmd_broker)


def _cmd_schema(args: argparse.Namespace) -> int:
    """Print the Avro schema the job writes its result values with."""
    from window_operator.codecs.result_avro import AvroResultEncoder
    from window_operator.config import JobConfig

    config = load_checked_config(args.config, user_code=False)
    if not isinstance(config, JobConfig):
        raise CliError("a join writes its results as JSON: they have no Avro schema", EXIT_CONFIG)
    if config.output.format != "avro":
        raise CliError(
            f"{args.config}: output.format is {config.output.format}: the results are JSON "
            "objects (set output.format: avro for Avro values)",
            EXIT_CONFIG,
        )
    print(AvroResultEncoder(config).schema_json)
    return 0


def _add_schema(sub: Subparsers) -> None:
    sch = sub.add_parser(
        "schema",
        help="print the Avro schema of the job's result values (output.format: avro): the "
        "one derived from the job, or output.avro_schema",
    )
    add_config_option(sch)
    sch.set_defaults(func=_cmd_schema)


def _cmd_nexmark_generate(args: argparse.Namespace) -> int:
    from window_operator.nexmark import (
        EventTimeRangeError,
        NexmarkConfig,
        NexmarkTopics,
        UnacknowledgedError,
        fill_topics,
    )

    if not args.rate > 0:  # --events and --partitions are positive_int
        raise CliError(f"--rate must be > 0 (got {args.rate})", EXIT_CONFIG)
    base = parse_time(args.base_time, int(time.time() * 1000))
    cfg = NexmarkConfig(rate=args.rate, base_time=base, seed=args.seed, extra=not args.no_extra)
    try:  # before the broker is asked anything
        cfg.check_times(args.events)
    except EventTimeRangeError as exc:
        raise CliError(
            f"--rate {args.rate:g}, --events {args.events}, --base-time {base}: {exc}: "
            "give a higher --rate, fewer --events or another --base-time",
            EXIT_CONFIG,
        ) from None
    topics = NexmarkTopics.with_prefix(args.topic_prefix)
    try:
        report = fill_topics(
            bootstrap_servers(args, None),
            cfg,
            args.events,
            topics=topics,
            partitions=args.partitions,
        )
    except UnacknowledgedError as exc:
        raise CliError(str(exc)) from None
    print(
        f"nexmark: {report.events} events in {report.seconds:.1f}s: {report.persons} persons "
        f"to {topics.persons}, {report.auctions} auctions to {topics.auctions}, {report.bids} "
        f"bids to {topics.bids}; event time {report.first_time} .. {report.last_time} "
        f"(base time {base}, seed {args.seed})",
        file=sys.stderr,
    )
    return 0


def _add_nexmark(sub: Subparsers) -> None:
    nex = sub.add_parser("nexmark", help="the Nexmark benchmark's event streams")
    nex_sub = nex.add_subparsers(dest="nexmark_command", required=True)
    gen = nex_sub.add_parser(
        "generate",
        help="fill Kafka topics <prefix>persons, <prefix>auctions, <prefix>bids (JSON)",
    )
    gen.add_argument(
        "--events", type=positive_int, required=True, help="events of all kinds (1:3:46)"
    )
    add_bootstrap_option(gen)
    gen.add_argument(
        "--rate", type=positive_number, default=10_000.0, help="events per second of event time"
    )
    gen.add_argument("--topic-prefix", default="nexmark-", help="topic name prefix")
    gen.add_argument("--partitions", type=positive_int, default=4, help="partitions of new topics")
    gen.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of every random draw (>= 0)"
    )
    gen.add_argument(
        "--base-time", help="event time of the first event, ms or ISO-8601 (default: now)"
    )
    gen.add_argument("--no-extra", action="store_true", help="leave the padding field empty")
    gen.set_defaults(func=_cmd_nexmark_generate)


def add_parsers(sub: Subparsers) -> None:
    """``broker``, ``schema`` and ``nexmark``."""
    _add_broker(sub)
    _add_schema(sub)
    _add_nexmark(sub)
