"""The growth look of a long-running worker against a real broker: the same partitions,
added ones (an answer that stays), a broker that does not answer, and workers that wait
for it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from jobkit import (
    add_partitions,
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
from window_operator.kafka_admin import KafkaAdmin
from window_operator.runtime.longrun.growth import InputGrowth, Look
from window_operator.runtime.longrun.local import LocalLongRunningJob

pytestmark = [pytest.mark.kafka]


def test_added_partitions_are_growth_and_the_answer_stays(
    kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    a, b = unique_name("grow-a"), unique_name("grow-b")
    create_topic(kafka_bootstrap, a, 2)
    create_topic(kafka_bootstrap, b, 1)
    growth = InputGrowth(KafkaAdmin(kafka_bootstrap), {a: 2, b: 1}, timeout_s=30.0)
    assert growth.look() is Look.SAME
    assert growth.grown == {} and growth.describe() == ""
    add_partitions(kafka_bootstrap, a, 3)
    assert growth.look() is Look.GREW
    assert growth.grown == {a: (2, 3)} and growth.describe() == f"{a} 2 -> 3"
    # once grown, the workers end: the answer stays without another lookup
    growth.admin = KafkaAdmin(f"127.0.0.1:{free_port()}", metadata_timeout_s=0.5)
    assert growth.look() is Look.GREW


def test_a_broker_that_does_not_answer_leaves_growth_unknown() -> None:
    # nothing listens there: the lookup times out, which is no answer, not "no growth"
    admin = KafkaAdmin(f"127.0.0.1:{free_port()}", metadata_timeout_s=0.5)
    growth = InputGrowth(admin, {"clicks": 4}, timeout_s=0.5)
    assert growth.look() is Look.UNANSWERED
    assert growth.grown == {}


@pytest.mark.parametrize("then", ["broker_back", "job_stopped"])
def test_an_epoch_waits_for_a_broker_that_does_not_answer_its_look(
    tmp_path: Path,
    unique_name: Callable[[str], str],
    caplog: pytest.LogCaptureFixture,
    then: str,
) -> None:
    """The broker goes away while the workers wait for input: the growth look before the
    next epoch goes unanswered, and the epoch waits (it used to go on as if no partition
    had been added). Then either the broker comes back and the run goes on, or the job is
    stopped meanwhile and a second run takes the rest; either way the windows are exact."""
    caplog.set_level(logging.WARNING, logger="window_operator")
    broker = LocalBroker(port=free_port(), data_dir=tmp_path / "broker").start()
    jobs: list[LocalLongRunningJob] = []

    def start(available_now: bool = False) -> LocalLongRunningJob:
        jobs.append(
            local_job(
                config, bootstrap, tmp_path, 2, watch_inputs=True, available_now=available_now
            )
        )
        jobs[-1].start()
        return jobs[-1]

    try:
        bootstrap = broker.bootstrap_servers
        topic = unique_name("outage")
        stream = make_stream(2_000, keys=40, seed=41)
        records = stream.records()
        create_topic(bootstrap, topic, 2)
        produce(bootstrap, topic, records[:1_000], round_robin=True, partitions=2)
        config = job_config(tmp_path, topic, unique_name("job"), spark={"trigger": "200ms"})
        job = start()
        wait_until(lambda: applied(job) == 1_000, "the first half applied")
        # noida-db keeps a write only about a second after it acknowledged it (BROKER.md):
        # a stop right after the last commit could lose it, with the transactional state
        # of the producers that wrote it (a run failed once on a sequence number reused)
        time.sleep(1.5)
        broker.stop()
        # the workers wait at the look before the next epoch, or at the commit of an
        # epoch under way at the stop, which fails once its records time out
        # (transaction.timeout.ms, 60 s); an idle epoch commits nothing
        wait_until(
            lambda: "the epoch waits for it" in caplog.text or "Kafka did not take" in caplog.text,
            "an unanswered look or commit",
            timeout_s=120.0,
        )
        if then == "job_stopped":
            job.stop()
            job.wait(120)
            assert not any(s.inputs_grew for s in job.summaries)
            assert "records are read again at the next start" in caplog.text
        broker.start()
        produce_the_rest(bootstrap, topic, stream, 1_000, 2)
        if then == "job_stopped":
            job = start(available_now=True)
            job.wait(120)
        else:
            wait_until(lambda: applied(job) == 2_002, "every record applied")
        got = latest_results(config, read_topic(bootstrap, config.output.topic))
    finally:
        for j in jobs:
            j.stop()
            j.wait(120)
        broker.stop()
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))
