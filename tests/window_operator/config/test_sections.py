"""The optional sections: defaults, derived names, durations in ms, emit and spark forms."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from configkit import ROOT, minimal, problem_lines, write

from window_operator.config import EmitConfig, LateEmit, load_config, parse_config


def test_defaults_are_as_documented() -> None:
    cfg = parse_config(minimal(), base_dir=ROOT)
    assert cfg.input.topic == "j-input"
    assert cfg.input.format == "json"
    assert cfg.input.avro_schema is None
    assert cfg.input.avro_wire == "schemaless"
    assert cfg.input.key is None
    assert cfg.input.timestamp_unit == "ms"
    assert cfg.input.fields is None
    assert cfg.aggregations[0].field is None
    assert cfg.aggregations[0].params == {}
    assert cfg.watermark.allowed_lateness == 0
    assert cfg.watermark.idle_timeout is None
    assert cfg.emit.early is None
    assert cfg.emit.late == LateEmit(mode="period", period_ms=10_000)
    assert cfg.retention.time == 3_600_000
    assert cfg.retention.size is None
    assert cfg.output.topic == "j-windows"
    assert cfg.output.format == "json"
    assert cfg.output.avro_schema is None
    assert cfg.output.errors_topic == "j-errors"
    assert cfg.output.max_record_bytes == 990_000
    assert cfg.state.dir == Path("./state")
    assert cfg.kafka.bootstrap_servers is None
    assert cfg.kafka.replication_factor is None  # the broker's default
    assert (cfg.kafka.consumer, cfg.kafka.producer) == ({}, {})
    assert cfg.spark.master is None
    assert (cfg.spark.mode, cfg.spark.long_running, cfg.spark.workers) == (
        "micro_batch",
        False,
        None,
    )
    assert cfg.spark.trigger == 5_000
    assert cfg.spark.max_offsets_per_trigger is None
    assert cfg.spark.checkpoint_dir == Path("state/j/spark-checkpoint")
    assert cfg.spark.conf == {}


def test_null_sections_take_defaults() -> None:
    doc = minimal()
    for section in ("watermark", "emit", "retention", "output", "state", "kafka", "spark"):
        doc[section] = None
    assert parse_config(doc, base_dir=ROOT) == parse_config(minimal(), base_dir=ROOT)


def test_checkpoint_dir_follows_state_dir_and_can_be_set() -> None:
    doc = minimal() | {"state": {"dir": "/var/lib/wo"}}
    assert parse_config(doc, base_dir=ROOT).spark.checkpoint_dir == Path(
        "/var/lib/wo/j/spark-checkpoint"
    )
    doc["spark"] = {"checkpoint_dir": "ckpt"}
    assert parse_config(doc, base_dir=ROOT).spark.checkpoint_dir == Path("ckpt")


def test_state_dir_is_not_resolved_against_the_yaml(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        job: j
        input: {timestamp: ts}
        window: {type: tumbling, size: 1m}
        aggregations: [{name: n, op: count}]
        state: {dir: data/state}
        """,
    )
    assert load_config(path).state.dir == Path("data/state")


def test_duration_fields_are_milliseconds_with_ms_properties() -> None:
    doc = minimal() | {
        "window": {"type": "hopping", "size": "1m", "step": "15s"},
        "watermark": {"allowed_lateness": "2s", "idle_timeout": "30s"},
        "emit": {"early": "5s", "late": "1m"},
        "retention": {"time": "2h", "size": 100},
        "spark": {"trigger": 2500},
    }
    cfg = parse_config(doc, base_dir=ROOT)
    assert (cfg.window.size, cfg.window.size_ms) == (60_000, 60_000)
    assert (cfg.window.step, cfg.window.step_ms) == (15_000, 15_000)
    assert cfg.watermark.allowed_lateness_ms == 2_000
    assert cfg.watermark.idle_timeout_ms == 30_000
    assert (cfg.emit.early, cfg.emit.early_ms) == (5_000, 5_000)
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms) == ("period", 60_000)
    assert (cfg.retention.time_ms, cfg.retention.size) == (7_200_000, 100)
    assert (cfg.spark.trigger_ms, cfg.spark.available_now) == (2_500, False)


@pytest.mark.parametrize(
    ("late", "mode", "period"),
    [
        ("10s", "period", 10_000),
        (250, "period", 250),
        ("per_arrival", "per_arrival", 0),
        ("off", "off", 0),
        (False, "off", 0),  # YAML 1.1 reads a bare `off` as false
        # the mapping form, as the README gives it: `{mode: off}` is {mode: false} in YAML
        ({"mode": False, "period_ms": 0}, "off", 0),
        ({"mode": "per_arrival"}, "per_arrival", 0),
        ({"mode": "period", "period_ms": 5000}, "period", 5_000),
    ],
)
def test_emit_late_forms(late: Any, mode: str, period: int) -> None:
    cfg = parse_config(minimal() | {"emit": {"late": late}}, base_dir=ROOT)
    assert (cfg.emit.late_mode, cfg.emit.late_period_ms) == (mode, period)


def test_bare_off_in_yaml_disables_early_and_late(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        job: j
        input: {timestamp: ts}
        window: {type: tumbling, size: 1m}
        aggregations: [{name: n, op: count}]
        watermark: {idle_timeout: off}
        emit:
          early: off
          late: off
        """,
    )
    cfg = load_config(path)
    assert cfg.emit == EmitConfig(early=None, late=LateEmit(mode="off", period_ms=0))
    assert cfg.watermark.idle_timeout is None


def test_spark_trigger_available_now_and_settings() -> None:
    doc = minimal() | {
        "spark": {"trigger": "available_now", "conf": {"a.b": 4, "c": True, "d": "x"}},
        "kafka": {
            "consumer": {"fetch.min.bytes": 1, "enable.auto.commit": False, "client.id": "y"}
        },
    }
    cfg = parse_config(doc, base_dir=ROOT)
    assert (cfg.spark.trigger, cfg.spark.trigger_ms, cfg.spark.available_now) == (
        "available_now",
        None,
        True,
    )
    assert cfg.spark.conf == {"a.b": "4", "c": "true", "d": "x"}
    assert cfg.kafka.consumer == {
        "fetch.min.bytes": 1, "enable.auto.commit": False, "client.id": "y"
    }  # fmt: skip


def test_librdkafka_settings_it_does_not_take_are_field_problems() -> None:
    """They made every task fail to create its clients until ``broker_timeout`` ran out,
    reported as a broker outage."""
    doc = minimal() | {
        "kafka": {
            "producer": {"bogus.setting": 1, "linger.ms": 5},
            "consumer": {"fetch.wait.max.ms": "abc", "ssl.ca.location": "/only/on/executors"},
        }
    }
    assert problem_lines(doc) == [
        "kafka.consumer: librdkafka does not take these settings: Invalid value for "
        'configuration property "fetch.wait.max.ms"',
        "kafka.producer: librdkafka does not take these settings: No such configuration "
        'property: "bogus.setting"',
    ]
    doc["kafka"] = {"producer": {"linger.ms": 5}, "consumer": {"ssl.ca.location": "/nope"}}
    assert parse_config(doc, base_dir=ROOT).kafka.producer == {"linger.ms": 5}


def test_spark_mode_long_running_and_its_workers() -> None:
    cfg = parse_config(minimal() | {"spark": {"mode": "long_running", "workers": 3}}, base_dir=ROOT)
    assert (cfg.spark.long_running, cfg.spark.workers) == (True, 3)
    lines = problem_lines(minimal() | {"spark": {"mode": "longrunning", "workers": 0}})
    assert lines == [
        "spark.mode: must be one of micro_batch, long_running (got 'longrunning')",
        "spark.workers: must be greater than 0 (got 0)",
    ]


def test_invalid_job_name_is_reported_once() -> None:
    # The derived topic names must not repeat the job name's problem.
    lines = problem_lines(minimal() | {"job": "my job"})
    assert len(lines) == 1
    assert lines[0].startswith("job: ")


@pytest.mark.parametrize(
    ("section", "path", "message"),
    [
        (
            {"retention": {"time": 2**53 + 1}},
            "retention.time",
            f"{2**53 + 1} is too long a duration (at most {2**53}ms)",
        ),
        (
            {"watermark": {"allowed_lateness": 2**64}},
            "watermark.allowed_lateness",
            f"{2**64} is too long a duration (at most {2**53}ms)",
        ),
        (
            {"emit": {"late": f"{2**63}ms"}},
            "emit.late",
            f"'{2**63}ms' is too long a duration (at most {2**53}ms); or per_arrival, or off",
        ),
        (
            {"processing": {"broker_timeout": "300000000000d"}},
            "processing.broker_timeout",
            f"'300000000000d' is too long a duration (at most {2**53}ms)",
        ),
        (
            {"retention": {"size": 2**63}},
            "retention.size",
            f"must be at most {2**53} (got {2**63})",
        ),
        (
            {"state": {"tasks": 10**100}},
            "state.tasks",
            f"must be at most {2**53} (got 10000000000000000000... (101 digits))",
        ),
        (
            {"spark": {"max_offsets_per_trigger": 10**5000}},
            "spark.max_offsets_per_trigger",
            f"must be at most {2**53} (got an integer of about 5000 digits)",
        ),
    ],
)
def test_durations_and_counts_of_the_sections_are_bounded(
    section: dict[str, Any], path: str, message: str
) -> None:
    assert problem_lines(minimal() | section) == [f"{path}: {message}"]


@pytest.mark.parametrize("port", [True, False])
def test_metrics_port_is_not_a_boolean(port: bool) -> None:
    assert problem_lines(minimal() | {"metrics": {"port": port}}) == [
        f"metrics.port: must be an integer (got {str(port).lower()})"
    ]


def test_a_job_writes_no_topic_it_reads_and_each_output_has_its_own() -> None:
    """Before, an error topic that was the input made a streaming job reject its own
    error records into its input, without end; results read back as input; error
    records mixed into the results."""
    doc = minimal() | {"output": {"topic": "j-input", "errors_topic": "j-input"}}
    assert problem_lines(doc) == [
        "output.topic: 'j-input' is the job's input (input.topic) too: it would read its own "
        "results again",
        "output.errors_topic: 'j-input' is the job's input (input.topic) too: it would read "
        "its own error records again",
    ]
    doc = minimal() | {"output": {"topic": "j-state-changelog"}}
    assert problem_lines(doc) == [
        "output.topic: 'j-state-changelog' is this job's changelog topic (its state's backup):"
        " write the results to another"
    ]
    doc = minimal() | {"input": {"timestamp": "ts", "topic": "j-state-changelog"}}
    assert problem_lines(doc) == [
        "input.topic: 'j-state-changelog' is this job's changelog topic: read another"
    ]
    doc = minimal() | {"output": {"topic": "out", "errors_topic": "out"}}
    assert problem_lines(doc) == [
        "output.errors_topic: must differ from output.topic ('out'): a reader of the results "
        "would take error records for results"
    ]
    # other jobs' topics are fine: a job may read another's results or errors
    doc = minimal() | {"input": {"timestamp": "ts", "topic": "k-windows"}}
    assert parse_config(doc, base_dir=ROOT).output.topic == "j-windows"


def test_client_settings_the_job_depends_on_take_only_its_values() -> None:
    """Before, ``isolation.level: read_uncommitted`` overrode the job's read_committed in
    its reads and restores (aborted records read as input and state), silently."""
    doc = minimal() | {
        "kafka": {
            "consumer": {"isolation.level": "read_uncommitted", "enable.partition.eof": False},
            "producer": {
                "acks": 1,
                "request.required.acks": 0,  # librdkafka's own name of acks
                "transactional.id": "mine",
                "linger.ms": 5,
            },
        }
    }
    assert problem_lines(doc) == [
        "kafka.consumer.isolation.level: is set by the job (it needs read_committed): leave it out",
        "kafka.consumer.enable.partition.eof: is set by the job (it needs true): leave it out",
        "kafka.producer.acks: is set by the job (it needs all or -1): leave it out",
        "kafka.producer.request.required.acks: is set by the job (it needs all or -1): leave "
        "it out",
        "kafka.producer.transactional.id: is set by the job (one per state task): leave it out",
    ]
    # the values the job sets anyway are fine (settings copied from elsewhere), in any
    # of librdkafka's spellings
    same = {
        "consumer": {"isolation.level": "read_committed", "enable.auto.commit": 0},
        "producer": {"acks": "all", "enable.idempotence": "t"},
    }
    assert parse_config(minimal() | {"kafka": same}, base_dir=ROOT).kafka.producer == {
        "acks": "all",
        "enable.idempotence": "t",
    }


def test_replication_factor_and_the_output_bound_are_checked() -> None:
    cfg = parse_config(
        minimal() | {"kafka": {"replication_factor": 3}, "output": {"max_record_bytes": 4096}},
        base_dir=ROOT,
    )
    assert (cfg.kafka.replication_factor, cfg.output.max_record_bytes) == (3, 4096)
    assert problem_lines(
        minimal() | {"kafka": {"replication_factor": 0}, "output": {"max_record_bytes": 100}}
    ) == [
        "kafka.replication_factor: must be at least 1 (got 0)",
        "output.max_record_bytes: must be at least 1024 (got 100)",
    ]
