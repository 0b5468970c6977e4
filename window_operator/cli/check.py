"""``check``: a job file checked as ``run`` checks it, without Kafka or Spark (the shape
of its state compared with the one an earlier run kept), and what the job will do in a
few lines."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from stores.changelog import changelog_topic
from window_operator.cli.common import add_config_option, load_checked_config, warn_ignored
from window_operator.config import JobConfig, JoinInputConfig, JoinJobConfig
from window_operator.durations import format_duration_ms
from window_operator.runtime.kept_shape import check_kept_shape, state_shape
from window_operator.runtime.settings import TaskSettings

if TYPE_CHECKING:
    from window_operator.cli.common import Subparsers

__all__ = ["add_parsers", "describe"]


def describe(config: JobConfig | JoinJobConfig, out: TextIO) -> None:
    """What the job reads, computes and writes, one line a part."""
    lines = [f"job {config.job}: valid"]
    if isinstance(config, JoinJobConfig):
        join = config.join
        lines += [
            f"  reads      {_side(join.left)}, {_side(join.right)}",
            f"  joins      {join.kind} on {', '.join(join.on) or '(every pair: a cross join)'}"
            f", {_condition(config)}",
        ]
    else:
        inp = config.input
        key = inp.key if isinstance(inp.key, str) else f"[{', '.join(inp.key)}]" if inp.key else ""
        lines += [
            f"  reads      {inp.topic} ({inp.format}), key {_key(config, key)}, event time "
            f"{_event_time(config)}",
            f"  windows    {_window(config)}",
            "  computes   "
            + ", ".join(
                f"{a.name} = {a.op}({a.field or ''})".replace("()", "") for a in config.aggregations
            ),
            f"  emits      {_emits(config)}",
        ]
        if not config.by_arrival:
            lines.append(
                f"  lateness   {format_duration_ms(config.watermark.allowed_lateness)}, "
                f"retention {format_duration_ms(config.retention.time)}"
            )
    lines += [
        f"  writes     results to {config.output.topic} ({_output_format(config)}), errors to "
        f"{config.output.errors_topic}, state changelog to {changelog_topic(config.job)}",
        f"  runs       {config.spark.mode} on Spark, {config.processing.guarantee}, state in "
        f"{config.state.dir}/{config.job} ({_tasks(config)})",
    ]
    print("\n".join(lines), file=out)


def _side(side: JoinInputConfig) -> str:
    time = (
        "the Kafka record timestamp"
        if side.timestamp_from == "kafka"
        else f"{side.timestamp} ({side.timestamp_unit})"
    )
    return f"{side.name} <- {side.topic_name} ({side.format}, event time {time})"


def _emits(config: JobConfig) -> str:
    """When results are sent: at the watermark, early, late."""
    early, late = config.emit.early, config.emit.late
    parts = ["a window when it closes"]
    if early is not None:
        parts.append(f"EARLY results every {format_duration_ms(early)} while it is open")
    if not config.by_arrival:
        if late.mode == "period":
            parts.append(f"LATE updates at most every {format_duration_ms(late.period_ms)}")
        elif late.mode == "per_arrival":
            parts.append("a LATE update per late event")
        else:
            parts.append("no LATE updates")
    return ", ".join(parts)


def _key(config: JobConfig, fields: str) -> str:
    if config.input.key_from == "kafka":
        return f"the Kafka record key ({config.input.key_format})"
    return fields or '"" (one global key)'


def _event_time(config: JobConfig) -> str:
    inp = config.input
    if inp.timestamp_from == "kafka":
        return "the Kafka record timestamp"
    return f"{inp.timestamp} ({inp.timestamp_unit})"


def _window(config: JobConfig) -> str:
    w = config.window.model_dump()
    shape = str(w.pop("type"))
    parts = [
        f"{name} {format_duration_ms(v) if shape not in ('count', 'offsets') else v}"
        for name, v in w.items()
        if v is not None and name != "max_idle_messages"
    ]
    if w.get("max_idle_messages") is not None:
        parts.append(f"ends after {w['max_idle_messages']} other messages")
    return " ".join([shape, *parts])


def _condition(config: JoinJobConfig) -> str:
    join = config.join
    if join.range is not None:
        return f"0 <= right.ts - left.ts <= {format_duration_ms(join.range)}"
    if join.between is not None:
        lo, hi = join.between
        return f"{_signed(lo)} <= right.ts - left.ts <= {_signed(hi)}"
    return f"ROWS {join.rows} PRECEDING (the {join.rows} latest {join.left.name} rows of the key)"


def _signed(ms: int) -> str:
    return ("-" if ms < 0 else "+") + format_duration_ms(abs(ms))


def _output_format(config: JobConfig | JoinJobConfig) -> str:
    if isinstance(config, JobConfig) and config.output.format == "avro":
        own = config.output.avro_schema
        return f"avro, schema {own}" if own is not None else "avro, derived schema"
    return "json"


def _tasks(config: JobConfig | JoinJobConfig) -> str:
    tasks = config.state.tasks
    return f"{tasks} state tasks" if tasks else "one state task per input partition"


def _cmd_check(args: argparse.Namespace) -> int:
    """Check the job file as ``run`` does (user operations imported, Avro schemas read,
    the shape of the state an earlier run kept compared)."""
    config = load_checked_config(args.config)
    warn_ignored(config, args.config)
    settings = TaskSettings(config, "", str(config.state.dir))
    check_kept_shape(Path(str(config.spark.checkpoint_dir)), config.job, state_shape(settings))
    describe(config, sys.stdout)
    return 0


def add_parsers(sub: Subparsers) -> None:
    """``check``."""
    chk = sub.add_parser(
        "check",
        help="check a job file as run does, without Kafka or Spark, and say what it will do",
    )
    add_config_option(chk)
    chk.set_defaults(func=_cmd_check)
