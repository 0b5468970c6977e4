"""The command line as a user runs it: a real subprocess, real files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from stores.changelog import changelog_topic
from window_operator.broker import free_port
from window_operator.kafka_admin import KafkaAdmin

ROOT = Path(__file__).resolve().parents[3]
#: Generous: a startup failure is reported in seconds (a bounded metadata request);
#: the bound only catches a return of the old minute-long waits.
STARTUP_FAILURE_S = 20.0


def cli(
    *args: str, cwd: Path = ROOT, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "window_operator", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


def simulate_files(
    tmp_path: Path, job_yaml: str, events: str | list[dict[str, object]], *extra: str
) -> subprocess.CompletedProcess[str]:
    """``simulate`` of a job file and an events file written from ``job_yaml`` and
    ``events`` (the file's text, or one JSON line per dict)."""
    job, path = tmp_path / "job.yaml", tmp_path / "e.jsonl"
    job.write_text(job_yaml)
    if isinstance(events, str):
        path.write_text(events)
    else:
        path.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in events))
    return cli("simulate", "--config", str(job), "--input", str(path), *extra)


def test_bad_config_names_the_field_and_exits_2_without_traceback(tmp_path: Path) -> None:
    proc = simulate_files(
        tmp_path,
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumblng, size: 10s}\n"
        "aggregations: [{name: n, op: cnt}]\n",
        '{"k": "a", "ts": 1}\n',
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "window.type" in proc.stderr and "tumbling" in proc.stderr and "hopping" in proc.stderr


def test_unknown_op_is_a_config_error_listing_the_builtins(tmp_path: Path) -> None:
    proc = simulate_files(
        tmp_path,
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: cnt}]\n",
        '{"k": "a", "ts": 1}\n',
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "aggregations.0.op" in proc.stderr and "count" in proc.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("run", "--bootstrap-servers", "127.0.0.1:1"),
        ("status", "--bootstrap-servers", "127.0.0.1:1"),
        ("restore", "--bootstrap-servers", "127.0.0.1:1"),
        ("inspect", "--key", "a"),
        ("demo",),
    ],
    ids=lambda c: c[0],
)
def test_every_command_refuses_an_operation_that_simulate_refuses(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """An unknown op is found only when the job is built: every command builds it
    before anything else, so each refuses the config as ``simulate`` does (naming the
    file and the field), before it asks a broker or starts one. Before, ``status`` and
    ``restore`` went on with such a config, ``inspect`` named no file and the demo
    started a broker and Spark, then printed two tracebacks."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts, topic: t}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: maxx, field: v}]\n"
        f"state: {{dir: {tmp_path / 'state'}}}\n"
    )
    (tmp_path / "state" / "x" / "task-0").mkdir(parents=True)  # inspect finds a task
    name, *options = command
    proc = cli(name, "--config", str(job), *options, env={"KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"invalid job config {job}:" in proc.stderr
    assert "aggregations.0.op: unknown aggregate op 'maxx'" in proc.stderr
    assert "broker" not in proc.stderr and "Spark" not in proc.stderr


@pytest.mark.parametrize("command", ["status", "restore"])
def test_commands_that_run_no_operation_do_not_import_user_code(
    tmp_path: Path, command: str
) -> None:
    """An operations host may lack the job's own packages: ``status`` and ``restore``
    check the built-in operations only, and go on to the broker (none answers here)."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts, topic: t}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: count}, {name: m, op: 'not_installed.ops:Mine'}]\n"
    )
    bootstrap = f"127.0.0.1:{free_port()}"
    proc = cli(command, "--config", str(job), "--bootstrap-servers", bootstrap)
    assert proc.returncode == 2, proc.stderr
    assert bootstrap in proc.stderr and "invalid job config" not in proc.stderr


KINDS = ("EARLY", "ON_TIME", "LATE")
AVRO_RESULT_MISFIT = {
    # the derived schema needs Avro names
    "aggregations: [{name: p95-latency, op: count}]\noutput: {format: avro}\n": (
        "output.format",
        "'p95-latency'",
    ),
    # a user schema whose types cannot hold the results (found before the first result)
    "aggregations: [{name: n, op: count}, {name: m, op: mean, field: v}]\n"
    "output: {format: avro, avro_schema: out.avsc}\n": (
        "output.avro_schema",
        "values.n cannot hold 0",
    ),
}


@pytest.mark.parametrize("aggregations_and_output", list(AVRO_RESULT_MISFIT))
def test_an_avro_output_that_cannot_hold_the_results_is_a_config_error(
    tmp_path: Path, aggregations_and_output: str
) -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "key", "type": "string"},
            {"name": "window_start", "type": "long"},
            {"name": "window_end", "type": "long"},
            {"name": "kind", "type": {"type": "enum", "name": "K", "symbols": list(KINDS)}},
            {"name": "update_seq", "type": "long"},
            {"name": "values", "type": {"type": "record", "name": "V", "fields": [
                {"name": "n", "type": "string"}, {"name": "m", "type": "double"},
            ]}},
        ],
    }  # fmt: skip
    (tmp_path / "out.avsc").write_bytes(orjson.dumps(schema))
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts}\nwindow: {type: tumbling, size: 10s}\n"
        + aggregations_and_output
    )
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1, "v": 1}\n')
    for command in (["simulate", "--input", str(events)], ["run"]):
        proc = cli(*command, "--config", str(job))
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        where, what = AVRO_RESULT_MISFIT[aggregations_and_output]
        assert f"  - {where}: " in proc.stderr and what in proc.stderr
    if "avro_schema" in aggregations_and_output:
        assert "values.m cannot hold null" in proc.stderr  # a mean of nothing is null


def test_a_join_with_avro_output_is_a_config_error(tmp_path: Path) -> None:
    proc = simulate_files(
        tmp_path,
        "job: j\njoin: {left: {name: l, timestamp: ts}, right: {name: r, timestamp: ts}, "
        "on: [id], range: 1m}\noutput: {format: avro}\n",
        '{"source": "l", "id": 1, "ts": 1}\n',
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "output.format: a join writes its results as JSON" in proc.stderr


def test_simulate_is_deterministic_and_reports_errors(tmp_path: Path) -> None:
    outs = []
    for i in range(2):
        out = tmp_path / f"out{i}.jsonl"
        errs = tmp_path / f"err{i}.jsonl"
        proc = cli(
            "simulate",
            "--config", "config/clicks.yaml",
            "--input", "config/samples/clicks.jsonl",
            "--output", str(out),
            "--errors", str(errs),
            "--batch-size", "25",
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    results = [orjson.loads(line) for line in outs[0].splitlines()]
    assert {r["kind"] for r in results} >= {"ON_TIME", "LATE"}
    first = results[0]
    assert set(first) == {"key", "window_start", "window_end", "kind", "update_seq", "values"}
    assert set(first["values"]) == {
        "clicks", "mean_latency_ms", "max_latency_ms", "p95_latency_ms"
    }  # fmt: skip
    errors = [orjson.loads(line) for line in errs.read_bytes().splitlines()]
    assert sorted(e["code"] for e in errors) == ["BAD_JSON", "BAD_TIMESTAMP", "MISSING_TIMESTAMP"]
    assert all(e["reason"] and e["offset"] is not None for e in errors)


def test_simulate_warns_when_every_record_is_rejected(tmp_path: Path) -> None:
    """A typo in a field name rejects every record as MISSING_FIELD: the run said only
    "0 applied" among its counts (on Kafka every record would go to the errors topic)."""
    job = job_file(tmp_path, "in")
    job.write_text(job.read_text().replace("{name: n, op: count}", "{name: n, op: sum, field: x}"))
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1, "y": 1}\n{"k": "b", "ts": 2, "y": 2}\n')
    proc = cli("simulate", "--config", str(job), "--input", str(events))
    assert proc.returncode == 0, proc.stderr
    assert "error records by code: MISSING_FIELD: 2" in proc.stderr
    assert "warning: every record was rejected: check the field names" in proc.stderr
    events.write_text('{"k": "a", "ts": 1, "x": 1}\n{"k": "b", "ts": 2}\n')
    proc = cli("simulate", "--config", str(job), "--input", str(events))
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    # no line is JSON (a compressed or UTF-16 file): the field names are not the point
    events.write_bytes('{"k": "a", "ts": 1}\n'.encode("utf-16"))
    proc = cli("simulate", "--config", str(job), "--input", str(events))
    assert "warning: every record was rejected: is the input a JSON Lines file" in proc.stderr


def test_simulate_reads_a_pipe_or_a_device(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    proc = cli("simulate", "--config", str(job), "--input", os.devnull)
    assert proc.returncode == 0 and "0 lines" in proc.stderr, proc.stderr
    piped = subprocess.run(
        [sys.executable, "-m", "window_operator", "simulate", "--config", str(job),
         "--input", "/dev/stdin"],
        input='{"k": "a", "ts": 1}\n', cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.returncode == 0, piped.stderr
    assert [orjson.loads(x)["values"] for x in piped.stdout.splitlines()] == [{"n": 1}]
    proc = cli("simulate", "--config", str(job), "--input", str(tmp_path))
    assert proc.returncode == 3 and "is a directory" in proc.stderr


def test_simulate_meta_fields_partitions_offsets_and_replays(tmp_path: Path) -> None:
    lines: list[dict[str, object]] = [
        {"k": "a", "ts": 1000, "partition": 0, "offset": 5},
        {"k": "a", "ts": 2000, "partition": 1, "offset": 0},
        {"k": "a", "ts": 3000, "partition": 0, "offset": 5},  # replay of offset 5
        {"k": "a", "ts": 4000, "partition": 0},  # offset 6
        {"k": "a", "ts": 15000, "partition": 1, "wall_ms": 99},
    ]
    out = tmp_path / "out.jsonl"
    proc = simulate_files(
        tmp_path,
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: count}]\n",
        lines,
        "--output",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    results = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {(r["window_start"], r["values"]["n"]) for r in results} == {(0, 3), (10000, 1)}
    assert "1 replayed" in proc.stderr


def test_simulate_of_offsets_windows_over_two_partitions_is_one_line(tmp_path: Path) -> None:
    """Offsets windows cover one partition (a task per partition on Spark): a file of two
    partitions is an input mistake, said in one line, not a traceback."""
    proc = simulate_files(
        tmp_path,
        "job: x\ninput: {key: k, timestamp: ts}\n"
        "window: {type: offsets, size: 2}\naggregations: [{name: n, op: count}]\n",
        [{"k": "a", "ts": 1, "partition": 0}, {"k": "a", "ts": 2, "partition": 1}],
    )
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "window-operator: offsets windows cover one input partition: this operator holds "
        "partition 0 and got records of partition 1. A job runs one state task per partition "
        "(state.tasks at least the input's partition count, fixed when the job first starts) "
        "(simulate the lines of one partition per run)"
    ]


# ---------------------------------------------------------------------------------------
# startup failures: exit 2 in seconds, one line naming the topic or the brokers


def test_inspect_answers_while_a_running_task_holds_its_store(tmp_path: Path) -> None:
    state = tmp_path / "state"
    built = cli(
        "simulate", "--config", "config/clicks.yaml", "--input", "config/samples/clicks.jsonl",
        "--state-dir", str(state), "--keep-open", "--output", str(tmp_path / "out.jsonl"),
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    inspect = ("inspect", "--config", "config/clicks.yaml", "--state-dir", str(state))
    alone = cli(*inspect, "--key", "/page/1")
    assert alone.returncode == 0, alone.stderr
    windows = [orjson.loads(line) for line in alone.stdout.splitlines()]
    assert windows and all(w["key"] == "/page/1" for w in windows)
    # a worker of a running job keeps its task store open (and locked) between epochs
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(state / "clicks" / "task-0")],
        cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        held = cli(*inspect, "--key", "/page/1")
        assert time.monotonic() - started < STARTUP_FAILURE_S  # no wait for the lock
    finally:
        holder.communicate("", timeout=30)
    assert held.returncode == 0, held.stderr
    assert held.stdout == alone.stdout


def test_a_user_finish_that_raises_is_an_error_record_and_shows_in_inspect(
    tmp_path: Path,
) -> None:
    """simulate writes the windows it can finish and exits 0; the window whose user
    ``finish`` raised is a RESULT_ERROR error line; inspect shows such values as the
    error, where it wrote a traceback before."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: udf\ninput: {key: k, timestamp: ts}\nwindow: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: s, op: 'udf_example:FinishFailsOverTenOp', field: v}]\n"
    )
    events = tmp_path / "e.jsonl"
    rows = [("a", 0, 1), ("b", 0, 20), ("a", 20_000, 1), ("b", 20_000, 30)]
    events.write_bytes(b"".join(orjson.dumps({"k": k, "ts": t, "v": v}) + b"\n"
                                for k, t, v in rows))  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "tests")}  # udf_example
    state, out, errors = tmp_path / "state", tmp_path / "out.jsonl", tmp_path / "err.jsonl"
    proc = cli(
        "simulate", "--config", str(job), "--input", str(events), "--keep-open",
        "--state-dir", str(state), "--output", str(out), "--errors", str(errors), env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "0 rejected, 1 window results, 1 not written (RESULT_ERROR)" in proc.stderr
    assert "error records by code: RESULT_ERROR: 1" in proc.stderr
    assert [orjson.loads(x)["key"] for x in out.read_bytes().splitlines()] == ["a"]
    (error,) = [orjson.loads(x) for x in errors.read_bytes().splitlines()]
    assert error["code"] == "RESULT_ERROR" and "a sum of 20.0 is over 10" in error["reason"]
    shown = cli("inspect", "--config", str(job), "--state-dir", str(state), "--key", "b", env=env)
    assert shown.returncode == 0, shown.stderr
    lines = [orjson.loads(x) for x in shown.stdout.splitlines()]
    assert {(w["window_start"], w["fired"]): w["values"]["s"] for w in lines} == {
        (0, True): {"error": "aggregation 's': finish raised ValueError: a sum of 20.0 is over 10"},
        (20_000, False): {
            "error": "aggregation 's': finish raised ValueError: a sum of 30.0 is over 10"
        },
    }


def test_sys_exit_in_a_user_operation_is_one_line_and_exit_status_1(tmp_path: Path) -> None:
    """A user ``combine`` calling ``sys.exit(3)`` while the windows fire: simulate fails
    with one line naming the call. Before, it exited with status 3 and no output at all."""
    job = tmp_path / "job.yaml"
    job.write_text(
        "job: udf\ninput: {key: k, timestamp: ts}\nwindow: {type: hopping, size: 10s, step: 5s}\n"
        "aggregations: [{name: s, op: 'udf_example:ExitingOp', field: v,"
        " params: {combine_exits: true}}]\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"".join(orjson.dumps({"k": "a", "ts": t, "v": 1}) + b"\n"
                                for t in (0, 1_000, 2_000)))  # fmt: skip
    env = {"PYTHONPATH": str(ROOT / "tests")}  # udf_example
    proc = cli("simulate", "--config", str(job), "--input", str(events), env=env)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("window-operator: a user-defined operation called sys.exit(3) in ")
    assert "udf_example.py, line " in line


#: Opens a task store (argv[1]) the way a running task does, and holds it until stdin ends.
HOLD_STORE = """
import sys
from stores.rocks import TaskStore
store = TaskStore(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
store.close()
"""


def job_file(tmp_path: Path, topic: str, job: str = "startup") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"job: {job}\ninput: {{topic: {topic}, key: k, timestamp: ts}}\n"
        "window: {type: tumbling, size: 10s}\n"
        "aggregations: [{name: n, op: count}]\n"
        f"state: {{dir: {tmp_path / 'state'}}}\n"
    )
    return path


def timed_cli(
    *args: str, env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.monotonic()
    proc = cli(*args, env=env)
    return time.monotonic() - start, proc


def assert_startup_failure(
    seconds: float, proc: subprocess.CompletedProcess[str], *names: str
) -> None:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr  # no librdkafka connection log either
    assert lines[0].startswith("window-operator: ")
    for name in names:
        assert name in lines[0]
    assert seconds < STARTUP_FAILURE_S


@pytest.mark.kafka
def test_run_against_a_missing_input_topic_exits_2_naming_it(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("missing")
    seconds, proc = timed_cli(
        "run", "--config", str(job_file(tmp_path, topic)), "--bootstrap-servers", kafka_bootstrap
    )
    assert_startup_failure(seconds, proc, repr(topic), kafka_bootstrap, "window-operator produce")


@pytest.mark.kafka
def test_run_with_a_master_spark_refuses_is_one_line(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """``local[0]``: the JVM refuses it under a screenful of Java stack. Before, that was
    a Python traceback and exit status 1 (only a master URL Spark does not know was one
    line)."""
    topic = unique_name("in")
    KafkaAdmin(kafka_bootstrap).create_topic(topic, 1)
    job = str(job_file(tmp_path, topic))
    proc = cli(
        "run", "--config", job, "--master", "local[0]", "--bootstrap-servers", kafka_bootstrap
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("window-operator: Spark did not start with master 'local[0]': ")
    assert "SparkException: " in last, last  # the JVM's reason, not py4j's wrapper line


@pytest.mark.parametrize(
    ("command", "where"),
    [("run", "refused"), ("produce", "refused"), ("restore", "refused"), ("status", "unresolved")],
)
def test_commands_against_an_unreachable_broker_exit_2_naming_it(
    tmp_path: Path, command: str, where: str
) -> None:
    """One line, also for a host name that does not resolve: librdkafka logged each of
    its attempts, about 100 lines before the one that counts."""
    # nothing listens there / no such host (.invalid never resolves, RFC 2606)
    bootstrap = f"127.0.0.1:{free_port()}" if where == "refused" else "nosuchhost.invalid:9092"
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n')
    extra = ["--input", str(events)] if command == "produce" else []
    seconds, proc = timed_cli(
        command, "--config", str(job_file(tmp_path, "in")), "--bootstrap-servers", bootstrap, *extra
    )
    assert_startup_failure(seconds, proc, bootstrap, "KAFKA_BOOTSTRAP_SERVERS")


def test_demo_against_an_unreachable_broker_exits_2_naming_it() -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    seconds, proc = timed_cli("demo", env={"KAFKA_BOOTSTRAP_SERVERS": bootstrap})
    assert_startup_failure(seconds, proc, bootstrap)


def test_no_broker_configured_exits_2(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}
    proc = subprocess.run(
        [sys.executable, "-m", "window_operator", "run", "--config", str(job_file(tmp_path, "in"))],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "KAFKA_BOOTSTRAP_SERVERS" in proc.stderr


@pytest.mark.kafka
def test_restore_without_a_changelog_exits_2_naming_it(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    job = unique_name("job")
    seconds, proc = timed_cli(
        "restore",
        "--config", str(job_file(tmp_path, "in", job=job)),
        "--bootstrap-servers", kafka_bootstrap,
    )  # fmt: skip
    assert_startup_failure(seconds, proc, repr(f"{job}-state-changelog"), "run the job first")


@pytest.mark.kafka
def test_restore_while_the_job_holds_its_store_is_one_line(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    job = unique_name("job")
    KafkaAdmin(kafka_bootstrap).create_topic(changelog_topic(job), 1)
    task_dir = tmp_path / "state" / job / "task-0"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(task_dir)],
        cwd=ROOT, stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        proc = cli(
            "restore",
            "--config", str(job_file(tmp_path, "in", job=job)),
            "--bootstrap-servers", kafka_bootstrap,
        )  # fmt: skip
    finally:
        holder.communicate("", timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("window-operator: task 0: ")
    assert str(task_dir) in line and "stop the job" in line


def test_argument_mistakes_are_one_line_before_anything_starts(tmp_path: Path) -> None:
    """No traceback, no broker contacted, no Spark: the line names the argument."""
    closed = f"127.0.0.1:{free_port()}"  # would take seconds to find unanswered
    job = str(job_file(tmp_path, "in"))
    missing = str(tmp_path / "nope.jsonl")
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n')
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()  # another process's server
        port = str(taken.getsockname()[1])
        cases = [
            (["produce", "--config", job, "--input", missing, "--bootstrap-servers", closed],
             3, "input file"),
            (["simulate", "--config", job, "--input", str(events), "--batch-size", "0"],
             2, "--batch-size: must be >= 1, got 0"),
            (["run", "--config", job, "--starting-offsets", "bogus", "--bootstrap-servers", closed],
             2, "--starting-offsets: startingOffsets must be 'earliest', 'latest' or JSON"),
            (["run", "--config", job, "--metrics-port", port, "--bootstrap-servers", closed],
             2, f"cannot serve metrics on 0.0.0.0:{port}"),
            (["run", "--config", job, "--metrics-port", "70000", "--bootstrap-servers", closed],
             2, "--metrics-port: must be a port from 0 to 65535, got 70000"),
            (["status", "--config", job, "--interval", "inf", "--bootstrap-servers", closed],
             2, "--interval: must be a finite number >= 0, got inf"),
            (["broker", "--port", "-1"], 2, "--port: must be a port from 0 to 65535, got -1"),
            # a traceback after Spark's start (a fresh-user walkthrough found it)
            (["demo", "--seconds", "-1", "--bootstrap-servers", closed],
             2, "--seconds: must be a finite number > 0, got -1"),
            (["demo", "--seconds", "0", "--bootstrap-servers", closed],  # a ZeroDivisionError
             2, "--seconds: must be a finite number > 0, got 0"),
            (["nexmark", "generate", "--events", "9", "--rate", "0", "--bootstrap-servers", closed],
             2, "--rate: must be a finite number > 0, got 0"),
            (["nexmark", "generate", "--events", "9", "--seed", "-1", "--bootstrap-servers",
              closed], 2, "--seed: must be >= 0, got -1"),  # NumPy's traceback
            # auctions expiring past 2^61 ms (NumPy warned, and wrote -9.2e15 .. 9e15)
            (["nexmark", "generate", "--events", "100", "--rate", "1e-12", "--base-time", "0",
              "--bootstrap-servers", closed],
             2, "window-operator: --rate 1e-12, --events 100, --base-time 0: the times of "
                "events 0 to 99 reach up to "),
            (["run", "--config", job, "--conf", "=x", "--bootstrap-servers", closed],
             2, "--conf expects key=value, got '=x'"),
            (["simulate", "--config", job, "--input", str(events), "--output", str(tmp_path)],
             3, f"window-operator: {tmp_path}: Is a directory"),
            (["simulate", "--config", job, "--input", str(events),
              "--errors", str(tmp_path / "no" / "e.jsonl")],
             3, f"window-operator: {tmp_path / 'no' / 'e.jsonl'}: No such file or directory"),
            (["simulate", "--config", job, "--input", str(events), "--state-dir", str(events)],
             3, "Not a directory"),
        ]  # fmt: skip
        # Spark cannot start here (no Java, no shell): a command that started it would
        # fail with another message (a time bound was flaky on a loaded machine)
        no_spark = {"JAVA_HOME": str(tmp_path / "no-java"), "PATH": str(tmp_path / "no-bin")}
        for args, code, message in cases:
            seconds, proc = timed_cli(*args, env=no_spark)
            assert proc.returncode == code, (args, proc.stderr)
            assert message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
            assert seconds < STARTUP_FAILURE_S, (args, seconds)


def test_simulate_never_writes_over_its_input(tmp_path: Path) -> None:
    """Nor over its config (the results replaced it: a user walkthrough found it)."""
    events = tmp_path / "e.jsonl"
    text = '{"k": "a", "ts": 1}\n'
    events.write_text(text)
    (tmp_path / "link.jsonl").symlink_to(events)
    job = str(job_file(tmp_path, "in"))
    config = Path(job).read_text()
    same = ["simulate", "--config", job, "--input", str(events)]
    for extra, message in [
        (["--output", str(events)], f"--output {events} is the file of --input"),
        (["--errors", job], f"--errors {job} is the file of --config"),
        (["--errors", str(tmp_path / "link.jsonl")], "is the file of --input"),
        (["--output", str(tmp_path / "o"), "--errors", f"{tmp_path}/./o"],
         "is the file of --output"),
    ]:  # fmt: skip
        proc = cli(*same, *extra)
        assert proc.returncode == 3 and message in proc.stderr, proc.stderr
        assert "Traceback" not in proc.stderr
        assert events.read_text() == text and Path(job).read_text() == config


def simulate_again(
    tmp_path: Path, lines: str, change: Callable[[Path], object]
) -> subprocess.CompletedProcess[str]:
    """``simulate --keep-open`` of ``lines`` on a fresh state, ``change`` (given the job
    file), then the same ``simulate`` on that state again: the second run."""
    events = tmp_path / "e.jsonl"
    events.write_text(lines)
    job = job_file(tmp_path, "in")
    again = ("simulate", "--config", str(job), "--input", str(events), "--keep-open",
             "--state-dir", str(tmp_path / "state"))  # fmt: skip
    first = cli(*again)
    assert first.returncode == 0, first.stderr
    change(job)
    return cli(*again)


def edit(old: str, new: str) -> Callable[[Path], object]:
    """A change of the job file: ``old`` replaced by ``new``."""
    return lambda job: job.write_text(job.read_text().replace(old, new))


def test_a_state_of_another_window_shape_is_one_line(tmp_path: Path) -> None:
    window = edit("{type: tumbling, size: 10s}", "{type: count, size: 2}")
    proc = simulate_again(tmp_path, '{"k": "a", "ts": 1}\n', window)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("window-operator: ") and "state" in line


@pytest.mark.parametrize(
    ("aggregations", "accepted"),
    [
        (("{name: n, op: count}", "{name: n, op: count}, {name: s, op: sum, field: v}"), False),
        (("{name: n, op: count}", "{name: s, op: sum, field: v}"), False),
        (("{name: n, op: count}", "{name: total, op: count}"), True),  # a new name only
    ],
    ids=["added", "changed", "renamed"],
)
def test_a_state_of_other_aggregations_is_one_line(
    tmp_path: Path, aggregations: tuple[str, str], accepted: bool
) -> None:
    """A job whose aggregations changed cannot continue the accumulators its state
    holds: one line, exit status 2. Before, it continued them (a sum went on from the
    stored mean's columns, a silently wrong figure) or failed with a traceback when the
    layout differed. A new name for the same operation keeps the same state."""
    lines = '{"k": "a", "ts": 1, "v": 10}\n{"k": "a", "ts": 2, "v": 20}\n'
    proc = simulate_again(tmp_path, lines, edit(*aggregations))
    if accepted:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("window-operator: ") and "aggregations" in line


def test_simulate_warns_of_settings_that_do_not_apply(tmp_path: Path) -> None:
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n{"k": "a", "ts": 2}\n')
    job = job_file(tmp_path, "in")
    job.write_text(
        job.read_text().replace("{type: tumbling, size: 10s}", "{type: count, size: 2}")
        + "emit: {late: off}\n"
    )
    proc = cli("simulate", "--config", str(job), "--input", str(events))
    assert proc.returncode == 0, proc.stderr
    assert f"window-operator: warning: {job}: emit.late does not apply to count windows" in (
        proc.stderr
    )
    assert proc.stdout.count("ON_TIME") == 1  # and the job ran


def test_a_state_that_does_not_decode_is_one_line(tmp_path: Path) -> None:
    """Damaged stored bytes: one line that says what to do, exit status 1 (it was a
    traceback)."""
    from stores.rocks import ColumnFamily, StoreBatch, TaskStore
    from window_operator.kernel import CHECKPOINT_KEY

    def damage(_: Path) -> None:
        with TaskStore(tmp_path / "state" / "startup" / "task-0") as store:
            damaged = StoreBatch()
            damaged.put(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY, b"{not json")
            store.commit(damaged)

    proc = simulate_again(tmp_path, '{"k": "a", "ts": 1}\n', damage)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("window-operator: the stored state does not decode (")
    assert "window-operator restore" in line


def test_status_without_a_broker_exits_2_even_for_a_job_that_never_ran(tmp_path: Path) -> None:
    bootstrap = f"127.0.0.1:{free_port()}"
    seconds, proc = timed_cli(
        "status", "--config", str(job_file(tmp_path, "in")), "--bootstrap-servers", bootstrap
    )
    assert_startup_failure(seconds, proc, bootstrap, "KAFKA_BOOTSTRAP_SERVERS")


def test_output_piped_to_a_reader_that_stops_early_ends_quietly(tmp_path: Path) -> None:
    """``simulate ... | head -1``: no BrokenPipeError traceback."""
    job = job_file(tmp_path, "in")
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"".join(b'{"k": "k%d", "ts": %d}\n' % (i, i) for i in range(20_000)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "simulate", "--config", str(job),
         "--input", str(events), "--batch-size", "1000"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b'{"key":')
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("target", ["--output", "--errors", "stdout"])
def test_an_output_with_no_room_left_is_one_line(tmp_path: Path, target: str) -> None:
    """A full disk (``/dev/full``) under the results, the errors or stdout: one line
    naming the cause, exit 3, no traceback."""
    args = ["simulate", "--config", "config/clicks.yaml", "--input", "config/samples/clicks.jsonl"]
    with open("/dev/full", "wb") as full:
        if target == "stdout":
            proc = subprocess.run(
                [sys.executable, "-m", "window_operator", *args],
                cwd=ROOT, stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
            )  # fmt: skip
        else:
            proc = cli(*args, target, "/dev/full")
    assert proc.returncode == 3, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "window-operator: cannot write the output (results or error records): "
        "No space left on device"
    )


@pytest.mark.kafka
@pytest.mark.parametrize("wire", ["schemaless", "confluent"])
def test_produce_writes_the_lines_of_an_avro_job_as_avro(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str], wire: str
) -> None:
    """The job reads what ``produce`` wrote; a line that does not fit the schema is
    produced as it is (the job rejects it as BAD_AVRO), and counted."""
    import io

    import fastavro
    from jobkit import read_topic

    schema = {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "k", "type": "string"}, {"name": "ts", "type": "long"}],
    }
    (tmp_path / "click.avsc").write_bytes(orjson.dumps(schema))
    topic = unique_name("avro-in")
    job = tmp_path / "job.yaml"
    job.write_text(
        f"job: {unique_name('job')}\n"
        f"input: {{topic: {topic}, key: k, timestamp: ts, format: avro, "
        f"avro_schema: click.avsc, avro_wire: {wire}}}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    events = tmp_path / "e.jsonl"
    events.write_text('{"k": "a", "ts": 1}\n{"k": "b", "ts": 2}\n{"k": "c", "ts": "late"}\n')
    proc = cli(
        "produce", "--config", str(job), "--input", str(events),
        "--bootstrap-servers", kafka_bootstrap,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "produced 3 records" in proc.stderr and "1 line did not fit" in proc.stderr
    got = read_topic(kafka_bootstrap, topic)
    assert sorted(m.key() for m in got) == [b"a", b"b", b"c"]
    parsed = fastavro.parse_schema(schema)
    header = b"\x00\x00\x00\x00\x00" if wire == "confluent" else b""
    values = {m.key(): m.value() for m in got}
    for key, ts in ((b"a", 1), (b"b", 2)):
        assert values[key].startswith(header)
        body = io.BytesIO(values[key][len(header) :])
        assert fastavro.schemaless_reader(body, parsed, None) == {"k": key.decode(), "ts": ts}
    assert values[b"c"] == b'{"k": "c", "ts": "late"}'


def test_produce_writes_a_line_to_the_partition_it_names(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    """As ``simulate`` reads the line; before, every line went to the partition of its
    key, so the job saw other partitions (and another watermark) than ``simulate``."""
    from jobkit import read_topic

    topic = unique_name("parts")
    job = tmp_path / "job.yaml"
    job.write_text(
        f"job: {unique_name('job')}\ninput: {{topic: {topic}, key: k, timestamp: ts}}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    lines = [{"k": "a", "ts": i, "partition": i % 3} for i in range(6)]
    lines.append({"k": "b", "ts": 9, "partition": 7})  # the topic has no partition 7
    events = tmp_path / "e.jsonl"
    events.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    proc = cli(
        "produce", "--config", str(job), "--input", str(events), "--partitions", "3",
        "--bootstrap-servers", kafka_bootstrap,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "produced 7 records" in proc.stderr
    assert "1 line named a partition their topic does not have" in proc.stderr
    got = {orjson.loads(m.value())["ts"]: m.partition() for m in read_topic(kafka_bootstrap, topic)}
    assert {ts: got[ts] for ts in range(6)} == {i: i % 3 for i in range(6)}
    assert got[9] in range(3)


def test_the_demo_of_a_join_config_says_it_runs_aggregations() -> None:
    """Before, a join config gave the aggregation model's problems (``join: unknown
    key``, ``input: required``)."""
    proc = cli("demo", "--config", "config/orders-shipments.yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "is a join: the demo streams clicks into an aggregation job" in proc.stderr


def test_the_demo_installed_without_the_source_tree_asks_for_a_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wheel holds the package, not ``config/``: the demo's default job is missing
    there (before: ``invalid job config .../site-packages/config/clicks.yaml``)."""
    import window_operator.demo
    from window_operator.cli import main

    monkeypatch.setattr(window_operator.demo, "DEFAULT_CONFIG", tmp_path / "clicks.yaml")
    assert main(["demo"]) == 2
    err = capsys.readouterr().err
    assert "config/clicks.yaml, comes with the project's source tree" in err
    assert "--config" in err


def test_the_demo_of_a_job_that_cannot_read_clicks_says_so_before_it_starts() -> None:
    """Before, it started a broker and Spark, streamed clicks the job rejected (302 of
    303 MISSING_TIMESTAMP) and ended with exit 1, never saying why."""
    proc = cli("demo", "--config", "config/orders-max.yaml")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        "window-operator: config/orders-max.yaml takes its event time from 'time' in ms, "
        "and the "
        'demo streams JSON clicks of {"page", "ts", "latency_ms"}: give it a job over '
        "clicks such as config/clicks.yaml (try `simulate` or `run` for this one)"
    )


def test_simulate_no_meta_reads_partition_offset_and_wall_ms_as_event_fields(
    tmp_path: Path,
) -> None:
    """Events with fields named ``offset``, ``partition`` or ``wall_ms`` of their own (a
    mirrored topic, a change-data-capture export) were read as the lines' positions:
    two lines of one offset silently replays, a partition name a WRONG_TYPE, where the
    job counts each record as it is (a deployment walkthrough)."""
    job = (
        "job: m\ninput: {topic: t, key: user, timestamp: ts}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    events: list[dict[str, object]] = [
        {"user": "a", "ts": 1, "offset": 1},
        {"user": "a", "ts": 2, "offset": 1},
        {"user": "b", "ts": 4, "partition": "eu-west-1"},
        {"user": "c", "ts": 5, "wall_ms": "late"},
    ]
    positions = simulate_files(tmp_path, job, events)
    assert positions.returncode == 0, positions.stderr
    counts = {r["key"]: r["values"]["n"] for r in map(orjson.loads, positions.stdout.splitlines())}
    assert counts == {"a": 1, "c": 1}
    assert "1 replayed, 1 rejected" in positions.stderr
    assert "if these are fields of your events, run with --no-meta" in positions.stderr
    plain = simulate_files(tmp_path, job, events, "--no-meta")
    assert plain.returncode == 0, plain.stderr
    counts = {r["key"]: r["values"]["n"] for r in map(orjson.loads, plain.stdout.splitlines())}
    assert counts == {"a": 2, "b": 1, "c": 1}
    assert "0 replayed, 0 rejected" in plain.stderr and "--no-meta" not in plain.stderr


def test_simulate_warns_of_a_job_field_named_as_a_line_field(tmp_path: Path) -> None:
    """A job keyed by ``partition`` with its time in ``wall_ms``: simulate read both as
    the lines' own, and every line was a MISSING_KEY "missing key field 'partition'",
    the field being right there (a walkthrough). It now says so at the start."""
    job = (
        "job: m\ninput: {topic: t, key: partition, timestamp: wall_ms}\n"
        "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n"
    )
    events: list[dict[str, object]] = [{"partition": 3, "wall_ms": 1}]
    proc = simulate_files(tmp_path, job, events)
    for setting, name in [("input.key", "partition"), ("input.timestamp", "wall_ms")]:
        assert (
            f"simulate: warning: {setting} names the field '{name}', which simulate reads as "
            "the line's own (where it stands, or when it came): if it is a field of your "
            "events, run with --no-meta"
        ) in proc.stderr
    plain = simulate_files(tmp_path, job, events, "--no-meta")
    assert plain.returncode == 0 and "warning" not in plain.stderr
    assert [orjson.loads(r)["key"] for r in plain.stdout.splitlines()] == ["3"]


@pytest.mark.parametrize(
    ("job", "names"),
    [
        (
            "job: m\ninput: {topic: t, key: user, timestamp_from: kafka}\n"
            "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n",
            ["input.timestamp_from: kafka (a line's wall_ms)"],
        ),
        (
            "job: m\ninput: {topic: t, key_from: kafka, timestamp: ts}\n"
            "window: {type: tumbling, size: 10s}\naggregations: [{name: n, op: count}]\n",
            ["input.key_from: kafka (a line's kafka_key)"],
        ),
        (
            "job: j\njoin:\n  left: {name: a, topic: a, timestamp: ts}\n"
            "  right: {name: b, topic: b, timestamp_from: kafka}\n"
            "  on: [id]\n  range: 1m\nretention: {time: 1h}\n",
            ["join.right.timestamp_from: kafka (a line's wall_ms)"],
        ),
    ],
)
@pytest.mark.parametrize("command", ["simulate", "produce"])
def test_no_meta_is_refused_for_a_job_that_reads_kafka_timestamps_or_keys(
    tmp_path: Path, job: str, names: list[str], command: str
) -> None:
    """Under ``--no-meta`` no line carries a ``wall_ms`` or ``kafka_key``: a job that
    takes its event time or key from the Kafka record would reject every line (simulate)
    or get none of them right (produce skips them, or writes them without a key), so the
    command refuses, naming the settings, before reading anything (a walkthrough: every
    line came out MISSING_TIMESTAMP with a reason about the line's wall_ms)."""
    (tmp_path / "job.yaml").write_text(job)
    (tmp_path / "e.jsonl").write_text('{"user": "a", "id": 1, "ts": 1}\n')
    extra = ["--bootstrap-servers", "127.0.0.1:1"] if command == "produce" else []
    proc = cli(
        command, "--config", str(tmp_path / "job.yaml"), "--input",
        str(tmp_path / "e.jsonl"), "--no-meta", *extra,
    )  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{command} --no-meta reads no line's wall_ms or kafka_key" in proc.stderr
    for name in names:
        assert f"this job takes {name}: no line would carry them" in proc.stderr
    assert proc.stdout == ""


def test_run_names_a_report_file_it_cannot_write_before_anything_starts(tmp_path: Path) -> None:
    """``--report`` into a missing directory failed after Spark had started (8 s),
    naming the path alone (a walkthrough)."""
    report = tmp_path / "missing" / "r.jsonl"
    proc = cli("run", "--config", "config/clicks.yaml", "--report", str(report),
               "--bootstrap-servers", "127.0.0.1:1")  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip() == (f"window-operator: --report {report}: No such file or directory")
