"""Scale-out proof: a Spark standalone cluster (a master and two workers on loopback).

Each worker keeps its RocksDB stores in its own directory, as separate hosts would.
The job runs for several micro-batches while Spark places tasks on whichever executor
is free; a task that lands on the other worker finds no (or a stale) local store and
must restore or catch up from its changelog. The results must stay exact.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from jobkit import (
    assert_matches_oracle,
    create_topic,
    job_config,
    latest_results,
    make_stream,
    oracle,
    produce,
    read_topic,
    sentinels,
)
from joinjobkit import random_join
from pydantic import BaseModel

from window_operator.broker import free_port

# jobs in their own processes, each its own Spark: one at a time, beside the lighter tests
# (bash .ci/run runs two pytest workers with --dist loadgroup)
pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.xdist_group("spark-jobs")]


def spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for(path: Path, text: str, count: int = 1, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(
        f"{text!r} not seen in {path}:\n{path.read_text(errors='replace')[-3000:]}"
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[Path]]]:
    """One cluster for the module (its start costs seconds); each job keeps its stores
    under its own name in the workers' state directories."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_NO_DAEMONIZE": "1",
    }
    port = free_port()
    master_log = tmp_path / "master.log"
    procs = [
        subprocess.Popen(
            [spark_class(), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
             "--port", str(port), "--webui-port", str(free_port())],
            env=env, stdout=master_log.open("wb"), stderr=subprocess.STDOUT,
        )
    ]  # fmt: skip
    states = []
    try:
        wait_for(master_log, "I have been elected leader")
        for i in range(2):
            state = tmp_path / f"worker-{i}-state"
            states.append(state)
            procs.append(
                subprocess.Popen(
                    [spark_class(), "org.apache.spark.deploy.worker.Worker",
                     f"spark://127.0.0.1:{port}", "--cores", "1", "--memory", "1g",
                     "--host", "127.0.0.1", "--webui-port", str(free_port()),
                     "--work-dir", str(tmp_path / f"worker-{i}")],
                    env={**env, "WINDOW_OPERATOR_STATE_DIR": str(state)},
                    stdout=(tmp_path / f"worker-{i}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )  # fmt: skip
        wait_for(master_log, "Registering worker", count=2)
        yield f"spark://127.0.0.1:{port}", states
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def run_on_cluster(config: BaseModel, master: str, bootstrap: str, tmp: Path) -> list[Any]:
    """``window-operator run --available-now`` of ``config`` on the cluster; its batch reports."""
    config_path = tmp / "job.yaml"
    config_path.write_text(yaml.safe_dump(orjson.loads(config.model_dump_json())))
    report = tmp / "report.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "window_operator", "run", "--config", str(config_path),
         "--bootstrap-servers", bootstrap, "--available-now", "--master", master,
         "--conf", "spark.executor.cores=1", "--conf", "spark.locality.wait=0",
         "--report", str(report)],
        capture_output=True, timeout=900,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    return [orjson.loads(line) for line in report.read_bytes().splitlines()]


def test_tasks_move_between_executors_and_results_stay_exact(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    cluster: tuple[str, list[Path]],
) -> None:
    master, worker_states = cluster
    topic = unique_name("clicks")
    create_topic(kafka_bootstrap, topic, 4)
    stream = make_stream(24_000, seed=8)
    produce(kafka_bootstrap, topic, stream.records())
    ends = sentinels(int(stream.ts.max()), 4)
    produce(kafka_bootstrap, topic, [], raw=[(k, orjson.dumps(v), p) for k, v, p in ends])
    config = job_config(
        tmp_path, topic, unique_name("job"), spark={"max_offsets_per_trigger": 2_000}
    )
    batches = run_on_cluster(config, master, kafka_bootstrap, tmp_path)
    assert len(batches) >= 5
    tasks = [t for b in batches for t in b["tasks"]]
    # the work really ran on both workers, in their own state directories
    roots = {str(s) for s in worker_states}
    used = {next(r for r in roots if r in t["location"]) for t in tasks}
    assert used == roots
    # and at least one task moved between them, restoring from its changelog
    homes: dict[int, set[str]] = {}
    for t in tasks:
        homes.setdefault(t["task"], set()).add(t["location"])
    assert any(len(h) > 1 for h in homes.values())
    assert sum(t["restored_records"] for t in tasks) > 0
    got = latest_results(config, read_topic(kafka_bootstrap, config.output.topic))
    assert_matches_oracle(got, oracle(stream, 60_000, 10_000))


def test_a_join_on_the_cluster_is_exact(
    tmp_path: Path,
    kafka_bootstrap: str,
    unique_name: Callable[[str], str],
    cluster: tuple[str, list[Path]],
) -> None:
    master, worker_states = cluster
    names = (unique_name("job"), unique_name("left"), unique_name("right"))
    join = random_join(
        kafka_bootstrap,
        tmp_path,
        names,
        kind="left",
        spark={"trigger": "available_now", "max_offsets_per_trigger": 600},
    )
    batches = run_on_cluster(join.config, master, kafka_bootstrap, tmp_path)
    tasks = [t for b in batches for t in b["tasks"]]
    roots = {str(s) for s in worker_states}
    assert {next(r for r in roots if r in t["location"]) for t in tasks} == roots
    assert join.got(kafka_bootstrap) == join.expected()
