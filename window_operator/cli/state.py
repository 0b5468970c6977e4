"""The commands on a job's local state: ``restore`` (from the changelog) and ``inspect``."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import TYPE_CHECKING

from window_operator.cli.common import (
    EXIT_CONFIG,
    CliError,
    add_bootstrap_option,
    add_config_option,
    add_state_dir_option,
    parse_time,
    task_settings,
)
from window_operator.config import JoinJobConfig
from window_operator.kafka_admin import KafkaAdmin

if TYPE_CHECKING:
    from window_operator.cli.common import Subparsers
    from window_operator.eventkey import KeyFormat
    from window_operator.runtime.settings import TaskSettings

__all__ = ["RESTORE_LOCK_WAIT_S", "add_parsers"]

#: How long ``restore`` waits for a task store another process has open (a worker of a
#: killed job lets go of it within seconds; a running job does not).
RESTORE_LOCK_WAIT_S = 10.0


def _cmd_restore(args: argparse.Namespace) -> int:
    from stores.rocks import StoreLockedError
    from window_operator.observe.progress import RestoreBar
    from window_operator.runtime.commit import TaskState

    settings = task_settings(args, user_code=False)  # it replays bytes: no operation runs
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
            state = TaskState.open(settings, task, progress=bar, lock_wait_s=RESTORE_LOCK_WAIT_S)
        except StoreLockedError:
            raise CliError(
                f"task {task}: its store {settings.task_path(task)} is open in another "
                "process (is the job running? It keeps its stores caught up itself): stop "
                "the job before restoring",
                EXIT_CONFIG,
            ) from None
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
    from window_operator.runtime.settings import task_state_dir

    settings = task_settings(args, with_kafka=False)
    start = parse_time(args.start, -(2**62))
    end = parse_time(args.end, 2**62)
    if start >= end:
        raise CliError(f"--from ({args.start}) must be before --to ({args.end})", EXIT_CONFIG)
    root = task_state_dir(settings.state_dir_path, settings.config.job, 0).parent
    tasks = (
        sorted(int(p.name.removeprefix("task-")) for p in root.glob("task-*") if p.is_dir())
        if root.exists()
        else []
    )
    if not tasks:
        raise CliError(f"no local state under {root}: run the job or `window-operator restore`")
    key, hint = _group_key(settings.config, args.key)
    found = 0
    for task in tasks:
        for line in _inspect_task(settings, task, key, start, end):
            found += 1
            sys.stdout.buffer.write(_inspect_json(line) + b"\n")
    if not found:
        print(f"no stored state for key {key!r} in that range{hint}", file=sys.stderr)
    return 0


def _group_key(config: object, given: str) -> tuple[str, str]:
    """The job's text of the key ``given`` (a job keyed by several fields takes a JSON
    array, written as the job writes it: ``'["US", 2024]'`` is ``["US","2024"]``), and a
    hint for a miss."""
    import orjson

    from window_operator.config import JobConfig
    from window_operator.events import RecordDecoder

    if isinstance(config, JoinJobConfig):
        on = config.join.on
        if not on:
            return given, " (a join without on fields keeps every message under the key [])"
        if len(on) == 1:
            return given, f" (a key of {on[0]} is its value as JSON, such as 5 or '\"a\"')"
        return given, f" (a key of {', '.join(on)} is a JSON array, such as {_example(on)})"
    if not isinstance(config, JobConfig):
        return given, ""
    if config.input.kafka_key and config.input.key_format != "string":
        return _kafka_key(given, config.input.key_format)
    fields = config.input.key_fields
    if not fields:  # one global key, or a text Kafka record key: the text as it is
        return given, ""
    if len(fields) == 1:
        return given, _number_hint(given, fields[0])
    hint = f" (a key of {', '.join(fields)} is a JSON array, such as {_example(fields)})"
    try:
        values = orjson.loads(given)
    except orjson.JSONDecodeError:
        return given, hint
    if not isinstance(values, list) or len(values) != len(fields):
        return given, hint
    decoder = RecordDecoder(key_field=fields, timestamp_field=None)
    return decoder.key_or_none(dict(zip(fields, values, strict=True))) or given, hint


def _kafka_key(given: str, key_format: KeyFormat) -> tuple[str, str]:
    """The text of the Kafka record key ``given`` in ``key_format`` (``long`` and
    ``int``: an integer, ``+1`` and ``01`` are ``1``; ``bytes``: hexadecimal text in
    either case), and a hint for a miss."""
    from window_operator.eventkey import kafka_key_text
    from window_operator.rejections import RecordRejected

    value: object = given
    if key_format != "bytes":
        with contextlib.suppress(ValueError):
            value = int(given)
    try:
        return kafka_key_text(value, 1 << 20, key_format), ""
    except RecordRejected as rej:
        return given, f" ({rej.reason})"


def _number_hint(given: str, field: str) -> str:
    """A hint for a missed key that the job would write otherwise as a number or a
    boolean (``1e3`` is the key ``1000.0``, ``true`` the key ``true``)."""
    import orjson

    from window_operator.events import RecordDecoder

    try:
        value = orjson.loads(given)
    except orjson.JSONDecodeError:
        return ""
    if not isinstance(value, int | float | bool):
        return ""
    decoder = RecordDecoder(key_field=field, timestamp_field=None)
    text = decoder.key_or_none({field: value})
    if text is None or text == given:
        return ""
    return f" (the number {given} in the input is the key {text!r}: --key {text})"


def _example(fields: tuple[str, ...]) -> str:
    import orjson

    return "'" + orjson.dumps([f"<{f}>" for f in fields]).decode() + "'"


def _inspect_json(line: dict[str, object]) -> bytes:
    """One line of ``inspect``, written as results are (:func:`dumps_json`); a value
    whose ``finish`` raised shows as ``{"error": reason}``, one with no JSON form as
    ``{"error": "no JSON form: set"}``."""
    from window_operator.codecs.result_json import dumps_json

    try:
        return dumps_json(line)
    except TypeError:
        values = line.get("values")
        if not isinstance(values, dict):
            raise
        return dumps_json({**line, "values": {n: _shown(v) for n, v in values.items()}})


def _shown(value: object) -> object:
    """A stored window's value as ``inspect`` shows it."""
    from window_operator.codecs.result_json import dumps_json
    from window_operator.results import FailedValue

    if isinstance(value, FailedValue):
        return {"error": value.reason}
    try:
        dumps_json(value)
    except TypeError:
        return {"error": f"no JSON form: {type(value).__name__}"}
    return value


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
            **({} if w.partition is None else {"partition": w.partition}),
            "fired": w.fired,
            "values": w.values,
        }
        for w in stored_windows(settings, task, key, start, end)
    ]


def _add_state_commands(sub: Subparsers) -> None:
    rst = sub.add_parser("restore", help="rebuild local task stores from the changelog")
    add_config_option(rst)
    rst.add_argument("--task", type=int, help="only this state task (0 .. tasks - 1)")
    add_bootstrap_option(rst)
    add_state_dir_option(rst)
    rst.set_defaults(func=_cmd_restore)

    ins = sub.add_parser("inspect", help="print the stored windows of a key")
    add_config_option(ins)
    ins.add_argument("--key", required=True, help="the key to look up")
    ins.add_argument("--from", dest="start", help="window range start (ms or ISO-8601)")
    ins.add_argument("--to", dest="end", help="window range end (ms or ISO-8601)")
    add_state_dir_option(ins)
    ins.set_defaults(func=_cmd_inspect)


def add_parsers(sub: Subparsers) -> None:
    """``restore`` and ``inspect``."""
    _add_state_commands(sub)
