"""Random-crash trials: kill the streaming job (and sometimes the broker) at random moments,
restart it, and check that every result reaches the output exactly once.

Run ``python benchmarks/crash_trials.py`` (options: ``--kills N`` per job, default 20;
``--jobs aggregation,session,join``, or also ``count``, ``offsets``; ``--events N`` per
job, default 6,000; ``--seed S``;
``--broker-kills P`` the share of trials that also SIGKILL the broker, default 0.25;
``--wipe P`` the share that also delete the local state directory, default 0.2;
``--startup-kills P`` the share of kills during start-up, default 0.1; ``--max-delay S``
how long after the job's first step a kill may come, default 8 s; ``--mode long_running``
the job's long-running shape instead of micro-batches; ``--guarantee at_least_once`` the
jobs' ``processing.guarantee``, default ``exactly_once``).
Exit status 1 when a result is lost, wrong or duplicated (at_least_once: lost, wrong,
or changed after its final value; or an error record missing).

Per job: a private local broker (noida-db) and a stream produced round-robin (not keyed
by the grouping key), with late and out-of-order events, a few bad records and several
keys per partition. ``window-operator run`` runs as a subprocess in its own process group
with a 1 s trigger and small micro-batches; after a random delay the whole group is
SIGKILLed, and so is every process the job started (PySpark's Python workers leave the
group). In some trials the local state directory is deleted too, or the broker is
SIGKILLed and started again on the same port and data directory. Then the job restarts;
after the last kill it runs to the end of the input (``--available-now``). The ``count``
job's stream is keyed instead (a key's messages in one partition), so that its windows do
not depend on where batches are cut; its partial windows at the end stay open, unexpected.

The output is read with ``isolation.level=read_committed``. Checked: the latest result of
every window equals the oracle (none missing, none wrong), no result record appears twice,
and every bad record is in the error topic exactly once. The phase each kill hit is read
from the job's own trace (``WINDOW_OPERATOR_TRACE``): map side, before outputs, after
outputs, after the changelog (transaction committed), after the local commit.

A duplicate (of a result, or of an error record: both carry the ``attempt`` header
while the job is traced) whose first copy was written by an attempt that never committed
(its ``attempt`` header is not among the committed attempts the trace lists) is the test
broker's defect, not the job's: noida-db does not abort the open transaction of a killed
producer when its transactional id is initialised again, and commits it with the next one
(real Kafka aborts it). Such duplicates are counted apart. So are those of an attempt
that committed within :data:`BROKER_LOSS_S` before a broker SIGKILL: that broker loses
the writes of its last second, commit markers included, so such a transaction may be
open again after the restart (its records were kept, its commit lost) and is then
committed with the next one, while the job, rightly, sends the lost batch again.

Under ``--guarantee at_least_once`` the output is written without transactions and read
as such (``read_uncommitted``; the broker's transaction defects above do not apply). The
README allows a batch's identical results to be sent again after a crash (an upsert
log), so the check is per window, over its records in offset order: the last one must
equal the oracle (else ``wrong``; none, or a tombstone last: ``lost``); a record
byte-identical to an earlier one of the window is ``resent`` (allowed); a window whose
final record was followed by another value (an older one sent again, a new one, a
tombstone) before that final record came again is ``changed`` (a failure: an upsert
reader saw the final value replaced). ``stale`` counts, among the resent, copies of an
earlier value sent after another one (an upsert reader sees the window go back; allowed
before the final value, reported). An error record missing is a
failure; one sent twice is counted (``twice``) but allowed, as a re-sent result is.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from window_operator.broker import LocalBroker, free_port
from window_operator.kafka_admin import KafkaAdmin, TopicSpec

BASE = 1_700_000_000_000
PHASES = ("startup", "map", "apply", "outputs", "changelog", "local-commit")
PHASE_NAMES = {
    "startup": "before the first batch",
    "map": "map side",
    "apply": "before outputs",
    "outputs": "after outputs",
    "changelog": "after changelog (committed)",
    "local-commit": "after local commit",
}
TAG_ENV = "WINDOW_OPERATOR_HARNESS_TAG"
#: a long-running worker's trace of its start of reading, as a phase
READING = {"worker-reading": "map"}
#: how far back from its SIGKILL the local broker may lose acknowledged writes (BROKER.md:
#: about a second), with a margin
BROKER_LOSS_S = 2.0


# ------------------------------------------------------------------------------ streams


@dataclass
class Stream:
    """What was produced: per topic the records, the bad ones' positions, each event's
    (partition, offset) and per partition the offset of its far event, the last."""

    events: list[dict[str, Any]]
    bad: set[tuple[str, int, int]] = field(default_factory=set)
    at: list[tuple[int, int]] = field(default_factory=list)
    ends: dict[int, int] = field(default_factory=dict)


def _produce(bootstrap: str, topic: str, rows: list[tuple[bytes, int]]) -> list[int]:
    """Produce ``(value, partition)`` rows in order; their offsets."""
    offsets: list[int] = [0] * len(rows)

    def done(i: int) -> Any:
        def cb(err: Any, msg: Any) -> None:
            assert err is None, err
            offsets[i] = msg.offset()

        return cb

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "enable.idempotence": True})
    for i, (value, part) in enumerate(rows):
        while True:
            try:
                p.produce(topic, value=value, partition=part, on_delivery=done(i))
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0
    return offsets


def _events(rng: random.Random, n: int, keys: int, gap_ms: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        late = rng.random() < 0.1
        ts = BASE + i * gap_ms - (rng.randrange(1, 8_000) if late else 0)
        out.append({"k": f"key-{rng.randrange(keys)}", "ts": ts, "v": rng.randrange(100)})
    return out


def produce_stream(
    bootstrap: str,
    topic: str,
    events: list[dict[str, Any]],
    partitions: int,
    rng: random.Random,
    *,
    keyed: bool = False,
) -> Stream:
    """Round-robin records (``keyed``: by key) with a few bad ones among them, then one far
    event per partition."""

    def part(i: int, e: dict[str, Any]) -> int:
        return zlib.crc32(e["k"].encode()) % partitions if keyed else i % partitions

    rows = [(orjson.dumps(e), part(i, e)) for i, e in enumerate(events)]
    bad_at = sorted(rng.sample(range(len(rows)), 5))
    for j, i in enumerate(bad_at):
        rows.insert(i + j, (b'{"k": "broken", "ts": ' if j % 2 else b"not json", i % partitions))
    end = max(e["ts"] for e in events) + 3_600_000
    rows += [(orjson.dumps({"k": "__end__", "ts": end, "v": 0}), p) for p in range(partitions)]
    offsets = _produce(bootstrap, topic, rows)
    stream = Stream(events)
    for j, i in enumerate(bad_at):
        row = i + j
        stream.bad.add((topic, rows[row][1], offsets[row]))
    for i in range(len(events)):
        row = i + bisect.bisect_right(bad_at, i)
        stream.at.append((rows[row][1], offsets[row]))
    stream.ends = {rows[-1 - p][1]: offsets[-1 - p] for p in range(partitions)}
    return stream


# ------------------------------------------------------------------------------ jobs


@dataclass
class Job:
    """A job under trial: its config file, topics and what the output must be."""

    kind: str
    config: dict[str, Any]
    path: Path
    streams: list[Stream]
    expected: dict[bytes, Any]

    @property
    def output(self) -> str:
        return str(self.config["output"]["topic"])

    @property
    def errors(self) -> str:
        return str(self.config["output"]["errors_topic"])


def _base_config(name: str, state: Path) -> dict[str, Any]:
    return {
        "job": name,
        "watermark": {"allowed_lateness": "2s"},
        "retention": {"time": "1h"},
        "output": {"topic": f"{name}-out", "errors_topic": f"{name}-errors"},
        "state": {"dir": str(state)},
        "processing": {"guarantee": "exactly_once", "broker_timeout": "2m"},
        "spark": {"trigger": "1s", "max_offsets_per_trigger": 400},
    }


def aggregation_job(bootstrap: str, work: Path, rng: random.Random, n: int) -> Job:
    name = f"crash-agg-{uuid.uuid4().hex[:6]}"
    KafkaAdmin(bootstrap).create_topics([TopicSpec(f"{name}-in", 4, {"retention.ms": "-1"})])
    events = _events(rng, n, 60, 50)
    stream = produce_stream(bootstrap, f"{name}-in", events, 4, rng)
    config = {
        **_base_config(name, work / "state"),
        "input": {"topic": f"{name}-in", "key": "k", "timestamp": "ts"},
        "window": {"type": "hopping", "size": "30s", "step": "10s"},
        "aggregations": [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}],
        "emit": {"late": "per_arrival"},
    }
    expected: dict[bytes, Any] = {}
    for e in events:
        first = e["ts"] - 30_000 + 10_000
        first -= first % 10_000
        for w in range(first, e["ts"] + 1, 10_000):
            if w <= e["ts"] < w + 30_000:
                key = orjson.dumps({"key": e["k"], "window_start": w, "window_end": w + 30_000})
                _count(expected, key, e["v"])
    return Job("aggregation", config, work / "job.yaml", [stream], expected)


def _count(expected: dict[bytes, Any], key: bytes, value: float) -> None:
    """One event more in the expected ``[count, sum]`` of the window ``key``."""
    n_s = expected.setdefault(key, [0, 0.0])
    n_s[0] += 1
    n_s[1] += value


def session_job(bootstrap: str, work: Path, rng: random.Random, n: int) -> Job:
    name = f"crash-ses-{uuid.uuid4().hex[:6]}"
    KafkaAdmin(bootstrap).create_topics([TopicSpec(f"{name}-in", 4, {"retention.ms": "-1"})])
    events = _events(rng, n, 80, 60)
    stream = produce_stream(bootstrap, f"{name}-in", events, 4, rng)
    gap = 5_000
    config = {
        **_base_config(name, work / "state"),
        "input": {"topic": f"{name}-in", "key": "k", "timestamp": "ts"},
        "window": {"type": "session", "gap": gap},
        "aggregations": [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}],
        "emit": {"late": "per_arrival"},
    }
    by_key: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_key.setdefault(e["k"], []).append(e)
    expected: dict[bytes, Any] = {}
    for k, evs in by_key.items():
        evs.sort(key=lambda e: e["ts"])
        group = [evs[0]]
        for e in evs[1:] + [None]:  # type: ignore[list-item]
            if e is None or e["ts"] - group[-1]["ts"] > gap:
                start, end = group[0]["ts"], group[-1]["ts"] + gap
                key = orjson.dumps({"key": k, "window_start": start, "window_end": end})
                expected[key] = [len(group), float(sum(x["v"] for x in group))]
                group = [] if e is None else [e]
            else:
                group.append(e)
    return Job("session", config, work / "job.yaml", [stream], expected)


def join_job(bootstrap: str, work: Path, rng: random.Random, n: int) -> Job:
    name = f"crash-join-{uuid.uuid4().hex[:6]}"
    topics = (f"{name}-left", f"{name}-right")
    KafkaAdmin(bootstrap).create_topics([TopicSpec(t, 2, {"retention.ms": "-1"}) for t in topics])
    events = _events(rng, n, 100, 40)
    sides: list[list[dict[str, Any]]] = [[], []]
    for i, e in enumerate(events):
        sides[rng.randrange(2)].append({**e, "n": i})
    streams = [produce_stream(bootstrap, t, s, 2, rng) for t, s in zip(topics, sides, strict=True)]
    config = {
        **_base_config(name, work / "state"),
        "join": {
            "left": {"name": "l", "topic": topics[0], "timestamp": "ts"},
            "right": {"name": "r", "topic": topics[1], "timestamp": "ts"},
            "on": ["k"],
            "between": ["-2s", "5s"],
        },
    }
    expected: dict[bytes, Any] = {}
    rights: dict[str, list[dict[str, Any]]] = {}
    for r in sides[1]:
        rights.setdefault(r["k"], []).append(r)
    for left in sides[0]:
        for r in rights.get(left["k"], []):
            if -2_000 <= r["ts"] - left["ts"] <= 5_000:
                expected[orjson.dumps([left["n"], r["n"]])] = 1
    return Job("join", config, work / "job.yaml", streams, expected)


def _tuple_config(name: str, state: Path, window: dict[str, Any]) -> dict[str, Any]:
    """A count or offsets job: no event-time settings (they do not apply)."""
    config = _base_config(name, state)
    del config["watermark"], config["retention"]
    return {
        **config,
        "input": {"topic": f"{name}-in", "key": "k", "timestamp": "ts"},
        "window": window,
        "aggregations": [{"name": "n", "op": "count"}, {"name": "s", "op": "sum", "field": "v"}],
    }


def count_job(bootstrap: str, work: Path, rng: random.Random, n: int) -> Job:
    """Count windows; a key's partial window at the end stays open (no result)."""
    name = f"crash-cnt-{uuid.uuid4().hex[:6]}"
    KafkaAdmin(bootstrap).create_topics([TopicSpec(f"{name}-in", 4, {"retention.ms": "-1"})])
    events = _events(rng, n, 20, 50)
    stream = produce_stream(bootstrap, f"{name}-in", events, 4, rng, keyed=True)
    size, step = 10, 5
    config = _tuple_config(name, work / "state", {"type": "count", "size": size, "step": step})
    by_key: dict[str, list[dict[str, Any]]] = {}
    for e, _ in sorted(zip(events, stream.at, strict=True), key=lambda x: x[1]):
        by_key.setdefault(e["k"], []).append(e)
    expected: dict[bytes, Any] = {}
    for k, evs in by_key.items():
        for s in range(0, len(evs) - size + 1, step):
            key = orjson.dumps({"key": k, "window_start": s, "window_end": s + size})
            expected[key] = [size, float(sum(e["v"] for e in evs[s : s + size]))]
    return Job("count", config, work / "job.yaml", [stream], expected)


def offsets_job(bootstrap: str, work: Path, rng: random.Random, n: int) -> Job:
    """Offsets windows; a window fires once its partition has an offset past its end."""
    name = f"crash-off-{uuid.uuid4().hex[:6]}"
    KafkaAdmin(bootstrap).create_topics([TopicSpec(f"{name}-in", 4, {"retention.ms": "-1"})])
    events = _events(rng, n, 10, 50)
    stream = produce_stream(bootstrap, f"{name}-in", events, 4, rng)
    size, step = 40, 20
    config = _tuple_config(name, work / "state", {"type": "offsets", "size": size, "step": step})
    expected: dict[bytes, Any] = {}
    for e, (p, o) in zip(events, stream.at, strict=True):
        for s in range(max(0, o - size + step) // step * step, o + 1, step):
            if s + size <= stream.ends[p]:
                doc = {"key": e["k"], "window_start": s, "window_end": s + size, "partition": p}
                _count(expected, orjson.dumps(doc), e["v"])
    return Job("offsets", config, work / "job.yaml", [stream], expected)


MAKERS = {
    "aggregation": aggregation_job,
    "session": session_job,
    "join": join_job,
    "count": count_job,
    "offsets": offsets_job,
}


# ------------------------------------------------------------------------------ running


def _tagged_pids(tag: str) -> list[int]:
    """Processes whose environment carries ``tag`` (the job and everything it started)."""
    needle = f"{TAG_ENV}={tag}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_job(proc: subprocess.Popen[bytes], tag: str) -> None:
    """SIGKILL the job's process group and every straggler that carries its tag."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for pid in _tagged_pids(tag):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait(30)


def start_job(
    job: Job, bootstrap: str, trace: Path, *, available_now: bool, mode: str = "micro_batch"
) -> tuple[Any, str]:
    tag = uuid.uuid4().hex
    env = {**os.environ, TAG_ENV: tag, "WINDOW_OPERATOR_TRACE": str(trace)}
    cmd = [sys.executable, "-m", "window_operator", "run", "--config", str(job.path),
           "--bootstrap-servers", bootstrap, "--master", "local[2]", "--mode", mode]  # fmt: skip
    if available_now:
        cmd.append("--available-now")
    log = open(job.path.parent / "job.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)
    log.close()
    return proc, tag


def wait_for_activity(trace: Path, since: float, proc: Any, timeout_s: float = 180) -> None:
    """Until the job (started at ``since``) traces its first step, or ends."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if trace.exists() and any(
            float(ln.split()[0]) >= since for ln in trace.read_text().splitlines() if ln.strip()
        ):
            return
        time.sleep(0.2)


def phase_at(trace: Path, since: float, at: float) -> str:
    """The furthest phase of the newest batch a task reached between ``since`` and ``at``."""
    if not trace.exists():
        return "startup"
    lines = [ln.split() for ln in trace.read_text().splitlines() if ln.strip()]
    # a long-running worker traces its reading, and the phases of its tasks' epochs
    lines = [[*ln[:1], READING.get(ln[1], ln[1]), *ln[2:]] for ln in lines]
    lines = [ln for ln in lines if since <= float(ln[0]) <= at and ln[1] in PHASES]
    if not lines:
        return "startup"
    newest = max(int(ln[3]) for ln in lines)
    reached = [ln[1] for ln in lines if int(ln[3]) == newest]
    return max(reached, key=PHASES.index)


def committed_attempts(trace: Path, broker_kills: Sequence[float] = ()) -> set[str]:
    """Attempts whose transaction committed (the trace's ``changelog`` lines), except
    those a broker SIGKILLed at one of ``broker_kills`` may have lost."""
    if not trace.exists():
        return set()
    lines = [ln.split() for ln in trace.read_text().splitlines()]
    return {
        ln[4]
        for ln in lines
        if len(ln) > 4
        and ln[1] == "changelog"
        and not any(0 <= at - float(ln[0]) <= BROKER_LOSS_S for at in broker_kills)
    }


def results_sent(trace: Path) -> dict[str, int]:
    """How many results each committed attempt sent (from the trace's ``changelog`` lines)."""
    lines = [ln.split() for ln in trace.read_text().splitlines()] if trace.exists() else []
    return {ln[4]: int(ln[5]) for ln in lines if len(ln) > 5 and ln[1] == "changelog"}


# ------------------------------------------------------------------------------ checking


def read_all(bootstrap: str, topic: str, *, committed: bool = True) -> list[Any]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"crash-check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    parts = KafkaAdmin(bootstrap).partition_count(topic) or 0
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    out: list[Any] = []
    eof: set[int] = set()
    deadline = time.monotonic() + 120
    while len(eof) < parts and time.monotonic() < deadline:
        for m in c.consume(5_000, 0.5):
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    eof.add(m.partition())
                continue
            out.append(m)
    c.close()
    return out


@dataclass
class Verdict:
    windows: int = 0
    lost: int = 0
    wrong: int = 0
    duplicates: int = 0
    broker_duplicates: int = 0
    errors_expected: int = 0
    errors_missing: int = 0
    errors_twice: int = 0
    #: at_least_once: identical copies of a window's earlier record (allowed)
    resent: int = 0
    #: at_least_once: of the resent, copies of an earlier value sent after another one
    stale: int = 0
    #: at_least_once: windows whose final record was followed by another value (failure)
    changed: int = 0
    #: at_least_once: windows whose records are in more than one output partition
    split: int = 0
    at_least_once: bool = False

    @property
    def failed(self) -> bool:
        if self.at_least_once:
            return bool(self.lost or self.wrong or self.changed or self.errors_missing)
        return bool(
            self.lost or self.wrong or self.duplicates or self.errors_missing or self.errors_twice
        )


def check(job: Job, bootstrap: str, committed: set[str]) -> Verdict:
    v = Verdict(windows=len(job.expected))
    msgs = read_all(bootstrap, job.output)
    copies: dict[tuple[bytes, bytes], list[str]] = {}
    latest: dict[bytes, Any] = {}
    for m in msgs:
        key, value = m.key(), m.value()
        if value is None:
            latest.pop(key, None)
            continue
        attempt = dict(m.headers() or []).get("attempt", b"").decode()
        copies.setdefault((key, value), []).append(attempt)
        r = orjson.loads(value)
        if job.kind == "join":
            if "n" in r["left"]:  # not the two end-of-input records, which pair up
                latest[orjson.dumps([r["left"]["n"], r["right"]["n"]])] = 1
        elif r["key"] != "__end__":
            latest[key] = [r["values"]["n"], float(r["values"]["s"])]
    for attempts in copies.values():
        if len(attempts) > 1:
            if any(a and a not in committed for a in attempts):
                v.broker_duplicates += len(attempts) - 1
            else:
                v.duplicates += len(attempts) - 1
    for key, want in job.expected.items():
        got = latest.get(key)
        if got is None:
            v.lost += 1
        elif got != want:
            v.wrong += 1
    v.wrong += len(set(latest) - set(job.expected))
    bad = set().union(*(s.bad for s in job.streams))
    v.errors_expected = len(bad)
    seen: dict[tuple[str, int, int], list[str]] = {}
    for m in read_all(bootstrap, job.errors):
        h = {k: x.decode() for k, x in (m.headers() or [])}
        at = (h["source.topic"], int(h["source.partition"]), int(h["source.offset"]))
        seen.setdefault(at, []).append(h.get("attempt", ""))
    v.errors_missing = len(bad - set(seen))
    for attempts in seen.values():  # an uncommitted attempt's copy: the broker's, as above
        if len(attempts) > 1:
            if any(a and a not in committed for a in attempts):
                v.broker_duplicates += len(attempts) - 1
            else:
                v.errors_twice += len(attempts) - 1
    return v


def _window_of(job: Job, key: bytes, value: bytes | None) -> bytes | None:
    """The oracle's key of an output record (None: an end-of-input record)."""
    if job.kind == "join":
        if value is None:
            return None
        r = orjson.loads(value)
        if "n" not in r["left"]:  # the two end-of-input records, which pair up
            return None
        return orjson.dumps([r["left"]["n"], r["right"]["n"]])
    if orjson.loads(key)["key"] == "__end__":
        return None
    return key


def _result_of(job: Job, value: bytes) -> Any:
    if job.kind == "join":
        return 1
    r = orjson.loads(value)
    return [r["values"]["n"], float(r["values"]["s"])]


def check_at_least_once(job: Job, bootstrap: str) -> Verdict:
    """The at-least-once verdict (see the module doc): per window, its records in offset
    order; identical copies allowed, a wrong or missing last one or a change after the
    final one not."""
    v = Verdict(windows=len(job.expected), at_least_once=True)
    msgs = read_all(bootstrap, job.output, committed=False)
    msgs.sort(key=lambda m: (m.partition(), m.offset()))
    records: dict[bytes, list[bytes | None]] = {}
    parts: dict[bytes, set[int]] = {}
    for m in msgs:
        window = _window_of(job, m.key(), m.value())
        if window is None:
            continue
        records.setdefault(window, []).append(m.value())
        parts.setdefault(window, set()).add(m.partition())
    v.split = sum(len(p) > 1 for p in parts.values())
    for window, seq in records.items():
        want = job.expected.get(window)
        last = seq[-1]
        if want is None:
            if last is not None:
                v.wrong += 1  # a window the oracle does not have
        elif last is None:
            v.lost += 1
        elif _result_of(job, last) != want:
            v.wrong += 1
        elif any(x != last for x in seq[seq.index(last) + 1 :]):
            v.changed += 1  # the final record was followed by another value
        seen: set[bytes | None] = set()
        for i, value in enumerate(seq):
            if value in seen:
                v.resent += 1
                v.stale += seq[i - 1] != value
            seen.add(value)
    v.lost += sum(1 for w in job.expected if w not in records)
    bad = set().union(*(s.bad for s in job.streams))
    v.errors_expected = len(bad)
    seen_err: Counter[tuple[str, int, int]] = Counter()
    for m in read_all(bootstrap, job.errors, committed=False):
        h = {k: x.decode() for k, x in (m.headers() or [])}
        seen_err[(h["source.topic"], int(h["source.partition"]), int(h["source.offset"]))] += 1
    v.errors_missing = len(bad - set(seen_err))
    v.errors_twice = sum(n - 1 for n in seen_err.values())
    return v


# ------------------------------------------------------------------------------ trials


@dataclass
class Trials:
    kills: int = 0
    broker_kills: int = 0
    wipes: int = 0
    phases: Counter[str] = field(default_factory=Counter)
    verdicts: dict[str, Verdict] = field(default_factory=dict)


def run_trials(kind: str, args: argparse.Namespace, rng: random.Random, out: Trials) -> None:
    work = Path(tempfile.mkdtemp(prefix=f"crash-{kind}-"))
    if args.keep:
        print(f"  {kind}: work directory {work}", flush=True)
    broker = LocalBroker(port=free_port(), data_dir=work / "broker")
    broker.start()
    try:
        bootstrap = broker.bootstrap_servers
        job = MAKERS[kind](bootstrap, work, rng, args.events)
        job.config["processing"]["guarantee"] = getattr(args, "guarantee", "exactly_once")
        job.path.write_text(yaml.safe_dump(job.config))
        trace = work / "trace.log"
        broker_kills: list[float] = []
        for trial in range(args.kills):
            proc, tag = start_job(job, bootstrap, trace, available_now=False, mode=args.mode)
            started = time.time()
            if rng.random() >= args.startup_kills:
                wait_for_activity(trace, started, proc)
            time.sleep(rng.uniform(args.min_delay, args.max_delay))
            at = time.time()
            if proc.poll() is not None:
                raise SystemExit(f"{kind}: the job ended by itself ({proc.returncode}); see {work}")
            kill_job(proc, tag)
            out.kills += 1
            out.phases[phase_at(trace, started, at)] += 1
            if rng.random() < args.wipe:
                shutil.rmtree(work / "state" / job.config["job"] / "task-0", ignore_errors=True)
                for d in (work / "state" / job.config["job"]).glob("task-*"):
                    shutil.rmtree(d, ignore_errors=True)
                out.wipes += 1
            forced = trial in getattr(args, "broker_kill_trials", ())
            if rng.random() < args.broker_kills or forced:
                broker_kills.append(time.time())
                broker.kill()
                time.sleep(rng.uniform(1.0, 5.0))
                broker.start()
                out.broker_kills += 1
            print(f"  {kind} trial {trial + 1}: killed at {phase_at(trace, started, at)}",
                  flush=True)  # fmt: skip
        proc, tag = start_job(job, bootstrap, trace, available_now=True, mode=args.mode)
        code = proc.wait(900)
        kill_job(proc, tag)
        if code != 0:
            raise SystemExit(f"{kind}: the final run failed ({code}); see {work}/job.log")
        if job.config["processing"]["guarantee"] == "at_least_once":
            out.verdicts[kind] = check_at_least_once(job, bootstrap)
        else:
            out.verdicts[kind] = check(job, bootstrap, committed_attempts(trace, broker_kills))
    finally:
        broker.kill()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20, help="kills per job")
    ap.add_argument("--jobs", default="aggregation,session,join")
    ap.add_argument("--events", type=int, default=6_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--broker-kills", type=float, default=0.25)
    ap.add_argument("--wipe", type=float, default=0.2)
    ap.add_argument("--startup-kills", type=float, default=0.1,
                    help="share of kills during start-up")  # fmt: skip
    ap.add_argument("--min-delay", type=float, default=0.0, help="after the job's first step")
    ap.add_argument("--max-delay", type=float, default=8.0)
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    ap.add_argument("--mode", default="micro_batch", choices=["micro_batch", "long_running"])
    ap.add_argument("--guarantee", default="exactly_once",
                    choices=["exactly_once", "at_least_once"],
                    help="the jobs' processing.guarantee")  # fmt: skip
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    out = Trials()
    started = time.time()
    for kind in args.jobs.split(","):
        print(f"{kind}: {args.kills} kills", flush=True)
        run_trials(kind, args, rng, out)
    print(report(out, time.time() - started))
    return 1 if any(v.failed for v in out.verdicts.values()) else 0


def report(out: Trials, seconds: float) -> str:
    lines = [
        f"trials: {len(out.verdicts)} jobs, {out.kills} kills of the job "
        f"({out.broker_kills} with a broker SIGKILL, {out.wipes} with the local state deleted) "
        f"in {seconds:.0f} s",
        "kills by the phase the job had reached:",
    ]
    lines += [f"  {PHASE_NAMES[p]:<30} {out.phases[p]}" for p in PHASES]
    lines.append(
        f"{'job':<12} {'windows':>8} {'lost':>5} {'wrong':>6} {'dupl.':>6} {'broker dupl.':>13} "
        f"{'errors':>7} {'missing':>8} {'twice':>6}"
    )
    for kind, v in out.verdicts.items():
        lines.append(
            f"{kind:<12} {v.windows:>8} {v.lost:>5} {v.wrong:>6} {v.duplicates:>6} "
            f"{v.broker_duplicates:>13} {v.errors_expected:>7} {v.errors_missing:>8} "
            f"{v.errors_twice:>6}"
        )
    alo = {k: v for k, v in out.verdicts.items() if v.at_least_once}
    if alo:
        lines.append(
            "at_least_once (dupl./broker dupl. do not apply; twice is allowed):\n"
            f"{'job':<12} {'resent':>7} {'stale':>6} {'changed':>8} {'split':>6}"
        )
        for kind, v in alo.items():
            lines.append(f"{kind:<12} {v.resent:>7} {v.stale:>6} {v.changed:>8} {v.split:>6}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
