"""``window-operator status`` on a job that has run, one that is behind, and one that never
ran (its checks one by one, on made-up readings: ``test_status_checks.py``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jobkit import run_to_end
from obskit import in_order, job_dict, one_partition_topic, produce_events, write_job

from window_operator.broker import free_port
from window_operator.cli import main

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def status(capsys: pytest.CaptureFixture[str], path: Path, bootstrap: str, *more: str) -> Any:
    code = main(["status", "--config", str(path), "--bootstrap-servers", bootstrap, *more])
    return code, capsys.readouterr().out


def test_status_of_a_job_that_ran_then_fell_behind(
    tmp_path: Path,
    spark: Any,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, job = unique_name("in"), unique_name("job")
    one_partition_topic(kafka_bootstrap, topic)
    produce_events(kafka_bootstrap, topic, in_order(100))
    doc = job_dict(tmp_path, topic, job)
    path, config = write_job(tmp_path, doc)
    run_to_end(config, kafka_bootstrap, spark, 300)

    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 0, out
    assert f"{topic}[0]" in out and "healthy: lag 0" in out
    row = next(line for line in out.splitlines() if line.startswith(f"{topic}[0]"))
    assert row.split()[1:4] == ["100", "100", "0"]  # committed, end, lag
    # max event time of the partition (T0 + 24.75 s), its watermark 5 s (lateness) behind
    assert row.split()[4:] == ["2023-11-14", "22:14:24", "2023-11-14", "22:14:19"]
    assert "task 0" in out and "local store" in out

    # no broker answering: what the checkpoint tells, then the broker's line, exit 2
    gone = f"127.0.0.1:{free_port()}"
    code = main(["status", "--config", str(path), "--bootstrap-servers", gone])
    printed = capsys.readouterr()
    assert code == 2, printed
    row = next(line for line in printed.out.splitlines() if line.startswith(f"{topic}[0]"))
    assert row.split()[1:4] == ["100", "-", "-"]  # committed; end and lag unknown
    assert "input ends, lag and changelogs unknown: the broker does not answer" in printed.out
    assert "task 0" not in printed.out and gone in printed.err

    produce_events(kafka_bootstrap, topic, in_order(30))
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1
    assert "UNHEALTHY: behind: 30 input records wait for the next run" in out

    # read twice, 3 s apart, while 20 more arrive: every line tells the second reading
    more = threading.Timer(0.5, produce_events, (kafka_bootstrap, topic, in_order(20)))
    more.start()
    code, out = status(capsys, path, kafka_bootstrap, "--interval", "3")
    more.join()
    assert code == 1
    assert "UNHEALTHY: lag growing: 30 -> 50 in 3 s" in out
    assert "UNHEALTHY: behind: 50 input records wait for the next run" in out
    row = next(line for line in out.splitlines() if line.startswith(f"{topic}[0]"))
    assert row.split()[1:4] == ["100", "150", "50"]

    # the same job run with a 1 s trigger: behind once no batch ran for 2 triggers
    streaming, _ = write_job(tmp_path, {**doc, "spark": {"trigger": "1s"}}, "streaming.yaml")
    time.sleep(2.5)
    code, out = status(capsys, streaming, kafka_bootstrap, "--max-idle-triggers", "2")
    assert code == 1
    assert "UNHEALTHY: behind: 50 input records wait, but no batch ran for" in out
    assert "(2 triggers of 1 s): is the job running?" in out


def test_status_of_a_job_that_never_ran(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = unique_name("in")
    one_partition_topic(kafka_bootstrap, topic)
    path, _ = write_job(tmp_path, job_dict(tmp_path, topic, "never-ran"))
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1
    assert out.strip() == (
        f"UNHEALTHY: job 'never-ran' has never run: its Spark checkpoint "
        f"{tmp_path}/state/never-ran/spark-checkpoint holds no micro-batch "
        "(start it with `window-operator run`)"
    )
    # with input waiting, it says how much (what `run` reads from the earliest offsets)
    produce_events(kafka_bootstrap, topic, [{"page": "a", "ts": 1_000}] * 3)
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1 and out.strip().endswith(
        "(start it with `window-operator run`); 3 records wait in its input"
    )


def test_a_job_that_never_ran_here_names_its_checkpoint_in_full(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A relative ``state.dir`` is taken from the working directory: ``status`` run from
    another one said the job had never run, naming a relative path (a walkthrough)."""
    topic = unique_name("in")
    one_partition_topic(kafka_bootstrap, topic)
    doc = job_dict(tmp_path, topic, "elsewhere")
    doc["state"] = {"dir": "state"}
    path, _ = write_job(tmp_path, doc)
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path / "other")
    code, out = status(capsys, path, kafka_bootstrap)
    assert code == 1
    assert f"its Spark checkpoint {tmp_path}/other/state/elsewhere/spark-checkpoint " in out
    assert "(a relative path: to this directory) holds no micro-batch" in out
