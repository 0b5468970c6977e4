"""Long-running workers that end with an epoch uncommitted: asked to stop while Kafka
does not take its commit, or having lost their driver. They end without committing
anything more, and the next start takes (and reports) the epoch's records."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from jobkit import (
    applied,
    assert_matches_oracle,
    create_topic,
    job_config,
    latest_results,
    local_job,
    make_stream,
    oracle,
    produce,
    produce_the_rest,
    read_topic,
    wait_until,
)

from window_operator.broker import LocalBroker, free_port
from window_operator.runtime import runner
from window_operator.runtime.longrun.local import LocalLongRunningJob

pytestmark = [pytest.mark.kafka]


def test_a_job_stopped_while_kafka_does_not_take_an_epoch_ends_and_the_next_start_takes_it(
    tmp_path: Path,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The broker stops after an epoch's results were sent and before its commit; the
    job is asked to stop. The workers used to wait for the commit, and try it again, for
    ``processing.broker_timeout`` (5 minutes) before they looked at the stop."""
    caplog.set_level(logging.WARNING, logger="window_operator")
    broker = LocalBroker(port=free_port(), data_dir=tmp_path / "broker").start()
    jobs: list[LocalLongRunningJob] = []
    armed, fired, down = threading.Event(), threading.Event(), threading.Event()

    def stop_the_broker_at_the_commit(name: str, records: int, batch_id: int = -1) -> None:
        if name == "after_outputs" and records and armed.is_set() and not fired.is_set():
            fired.set()
            time.sleep(1.5)  # noida-db keeps a write about a second after it (BROKER.md)
            broker.stop()
            down.set()

    monkeypatch.setattr(runner, "crash_point", stop_the_broker_at_the_commit)
    try:
        bootstrap = broker.bootstrap_servers
        topic = unique_name("away")
        stream = make_stream(1_600, keys=30, seed=43)
        records = stream.records()
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, records[:800], round_robin=True, partitions=2)
        config = job_config(tmp_path, topic, unique_name("job"), spark={"trigger": "200ms"})
        jobs.append(job := local_job(config, bootstrap, tmp_path, 2))
        job.start()
        wait_until(lambda: applied(job) == 800, "the first half applied")
        time.sleep(1.5)  # the first half's commits kept by the broker (BROKER.md)
        armed.set()
        produce(bootstrap, topic, records[800:1_200], round_robin=True, partitions=2)
        wait_until(down.is_set, "the broker stopped at an epoch's commit")
        time.sleep(2.0)  # the commit waits for the broker
        asked = time.monotonic()
        job.stop()
        job.wait(60)  # well within processing.broker_timeout (300 s)
        assert time.monotonic() - asked < 20
        assert "stopped while Kafka did not take epoch" in caplog.text
        assert applied(job) < 1_200  # the epoch of the stop was not committed
        broker.start()
        produce_the_rest(bootstrap, topic, stream, 1_200, 2)
        jobs.append(again := local_job(config, bootstrap, tmp_path, 2, available_now=True))
        again.start()
        again.wait(120)
        # each task took what it had not committed: nothing lost, nothing applied twice
        assert applied(job) + applied(again) == len(records) + 2
        got = latest_results(config, read_topic(bootstrap, config.output.topic))
    finally:
        for j in jobs:
            j.stop()
            j.wait(120)
        broker.stop()
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_workers_that_lost_their_driver_leave_the_open_epoch_to_the_next_start(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The driver goes away while an epoch is open. The workers used to commit a last
    epoch that no driver heard of: the next start took its records for replays, and the
    reports of the two runs left them out. Now every record is reported applied once."""
    caplog.set_level(logging.WARNING, logger="window_operator")
    topic = unique_name("lost")
    stream = make_stream(1_200, keys=30, seed=47)
    records = stream.records()
    create_topic(kafka_bootstrap, topic, 2)
    produce(kafka_bootstrap, topic, records[:600], round_robin=True, partitions=2)
    config = job_config(tmp_path, topic, unique_name("job"), spark={"trigger": "3s"})
    first = local_job(config, kafka_bootstrap, tmp_path, 2)
    first.start()
    try:
        wait_until(lambda: applied(first) == 600, "the first part applied")
        epochs = len(first.reports)
        wait_until(lambda: len(first.reports) > epochs, "an epoch's end")
        produce(kafka_bootstrap, topic, records[600:900], round_robin=True, partitions=2)
        time.sleep(1.0)  # read, in an epoch that ends 3 s after the last
        assert first._coordinator is not None
        first._coordinator.close()  # the driver is gone
        first.wait(60)
    finally:
        first.stop()
        first.wait(60)
    produce_the_rest(kafka_bootstrap, topic, stream, 900, 2)
    again = local_job(config, kafka_bootstrap, tmp_path, 2, available_now=True)
    again.start()
    again.wait(120)
    assert applied(first) + applied(again) == len(records) + 2
    lost = "lost the driver: the epoch's records are read again at the next start"
    assert lost in caplog.text
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
