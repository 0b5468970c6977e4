"""What the sub-commands share: user-facing errors and exit codes, the options several
take, the broker address, times on the command line, loading a job, the input file."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from window_operator.config import (
    JobConfig,
    JoinJobConfig,
    load_any_config,
    load_config,
)
from window_operator.errors import WindowOperatorError
from window_operator.job import JobRuntime, build_runtime, check_operations
from window_operator.join import JoinRuntime, build_join_runtime
from window_operator.observe.progress import progress_bar
from window_operator.observe.redact import RedactingFilter, secret_values

if TYPE_CHECKING:
    from tqdm import tqdm

    from window_operator.runtime.settings import TaskSettings

    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]

__all__ = [
    "EXIT_CONFIG",
    "EXIT_FAILED",
    "EXIT_INPUT",
    "EXIT_UNHEALTHY",
    "CliError",
    "add_bootstrap_option",
    "add_config_option",
    "add_no_meta_option",
    "add_state_dir_option",
    "bootstrap_servers",
    "check_no_meta",
    "file_progress",
    "input_file",
    "load_checked_config",
    "load_runtime",
    "load_simulation_runtime",
    "non_negative_int",
    "warn_ignored",
    "parse_time",
    "port_number",
    "positive_int",
    "seconds",
    "task_settings",
]

#: A bad config or a setup the job cannot start with (no broker, a missing topic).
EXIT_CONFIG = 2
EXIT_INPUT = 3
#: ``status``: the job is behind, stalled, or never ran.
EXIT_UNHEALTHY = 1
#: The job stopped on an error while it ran (a failed query, failing workers, a
#: user-defined operation calling sys.exit).
EXIT_FAILED = 1


class CliError(WindowOperatorError):
    """A user-facing error: printed without a traceback."""

    def __init__(self, message: str, code: int = EXIT_INPUT) -> None:
        super().__init__(message)
        self.code = code


def _number(text: str, parse: type[int] | type[float], what: str) -> float:
    """``text`` as ``parse`` reads it; argparse reports a failure as a usage error."""
    try:
        return parse(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(_number(text, int, "an integer"))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    value = int(_number(text, int, "an integer"))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    value = int(_number(text, int, "a port number"))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 0 to 65535, got {value}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds >= 0."""
    value = _number(text, float, "a number of seconds")
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_number(text: str) -> float:
    """An argparse type: a finite number > 0."""
    value = _number(text, float, "a number")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def add_config_option(parser: argparse.ArgumentParser) -> None:
    """``--config``, the job file (required)."""
    parser.add_argument("--config", required=True, help="job YAML file")


def add_bootstrap_option(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap-servers`` (see :func:`bootstrap_servers`)."""
    parser.add_argument(
        "--bootstrap-servers", help="Kafka brokers (default: KAFKA_BOOTSTRAP_SERVERS)"
    )


def add_no_meta_option(parser: argparse.ArgumentParser) -> None:
    """``--no-meta`` of ``simulate`` and ``produce``: every field of a line is the event's."""
    parser.add_argument(
        "--no-meta",
        action="store_true",
        help="the lines' partition, offset, wall_ms and kafka_key fields are the events' "
        "own, not where the lines stand (every line of partition 0 at the next offset, "
        "arriving at its event time, without a Kafka key; produce routes it by its key)",
    )


def check_no_meta(config: JobConfig | JoinJobConfig, command: str) -> None:
    """Refuse ``--no-meta`` for a job that reads its event time or key from the Kafka
    record: without the lines' ``wall_ms`` and ``kafka_key`` no line would carry them,
    and every one would be rejected (``simulate``) or skipped or written without a key
    (``produce``)."""
    reads = [
        f"{where}.timestamp_from: kafka (a line's wall_ms)"
        for where, section in config.input_models()
        if section.timestamp_from == "kafka"
    ]
    if isinstance(config, JobConfig) and config.input.key_from == "kafka":
        reads.append("input.key_from: kafka (a line's kafka_key)")
    if reads:
        raise CliError(
            f"{command} --no-meta reads no line's wall_ms or kafka_key, and this job "
            f"takes {' and '.join(reads)}: no line would carry them. Run without "
            "--no-meta (if your events have fields of those names, rename them)",
            EXIT_CONFIG,
        )


def add_state_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--state-dir``, where a job's RocksDB state is (see :func:`task_settings`)."""
    parser.add_argument("--state-dir", help="RocksDB state directory (default: state.dir)")


def load_runtime(path: str) -> JobRuntime:
    """The runtime of the aggregation job configured at ``path``."""
    config = load_config(path)
    return build_runtime(config, source=path)


def load_simulation_runtime(path: str) -> JobRuntime | JoinRuntime:
    """The runtime of an aggregation job, or of a join job (a config with ``join:``)."""
    config = load_any_config(path)
    if isinstance(config, JoinJobConfig):
        return build_join_runtime(config, source=path)
    return build_runtime(config, source=path)


def load_checked_config(path: str | Path, *, user_code: bool = True) -> JobConfig | JoinJobConfig:
    """The job configured at ``path``, with what only building it checks (an unknown
    ``op``, a user-defined operation that does not import): every command refuses the
    configs that ``simulate`` and ``run`` refuse, with the same message. Without
    ``user_code`` (commands that run no operation) user-defined operations are not
    imported, so a host without the job's own packages can run those commands."""
    if user_code:
        return load_simulation_runtime(str(path)).config
    config = load_any_config(path)
    if isinstance(config, JoinJobConfig):
        build_join_runtime(config, source=str(path))
    else:
        check_operations(config, source=str(path))
    return config


def warn_ignored(config: JobConfig | JoinJobConfig, path: str | Path) -> None:
    """A warning line on stderr for each setting of the file that does not apply, and
    for each aggregation a user Avro output schema leaves unwritten."""
    for reason in config.ignored_settings():
        print(f"window-operator: warning: {path}: {reason}; it is ignored", file=sys.stderr)
    for setting, name in _dotted_fields(config):
        print(
            f"window-operator: warning: {path}: {setting} names the field {name!r}: a "
            "top-level field of that name (a dot does not reach into nested objects)",
            file=sys.stderr,
        )
    if isinstance(config, JobConfig) and config.output.avro_schema is not None:
        from window_operator.codecs.result_schema import unwritten_values  # Avro: imported

        for reason in unwritten_values(config):
            print(f"window-operator: warning: {path}: {reason}", file=sys.stderr)


def named_fields(config: JobConfig | JoinJobConfig) -> list[tuple[str, str]]:
    """``(setting, field)`` of every record field the config names."""
    named: list[tuple[str, str | None]] = []
    if isinstance(config, JobConfig):
        named += [("input.key", f) for f in config.input.key_fields]
        named.append(("input.timestamp", config.input.timestamp))
        named += [(f"aggregations.{i}.field", a.field) for i, a in enumerate(config.aggregations)]
    else:
        named += [("join.on", f) for f in config.join.on]
        for side in (config.join.left, config.join.right):
            named.append((f"{side.section}.timestamp", side.timestamp))
            named += [(f"{side.section}.fields", f) for f in side.fields or ()]
    return [(setting, name) for setting, name in named if name is not None]


def _dotted_fields(config: JobConfig | JoinJobConfig) -> list[tuple[str, str]]:
    """The settings that name a record field with a dot in it (a nested path, meant?)."""
    return [(setting, name) for setting, name in named_fields(config) if "." in name]


def bootstrap_servers(args: argparse.Namespace, config: JobConfig | JoinJobConfig | None) -> str:
    """The brokers: ``--bootstrap-servers``, the config's, or ``KAFKA_BOOTSTRAP_SERVERS``.

    Every command that talks to Kafka passes here, so the config's secrets are added to
    the log redaction here too.
    """
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


def parse_time(text: str | None, default: int) -> int:
    """A time given as epoch milliseconds or ISO-8601 (``default`` when not given); one
    without a zone is UTC, as the log and ``status`` print times."""
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        pass
    from datetime import UTC, datetime

    try:
        dt = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"{text!r} is neither epoch milliseconds nor an ISO-8601 time") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return int(dt.timestamp() * 1000)


def task_settings(
    args: argparse.Namespace, with_kafka: bool = True, *, user_code: bool = True
) -> TaskSettings:
    """The task settings of ``--config`` (with ``--state-dir`` and the brokers; see
    :func:`load_checked_config` for ``user_code``)."""
    from window_operator.runtime.settings import TaskSettings

    config = load_checked_config(args.config, user_code=user_code)
    return TaskSettings(
        config=config,
        bootstrap_servers=bootstrap_servers(args, config) if with_kafka else "",
        state_dir=str(args.state_dir or config.state.dir),
    )


def input_file(path: str) -> Path:
    """``--input``, which must be a readable file (or a device or pipe to read)."""
    input_path = Path(path)
    if not input_path.exists():
        raise CliError(f"input file {input_path} does not exist")
    if input_path.is_dir():
        raise CliError(f"input {input_path} is a directory, not a file of JSON lines")
    return input_path


def file_progress(path: Path, desc: str) -> tqdm[Any] | None:
    """A bar of the bytes of ``path`` read (none for a pipe or device: no size, no
    position)."""
    return progress_bar(total=path.stat().st_size, desc=desc, unit="B") if path.is_file() else None
