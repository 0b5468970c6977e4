"""The ``window-operator`` command line.

Sub-commands: ``simulate`` (a job config over a JSONL file), ``run`` (the Spark
streaming job), ``status`` (a job's progress and health), ``broker`` (a local
Kafka-protocol broker), ``restore`` (rebuild local stores from the changelog),
``inspect`` (print the stored windows of a key) and ``demo``. Configuration mistakes
are reported as a list of field problems on stderr with exit status 2, never as a
traceback; so are startup failures (no broker
configured or answering, a missing input or changelog topic), each as one line.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from window_operator.broker import BrokerError
from window_operator.config import (
    ConfigError,
    JobConfig,
    JoinJobConfig,
    load_any_config,
    load_config,
)
from window_operator.job import JobRuntime, build_runtime
from window_operator.join import JoinRuntime, build_join_runtime
from window_operator.kafka_admin import KafkaAdmin, KafkaAdminError
from window_operator.observe.logs import setup_logging
from window_operator.observe.progress import progress_bar
from window_operator.observe.redact import RedactingFilter, secret_values
from window_operator.spark.topics import TaskCountError, TransactionsUnsupportedError

if TYPE_CHECKING:
    from window_operator.runtime.settings import TaskSettings

    _Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = ["main"]

#: A bad config or a setup the job cannot start with (no broker, a missing topic).
EXIT_CONFIG = 2
EXIT_INPUT = 3
#: ``status``: the job is behind, stalled, or never ran.
EXIT_UNHEALTHY = 1


class CliError(Exception):
    """A user-facing error: printed without a traceback."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _load_runtime(path: str) -> JobRuntime:
    config = load_config(path)
    return build_runtime(config, source=path)


def _load_simulation_runtime(path: str) -> JobRuntime | JoinRuntime:
    """The runtime of an aggregation job, or of a join job (a config with ``join:``)."""
    config = load_any_config(path)
    if isinstance(config, JoinJobConfig):
        return build_join_runtime(config, source=path)
    return build_runtime(config, source=path)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from window_operator.simulate import simulate

    runtime = _load_simulation_runtime(args.config)
    input_path = Path(args.input)
    if not input_path.is_file():
        raise CliError(f"input file {input_path} does not exist")
    out: IO[bytes]
    errors_out: IO[bytes] | None = None
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    bar = progress_bar(total=input_path.stat().st_size, desc="simulate", unit="B")
    try:
        if args.errors:
            errors_out = open(args.errors, "wb")  # noqa: SIM115
        summary = simulate(
            runtime,
            input_path,
            out,
            errors_out=errors_out,
            state_dir=Path(args.state_dir) if args.state_dir else None,
            batch_size=args.batch_size,
            progress=lambda position: bar.update(max(0, position - bar.n)),
        )
    finally:
        bar.close()
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
        if errors_out is not None:
            errors_out.close()
    parts = [
        f"{summary.lines} lines",
        f"{summary.applied} applied",
        f"{summary.replayed} replayed",
        f"{summary.rejected} rejected",
        f"{summary.results} {'join' if isinstance(runtime, JoinRuntime) else 'window'} results",
    ]
    print("simulate: " + ", ".join(parts), file=sys.stderr)
    if summary.errors:
        detail = ", ".join(f"{code}: {n}" for code, n in sorted(summary.errors.items()))
        where = f" (see {args.errors})" if args.errors else " (use --errors FILE for details)"
        print(f"simulate: rejected records by reason: {detail}{where}", file=sys.stderr)
    return 0


def _bootstrap(args: argparse.Namespace, config: JobConfig | JoinJobConfig | None) -> str:
    servers = (
        getattr(args, "bootstrap_servers", None)
        or (config.kafka.bootstrap_servers if config is not None else None)
        or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    )
    if not servers:
        raise CliError(
            "no Kafka broker: set KAFKA_BOOTSTRAP_SERVERS, pass --bootstrap-servers, "
            "or start a local one with `window-operator broker`",
            EXIT_CONFIG,
        )
    redact: RedactingFilter | None = getattr(args, "redact", None)
    if redact is not None and config is not None:
        # every command that talks to Kafka passes here: its secrets never reach a log
        redact.add(secret_values(config.kafka.producer, config.kafka.consumer))
    return servers


def _parse_time(text: str | None, default: int) -> int:
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        pass
    from datetime import datetime

    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    return int(dt.timestamp() * 1000)


def _spark_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise CliError(f"--conf expects key=value, got {pair!r}")
        conf[key] = value
    return conf


def _cmd_run(args: argparse.Namespace) -> int:
    from window_operator.spark.driver import StreamingJob, prepare_topics
    from window_operator.spark.session import build_session

    config = load_any_config(args.config)
    if isinstance(config, JobConfig):
        build_runtime(config, source=args.config)  # operation problems are config errors
    else:
        build_join_runtime(config, source=args.config)
    bootstrap = _bootstrap(args, config)
    # before Spark starts (seconds): an unreachable broker, a missing input topic or a
    # task count that disagrees with the changelog is reported at once
    prepare_topics(config, bootstrap)
    conf = {**config.spark.conf, **_spark_conf(args.conf)}
    if os.environ.get("WINDOW_OPERATOR_CRASH_AT"):
        # recovery tests: let the armed task kill this whole job (see runtime.faults)
        os.environ["WINDOW_OPERATOR_CRASH_PGID"] = str(os.getpgid(0))
    spark = build_session(
        app_name=f"window-operator-{config.job}",
        master=args.master or config.spark.master,
        conf=conf,
    )
    job = StreamingJob(
        config,
        bootstrap_servers=bootstrap,
        spark=spark,
        state_dir=args.state_dir,
        available_now=True if args.available_now else None,
        starting_offsets=args.starting_offsets,
    )
    from window_operator.observe.attach import QueryFailedError, run_observed

    metrics = config.metrics
    try:
        run_observed(
            job,
            metrics_port=args.metrics_port if args.metrics_port is not None else metrics.port,
            metrics_host=metrics.host,
            report_path=args.report,
        )
    except QueryFailedError as exc:
        raise CliError(str(exc)) from None
    return 0


def _cmd_broker(args: argparse.Namespace) -> int:
    from pathlib import Path

    from window_operator.broker import LocalBroker

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


def _task_settings(args: argparse.Namespace, with_kafka: bool = True) -> TaskSettings:
    from window_operator.runtime.settings import TaskSettings

    config = load_any_config(args.config)
    return TaskSettings(
        config=config,
        bootstrap_servers=_bootstrap(args, config) if with_kafka else "",
        state_dir=str(args.state_dir or config.state.dir),
    )


def _cmd_restore(args: argparse.Namespace) -> int:
    from window_operator.observe.progress import RestoreBar
    from window_operator.runtime.commit import TaskState

    settings = _task_settings(args)
    count = KafkaAdmin(settings.bootstrap_servers).require_topic(
        settings.changelog_topic,
        hint="run the job first (it creates its changelog), or check the job name in the config",
        kind="changelog topic",
        wait_s=0,
    )
    if args.task is not None and not 0 <= args.task < count:
        raise CliError(
            f"--task {args.task}: the changelog {settings.changelog_topic!r} has tasks "
            f"0 to {count - 1}",
            EXIT_CONFIG,
        )
    tasks = [args.task] if args.task is not None else list(range(count))
    for task in tasks:
        bar = RestoreBar(task)
        try:
            state = TaskState.open(settings, task, progress=bar)
        finally:
            bar.close()
        state.close()
        result = state.restored
        print(
            f"task {task}: applied {result.applied} records in {result.batches} batches, "
            f"now at changelog offset {result.position}"
            + (f", {len(result.uncommitted)} uncommitted" if result.uncommitted else "")
        )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    import orjson

    from window_operator.runtime.settings import task_state_dir

    settings = _task_settings(args, with_kafka=False)
    start = _parse_time(args.start, -(2**62))
    end = _parse_time(args.end, 2**62)
    root = task_state_dir(settings.state_dir_path, settings.config.job, 0).parent
    tasks = (
        sorted(int(p.name.removeprefix("task-")) for p in root.glob("task-*") if p.is_dir())
        if root.exists()
        else []
    )
    if not tasks:
        raise CliError(f"no local state under {root}: run the job or `window-operator restore`")
    found = 0
    for task in tasks:
        for line in _inspect_task(settings, task, args.key, start, end):
            found += 1
            sys.stdout.buffer.write(orjson.dumps(line) + b"\n")
    if not found:
        print(f"no stored state for key {args.key!r} in that range", file=sys.stderr)
    return 0


def _inspect_task(
    settings: TaskSettings, task: int, key: str, start: int, end: int
) -> list[dict[str, object]]:
    """A task's stored windows of ``key`` (aggregations) or messages (joins), as JSON."""
    from window_operator.runtime.queries import stored_messages, stored_windows

    if isinstance(settings.config, JoinJobConfig):
        return [
            {
                "task": task,
                "source": m.source,
                "key": list(m.key),
                "ts": m.ts,
                "partition": m.partition,
                "offset": m.offset,
                "record": m.record,
            }
            for m in stored_messages(settings, task, key, start, end)
        ]
    return [
        {
            "task": task,
            "key": w.key,
            "window_start": w.window_start,
            "window_end": w.window_end,
            "fired": w.fired,
            "values": w.values,
        }
        for w in stored_windows(settings, task, key, start, end)
    ]


def _cmd_produce(args: argparse.Namespace) -> int:
    import orjson
    from confluent_kafka import Producer

    runtime = _load_runtime(args.config)
    config = runtime.config
    bootstrap = _bootstrap(args, config)
    topic = config.input.topic
    # retention.ms=-1: sample data carries historical event times
    KafkaAdmin(bootstrap).create_topic(topic, args.partitions, {"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    key_field = config.input.key
    n = 0
    bar = progress_bar(total=Path(args.input).stat().st_size, desc="produce", unit="B")
    with open(args.input, "rb") as lines, bar:
        for line in lines:
            bar.update(len(line))
            line = line.strip()
            if not line:
                continue
            key = None
            if key_field is not None:
                try:
                    value = orjson.loads(line).get(key_field)
                    key = None if value is None else str(value).encode()
                except (orjson.JSONDecodeError, AttributeError):
                    key = None  # produced as is: the job routes it to the error topic
            while True:
                try:
                    producer.produce(topic, key=key, value=line)
                    break
                except BufferError:
                    producer.poll(0.1)
            n += 1
    if producer.flush(60):
        raise CliError("some records were not acknowledged by the broker")
    print(f"produced {n} records to {topic}", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from pathlib import Path

    from window_operator.demo import DEFAULT_CONFIG, run_demo

    printed = run_demo(
        config_path=Path(args.config) if args.config else DEFAULT_CONFIG,
        events=args.events,
        seconds=args.seconds,
        out=sys.stdout,
        err=sys.stderr,
        chart=Path(args.chart) if args.chart else None,
    )
    return 0 if printed > 0 else 1


def _add_simulate(sub: _Subparsers) -> None:
    sim = sub.add_parser(
        "simulate",
        help="run a job config over a JSONL file of events and print the window results",
    )
    sim.add_argument("--config", required=True, help="job YAML file")
    sim.add_argument("--input", required=True, help="JSONL events, one per line, arrival order")
    sim.add_argument("--output", help="write results here (JSONL) instead of stdout")
    sim.add_argument("--errors", help="write rejected records here (JSONL)")
    sim.add_argument("--state-dir", help="keep the RocksDB state here (default: a temp dir)")
    sim.add_argument(
        "--batch-size",
        type=int,
        default=10_000,
        help="events per micro-batch, as the streaming job would see them (1 = per event)",
    )
    sim.set_defaults(func=_cmd_simulate)


def _add_run(sub: _Subparsers) -> None:
    run = sub.add_parser("run", help="run the Spark Structured Streaming job of a config")
    run.add_argument("--config", required=True, help="job YAML file")
    run.add_argument(
        "--master", help="Spark master (default: spark.master of the config, local[*])"
    )
    run.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value")
    run.add_argument("--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)")
    run.add_argument("--state-dir", help="RocksDB state directory (default: state.dir)")
    run.add_argument(
        "--available-now", action="store_true", help="process what is in the topic, then stop"
    )
    run.add_argument(
        "--starting-offsets", default="earliest", help="earliest | latest | Spark-style JSON"
    )
    run.add_argument("--report", help="append one JSON line of task reports per micro-batch")
    run.add_argument(
        "--metrics-port",
        type=int,
        help="serve Prometheus metrics on this port (default: metrics.port; 0: any free one)",
    )
    run.add_argument("--quiet", action="store_true", help="no log line per micro-batch")
    run.set_defaults(func=_cmd_run)


def _add_status(sub: _Subparsers) -> None:
    st = sub.add_parser(
        "status", help="a job's input lag, watermark, last batch and changelog; exit 1 unhealthy"
    )
    st.add_argument("--config", required=True, help="job YAML file")
    st.add_argument("--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)")
    st.add_argument("--state-dir", help="RocksDB state directory (default: state.dir)")
    st.add_argument(
        "--max-idle-triggers",
        type=int,
        default=3,
        help="unhealthy when input waits and no batch ran for this many triggers (default 3)",
    )
    st.add_argument(
        "--interval",
        type=float,
        default=0.0,
        help="read the lag twice this many seconds apart: unhealthy if it grew (default: once)",
    )
    st.set_defaults(func=_cmd_status)


def _cmd_status(args: argparse.Namespace) -> int:
    from window_operator.observe.status import format_status, job_status

    config = load_any_config(args.config)
    status = job_status(
        config,
        _bootstrap(args, config),
        state_dir=args.state_dir,
        max_idle_triggers=args.max_idle_triggers,
        interval_s=args.interval,
    )
    print(format_status(status))
    return 0 if status.healthy else EXIT_UNHEALTHY


def _add_state_commands(sub: _Subparsers) -> None:
    rst = sub.add_parser("restore", help="rebuild local task stores from the changelog")
    rst.add_argument("--config", required=True, help="job YAML file")
    rst.add_argument("--task", type=int, help="only this task (input partition)")
    rst.add_argument("--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)")
    rst.add_argument("--state-dir", help="RocksDB state directory (default: state.dir)")
    rst.set_defaults(func=_cmd_restore)

    ins = sub.add_parser("inspect", help="print the stored windows of a key")
    ins.add_argument("--config", required=True, help="job YAML file")
    ins.add_argument("--key", required=True, help="the key to look up")
    ins.add_argument("--from", dest="start", help="window range start (ms or ISO-8601)")
    ins.add_argument("--to", dest="end", help="window range end (ms or ISO-8601)")
    ins.add_argument("--state-dir", help="RocksDB state directory (default: state.dir)")
    ins.set_defaults(func=_cmd_inspect)


def _add_broker(sub: _Subparsers) -> None:
    brk = sub.add_parser("broker", help="run a local Kafka-protocol broker (noida-db)")
    brk.add_argument("--port", type=int, help="port (default: a free one)")
    brk.add_argument("--data-dir", help="data directory (default: a temporary one)")
    brk.set_defaults(func=_cmd_broker)


def _add_produce_and_demo(sub: _Subparsers) -> None:
    prod = sub.add_parser("produce", help="produce a JSONL file to a job's input topic")
    prod.add_argument("--config", required=True, help="job YAML file")
    prod.add_argument("--input", required=True, help="JSONL events")
    prod.add_argument("--partitions", type=int, default=4, help="partitions if the topic is new")
    prod.add_argument(
        "--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)"
    )
    prod.set_defaults(func=_cmd_produce)

    demo = sub.add_parser(
        "demo", help="broker + live click stream + the streaming job, printing window results"
    )
    demo.add_argument("--config", help="job YAML (default: config/clicks.yaml)")
    demo.add_argument("--events", type=int, default=3000, help="clicks to produce")
    demo.add_argument("--seconds", type=float, default=30.0, help="wall time to produce them")
    demo.add_argument("--chart", help="where to write the PNG chart (default: the run's temp dir)")
    demo.set_defaults(func=_cmd_demo)


def _cmd_nexmark_generate(args: argparse.Namespace) -> int:
    from window_operator.nexmark import (
        NexmarkConfig,
        NexmarkTopics,
        UnacknowledgedError,
        fill_topics,
    )

    if args.events < 0 or args.partitions < 1 or not args.rate > 0:
        raise CliError("--events must be >= 0, --partitions >= 1 and --rate > 0", EXIT_CONFIG)
    base = _parse_time(args.base_time, int(time.time() * 1000))
    cfg = NexmarkConfig(rate=args.rate, base_time=base, seed=args.seed, extra=not args.no_extra)
    topics = NexmarkTopics.with_prefix(args.topic_prefix)
    try:
        report = fill_topics(
            _bootstrap(args, None), cfg, args.events, topics=topics, partitions=args.partitions
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


def _add_nexmark(sub: _Subparsers) -> None:
    nex = sub.add_parser("nexmark", help="the Nexmark benchmark's event streams")
    nex_sub = nex.add_subparsers(dest="nexmark_command", required=True)
    gen = nex_sub.add_parser(
        "generate",
        help="fill Kafka topics <prefix>persons, <prefix>auctions, <prefix>bids (JSON)",
    )
    gen.add_argument("--events", type=int, required=True, help="events of all kinds (1:3:46)")
    gen.add_argument("--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)")
    gen.add_argument("--rate", type=float, default=10_000.0, help="events per second of event time")
    gen.add_argument("--topic-prefix", default="nexmark-", help="topic name prefix")
    gen.add_argument("--partitions", type=int, default=4, help="partitions of new topics")
    gen.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    gen.add_argument(
        "--base-time", help="event time of the first event, ms or ISO-8601 (default: now)"
    )
    gen.add_argument("--no-extra", action="store_true", help="leave the padding field empty")
    gen.set_defaults(func=_cmd_nexmark_generate)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="window-operator",
        description="Stateful event-time window operators on RocksDB, over Kafka and Spark.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _add_simulate(sub)
    _add_run(sub)
    _add_status(sub)
    _add_broker(sub)
    _add_state_commands(sub)
    _add_produce_and_demo(sub)
    _add_nexmark(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``window-operator`` console script."""
    args = _parser().parse_args(argv)
    args.redact = setup_logging(quiet=bool(getattr(args, "quiet", False)))
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CONFIG
    except CliError as exc:
        print(f"window-operator: {exc}", file=sys.stderr)
        return exc.code
    except (KafkaAdminError, BrokerError, TaskCountError, TransactionsUnsupportedError) as exc:
        print(f"window-operator: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
