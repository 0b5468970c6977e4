"""The batch log line: what it says, and which reports it keeps at DEBUG."""

from __future__ import annotations

import logging

import pytest

from window_operator.kernel import ClockState
from window_operator.observe.logs import (
    BATCH_LOGGER,
    LOG_FORMAT,
    BatchLog,
    KafkaNoiseFilter,
    utc_formatter,
)
from window_operator.runtime.exchange import InputPartition, MapReport
from window_operator.runtime.report import TaskReport
from window_operator.spark.driver import BatchReport

PARTITION = InputPartition(0, "clicks", 0)


def report(batch_id: int, read: int = 0, **task: int) -> BatchReport:
    ranges = [MapReport(PARTITION.span(100, 100 + read), read, None)]
    return BatchReport(batch_id, [TaskReport(0, batch_id, **task)], ranges, ClockState(), 0.5)


@pytest.mark.parametrize(
    ("made", "level"),
    [
        (report(3, read=10, applied=10), logging.INFO),
        (report(3, rejected=1), logging.INFO),
        (report(3, replayed=4), logging.INFO),
        (report(3, restored_records=7), logging.INFO),
        (report(-1, results=2), logging.INFO),  # a timer pass that emitted
        (report(-1, result_errors=1), logging.INFO),  # one whose result was not written
        (report(3), logging.DEBUG),  # an epoch of a long-running worker that read nothing
        (report(-1), logging.DEBUG),  # a timer pass that emitted nothing
    ],
)
def test_reports_that_did_nothing_are_logged_at_debug(
    made: BatchReport, level: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger=BATCH_LOGGER)
    BatchLog()(made)
    (record,) = caplog.records
    assert record.levelno == level


def test_the_line_names_the_batch_and_its_counts() -> None:
    line = BatchLog().line(report(7, read=10, applied=9, rejected=1, late=2))
    assert line == (
        "batch 7, 10 read, 9 applied, 2 late, 1 rejected, 0 results, watermark -, 0.50 s"
    )


def test_a_self_join_range_counts_as_read_once() -> None:
    """Both inputs of a self-join report the one range they read (README, *Joins*: a
    record of the topic counts as read once, as ``records_read_total`` counts it)."""
    other_input = InputPartition(1, "clicks", 0)  # the right input, on the same topic
    ranges = [MapReport(PARTITION.span(100, 110), 10, None),
              MapReport(other_input.span(100, 110), 10, None)]  # fmt: skip
    made = BatchReport(7, [TaskReport(0, 7, applied=20)], ranges, ClockState(), 0.5)
    line = BatchLog().line(made)
    assert line.startswith("batch 7, 10 read, 20 applied, "), line


def test_a_lag_the_broker_did_not_answer_for_is_not_printed_as_this_batchs() -> None:
    """A batch that read the 30 waiting records while the broker stopped answering the
    lag request: its line said ``lag 30`` (the gauge's reading from before the batch)."""
    from helpers import runtime_for

    from window_operator.observe.lag import LagReading
    from window_operator.observe.metrics import JobMetrics

    class Lag:
        answers: list[list[LagReading] | None] = [[LagReading("clicks", 0, 100, 130)], None]

        def advance(self, ranges: object) -> None:
            list(ranges)  # type: ignore[call-overload]

        def read(self) -> list[LagReading] | None:
            return self.answers.pop(0)

    metrics = JobMetrics(runtime_for().config, lag=Lag())  # type: ignore[arg-type]
    log = BatchLog(metrics)
    first = report(1)
    metrics(first)
    assert log.line(first).endswith(", lag 30, 0.50 s")
    second = report(2, read=30, applied=30)
    metrics(second)
    assert log.line(second).endswith(", lag unknown, 0.50 s"), log.line(second)


def test_the_line_tells_results_that_were_not_written() -> None:
    line = BatchLog().line(report(-1, result_errors=1))
    assert line == "timer pass, 0 results, 1 not written (RESULT_ERROR), watermark -, 0.50 s"


def test_the_line_tells_a_restore_why_a_quiet_pass_is_logged() -> None:
    line = BatchLog().line(report(-1, restored_records=577))
    assert line == "timer pass, 0 results, 577 changelog records restored, watermark -, 0.50 s"


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("window_operator.kafka", logging.ERROR, "", 0, message, None, None)


def test_a_host_that_does_not_resolve_is_said_once_by_a_running_job() -> None:
    """librdkafka repeats it about 20 times a second; a start-up check says it in its
    own one line; a running job's clients (a broker advertising a name this host cannot
    resolve) say it once per host, not never."""
    fail = "FAIL [rdkafka#producer-1] [thrd:{0}:9092/1]: Failed to resolve '{0}:9092': x"
    running, startup = KafkaNoiseFilter(first_unresolved=True), KafkaNoiseFilter()
    kept = [running.filter(_record(fail.format(host))) for host in ("kafka", "kafka", "other")]
    assert kept == [True, False, True]
    assert not startup.filter(_record(fail.format("kafka")))
    for noise in ("Connection refused", "1/1 brokers are down", "Disconnected"):
        assert not running.filter(_record(f"FAIL [rdkafka#producer-1]: {noise}"))
    assert running.filter(_record("Commit failed: the transaction was fenced"))


def test_an_address_that_does_not_answer_as_kafka_is_said_once_by_a_running_job() -> None:
    """Something that is not Kafka at the broker's address (an HTTP server: a mistyped
    port) made librdkafka log its failure several times a second, 97 lines before the
    command's one line (a walkthrough)."""
    fail = (
        "FAIL [rdkafka#producer-1] [thrd:{0}/bootstrap]: {0}/bootstrap: Receive failed: "
        "Invalid response size 1213486160 (0..1000000000): increase receive.message.max.bytes"
    )
    running, startup = KafkaNoiseFilter(first_unresolved=True), KafkaNoiseFilter()
    kept = [running.filter(_record(fail.format(a))) for a in ("h:9092", "h:9092", "g:9092")]
    assert kept == [True, False, True]
    assert not startup.filter(_record(fail.format("h:9092")))


def test_a_check_that_meets_something_else_than_kafka_says_so() -> None:
    from window_operator.kafka_admin import BrokerUnreachableError

    cause = "h:1/bootstrap: Receive failed: Invalid response size 1213486160 (0..1000000000)"
    text = str(BrokerUnreachableError("h:1", 5.0, cause))
    assert "something answers there, but not as Kafka does" in text
    assert "receive.message.max.bytes" not in text
    # a broker's answer over a receive.message.max.bytes set too low: librdkafka's advice
    big = "h:1/bootstrap: Receive failed: Invalid response size 2000000 (0..100000): increase"
    assert "not as Kafka does" not in str(BrokerUnreachableError("h:1", 5.0, big))


def test_the_time_of_a_log_line_is_utc_as_every_other_time_the_job_prints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line's time was the machine's local time, beside a watermark (and `status`,
    `inspect`) in UTC."""
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-9")  # UTC+9 (the POSIX sign is inverted)
    time.tzset()
    try:
        record = logging.LogRecord(BATCH_LOGGER, logging.INFO, __file__, 1, "x", None, None)
        record.created = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
        assert utc_formatter(LOG_FORMAT).format(record) == f"22:13:20 INFO {BATCH_LOGGER}: x"
        assert logging.Formatter(LOG_FORMAT, "%H:%M:%S").format(record).startswith("07:13:20")
    finally:
        monkeypatch.undo()  # the TZ the process had, then the C library told of it
        time.tzset()
