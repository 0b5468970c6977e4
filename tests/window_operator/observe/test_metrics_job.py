"""The job's /metrics, scraped while it runs on the real broker and Spark, against what
was produced: applied, rejected by reason, late, results by kind, lag back to zero."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from jobkit import read_topic
from obskit import (
    T0,
    Samples,
    by_label,
    in_order,
    job_dict,
    one_partition_topic,
    produce_events,
    produce_values,
    scrape,
    total,
    write_job,
)

from window_operator.observe.attach import attach
from window_operator.observe.lag import InputLag
from window_operator.observe.metrics import JobMetrics
from window_operator.spark.driver import StreamingJob

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

P = "window_operator_"


def run_scraped(spark: Any, config: Any, bootstrap: str, metrics: JobMetrics, port: int) -> int:
    """Run the AvailableNow job once, scraping /metrics meanwhile; the scrapes that worked."""
    job = StreamingJob(config, bootstrap_servers=bootstrap, spark=spark)
    job.add_observer(metrics)
    scrapes: list[Samples] = []
    done = threading.Event()

    def poll() -> None:
        while not done.wait(0.2):
            scrapes.append(scrape(port))

    poller = threading.Thread(target=poll, daemon=True)
    job.start()
    poller.start()
    try:
        assert job.await_termination(300)
    finally:
        done.set()
        poller.join(5)
    return len(scrapes)


def test_metrics_count_what_was_produced_and_lag_ends_at_zero(
    tmp_path: Path, spark: Any, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    topic = unique_name("in")
    one_partition_topic(kafka_bootstrap, topic)
    # run 1: 200 events in event-time order and 3 broken records
    produce_events(kafka_bootstrap, topic, in_order(200))
    produce_values(kafka_bootstrap, topic, [b'{"page": "/x", "ts": 1', b"{oops", b'{"page": "/x"}'])
    _, config = write_job(tmp_path, job_dict(tmp_path, topic, unique_name("job")))
    lag = InputLag(kafka_bootstrap, [topic], checkpoint_dir=str(config.spark.checkpoint_dir))
    metrics = JobMetrics(config, lag=lag)
    port = metrics.serve(0, "127.0.0.1")
    try:
        polled = run_scraped(spark, config, kafka_bootstrap, metrics, port)
        # run 2 (the watermark is now T0 + 49.75 s - 5 s): 10 late events within
        # retention, 2 out of it
        late = [{"page": "/page/1", "ts": T0 + 1000 * i} for i in range(1, 11)]
        gone = [{"page": "/page/2", "ts": T0 - 600_000 - i} for i in range(2)]
        produce_events(kafka_bootstrap, topic, late + gone)
        polled += run_scraped(spark, config, kafka_bootstrap, metrics, port)
        final = scrape(port)
    finally:
        metrics.close()
    assert polled > 0  # /metrics answered while the job ran

    assert total(final, f"{P}records_read_total") == 215
    assert total(final, f"{P}records_applied_total") == 210
    assert total(final, f"{P}records_late_total") == 10
    assert by_label(final, f"{P}records_rejected_total", "reason") == {
        "BAD_JSON": 2,
        "MISSING_TIMESTAMP": 1,
        "OUT_OF_RETENTION": 2,
    }
    assert total(final, f"{P}records_out_of_retention_total") == 2

    out = read_topic(kafka_bootstrap, config.output.topic)
    kinds = Counter(orjson.loads(m.value())["kind"] for m in out if m.value() is not None)
    assert kinds["LATE"] > 0 and kinds["ON_TIME"] > 0
    assert by_label(final, f"{P}results_total", "kind") == dict(kinds)
    errors = read_topic(kafka_bootstrap, config.output.errors_topic)
    assert len(errors) == 5

    assert final[f"{P}input_lag_records"] == {(("partition", "0"), ("topic", topic)): 0.0}
    assert final[f"{P}input_position_offset"] == {(("partition", "0"), ("topic", topic)): 215}
    assert final[f"{P}watermark_ms"][()] == T0 + 250 * 199 - 5000
    assert total(final, f"{P}state_store_bytes") > 0
    assert total(final, f"{P}state_windows") > 0  # the newest windows are still open
    assert by_label(final, f"{P}batches_total", "type")["micro_batch"] >= 2
    # a restarted job shows its last batch and watermark before its first batch runs
    # (before: NaN, all of an idle job's run)
    restarted = attach(
        StreamingJob(config, bootstrap_servers=kafka_bootstrap, spark=spark), listen=False
    )
    try:
        sample = restarted.metrics.registry.get_sample_value
        assert sample(f"{P}last_batch_id") == final[f"{P}last_batch_id"][()] > 0
        assert sample(f"{P}watermark_ms") == final[f"{P}watermark_ms"][()]
    finally:
        restarted.close()
    phases = by_label(final, f"{P}phase_seconds_count", "phase")
    assert set(phases) == {"read", "restore", "operator", "outputs", "changelog", "commit"}
