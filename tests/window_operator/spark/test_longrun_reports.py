"""The driver of a long-running job publishes the job's clock, whatever worker reports."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobkit import job_config

from window_operator.kernel import ClockState, InputPosition
from window_operator.runtime.longrun.progress import PROGRESS_FILE, read_progress
from window_operator.runtime.longrun.wire import EpochReport
from window_operator.spark.clock_log import CLOCK_DIR, ClockLog
from window_operator.spark.driver import BatchReport
from window_operator.spark.longrun import LongRunningJob, Restarts

S = 1_000


def test_a_report_trailing_another_workers_does_not_take_the_clock_back(tmp_path: Path) -> None:
    """Worker 1 reports after worker 0 with an earlier clock: the log line, the
    ``--report`` file, the metrics and ``status`` (the progress file) still get the
    furthest one. Before, each report carried its worker's clock, and the watermark
    went back from 35 s to 30 s."""
    config = job_config(tmp_path, "clicks", "clocks", spark={"mode": "long_running"})
    reports: list[BatchReport] = []
    # no Spark session: the coordinator's callback alone is driven here
    job = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None,
                         on_report=reports.append)  # fmt: skip
    p0, p1 = InputPosition(0, 0), InputPosition(0, 1)
    ahead = ClockState({p0: 50 * S, p1: 40 * S}, {}, 10 * S, 1 * S, 35 * S)
    behind = ClockState({p0: 45 * S, p1: 36 * S}, {}, 9 * S, 1 * S, 30 * S)
    for worker, clock in [(0, ahead), (1, behind)]:
        job._on_epoch(EpochReport(worker, 0, [], [], clock, 0.1))
    assert [r.clock for r in reports] == [ahead, ahead]
    assert [r.batch_id for r in reports] == [0, 1]
    progress = read_progress(Path(str(config.spark.checkpoint_dir)))
    assert progress is not None and progress.watermark == 35 * S
    assert progress.max_ts == {p0: 50 * S, p1: 40 * S}
    # a restarted driver numbers its epochs on, as `status` counts them ("last epoch 1")
    again = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None,
                           on_report=reports.append)  # fmt: skip
    again._on_epoch(EpochReport(0, 0, [], [], behind, 0.1))
    assert reports[-1].batch_id == progress.epochs == 2
    # ... and goes on from the clock it showed: the trailing worker does not take it back
    assert reports[-1].clock.watermark == 35 * S
    assert reports[-1].clock.max_ts == {p0: 50 * S, p1: 40 * S}


def test_a_job_switched_from_micro_batches_goes_on_from_their_clock(tmp_path: Path) -> None:
    """A long-running run after micro-batches starts from the furthest of the
    micro-batch shape's clock (its clock log) and its own last run's, not from nothing
    or its own alone: its watermark does not go back (a walkthrough saw 1970 in
    ``status`` and the log after such a switch)."""
    config = job_config(tmp_path, "clicks", "switched", spark={"mode": "long_running"})
    checkpoint = Path(str(config.spark.checkpoint_dir))
    p0 = InputPosition(0, 0)
    micro = ClockState({p0: 50 * S}, {p0: 7 * S}, 10 * S, 1 * S, 45 * S)
    ClockLog(checkpoint / CLOCK_DIR).write(3, micro, final=True)
    job = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None)
    assert (job.clock.max_ts, job.clock.watermark) == ({p0: 50 * S}, 45 * S)
    # its own epochs went further: it goes on from them
    job._on_epoch(EpochReport(0, 0, [], [], ClockState({p0: 60 * S}, watermark=55 * S), 0.1))
    again = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None)
    assert (again.clock.max_ts, again.clock.watermark) == ({p0: 60 * S}, 55 * S)
    # then micro-batches went further again (long, micro, long): from theirs
    later = ClockState({p0: 80 * S}, {}, 20 * S, 1 * S, 75 * S)
    ClockLog(checkpoint / CLOCK_DIR).write(9, later, final=True)
    last = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None)
    assert (last.clock.max_ts, last.clock.watermark) == ({p0: 80 * S}, 75 * S)


def test_a_progress_file_that_does_not_read_starts_from_zero(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = job_config(tmp_path, "clicks", "garbled", spark={"mode": "long_running"})
    checkpoint = Path(str(config.spark.checkpoint_dir))
    checkpoint.mkdir(parents=True)
    (checkpoint / PROGRESS_FILE).write_text("{not json")
    job = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None)
    assert job._epochs == 0 and "does not read" in caplog.text


def test_a_start_makes_progress_once_every_worker_reported(tmp_path: Path) -> None:
    """A healthy worker's empty epochs are not progress while another worker fails at
    every start: before, any epoch counted, and such a job restarted its workers forever
    (16 times in 150 s, in a helper's test with an offsets job)."""
    config = job_config(tmp_path, "clicks", "restarts", spark={"mode": "long_running"})
    job = LongRunningJob(config, bootstrap_servers="unused:9092", spark=None)
    assert not job.progressed(2)
    for _ in range(3):  # worker 0 reports every trigger; worker 1 never does
        job._on_epoch(EpochReport(0, 0, [], [], ClockState(), 0.1))
    assert not job.progressed(2)
    job._on_epoch(EpochReport(1, 0, [], [], ClockState(), 0.1))
    assert job.progressed(2)


def test_restarts_give_up_after_three_failures_without_progress() -> None:
    restarts = Restarts()
    assert [restarts.failed(False) for _ in range(3)] == [2.0, 4.0, 8.0]
    assert restarts.failed(False) is None and restarts.failures == 4
    again = Restarts()
    waits = [again.failed(p) for p in (False, False, True, False, False, False, False)]
    assert waits == [2.0, 4.0, 2.0, 2.0, 4.0, 8.0, None]  # progress starts the count again
