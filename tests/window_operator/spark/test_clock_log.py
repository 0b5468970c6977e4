"""The driver's clock log: entries per batch (prepared, then final) and the input's origin."""

from __future__ import annotations

from pathlib import Path

from jobkit import job_config

from window_operator.kernel import ClockState, InputPosition
from window_operator.runtime.batch import note_ends, note_origin
from window_operator.runtime.exchange import InputRange, MapReport
from window_operator.spark.clock_log import ClockLog
from window_operator.spark.driver import StreamingJob

P0, P1 = InputPosition(0, 0), InputPosition(0, 1)


def moved(state: ClockState, now: int) -> ClockState:
    return ClockState(max_ts=dict(state.max_ts), now=now, watermark=state.watermark)


def test_a_replayed_batch_gets_the_clock_it_first_ran_with(tmp_path: Path) -> None:
    log = ClockLog(tmp_path / "clock")
    log.prepare(3, ClockState(max_ts={P0: 5_000}, now=100, watermark=4_000))
    first = log.begin(3, 200, moved)
    assert (first.now, first.max_ts, first.watermark) == (200, {P0: 5_000}, 4_000)
    # the batch runs again (its commit was not logged): same clock, not the later now
    assert log.begin(3, 900, moved) == first
    # a prepared entry never overwrites a final one
    log.prepare(3, ClockState(now=1))
    assert ClockLog(tmp_path / "clock").begin(3, 1_000, moved) == first


def test_a_batch_without_an_entry_starts_from_the_newest_earlier_one(tmp_path: Path) -> None:
    log = ClockLog(tmp_path / "clock")
    log.begin(1, 100, moved)
    log.prepare(2, ClockState(max_ts={P0: 7}, now=150))
    assert log.begin(5, 300, moved).max_ts == {P0: 7}
    assert ClockLog(tmp_path / "empty").begin(0, 10, moved) == ClockState(now=10)


def test_a_restarted_driver_goes_on_from_the_newest_entry(tmp_path: Path) -> None:
    log = ClockLog(tmp_path / "clock")
    assert log.newest() is None
    log.begin(9, 100, moved)
    log.begin(10, 200, moved)
    log.prepare(11, ClockState(max_ts={P0: 7}, now=250, watermark=5))
    prepared = ClockState({P0: 7}, {}, 250, None, 5)
    assert ClockLog(tmp_path / "clock").newest() == (11, prepared, False)
    (tmp_path / "clock" / "11.json").unlink()  # the driver died before batch 10 ended
    assert log.newest() == (10, ClockState(now=200), True)


def test_the_origin_keeps_the_first_offset_of_every_partition(tmp_path: Path) -> None:
    def report(pos: InputPosition, start: int, end: int) -> MapReport:
        return MapReport(InputRange(pos.source, "t", pos.partition, start, end), end - start, 1)

    log = ClockLog(tmp_path / "clock")
    assert log.origin() is None  # never recorded
    origin = note_origin({}, [report(P0, 40, 50), report(P0, 30, 40)], 0)
    origin = note_origin(origin, [report(P0, 50, 60), report(P1, 7, 9)], 1)
    assert origin == {P0: 30, P1: 7}
    # a job whose checkpoint reached later batches without an origin gets none: where
    # it began is not known
    assert note_origin(None, [report(P0, 400, 500)], 5) is None
    # known, but nothing read yet (Spark ran empty batches first)
    assert note_origin(None, [], 0) == {}
    assert note_origin({}, [report(P0, 400, 500)], 5) == {P0: 400}
    log.write_origin(origin)
    assert ClockLog(tmp_path / "clock").origin() == {P0: 30, P1: 7}
    # the origin file is not taken for a batch's entry
    assert log.begin(0, 5, moved) == ClockState(now=5)


def test_the_ends_keep_the_last_range_of_every_partition(tmp_path: Path) -> None:
    def report(pos: InputPosition, start: int, end: int) -> MapReport:
        return MapReport(InputRange(pos.source, "t", pos.partition, start, end), end - start, 1)

    ends = note_ends({}, [report(P0, 0, 10), report(P1, 5, 9), report(P0, 10, 20)])
    ends = note_ends(ends, [report(P1, 9, 12)])
    assert {p: (r.start, r.end) for p, r in ends.items()} == {P0: (10, 20), P1: (9, 12)}
    log = ClockLog(tmp_path / "clock")
    assert log.ends() == {}
    log.write_ends(ends)
    assert ClockLog(tmp_path / "clock").ends() == ends


def test_the_history_names_how_the_recent_batches_began(tmp_path: Path) -> None:
    log = ClockLog(tmp_path / "clock")
    log.write(0, ClockState(now=1), final=True)  # an entry from before starts were kept
    for batch_id in (1, 2, 3):
        log.begin(batch_id, 100 * batch_id, moved, {P0: 10 * batch_id})
    log.prepare(4, ClockState(now=350))
    # a replay keeps the starts its batch first began with
    log.begin(3, 999, moved, {P0: 99})
    again = ClockLog(tmp_path / "clock")
    assert [(b.batch_id, b.clock.now, b.starts) for b in again.history(None, 16)] == [
        (1, 100, {P0: 10}),
        (2, 200, {P0: 20}),
        (3, 300, {P0: 30}),
    ]
    # before a batch: only earlier ones, the newest ``most`` of them
    assert [b.batch_id for b in again.history(3, 16)] == [1, 2]
    assert [b.batch_id for b in again.history(4, 2)] == [2, 3]
    # a batch without a final entry ends the history: batches must be consecutive
    log.begin(6, 600, moved, {P0: 60})
    assert [b.batch_id for b in log.history(7, 16)] == [6]
    assert log.history(1, 16) == ()


def test_a_restart_holds_the_clock_of_a_batch_that_may_run_again(tmp_path: Path) -> None:
    """Batch 10 began (its entry is final) when the driver died: until a batch ran, a
    restarted driver's timer passes keep that clock. Moved on to the restart's wall
    clock, idle partitions would let the watermark jump (here from 10 s to 55 s) and
    fire windows before batch 10 runs again, which would then find records late that
    it first took on time. A prepared newest entry moves on as timer passes do."""
    config = job_config(tmp_path, "clicks", "held", watermark={"idle_timeout": "30s"})
    log = ClockLog(Path(str(config.spark.checkpoint_dir)) / "window-operator-clock")
    before = ClockState({P0: 10_000, P1: 60_000}, {P0: 1_000, P1: 100_000}, 100_000, 0, 10_000)
    log.prepare(10, before)
    log.begin(10, 100_000, moved)
    restart = 220_000  # two minutes later: both partitions idle
    job = StreamingJob(config, bootstrap_servers="unused:9092", spark=None)
    began = log.read(10)
    assert began is not None and began[1] and job.timer_clock(restart) == began[0]
    (log.directory / "10.json").unlink()
    log.prepare(10, before)  # batch 9 ended, batch 10 never began
    moved_on = StreamingJob(config, bootstrap_servers="unused:9092", spark=None)
    assert moved_on.timer_clock(restart).watermark == 60_000 - 5_000  # minus the lateness
