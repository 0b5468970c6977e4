"""Start-up: the time from ``window-operator run`` to the job's first committed micro-batch,
for a fresh job and for a restart with warm local stores and an existing checkpoint.

Run ``python benchmarks/bench_startup.py``. Options: ``--runs N`` (3: N fresh starts, each
followed by a restart of the same job, per mode), ``--modes`` (``micro_batch,long_running``:
the job's ``spark.mode``), ``--events`` (events produced before each start,
10,000), ``--partitions`` (4), ``--master`` (``local[2]``), ``--profile`` (also time the
start-up's steps in this process), ``--tmpdir``.

Each start is the command a user types, as a subprocess (``window-operator run --config
job.yaml --report FILE``, processing-time trigger 1 s, exactly-once), against a local
broker started once; the input topic holds the events produced so far. Timed from just
before the subprocess is started to:

* ``report``: the job's first report of a data micro-batch or epoch (``--report`` file;
  written once the batch's state tasks committed);
* ``committed``: Spark's commit log entry of that batch (``<checkpoint>/commits/<id>``);
  a long-running job has no commit log: its report is written once its tasks committed.

The job is then stopped with SIGINT (as Ctrl-C does) and, for the restart, ``--events``
more events are produced first, so the restart has a batch to run. Every fresh start is
a new job (no state, no checkpoint, its topics created by the job). The medians are
printed, with the machine's load average at each start.

``--profile`` runs the steps of ``run`` here, one after the other, and prints how long each
took (config and imports, the topic checks, the transactions probe, the Spark session,
starting the query, the first batch and its phases), for a fresh job and a restart.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FIRST_BATCH_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 60.0
POLL_S = 0.02
REPO = Path(__file__).resolve().parent.parent

JOB_YAML = """\
job: {job}
input: {{topic: {topic}, key: page, timestamp: ts}}
window: {{type: tumbling, size: 10s}}
aggregations:
  - {{name: clicks, op: count}}
  - {{name: mean_latency_ms, op: mean, field: latency_ms}}
watermark: {{allowed_lateness: 1s}}
state: {{dir: {state}}}
spark: {{trigger: 1s, mode: {mode}}}
"""


@dataclass
class Start:
    """One start of the job."""

    mode: str  # spark.mode
    kind: str  # "fresh" | "restart"
    report_s: float
    committed_s: float
    batch_id: int
    load: float


def produce(bootstrap: str, topic: str, events: int, partitions: int) -> None:
    """``events`` click events dated now, round-robin over the partitions."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    ts = int(time.time() * 1000)
    for i in range(events):
        value = b'{"page":"p%d","ts":%d,"latency_ms":%d}' % (i % 100, ts + i // 100, i % 50)
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60):
        raise RuntimeError("the input was not acknowledged")


def write_config(tmp: Path, job: str, topic: str, mode: str = "micro_batch") -> Path:
    path = tmp / f"{job}.yaml"
    path.write_text(JOB_YAML.format(job=job, topic=topic, state=tmp / "state", mode=mode))
    return path


def checkpoint_commits(tmp: Path, job: str) -> set[int]:
    """Batch ids in the job's Spark commit log."""
    commits = tmp / "state" / job / "spark-checkpoint" / "commits"
    if not commits.is_dir():
        return set()
    return {int(p.name) for p in commits.iterdir() if p.name.isdigit()}


def first_data_batch(report: Path) -> int | None:
    """The id of the first batch (or epoch) that read records, in a ``--report`` file
    (written once the batch's state tasks committed)."""
    if not report.exists():
        return None
    for line in report.read_bytes().splitlines():
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None  # a line being written
        if doc["batch"] >= 0 and sum(r["records"] for r in doc["ranges"]) > 0:
            return int(doc["batch"])
    return None


def time_start(
    mode: str, kind: str, config: Path, job: str, tmp: Path, bootstrap: str,
    args: argparse.Namespace,
) -> Start:  # fmt: skip
    """Run the job as a subprocess until its first committed data batch; stop it."""
    report = tmp / f"{job}-{kind}-{uuid.uuid4().hex[:6]}.jsonl"
    before = checkpoint_commits(tmp, job)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    cmd = [sys.executable, "-m", "window_operator", "run", "--config", str(config),
           "--master", args.master, "--report", str(report)]  # fmt: skip
    load = os.getloadavg()[0]
    log = open(tmp / f"{job}-{kind}.log", "wb")  # noqa: SIM115 - closed below
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    report_s = committed_s = None
    batch_id = -1
    try:
        deadline = t0 + FIRST_BATCH_TIMEOUT_S
        while committed_s is None or report_s is None:
            now = time.perf_counter()
            if now > deadline or proc.poll() is not None:
                raise RuntimeError(f"{kind} start of {job} made no batch: see {log.name}")
            if report_s is None and (found := first_data_batch(report)) is not None:
                report_s, batch_id = now - t0, found
                if mode == "long_running":  # no Spark commit log: the report says it
                    committed_s = report_s
            if committed_s is None and checkpoint_commits(tmp, job) - before:
                committed_s = now - t0
            time.sleep(POLL_S)
    finally:
        stop(proc)
        log.close()
    return Start(mode, kind, report_s, committed_s, batch_id, load)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT (Ctrl-C), then the process group if it does not stop in time."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


# ------------------------------------------------------------------------ profile


def profile(tmp: Path, bootstrap: str, topic: str, args: argparse.Namespace) -> list[str]:
    """The steps of ``run`` timed in this process: a fresh job, then its restart."""
    job = f"startup-profile-{uuid.uuid4().hex[:6]}"
    config = write_config(tmp, job, topic)
    lines = []
    for kind in ("fresh", "restart"):
        if kind == "restart":
            produce(bootstrap, topic, args.events, args.partitions)
        steps = profile_once(config, bootstrap, args)
        text = ", ".join(f"{name} {s:.2f}" for name, s in steps)
        lines.append(f"  {kind:<8} (s): {text}")
    return lines


def profile_once(
    config_path: Path, bootstrap: str, args: argparse.Namespace
) -> list[tuple[str, float]]:
    """One start, step by step, as ``_cmd_run`` does it (imports already warm after the first)."""
    steps: list[tuple[str, float]] = []
    t = time.perf_counter()

    def step(name: str) -> None:
        nonlocal t
        now = time.perf_counter()
        steps.append((name, now - t))
        t = now

    from window_operator.config import load_any_config
    from window_operator.job import build_runtime
    from window_operator.spark.driver import StreamingJob
    from window_operator.spark.session import build_session
    from window_operator.spark.topics import prepare_topics

    config = load_any_config(str(config_path))
    build_runtime(config, source=str(config_path))  # type: ignore[arg-type]
    step("config + imports")
    prepare_topics(config, bootstrap)
    step("prepare_topics")
    spark = build_session(app_name="startup-profile", master=args.master)
    step("Spark session")
    reports: list[Any] = []
    job = StreamingJob(config, bootstrap_servers=bootstrap, spark=spark, on_report=reports.append)
    job.start()
    step("job.start (topics again + query start)")
    deadline = time.perf_counter() + FIRST_BATCH_TIMEOUT_S
    while not any(r.batch_id >= 0 for r in reports) and time.perf_counter() < deadline:
        time.sleep(POLL_S)
    step("to the first data batch's report")
    first = next(r for r in reports if r.batch_id >= 0)
    progress = [orjson.loads(p.json) for p in job.query.recentProgress]
    job.stop()
    spark.stop()
    steps += first_batch_phases(first, progress)
    return steps


def first_batch_phases(first: Any, progress: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """The first batch's Spark phases and its slowest state task's open + restore."""
    out: list[tuple[str, float]] = [("  of which foreachBatch", first.seconds)]
    out.append(
        ("slowest task open+restore", max((t.seconds_restore for t in first.tasks), default=0))
    )
    out.append(("slowest map range", max((m.seconds for m in first.ranges), default=0)))
    for p in progress:
        if p.get("batchId") == first.batch_id:
            for k in ("latestOffset", "queryPlanning", "walCommit", "commitOffsets"):
                if k in p.get("durationMs", {}):
                    out.append((k, p["durationMs"][k] / 1000.0))
    return out


# ------------------------------------------------------------------------ main


def machine() -> str:
    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )


def summary(starts: list[Start]) -> list[str]:
    lines = []
    for mode in dict.fromkeys(s.mode for s in starts):
        for kind in ("fresh", "restart"):
            mine = [s for s in starts if s.kind == kind and s.mode == mode]
            if not mine:
                continue
            committed = [s.committed_s for s in mine]
            report = [s.report_s for s in mine]
            loads = ", ".join(f"{s.load:.1f}" for s in mine)
            lines.append(
                f"{mode:<12} {kind:<8} first committed batch: median "
                f"{statistics.median(committed):5.1f} s (runs "
                f"{', '.join(f'{x:.1f}' for x in committed)}); its report "
                f"{statistics.median(report):5.1f} s; load average at each start {loads}"
            )
        restart = [s.committed_s for s in starts if s.kind == "restart" and s.mode == mode]
        if restart:
            verdict = "met" if statistics.median(restart) <= 10.0 else "NOT met"
            lines.append(f"{mode}: goal, a restart's first committed batch within 10 s: {verdict}")
    return lines


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--events", type=int, default=10_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument(
        "--modes", default="micro_batch,long_running", help="the job's spark.mode(s) to time"
    )
    ap.add_argument("--tmpdir", type=Path, default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from window_operator.broker import LocalBroker
    from window_operator.kafka_admin import KafkaAdmin

    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="bench-startup-", dir=args.tmpdir))
    print(f"machine: {machine()}; master {args.master}", flush=True)
    broker = LocalBroker(data_dir=tmp / "broker")
    broker.start()
    try:
        bootstrap = broker.bootstrap_servers
        starts: list[Start] = []
        for _ in range(args.runs):
            for mode in args.modes.split(","):
                job = f"startup-{uuid.uuid4().hex[:8]}"
                # a topic per run: every fresh start reads the same amount of input
                topic = f"clicks-{job}"
                KafkaAdmin(bootstrap).create_topic(topic, args.partitions, {"retention.ms": "-1"})
                config = write_config(tmp, job, topic, mode)
                for kind in ("fresh", "restart"):
                    produce(bootstrap, topic, args.events, args.partitions)
                    starts.append(time_start(mode, kind, config, job, tmp, bootstrap, args))
                    s = starts[-1]
                    print(f"  {mode:<12} {kind:<8} committed {s.committed_s:5.1f} s, report "
                          f"{s.report_s:5.1f} s (batch {s.batch_id}, load {s.load:.1f})",
                          flush=True)  # fmt: skip
        print("\n".join(summary(starts)))
        if args.profile:
            print("where a start's time goes (in this process):")
            print("\n".join(profile(tmp, bootstrap, topic, args)))
        return 0
    finally:
        broker.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
