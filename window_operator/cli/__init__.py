"""The ``window-operator`` command line.

Sub-commands: ``simulate`` (a job config over a JSONL file), ``run`` (the Spark
streaming job), ``status`` (a job's progress and health) and ``demo`` (:mod:`.jobs`);
``produce`` (a JSONL file into a job's input topics, :mod:`.produce`); ``restore``
(rebuild local stores from the changelog) and ``inspect`` (print the stored windows of a
key) (:mod:`.state`); ``broker`` (a local Kafka-protocol broker) and ``nexmark
generate`` (:mod:`.tools`). Configuration mistakes are reported as
a list of field problems on stderr with exit status 2, never as a traceback; so are
startup failures (no broker configured or answering, a missing input or changelog
topic, a state of another job shape), each as one line, and a file that cannot be read
or written, or an output with no room left (exit status 3).
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Sequence

from stores.errors import StateCorruptError
from window_operator.broker import BrokerError
from window_operator.cli import check, jobs, produce, read, state, tools
from window_operator.cli.common import EXIT_CONFIG, EXIT_FAILED, EXIT_INPUT, CliError
from window_operator.config import ConfigError
from window_operator.errors import (
    IncompatibleStateError,
    JobSetupError,
    StartingOffsetsError,
    UserCodeExitError,
    UserOpError,
)
from window_operator.kafka_admin import KafkaAdminError
from window_operator.observe.logs import setup_logging
from window_operator.observe.metrics import MetricsPortError
from window_operator.spark.topics import TaskCountError, TransactionsUnsupportedError

__all__ = ["main"]


#: What keeps a job from starting, whatever its records: one line, exit status 2.
_STARTUP_FAILURES = (
    KafkaAdminError,
    BrokerError,
    TaskCountError,
    TransactionsUnsupportedError,
    MetricsPortError,
    IncompatibleStateError,
    JobSetupError,
    StartingOffsetsError,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="window-operator",
        description="Stateful event-time window operators on RocksDB, over Kafka and Spark.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check.add_parsers(sub)
    jobs.add_parsers(sub)
    produce.add_parsers(sub)
    read.add_parsers(sub)
    state.add_parsers(sub)
    tools.add_parsers(sub)
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
    except _STARTUP_FAILURES as exc:
        print(f"window-operator: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except (UserCodeExitError, UserOpError) as exc:
        print(f"window-operator: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except StateCorruptError as exc:
        print(
            f"window-operator: the stored state does not decode ({exc}): rebuild the "
            "store from its changelog (window-operator restore) or start from an empty "
            "state directory",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader of our output went away (``| head``): stop quietly, as cat does
        _quiet_stdout()
        return 141
    except OSError as exc:
        if exc.filename is not None:  # a file named on the command line or in the config
            print(f"window-operator: {exc.filename}: {exc.strerror}", file=sys.stderr)
            return EXIT_INPUT
        if exc.errno not in _FULL:
            raise
        # a write to an output stream (stdout, --output, --errors) found no room
        print(
            f"window-operator: cannot write the output (results or error records): {exc.strerror}",
            file=sys.stderr,
        )
        _quiet_stdout()  # its buffer would fail again at exit
        return EXIT_INPUT
    return code


#: The errors of a write that found no room (disk full, quota, file size limit).
_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _quiet_stdout() -> None:
    """Point stdout at /dev/null: what is left in its buffer goes nowhere at exit."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


if __name__ == "__main__":
    sys.exit(main())
