"""Build the runtime objects of a job from its validated config.

The frozen config is the single source; library objects (operations, decoder,
policies, stores) are made here, at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stores.rocks import TaskStore
from window_operator.aggregations import (
    ObjectOp,
    OpParamError,
    UnknownOpError,
    VectorOp,
    resolve_op,
)
from window_operator.aggregator import WindowedAggregator
from window_operator.aggset import AggregationSet, BoundAggregation
from window_operator.config import ConfigError, ConfigProblem, JobConfig
from window_operator.events import RecordDecoder
from window_operator.policies import EmitPolicy, LateMode
from window_operator.windows import TimeWindowing

__all__ = ["JobRuntime", "build_runtime", "task_state_dir"]


@dataclass(frozen=True, slots=True)
class JobRuntime:
    """Everything a task needs, built once per job."""

    config: JobConfig
    windowing: TimeWindowing
    aggregations: AggregationSet
    policy: EmitPolicy
    decoder: RecordDecoder

    def open_task(
        self, state_dir: Path, task: int = 0, *, use_deduct: bool | None = None
    ) -> WindowedAggregator:
        """Open (or restore) the aggregator of ``task`` with its RocksDB under ``state_dir``."""
        store = TaskStore(task_state_dir(state_dir, self.config.job, task))
        return WindowedAggregator(
            windowing=self.windowing,
            aggregations=self.aggregations,
            policy=self.policy,
            store=store,
            decoder=self.decoder,
            use_deduct=use_deduct,
        )


def task_state_dir(state_dir: Path, job: str, task: int) -> Path:
    """Where a task's RocksDB lives."""
    return Path(state_dir) / job / f"task-{task}"


def build_runtime(config: JobConfig, *, source: str | None = None) -> JobRuntime:
    """Resolve operations, decoder and policies; op problems raise :class:`ConfigError`."""
    bound: list[BoundAggregation] = []
    problems: list[ConfigProblem] = []
    for i, agg in enumerate(config.aggregations):
        params = dict(agg.params)
        x_field = None
        if agg.op == "linreg":
            x = params.pop("x", None)
            if x is not None and not isinstance(x, str):
                problems.append(ConfigProblem(f"aggregations.{i}.params.x", "must be a field name"))
                continue
            x_field = x
        try:
            op = resolve_op(agg.op, params, has_field=agg.field is not None)
        except UnknownOpError as exc:
            problems.append(ConfigProblem(f"aggregations.{i}.op", str(exc)))
            continue
        except OpParamError as exc:
            problems.append(ConfigProblem(f"aggregations.{i}.params", str(exc)))
            continue
        if op.needs_field and agg.field is None:
            problems.append(
                ConfigProblem(f"aggregations.{i}.field", f"op {agg.op!r} needs a field")
            )
            continue
        bound.append(BoundAggregation(agg.name, op, agg.field, x_field))
    if problems:
        raise ConfigError(source, problems)
    aggs = AggregationSet(bound)
    numeric: list[str] = []
    objects: list[str] = []
    for b in bound:
        if b.field is not None:
            wants_number = isinstance(b.op, VectorOp) or (
                isinstance(b.op, ObjectOp) and b.op.numeric
            )
            (numeric if wants_number else objects).append(b.field)
        if b.x_field is not None:
            numeric.append(b.x_field)
    inp = config.input
    decoder = RecordDecoder(
        key_field=inp.key,
        timestamp_field=inp.timestamp,
        timestamp_unit=inp.timestamp_unit,
        numeric_fields=numeric,
        object_fields=objects,
    )
    windowing = TimeWindowing(config.window.size, config.window.step)
    retention = config.retention.time
    if config.retention.size is not None:
        retention = min(retention, config.retention.size * windowing.step)
    policy = EmitPolicy(
        allowed_lateness=config.watermark.allowed_lateness,
        idle_timeout=config.watermark.idle_timeout,
        early_period=config.emit.early,
        late_mode=LateMode(config.emit.late.mode),
        late_period=config.emit.late.period_ms,
        retention=retention,
    )
    return JobRuntime(config, windowing, aggs, policy, decoder)
