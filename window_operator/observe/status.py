"""``window-operator status``: a job's progress and health, read without the job running.

Sources: the Spark checkpoint (committed input offsets, the last batch and its time,
see :mod:`~window_operator.observe.checkpoint`), the driver's clock log (watermark and
max event time per input partition), the input topics (end offsets, hence the lag) and
the changelog topic (offsets per state task), plus the local stores when this host has
them. A job is unhealthy when input waits and no batch ran for ``max_idle_triggers``
trigger intervals (or, for ``available_now`` jobs, whenever input waits), and when the
lag grew between two readings ``interval_s`` apart. With no broker answering, a job
that ran is told from its checkpoint and heartbeat alone (``unreachable`` set).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from stores.changelog import changelog_topic
from window_operator.config import JobConfig, JoinJobConfig
from window_operator.durations import format_duration_ms
from window_operator.kafka_admin import BrokerUnreachableError, KafkaAdmin
from window_operator.observe.checkpoint import CheckpointState, TopicPartition, read_checkpoint
from window_operator.observe.heartbeat import STALE_S, Beat, read_heartbeat
from window_operator.policies import NO_WATERMARK
from window_operator.runtime.settings import task_state_dir
from window_operator.runtime.starts import recreated_topics
from window_operator.spark.topics import input_topics, source_topics

__all__ = ["JobStatus", "PartitionStatus", "TaskStatus", "format_status", "job_status"]

AnyJobConfig = JobConfig | JoinJobConfig


@dataclass(frozen=True)
class PartitionStatus:
    """One input partition: the job's position, the end offset, lag and event time."""

    topic: str
    partition: int
    committed: int | None
    end: int | None
    max_event_time: int | None
    watermark: int | None
    #: the earliest offset the partition still holds (asked where nothing is committed)
    start: int | None = None

    @property
    def lag(self) -> int:
        """Offsets not processed yet (0 when the end is unknown); of a partition the
        job never read, those it still holds."""
        if self.end is None:
            return 0
        base = self.committed if self.committed is not None else self.start
        return max(0, self.end - (base or 0))


@dataclass(frozen=True)
class TaskStatus:
    """One state task: its changelog partition's offsets and its local store (if here)."""

    task: int
    changelog_start: int
    changelog_end: int
    local_bytes: int | None

    @property
    def changelog_offsets(self) -> int:
        """Offsets the changelog partition spans: its records, the offsets compaction
        emptied and one per transaction marker (one per batch or epoch committed)."""
        return max(0, self.changelog_end - self.changelog_start)


@dataclass
class JobStatus:
    """What :func:`job_status` found; ``problems`` empty means healthy."""

    job: str
    checkpoint: CheckpointState
    partitions: list[PartitionStatus] = field(default_factory=list)
    tasks: list[TaskStatus] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    now_ms: int = 0
    #: the last heartbeat of ``run`` (``None``: none, or not read yet)
    beat: Beat | None = None
    #: no broker answered: the rest is from the checkpoint and the heartbeat alone
    unreachable: BrokerUnreachableError | None = None
    #: what is worth knowing and not a problem (the partition the watermark waits for)
    notes: list[str] = field(default_factory=list)

    @property
    def healthy(self) -> bool:
        """Whether no problem was found."""
        return not self.problems

    @property
    def lag(self) -> int:
        """Total lag over the input partitions."""
        return sum(p.lag for p in self.partitions)

    @property
    def holding(self) -> list[PartitionStatus]:
        """The input partitions the job's watermark stands at while others are ahead of
        them: the slowest, which the watermark waits for (none when every partition is
        at the same time, or the watermark is at none, as when idle ones are skipped, nor
        when it stands at the newest partition's: with every partition idle the freshest
        leads, and nothing is ahead of it to wait for)."""
        clock = self.checkpoint.clock
        marks = [p.watermark for p in self.partitions if p.watermark is not None]
        if clock is None or len(marks) < 2 or min(marks) == max(marks):
            return []
        ahead = max(marks)
        return [
            p for p in self.partitions if p.watermark == clock.watermark and p.watermark < ahead
        ]


def _partitions(
    config: AnyJobConfig, admin: KafkaAdmin | None, cp: CheckpointState, counts: dict[str, int]
) -> list[PartitionStatus]:
    """Every input partition (``counts``: partitions per input topic) and every one the
    checkpoint names, with the ends and the lag read now (none without ``admin``)."""
    topics = input_topics(config)
    known: set[TopicPartition] = {(t, p) for t in topics for p in range(counts.get(t, 0))}
    known |= {tp for tp in cp.committed if tp[0] in topics}
    existing = sorted(tp for tp in known if tp[1] < counts.get(tp[0], 0))
    ends, starts = {}, {}
    if admin is not None:
        ends = admin.list_offsets(existing, earliest=False)
        unread = [tp for tp in existing if tp not in cp.committed]
        starts = admin.list_offsets(unread, earliest=True) if unread else {}
    lateness = config.watermark.allowed_lateness
    # the clock keys partitions by source index: a self-join's two inputs read one topic
    # (``topics`` names it once)
    sources = source_topics(config)
    max_ts: dict[TopicPartition, int] = {}
    if cp.clock is not None:
        for p, t in cp.clock.max_ts.items():
            if t > NO_WATERMARK:  # a partition that waits unread: no event time yet
                tp = (sources[p.source], p.partition)
                max_ts[tp] = max(t, max_ts.get(tp, t))
    out = []
    for tp in sorted(known):
        ts = max_ts.get(tp)
        out.append(
            PartitionStatus(
                tp[0],
                tp[1],
                cp.committed.get(tp),
                ends.get(tp),
                ts,
                None if ts is None else ts - lateness,
                starts.get(tp),
            )  # fmt: skip
        )
    return out


def _tasks(config: AnyJobConfig, admin: KafkaAdmin, state_dir: str) -> list[TaskStatus]:
    topic = changelog_topic(config.job)
    count = admin.partition_counts([topic]).get(topic, 0)
    parts = [(topic, p) for p in range(count)]
    starts = admin.list_offsets(parts, earliest=True)
    ends = admin.list_offsets(parts, earliest=False, read_committed=False)
    out = []
    for tp in parts:
        path = task_state_dir(Path(state_dir), config.job, tp[1])
        local = _dir_bytes(path) if path.is_dir() else None
        out.append(TaskStatus(tp[1], starts[tp], ends[tp], local))
    return out


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def job_status(
    config: AnyJobConfig,
    bootstrap_servers: str,
    *,
    state_dir: str | None = None,
    max_idle_triggers: int = 3,
    interval_s: float = 0.0,
) -> JobStatus:
    """Read the job's status (see module doc); a job that never ran has a problem saying so."""
    admin = KafkaAdmin(bootstrap_servers, client_config=config.kafka.consumer)
    cp = read_checkpoint(str(config.spark.checkpoint_dir))
    status = JobStatus(config.job, cp, now_ms=int(time.time() * 1000))
    try:
        found = admin.partition_counts(input_topics(config))
    except BrokerUnreachableError as exc:
        if not cp.exists:
            raise  # nothing to tell without the broker
        return _without_broker(config, status, exc)
    _check_topics(config, status, found, bootstrap_servers)
    if not cp.exists:
        status.partitions = _partitions(config, admin, cp, found)
        waiting = f"; {status.lag} records wait in its input" if status.lag else ""
        where = Path(cp.directory)
        relative = "" if where.is_absolute() else " (a relative path: to this directory)"
        status.problems.append(
            f"job {config.job!r} has never run: its Spark checkpoint "
            f"{where.absolute()}{relative} holds no micro-batch (start it with "
            f"`window-operator run`){waiting}"
        )
        return status
    status.partitions = _partitions(config, admin, cp, found)
    status.tasks = _tasks(config, admin, str(state_dir or config.state.dir))
    if interval_s > 0:
        before = status.lag
        time.sleep(interval_s)
        status.checkpoint = read_checkpoint(str(config.spark.checkpoint_dir))
        status.partitions = _partitions(config, admin, status.checkpoint, found)
        status.now_ms = int(time.time() * 1000)
        if status.lag > before:
            status.problems.append(f"lag growing: {before} -> {status.lag} in {interval_s:g} s")
    beat = status.beat = read_heartbeat(str(config.spark.checkpoint_dir))
    _check_idle(config, status, max_idle_triggers, beat)  # on the last reading, as printed
    _check_alive(config, status, beat)
    _check_unread(config, status)
    _check_truncated(status)
    _check_recreated(config, status, admin.topic_ids(input_topics(config)))
    _note_holding(config, status)
    return status


def _note_holding(config: AnyJobConfig, status: JobStatus) -> None:
    """Name the partitions the watermark waits for, how far behind the newest they
    are, and why one that gets no records keeps it there."""
    ahead = max((p.watermark for p in status.partitions if p.watermark is not None), default=0)
    for p in status.holding:
        behind = format_duration_ms(ahead - (p.watermark or ahead))
        why = ""
        known_idle = p.end is not None and p.lag == 0  # its end unknown without the broker
        if known_idle and config.watermark.idle_timeout is None:
            why = (
                ": it has no records waiting, and a partition that gets none holds the "
                "watermark until it does (watermark.idle_timeout lets it go idle)"
            )
        status.notes.append(
            f"the watermark waits for {p.topic}[{p.partition}], whose max event time is "
            f"{behind} behind the newest partition's{why}"
        )


def _without_broker(
    config: AnyJobConfig, status: JobStatus, exc: BrokerUnreachableError
) -> JobStatus:
    """What the checkpoint and the heartbeat tell when no broker answers (an outage is
    when ``status`` is wanted most): positions and event times, not ends nor lag."""
    status.unreachable = exc
    status.partitions = _partitions(config, None, status.checkpoint, {})
    status.beat = read_heartbeat(str(config.spark.checkpoint_dir))
    _check_alive(config, status, status.beat)
    _note_holding(config, status)
    return status


def _check_topics(
    config: AnyJobConfig, status: JobStatus, found: dict[str, int], bootstrap: str
) -> None:
    """An input topic that does not exist: the job cannot start (``run`` refuses it)."""
    for topic in input_topics(config):
        if topic not in found:
            status.problems.append(
                f"input topic {topic!r} does not exist on {bootstrap}: the job cannot run "
                "until it is created"
            )


def _check_truncated(status: JobStatus) -> None:
    """A committed position past its partition's end: the topic was deleted and created
    again, or the broker lost records the job had read, and the job stops with
    ``InputGapError`` there."""
    past = [
        p
        for p in status.partitions
        if p.committed is not None and p.end is not None and p.committed > p.end
    ]
    if past:
        names = ", ".join(f"{p.topic}[{p.partition}] {p.committed} > {p.end}" for p in past)
        status.problems.append(
            f"input behind the job: the checkpoint's positions are past the end of {names} "
            "(the topic was deleted and created again, or the broker lost records the job "
            "had read); the job stops with InputGapError there: see the README's Gaps"
        )


def _check_recreated(config: AnyJobConfig, status: JobStatus, ids: dict[str, str]) -> None:
    """An input topic whose Kafka id (``ids``) is not the one the job kept: it was
    deleted and created again, and the job refuses to start over it."""
    if changed := recreated_topics(Path(str(config.spark.checkpoint_dir)), ids):
        status.problems.append(
            f"input topic {', '.join(map(repr, changed))} was deleted and created again "
            "(its Kafka topic id is not the one the job kept): the job refuses to start "
            "over it (InputRecreatedError); start it afresh"
        )


def _check_unread(config: AnyJobConfig, status: JobStatus) -> None:
    """A long-running job without partition discovery reads partitions added to its
    inputs only after a restart: records waiting in one it never read are a problem,
    however busy its other partitions keep it."""
    if not config.spark.long_running or config.spark.partition_discovery is not None:
        return
    unread = [p for p in status.partitions if p.committed is None and p.lag > 0]
    if unread:
        names = ", ".join(f"{p.topic}[{p.partition}]" for p in unread)
        status.problems.append(
            f"not read: {sum(p.lag for p in unread)} records wait in {names}, which the "
            "job's workers do not read (spark.partition_discovery is off): restart the "
            "job to read them"
        )


def _check_idle(
    config: AnyJobConfig, status: JobStatus, max_idle_triggers: int, beat: Beat | None = None
) -> None:
    """Input waits and no batch ran for ``max_idle_triggers`` triggers. A job whose run
    (its heartbeat fresh) started after its last batch is said to be starting: it
    restores its stores and plans its first batch (before, asked whether it runs)."""
    lag = status.lag
    if lag == 0:
        return
    trigger = config.spark.trigger_ms
    if trigger is None:
        status.problems.append(f"behind: {lag} input records wait for the next run")
        return
    last = status.checkpoint.last_activity_ms or 0
    idle_s = (status.now_ms - last) / 1000.0
    if idle_s <= max_idle_triggers * trigger / 1000.0:
        return
    started = None if beat is None or beat.stopped else beat.started_ms
    fresh = beat is not None and status.now_ms - beat.at_ms <= STALE_S * 1000
    if fresh and started is not None and started > last:
        status.problems.append(
            f"behind: {lag} input records wait; the job started "
            f"{(status.now_ms - started) / 1000:.0f} s ago and has run no batch yet "
            "(restoring its stores, or planning its first batch: see its log)"
        )
        return
    triggers = (
        f"{max_idle_triggers} trigger{'s' if max_idle_triggers != 1 else ''} of "
        f"{trigger / 1000:g} s"
    )
    if beat is not None and fresh and started is not None:  # a batch that slow, or stuck
        status.problems.append(
            f"behind: {lag} input records wait, and no batch or timer pass began or ended for "
            f"{idle_s:.0f} s ({triggers}), though the job runs (its heartbeat "
            f"{(status.now_ms - beat.at_ms) / 1000:.0f} s ago): a batch that slow, or one "
            "stuck (see its log: each batch's line gives its time)"
        )
        return
    if beat is not None and beat.stopped:  # it knows: the last run ended
        status.problems.append(
            f"behind: {lag} input records wait for the next run (the last one ended at "
            f"{_time(beat.at_ms)} UTC)"
        )
        return
    status.problems.append(
        f"behind: {lag} input records wait, but no batch ran for {idle_s:.0f} s "
        f"({triggers}): is the job running?"
    )


def _check_alive(config: AnyJobConfig, status: JobStatus, beat: Beat | None) -> None:
    """A job whose ``run`` failed, and a streaming job (not ``available_now``, which
    stops by itself) whose ``run`` ended, or whose heartbeat is older than
    :data:`STALE_S` (killed, or its host gone), is not running. Without a heartbeat (a
    job run by other means) this is not judged."""
    if beat is not None and beat.stopped and beat.failure is not None:  # either way
        status.problems.append(
            f"not running: the job failed at {_time(beat.at_ms)} UTC: {beat.failure} (start "
            "it again with `window-operator run` once that is mended)"
        )
        return
    if beat is None or config.spark.trigger_ms is None:
        return
    if beat.stopped and beat.available_now:
        return  # ``run --available-now`` (or the config's) stops by itself: as asked
    if beat.stopped:
        status.problems.append(
            f"not running: the job stopped at {_time(beat.at_ms)} UTC (start it with "
            "`window-operator run`)"
        )
    elif (quiet_s := (status.now_ms - beat.at_ms) / 1000.0) > STALE_S:
        status.problems.append(
            f"not running: no heartbeat for {quiet_s:.0f} s from its driver (pid {beat.pid} "
            f"on {beat.host}): killed, or its host is down or hangs"
        )


def _time(ms: int | None) -> str:
    if ms is None or ms <= -(2**62) or ms >= 2**62:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _utc(ms: int | None) -> str:
    """A time with its zone; ``none yet`` (not ``- UTC``) before the first event."""
    if ms is None or ms <= -(2**62) or ms >= 2**62:
        return "none yet"
    return f"{_time(ms)} UTC"


def _size(n: int | None) -> str:
    """Bytes in binary units with one decimal (before: divided as integers, so 2.2 MiB
    showed as 2.0 MB)."""
    if n is None:
        return "not on this host"
    if n < 1024:
        return f"{n} B"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit}"


def format_status(s: JobStatus) -> str:
    """The human-readable report printed by ``window-operator status``."""
    cp = s.checkpoint
    if not cp.exists:
        return "\n".join(f"UNHEALTHY: {p}" for p in s.problems)
    ago = ""
    if cp.last_activity_ms is not None:
        ago = f" ({(s.now_ms - cp.last_activity_ms) / 1000:.0f} s ago)"
    wm = cp.clock.watermark if cp.clock is not None else None
    at = "" if cp.committed_ms is None else f" committed at {_time(cp.committed_ms)} UTC"
    lines = [
        f"job {s.job}: last {cp.unit} {cp.last_committed}{at}, "
        f"last activity {_utc(cp.last_activity_ms)}{ago}, watermark {_utc(wm)}",
        f"checkpoint {cp.directory}",
        *_last_run(s.beat),
        *_restarts(s.beat),
        "",
        f"{'input partition':<28} {'committed':>10} {'end':>10} {'lag':>8}  "
        f"{'max event time (UTC)':<20} watermark (UTC)",
    ]
    holding = {(p.topic, p.partition) for p in s.holding}
    for p in s.partitions:
        name = f"{p.topic}[{p.partition}]"
        lag = "-" if p.end is None else str(p.lag)  # unknown, not 0, without the broker
        mark = "  < the job's watermark" if (p.topic, p.partition) in holding else ""
        lines.append(
            f"{name:<28} {_num(p.committed):>10} {_num(p.end):>10} {lag:>8}  "
            f"{_time(p.max_event_time):<20} {_time(p.watermark)}{mark}"
        )
    if s.unreachable is not None:
        lines += ["", "input ends, lag and changelogs unknown: the broker does not answer"]
        lines += s.notes
        lines += [f"UNHEALTHY: {p}" for p in s.problems]
        return "\n".join(lines)
    lines += ["", f"{'state task':<12} {'changelog offsets':>20} {'span':>10}  local store"]
    for t in s.tasks:
        span = f"{t.changelog_start}..{t.changelog_end}"
        lines.append(
            f"task {t.task:<7} {span:>20} {t.changelog_offsets:>10}  {_size(t.local_bytes)}"
        )
    lines.append("")
    lines += s.notes
    if s.healthy:
        lines.append(f"healthy: lag {s.lag}")
    lines += [f"UNHEALTHY: {p}" for p in s.problems]
    return "\n".join(lines)


def _last_run(beat: Beat | None) -> list[str]:
    """The line on a last run that was to stop by itself (available-now), if it was one:
    why the job not running is no problem (the lag shows what waits)."""
    if beat is None or not beat.stopped or not beat.available_now or beat.failure is not None:
        return []
    return [
        f"its last run was an available-now run (it stops by itself), ended at "
        f"{_time(beat.at_ms)} UTC"
    ]


def _restarts(beat: Beat | None) -> list[str]:
    """The line on the long-running workers' failures in the (last) run, if any."""
    if beat is None or not beat.restarts:
        return []
    run = "its last run" if beat.stopped else "this run"
    times = "once" if beat.restarts == 1 else f"{beat.restarts} times"
    return [
        f"workers failed and started again {times} in {run}, last at "
        f"{_time(beat.last_restart_ms)} UTC: {beat.last_restart}"
    ]


def _num(n: int | None) -> str:
    return "-" if n is None else str(n)
