"""Build the runtime objects of a job from its validated config.

The frozen config is the single source; library objects (operations, decoder,
policies, stores) are made here, at the boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from stores.rocks import TaskStore
from window_operator.aggregations import (
    BUILTIN_OPS,
    ObjectOp,
    OpLoadError,
    OpParamError,
    UnknownOpError,
    VectorOp,
    is_user_defined,
    resolve_op,
)
from window_operator.aggregations.numeric import CountNonNullOp
from window_operator.aggregations.registry import op_class_path
from window_operator.aggset import AggregationSet, BoundAggregation
from window_operator.config import (
    ConfigError,
    ConfigProblem,
    HoppingWindow,
    JobConfig,
    SessionWindow,
    TumblingWindow,
)
from window_operator.events import RecordDecoder
from window_operator.policies import EmitPolicy, LateMode
from window_operator.runtime.settings import task_state_dir
from window_operator.timewindows import WindowedAggregator
from window_operator.windows import TimeWindowing

__all__ = ["JobRuntime", "TaskOperator", "build_runtime", "check_operations", "task_state_dir"]


if TYPE_CHECKING:
    from window_operator.count_windows import CountWindowAggregator
    from window_operator.session import SessionAggregator

TaskOperator = Union["WindowedAggregator", "SessionAggregator", "CountWindowAggregator"]
"""The operator of an aggregation job (one per window shape)."""


@dataclass(frozen=True, slots=True)
class JobRuntime:
    """Everything a task needs, built once per job."""

    config: JobConfig
    aggregations: AggregationSet
    policy: EmitPolicy
    decoder: RecordDecoder

    @property
    def user_operations(self) -> bool:
        """Whether an aggregation runs a user-defined operation (code that may raise on
        some value, where a record then becomes an ``INTERNAL_ERROR``)."""
        return any(agg.op not in BUILTIN_OPS for agg in self.config.aggregations)

    def open_task(
        self, state_dir: Path, task: int = 0, *, use_deduct: bool | None = None
    ) -> TaskOperator:
        """Open (or restore) the operator of ``task`` with its RocksDB under ``state_dir``."""
        store = TaskStore(task_state_dir(state_dir, self.config.job, task))
        try:
            return self.operator(store, use_deduct=use_deduct)
        except BaseException:  # a state it refuses: let go of the store
            store.close()
            raise

    def operator(self, store: TaskStore, *, use_deduct: bool | None = None) -> TaskOperator:
        """The operator of this job's window shape over ``store`` (restored from it)."""
        window = self.config.window
        common: dict[str, Any] = {
            "aggregations": self.aggregations,
            "policy": self.policy,
            "store": store,
            "decoder": self.decoder,
            "inputs": (self.config.input.topic,),
        }
        cache_mb = self.config.state.cache_mb
        if isinstance(window, TumblingWindow | HoppingWindow):
            return WindowedAggregator(
                windowing=TimeWindowing(window.size, window.step),
                use_deduct=use_deduct,
                cache_mb=cache_mb,
                **common,
            )
        if isinstance(window, SessionWindow):
            from window_operator.session import SessionAggregator

            return SessionAggregator(window=window, cache_mb=cache_mb, **common)
        from window_operator.count_windows import CountWindowAggregator

        return CountWindowAggregator(window=window, use_deduct=use_deduct, **common)


def build_runtime(config: JobConfig, *, source: str | None = None) -> JobRuntime:
    """Resolve operations, decoder and policies; op problems and an Avro output schema that
    does not fit the job raise :class:`ConfigError`; a join job's config a ``TypeError``
    (its runtime is :func:`~window_operator.join.build_join_runtime`'s)."""
    if not isinstance(config, JobConfig):
        raise TypeError(
            f"build_runtime takes a window job's JobConfig, got {type(config).__name__}: "
            "build a join job with window_operator.join.build_join_runtime"
        )
    bound = _bind_aggregations(config, source)
    _check_output(config, source)
    return JobRuntime(config, AggregationSet(bound), _emit_policy(config), _decoder(config, bound))


def check_operations(config: JobConfig, *, source: str | None = None) -> None:
    """The operation problems :func:`build_runtime` finds, without importing user code:
    for the commands that never run an operation (``status``, ``restore``), so that a
    host without the job's own packages can still run them."""
    _bind_aggregations(config, source, user_code=False)


def _check_output(config: JobConfig, source: str | None) -> None:
    """An Avro output schema (derived or the user's) that cannot hold the job's results is
    a config error, found before the job runs rather than at its first result."""
    if config.output.format != "avro":
        return
    from window_operator.codecs import AvroResultEncoder, AvroSchemaError

    try:
        AvroResultEncoder(config)
    except AvroSchemaError as exc:
        where = "output.avro_schema" if config.output.avro_schema else "output.format"
        raise ConfigError(source, [ConfigProblem(where, str(exc))]) from exc


def _bind_aggregations(
    config: JobConfig, source: str | None, *, user_code: bool = True
) -> list[BoundAggregation]:
    """Each configured aggregation with its operation, or every problem at once (without
    ``user_code``, user-defined operations are left out unchecked)."""
    bound: list[BoundAggregation] = []
    problems: list[ConfigProblem] = []
    for i, agg in enumerate(config.aggregations):
        if not user_code and is_user_defined(agg.op):
            continue
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
        except (UnknownOpError, OpLoadError) as exc:
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
        configured = [op_class_path(op), agg.params] if is_user_defined(agg.op) else agg.op
        bound.append(BoundAggregation(agg.name, op, agg.field, x_field, configured))
    if problems:
        raise ConfigError(source, problems)
    return bound


def _decoder(config: JobConfig, bound: list[BoundAggregation]) -> RecordDecoder:
    """The input decoder: numeric columns for vector operations, objects for the rest,
    and presence columns for fields only counted (SQL's ``COUNT(field)``)."""
    numeric: list[str] = []
    objects: list[str] = []
    counted: list[str] = []
    for b in bound:
        if b.field is not None and isinstance(b.op, CountNonNullOp):
            counted.append(b.field)
        elif b.field is not None:
            wants_number = isinstance(b.op, VectorOp) or (
                isinstance(b.op, ObjectOp) and b.op.numeric
            )
            (numeric if wants_number else objects).append(b.field)
        if b.x_field is not None:
            numeric.append(b.x_field)
    inp = config.input
    return RecordDecoder(
        key_field=inp.key_fields,
        timestamp_field=inp.timestamp_field,
        timestamp_unit=inp.timestamp_unit,
        kafka_key=inp.kafka_key,
        key_format=inp.key_format,
        numeric_fields=numeric,
        object_fields=objects,
        counted_fields=counted,
    )


def _emit_policy(config: JobConfig) -> EmitPolicy:
    """Lateness, idleness, emission and retention (``retention.size`` in windows)."""
    retention = config.retention.time
    window = config.window
    if config.retention.size is not None and isinstance(window, TumblingWindow | HoppingWindow):
        retention = min(retention, config.retention.size * window.step)
    return EmitPolicy(
        allowed_lateness=config.watermark.allowed_lateness,
        idle_timeout=config.watermark.idle_timeout,
        early_period=config.emit.early,
        late_mode=LateMode(config.emit.late.mode),
        late_period=config.emit.late.period_ms,
        retention=retention,
        max_future=config.watermark.max_future,
    )
