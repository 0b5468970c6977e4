"""Secrets of ``kafka.*`` settings never reach the logs, the report or the metrics.

The job runs from the command line with a SASL password and an SSL key password in
``kafka.producer`` (the local broker speaks PLAINTEXT, so librdkafka keeps them unused);
everything it prints, writes and serves is searched for them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path

import pytest
from obskit import in_order, job_dict, one_partition_topic, produce_events, scrape, total

from window_operator.broker import free_port
from window_operator.config import load_config
from window_operator.observe.heartbeat import read_heartbeat
from window_operator.observe.redact import RedactingFilter, redact_settings

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

SASL = "sasl-Pa55word-that-must-not-leak"
KEY = "ssl-key-Pa55word-that-must-not-leak"


def metrics_text(port: int) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        return str(resp.read().decode())


def test_secrets_stay_out_of_logs_reports_and_metrics(
    tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]
) -> None:
    import yaml

    topic = unique_name("in")
    one_partition_topic(kafka_bootstrap, topic)
    produce_events(kafka_bootstrap, topic, in_order(50))
    # ten batches of 5: the stop below comes with a backlog
    doc = job_dict(tmp_path, topic, unique_name("job"), trigger="1s", max_offsets_per_trigger=5)
    doc["kafka"] = {
        "producer": {"sasl.password": SASL, "ssl.key.password": KEY},
        "consumer": {"sasl.password": SASL},  # the source's consumers and the map side
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert SASL not in repr(load_config(path))  # nor in a config's repr (tracebacks)
    checkpoint = load_config(path).spark.checkpoint_dir

    port, report = free_port(), tmp_path / "report.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "window_operator", "run", "--config", str(path),
         "--bootstrap-servers", kafka_bootstrap, "--metrics-port", str(port),
         "--master", "local[2]", "--report", str(report)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # the signal reaches the driver only, as from a terminal
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    texts = []
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            try:
                metrics = scrape(port)
                if total(metrics, "window_operator_records_applied_total") >= 5:
                    break
            except (urllib.error.URLError, ConnectionError):
                pass
            time.sleep(0.5)
        else:
            pytest.fail("the job did not apply the input in time")
        texts.append(metrics_text(port))
        # the heartbeat `status` reads: the running driver's
        beat = read_heartbeat(checkpoint)
        assert beat is not None and not beat.stopped and beat.pid == proc.pid
        # a second copy over the same checkpoint is refused at once, before Spark
        second = subprocess.run(
            [sys.executable, "-m", "window_operator", "run", "--config", str(path),
             "--bootstrap-servers", kafka_bootstrap],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 2, second.stderr[-3000:]
        assert f"is already running: its driver is process {proc.pid} on this host" in (
            second.stderr
        )
    finally:
        # a stop as systemd, Kubernetes or docker sends it (the job's Ctrl-C: the same
        # handler); before, SIGTERM killed the job in the middle of a batch
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "stopping after the running micro-batch, epoch or start-up pass" in err
    assert "window_operator.batches: batch 0, 5 read, 5 applied" in err  # logs were written
    # it stopped after the running batch, not after the backlog (before: it ran until
    # nothing was left to read, as it was never found between two batches)
    assert "batch 9," not in err
    assert "Traceback" not in err and "BatchRefusedError" not in err
    texts += [out, err, report.read_text()]
    assert '"batch":0' in texts[-1]
    for text in texts:
        assert SASL not in text and KEY not in text
    beat = read_heartbeat(checkpoint)
    assert beat is not None and beat.stopped  # `status`: "not running: the job stopped at"


def test_redaction_masks_secret_settings_and_log_text() -> None:
    settings = {"sasl.password": SASL, "ssl.key.pem": "-----BEGIN KEY", "acks": "all"}
    assert redact_settings(settings) == {
        "sasl.password": "***",
        "ssl.key.pem": "***",
        "acks": "all",
    }
    import logging

    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "auth with %s", (SASL,), None)
    assert RedactingFilter([SASL]).filter(record)
    assert record.getMessage() == "auth with ***"
