"""The commands that run a job: ``simulate``, ``run``, ``status`` and ``demo``."""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from window_operator.cli.common import (
    EXIT_CONFIG,
    EXIT_FAILED,
    EXIT_UNHEALTHY,
    CliError,
    add_bootstrap_option,
    add_config_option,
    add_no_meta_option,
    add_state_dir_option,
    bootstrap_servers,
    check_no_meta,
    file_progress,
    input_file,
    load_checked_config,
    load_simulation_runtime,
    named_fields,
    port_number,
    positive_int,
    positive_number,
    seconds,
    warn_ignored,
)
from window_operator.config import JobConfig, JoinJobConfig, load_any_config
from window_operator.join import JoinRuntime

if TYPE_CHECKING:
    from window_operator.cli.common import Subparsers
    from window_operator.job import JobRuntime
    from window_operator.simulate import SimulationSummary

__all__ = ["add_parsers"]


def _warn_of_line_fields(config: JobConfig | JoinJobConfig, meta: Sequence[str]) -> None:
    """A warning for each field the job names that simulate reads as the line's own."""
    for setting, name in named_fields(config):
        if name in meta:
            print(
                f"simulate: warning: {setting} names the field {name!r}, which simulate "
                "reads as the line's own (where it stands, or when it came): if it is a "
                "field of your events, run with --no-meta",
                file=sys.stderr,
            )


def _cmd_simulate(args: argparse.Namespace) -> int:
    from window_operator.count_windows.offsets import OffsetsPartitionError
    from window_operator.simulate import FinishedStateError, simulate
    from window_operator.simulate_input import META_FIELDS

    runtime = load_simulation_runtime(args.config)
    warn_ignored(runtime.config, args.config)
    if args.no_meta:
        check_no_meta(runtime.config, "simulate")
    else:
        _warn_of_line_fields(runtime.config, META_FIELDS)
    input_path = input_file(args.input)
    _check_outputs(
        {"--input": input_path, "--config": Path(args.config)},
        {"--output": args.output, "--errors": args.errors},
    )
    out: IO[bytes]
    errors_out: IO[bytes] | None = None
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
    bar = file_progress(input_path, "simulate")
    progress = None if bar is None else (lambda position: bar.update(max(0, position - bar.n)))
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
            progress=progress,
            final=not args.keep_open,
            meta=() if args.no_meta else META_FIELDS,
        )
    except FinishedStateError as exc:
        raise CliError(str(exc)) from None
    except OffsetsPartitionError as exc:
        raise CliError(f"{exc} (simulate the lines of one partition per run)") from None
    finally:
        if bar is not None:
            bar.close()
        if out is not sys.stdout.buffer:
            out.close()
        else:
            out.flush()
        if errors_out is not None:
            errors_out.close()
    _print_summary(summary, runtime, args.errors)
    if summary.replayed and not args.no_meta and not args.state_dir:  # not a rerun
        print(
            "simulate: a line's offset (and partition, wall_ms) fields say where it stands: "
            "a line at or below an offset already read is a replay; if these are fields of "
            "your events, run with --no-meta",
            file=sys.stderr,
        )
    return 0


def _print_summary(
    summary: SimulationSummary, runtime: JobRuntime | JoinRuntime, errors: str | None
) -> None:
    """``simulate``'s closing lines on stderr."""
    parts = [
        f"{summary.lines} lines",
        f"{summary.applied} applied",
        f"{summary.replayed} replayed",
        f"{summary.rejected} rejected",
        f"{summary.results} {'join' if isinstance(runtime, JoinRuntime) else 'window'} results",
    ]
    if summary.result_errors:
        parts.append(f"{summary.result_errors} not written (RESULT_ERROR)")
    print("simulate: " + ", ".join(parts), file=sys.stderr)
    if summary.errors:
        detail = ", ".join(f"{code}: {n}" for code, n in sorted(summary.errors.items()))
        where = f" (see {errors})" if errors else " (use --errors FILE for details)"
        print(f"simulate: error records by code: {detail}{where}", file=sys.stderr)
    if summary.rejected and not summary.applied:
        codes = set(summary.errors) - {"RESULT_ERROR"}
        check = (
            "is the input a JSON Lines file (a JSON object per line, UTF-8, not compressed)?"
            if codes == {"BAD_JSON"}
            else "a user-defined operation raised on each (see the tracebacks)"
            if codes == {"INTERNAL_ERROR"}
            else "check the field names the config reads (key, timestamp, values) against "
            "the input's"
        )
        print(f"simulate: warning: every record was rejected: {check}", file=sys.stderr)
    if isinstance(runtime, JoinRuntime) and runtime.self_join:
        print(
            "simulate: both inputs read one topic (a self-join): every line reached both, "
            "whichever input it names, as every record of the topic does on Kafka",
            file=sys.stderr,
        )


def _check_outputs(inputs: dict[str, Path], outputs: dict[str, str | None]) -> None:
    """Refuse an output file that is an input (the records, the config), or another
    output: opening it for writing would empty the input before it is read (the config
    for good), or mix the two outputs."""
    taken: list[tuple[Path, str]] = [(path, option) for option, path in inputs.items()]
    for option, name in outputs.items():
        if name is None:
            continue
        path = Path(name)
        for other, other_option in taken:
            if _same_file(path, other):
                raise CliError(f"{option} {name} is the file of {other_option}: use another")
        taken.append((path, option))


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one regular file (devices and pipes may be shared)."""
    if any(p.exists() and not p.is_file() for p in (a, b)):
        return False
    if a.resolve() == b.resolve():
        return True
    return a.exists() and b.exists() and a.samefile(b)


def _spark_conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"--conf expects key=value, got {pair!r}", EXIT_CONFIG)
        conf[key] = value
    return conf


def _starting_offsets(text: str) -> str:
    """``--starting-offsets`` checked before Spark starts, in its canonical form."""
    from window_operator.spark.kafka_source.options import parse_starting_offsets

    try:
        parsed = parse_starting_offsets(text)
    except ValueError as exc:
        raise CliError(f"--starting-offsets: {exc}", EXIT_CONFIG) from None
    return parsed if isinstance(parsed, str) else json.dumps(parsed, sort_keys=True)


def _check_port(host: str, port: int) -> None:
    """Fail before Spark starts when the metrics port cannot be served."""
    from window_operator.observe.metrics import MetricsPortError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # as the metrics server will: a port left in TIME_WAIT by an earlier run is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise MetricsPortError(host, port, exc) from None


def _cmd_run(args: argparse.Namespace) -> int:
    from window_operator.observe.attach import catch_interrupts, release_interrupts
    from window_operator.observe.heartbeat import running_elsewhere
    from window_operator.spark.driver import prepare_topics

    config = load_checked_config(args.config)
    starting = _starting_offsets(args.starting_offsets)
    if args.mode is not None:
        config = config.model_copy(
            update={"spark": config.spark.model_copy(update={"mode": args.mode})}
        )
    warn_ignored(config, args.config)  # as the job runs: --mode decides what applies
    if other := running_elsewhere(config.spark.checkpoint_dir):
        raise CliError(
            f"job {config.job!r} is already running: {other}; stop it first (a second copy "
            "over the same checkpoint fails in Spark, or waits on its stores)",
            EXIT_CONFIG,
        )
    conf = {**config.spark.conf, **_spark_conf(args.conf)}
    metrics = config.metrics
    metrics_port = args.metrics_port if args.metrics_port is not None else metrics.port
    if metrics_port:
        _check_port(metrics.host, metrics_port)
    if args.report:  # before Spark starts (seconds), naming the option
        try:
            open(args.report, "ab").close()
        except OSError as exc:
            raise CliError(f"--report {args.report}: {exc.strerror}") from None
    bootstrap = bootstrap_servers(args, config)
    # before Spark starts (seconds): an unreachable broker, a missing input topic or a
    # task count that disagrees with the changelog is reported at once
    prepare_topics(config, bootstrap)
    if os.environ.get("WINDOW_OPERATOR_CRASH_AT"):
        # recovery tests: let the armed task kill this whole job (see runtime.faults)
        os.environ["WINDOW_OPERATOR_CRASH_PGID"] = str(os.getpgid(0))
    master = args.master or config.spark.master
    # Ctrl-C and SIGTERM are noted from here on: one while Spark starts ends the run
    # once it started (before: lost, or the driver gone and Spark's JVM left running)
    interrupted = threading.Event()
    previous = catch_interrupts(interrupted)
    try:
        return _run_job(args, config, conf, master, bootstrap, starting, interrupted)
    finally:
        release_interrupts(previous)


def _run_job(
    args: argparse.Namespace,
    config: JobConfig | JoinJobConfig,
    conf: dict[str, str],
    master: str | None,
    bootstrap: str,
    starting: str,
    interrupted: threading.Event,
) -> int:
    """``run`` once the config is checked: start Spark, then the job (see _cmd_run)."""
    from window_operator.spark.longrun import job_for
    from window_operator.spark.session import build_session

    metrics = config.metrics
    metrics_port = args.metrics_port if args.metrics_port is not None else metrics.port
    try:
        name = f"window-operator-{config.job}"
        spark = build_session(app_name=name, master=master, conf=conf, keep_interrupts=True)
    except Exception as exc:
        from py4j.protocol import Py4JError
        from pyspark.errors import PySparkException  # pyspark loads in seconds: only now

        from window_operator.spark.failures import root_cause

        if not isinstance(exc, PySparkException | Py4JError):
            raise
        # e.g. a master URL Spark does not know (its JVM exited), or one it refuses
        # (local[0]: the JVM says why, under a screenful of stack)
        where = f" with master {master!r}" if master else ""
        reason = str(exc).splitlines()[0] if isinstance(exc, PySparkException) else root_cause(exc)
        raise CliError(f"Spark did not start{where}: {reason} (see above)", EXIT_CONFIG) from None
    if interrupted.is_set():  # stopped while Spark started: nothing ran
        spark.stop()
        return 0
    job = job_for(
        config,
        bootstrap_servers=bootstrap,
        spark=spark,
        state_dir=args.state_dir,
        available_now=True if args.available_now else None,
        starting_offsets=starting,
    )
    from window_operator.observe.attach import QueryFailedError, run_observed

    try:
        run_observed(
            job,
            metrics_port=metrics_port,
            metrics_host=metrics.host,
            report_path=args.report,
            interrupted=interrupted,
        )
    except QueryFailedError as exc:
        raise CliError(str(exc), EXIT_FAILED) from None
    return 0


def _cmd_status(args: argparse.Namespace) -> int:
    from window_operator.observe.status import format_status, job_status

    config = load_checked_config(args.config, user_code=False)  # it reads Kafka only
    status = job_status(
        config,
        bootstrap_servers(args, config),
        state_dir=args.state_dir,
        max_idle_triggers=args.max_idle_triggers,
        interval_s=args.interval,
    )
    print(format_status(status))
    if status.unreachable is not None:  # told from the checkpoint alone: exit status 2
        raise status.unreachable
    return 0 if status.healthy else EXIT_UNHEALTHY


def _cmd_demo(args: argparse.Namespace) -> int:
    from window_operator.demo import DEFAULT_CONFIG, clicks_unread, run_demo

    config_path = Path(args.config) if args.config else DEFAULT_CONFIG
    if not args.config and not DEFAULT_CONFIG.exists():
        raise CliError(
            "the demo's job, config/clicks.yaml, comes with the project's source tree, "
            "which this install (not an editable one) does not have: give a job over "
            "clicks with --config, or install from a clone (pip install -e .)",
            EXIT_CONFIG,
        )
    if not isinstance(load_any_config(config_path), JobConfig):
        raise CliError(
            f"{config_path} is a join: the demo streams clicks into an aggregation job "
            "(try `simulate` or `run` for a join)",
            EXIT_CONFIG,
        )
    config = load_checked_config(config_path)  # its operations, as every command checks them
    if isinstance(config, JobConfig) and (unread := clicks_unread(config)) is not None:
        raise CliError(
            f"{config_path} {unread}, and the demo streams JSON clicks of "
            '{"page", "ts", "latency_ms"}: give it a job over clicks such as '
            "config/clicks.yaml (try `simulate` or `run` for this one)",
            EXIT_CONFIG,
        )
    printed = run_demo(
        config_path=config_path,
        events=args.events,
        seconds=args.seconds,
        out=sys.stdout,
        err=sys.stderr,
        chart=Path(args.chart) if args.chart else None,
        mode=args.mode,
    )
    return 0 if printed > 0 else 1


def _add_simulate(sub: Subparsers) -> None:
    sim = sub.add_parser(
        "simulate",
        help="run a job config over a JSONL file of events and print the window results",
    )
    add_config_option(sim)
    sim.add_argument("--input", required=True, help="JSONL events, one per line, arrival order")
    sim.add_argument("--output", help="write results here (JSONL) instead of stdout")
    sim.add_argument("--errors", help="write rejected records here (JSONL)")
    sim.add_argument("--state-dir", help="keep the RocksDB state here (default: a temp dir)")
    sim.add_argument(
        "--batch-size",
        type=positive_int,
        default=10_000,
        help="events per micro-batch, as the streaming job would see them (1 = per event)",
    )
    sim.add_argument(
        "--keep-open",
        action="store_true",
        help="no final timer at +infinity: windows not yet passed by the watermark stay open, "
        "and another run with the same --state-dir continues the stream",
    )
    add_no_meta_option(sim)
    sim.set_defaults(func=_cmd_simulate)


def _add_run(sub: Subparsers) -> None:
    run = sub.add_parser("run", help="run the Spark job of a config")
    add_config_option(run)
    run.add_argument(
        "--master", help="Spark master (default: spark.master of the config, local[*])"
    )
    run.add_argument("--conf", action="append", default=[], help="extra Spark conf key=value")
    add_bootstrap_option(run)
    add_state_dir_option(run)
    run.add_argument(
        "--available-now", action="store_true", help="process what is in the topic, then stop"
    )
    run.add_argument(
        "--mode",
        choices=["micro_batch", "long_running"],
        help="how the job runs on Spark (default: spark.mode of the config, micro_batch)",
    )
    run.add_argument(
        "--starting-offsets", default="earliest", help="earliest | latest | Spark-style JSON"
    )
    run.add_argument(
        "--report",
        help="append one JSON line of task reports per micro-batch, epoch or timer pass",
    )
    run.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve Prometheus metrics on this port (default: metrics.port; 0: any free one)",
    )
    run.add_argument("--quiet", action="store_true", help="no log line per micro-batch")
    run.set_defaults(func=_cmd_run)


def _add_status(sub: Subparsers) -> None:
    st = sub.add_parser(
        "status", help="a job's input lag, watermark, last batch and changelog; exit 1 unhealthy"
    )
    add_config_option(st)
    add_bootstrap_option(st)
    add_state_dir_option(st)
    st.add_argument(
        "--max-idle-triggers",
        type=positive_int,
        default=3,
        help="unhealthy when input waits and no batch ran for this many triggers (default 3)",
    )
    st.add_argument(
        "--interval",
        type=seconds,
        default=0.0,
        help="read the lag twice this many seconds apart: unhealthy if it grew (default: once)",
    )
    st.set_defaults(func=_cmd_status)


def _add_demo(sub: Subparsers) -> None:
    demo = sub.add_parser(
        "demo", help="broker + live click stream + the streaming job, printing window results"
    )
    demo.add_argument("--config", help="job YAML (default: config/clicks.yaml)")
    demo.add_argument("--events", type=positive_int, default=3000, help="clicks to produce")
    demo.add_argument(
        "--seconds", type=positive_number, default=30.0, help="wall time to produce them"
    )
    demo.add_argument("--chart", help="where to write the PNG chart (default: the run's temp dir)")
    demo.add_argument(
        "--mode",
        choices=["micro_batch", "long_running"],
        default="micro_batch",
        help="how the job runs on Spark (see `run --mode`)",
    )
    demo.set_defaults(func=_cmd_demo)


def add_parsers(sub: Subparsers) -> None:
    """``simulate``, ``run``, ``status`` and ``demo``."""
    _add_simulate(sub)
    _add_run(sub)
    _add_status(sub)
    _add_demo(sub)
