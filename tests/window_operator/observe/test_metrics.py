"""JobMetrics folds batch reports into counters (no broker, no Spark)."""

from __future__ import annotations

import math

from helpers import runtime_for

from window_operator.kernel import ClockState, InputPosition
from window_operator.observe.metrics import JobMetrics
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.exchange import InputPartition, MapReport
from window_operator.runtime.report import TaskReport
from window_operator.spark.driver import BatchReport, JobRun
from window_operator.spark.longrun import WorkerRestart


def test_results_not_written_are_counted_apart_from_rejected_records() -> None:
    metrics = JobMetrics(runtime_for().config)
    task = TaskReport(0, 4, applied=10, rejected=1, result_errors=2)
    task.rejected_by_code = {"BAD_JSON": 1}
    ranges = [MapReport(InputPartition(0, "in", 0).span(0, 11), 11, None)]
    metrics(BatchReport(4, [task], ranges, ClockState(), 0.1))
    sample = metrics.registry.get_sample_value
    assert sample("window_operator_results_not_written_total", {"task": "0"}) == 2
    assert sample("window_operator_records_rejected_total", {"reason": "BAD_JSON"}) == 1
    assert sample("window_operator_records_rejected_total", {"reason": "RESULT_ERROR"}) is None


def test_event_time_gauges_only_move_forward() -> None:
    """A report whose clock trails an earlier one's (the drivers publish clocks that
    do not go back; the metrics do not rely on it): the job's watermark and a
    partition's max event time never go back."""
    metrics = JobMetrics(runtime_for().config)
    sample = metrics.registry.get_sample_value
    # none yet: NaN (before, 0: a watermark of 1970, and "batch 0 ran")
    for unset in ("watermark_ms", "last_batch_id", "last_batch_timestamp_seconds"):
        assert math.isnan(sample(f"window_operator_{unset}") or 0.0)
    p0 = InputPosition(0, 0)
    for wm, ts in [(5_000, 9_000), (3_000, 7_000), (6_000, 8_000)]:
        clock = ClockState(max_ts={p0: ts}, watermark=wm)
        metrics(BatchReport(-1, [TaskReport(0)], [], clock, 0.1))
    topic = runtime_for().config.input.topic
    assert sample("window_operator_watermark_ms") == 6_000
    labels = {"topic": topic, "partition": "0"}
    assert sample("window_operator_partition_max_event_time_ms", labels) == 9_000
    # a partition waiting unread is in the clock without an event time: no gauge
    p1 = InputPosition(0, 1)
    metrics(BatchReport(-1, [TaskReport(0)], [], ClockState(max_ts={p1: NO_WATERMARK}), 0.1))
    unread = {"topic": topic, "partition": "1"}
    assert sample("window_operator_partition_max_event_time_ms", unread) is None


def test_a_restarted_job_shows_its_last_batch_and_clock_before_a_batch_runs() -> None:
    metrics = JobMetrics(runtime_for().config)
    sample = metrics.registry.get_sample_value
    metrics.resume(None, ClockState())  # a first start: nothing yet
    assert math.isnan(sample("window_operator_last_batch_id") or 0.0)
    assert math.isnan(sample("window_operator_watermark_ms") or 0.0)
    assert math.isnan(sample("window_operator_last_batch_timestamp_seconds") or 0.0)
    clock = ClockState(max_ts={InputPosition(0, 0): 9_000}, watermark=4_000)
    metrics.resume(22, clock, 1_800_000_000_500)
    assert sample("window_operator_last_batch_id") == 22
    assert sample("window_operator_last_batch_timestamp_seconds") == 1_800_000_000.5
    assert sample("window_operator_watermark_ms") == 4_000
    labels = {"topic": runtime_for().config.input.topic, "partition": "0"}
    assert sample("window_operator_partition_max_event_time_ms", labels) == 9_000


def test_restarts_of_the_long_running_workers_are_counted_by_cause() -> None:
    metrics = JobMetrics(runtime_for().config)
    for cause in ("failure", "failure", "inputs_grew"):
        metrics.worker_restart(WorkerRestart(cause, "why", 1_000))
    sample = metrics.registry.get_sample_value
    assert sample("window_operator_worker_restarts_total", {"cause": "failure"}) == 2
    assert sample("window_operator_worker_restarts_total", {"cause": "inputs_grew"}) == 1


def test_a_join_task_reports_the_messages_each_input_holds() -> None:
    """``state_messages`` per task and input; a join tells no live keys or windows, so
    those gauges stay unset for its tasks."""
    metrics = JobMetrics(runtime_for().config)
    task = TaskReport(1, 0, held_messages={"orders": 12, "shipments": 0})
    metrics(BatchReport(0, [task], [], ClockState(), 0.1))
    sample = metrics.registry.get_sample_value
    held = "window_operator_state_messages"
    assert sample(held, {"task": "1", "input": "orders"}) == 12
    assert sample(held, {"task": "1", "input": "shipments"}) == 0
    assert sample("window_operator_state_keys", {"task": "1"}) is None


def test_a_range_both_inputs_of_a_self_join_report_is_read_once() -> None:
    metrics = JobMetrics(runtime_for().config)
    left, right = InputPartition(0, "in", 0), InputPartition(1, "in", 0)
    ranges = [MapReport(p.span(0, 5), 5, None) for p in (left, right)]
    ranges.append(MapReport(left.span(5, 7), 2, None))
    report = BatchReport(4, [TaskReport(0)], ranges, ClockState(), 0.1)
    metrics(report)
    labels = {"topic": "in", "partition": "0"}
    assert metrics.registry.get_sample_value("window_operator_records_read_total", labels) == 7
    run = JobRun()
    run.add(report)
    assert run.totals["records"] == 7


def test_a_pass_that_committed_nothing_adds_no_commit_phases() -> None:
    """An idle task's pass commits nothing (it changed nothing but the wall clock): it
    counts no commit, and its zeros do not pull the commit phases' latencies down."""
    metrics = JobMetrics(runtime_for().config)
    busy = TaskReport(0, 1, commits=1, seconds_outputs=0.2, seconds_local_commit=0.1)
    metrics(BatchReport(1, [busy], [], ClockState(), 0.1))
    metrics(BatchReport(-1, [TaskReport(0, -1)], [], ClockState(), 0.1))
    sample = metrics.registry.get_sample_value
    assert sample("window_operator_commits_total", {"task": "0"}) == 1
    for phase in ("outputs", "changelog", "commit"):
        assert sample("window_operator_phase_seconds_count", {"phase": phase}) == 1
    assert sample("window_operator_phase_seconds_count", {"phase": "operator"}) == 2


def test_series_are_listed_in_partition_and_task_order() -> None:
    """A worker's report brings its partitions (0, 2, 4 of the first worker, say) and
    tasks in the order they ran: the exposition listed them so (0, 2, 4, 1, 3)."""
    from prometheus_client import generate_latest

    metrics = JobMetrics(runtime_for().config)
    topic = runtime_for().config.input.topic
    parts = [InputPartition(0, topic, p) for p in (4, 0, 2)]
    clock = ClockState(max_ts={p.position: 1_000 + p.partition for p in parts}, watermark=0)
    tasks = [TaskReport(t) for t in (3, 1, 2)]
    metrics(BatchReport(0, tasks, [MapReport(p.span(0, 1), 1, 1_000) for p in parts], clock, 0.1))
    more = [InputPartition(0, topic, p) for p in (3, 1)]
    metrics(
        BatchReport(1, [TaskReport(0)], [MapReport(p.span(0, 1), 1, 1) for p in more], clock, 0.1)
    )
    text = generate_latest(metrics.registry).decode()

    def order(metric: str, label: str) -> list[str]:
        lines = [line for line in text.splitlines() if line.startswith(metric + "{")]
        return [line.split(f'{label}="')[1].split('"')[0] for line in lines]

    # each report's new partitions in order (those of a later report after them)
    assert order("window_operator_records_read_total", "partition") == ["0", "2", "4", "1", "3"]
    assert order("window_operator_partition_max_event_time_ms", "partition") == ["0", "2", "4"]
    assert order("window_operator_records_applied_total", "task") == ["1", "2", "3", "0"]
