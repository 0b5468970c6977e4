"""The ``window-operator`` command line.

Sub-commands: ``simulate`` (run a job config over a JSONL file). Configuration
mistakes are reported as a list of field problems on stderr with exit status 2, never
as a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from window_operator.config import ConfigError, load_config
from window_operator.job import JobRuntime, build_runtime

__all__ = ["main"]

EXIT_CONFIG = 2
EXIT_INPUT = 3


class CliError(Exception):
    """A user-facing error: printed without a traceback."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _load_runtime(path: str) -> JobRuntime:
    config = load_config(path)
    return build_runtime(config, source=path)


def _cmd_simulate(args: argparse.Namespace) -> int:
    from window_operator.simulate import simulate

    runtime = _load_runtime(args.config)
    input_path = Path(args.input)
    if not input_path.is_file():
        raise CliError(f"input file {input_path} does not exist")
    out: IO[bytes]
    errors_out: IO[bytes] | None = None
    out = open(args.output, "wb") if args.output else sys.stdout.buffer  # noqa: SIM115
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
        )
    finally:
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
        f"{summary.results} window results",
    ]
    print("simulate: " + ", ".join(parts), file=sys.stderr)
    if summary.errors:
        detail = ", ".join(f"{code}: {n}" for code, n in sorted(summary.errors.items()))
        where = f" (see {args.errors})" if args.errors else " (use --errors FILE for details)"
        print(f"simulate: rejected records by reason: {detail}{where}", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="window-operator",
        description="Stateful event-time window operators on RocksDB, over Kafka and Spark.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``window-operator`` console script."""
    args = _parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_CONFIG
    except CliError as exc:
        print(f"window-operator: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
