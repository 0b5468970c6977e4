"""Join jobs at runtime: a job's operator settings and decoders, built once, and the
operator of each task over its RocksDB store.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from stores.rocks import TaskStore
from window_operator.config import ConfigError, ConfigProblem, JoinJobConfig
from window_operator.join.common import LEFT, RIGHT, UnknownSourceError
from window_operator.join.decoding import JoinDecoder
from window_operator.join.layouts import choose_layout
from window_operator.join.operator import JoinOperator
from window_operator.join.spec import JoinSpec

__all__ = ["JoinRuntime", "build_join_runtime"]


@dataclass(frozen=True, slots=True)
class JoinRuntime:
    """Everything a join task needs, built once per job."""

    config: JoinJobConfig
    spec: JoinSpec
    decoders: tuple[JoinDecoder, JoinDecoder]

    @property
    def self_join(self) -> bool:
        """Whether both inputs read one topic: every record of it reaches both."""
        return self.decoders[0].topic == self.decoders[1].topic

    def decoder(self, source: str) -> JoinDecoder:
        """The decoder of an input by name; raises :class:`UnknownSourceError`."""
        for d in self.decoders:
            if d.name == source:
                return d
        raise UnknownSourceError(
            f"unknown source {source!r}: expected {self.spec.left!r} or {self.spec.right!r}"
        )

    def open_task(self, state_dir: Path, task: int = 0, **options: int) -> JoinOperator:
        """Open (or restore) the join operator of ``task`` with its RocksDB under ``state_dir``.

        ``options`` are :class:`JoinOperator`'s cache settings.
        """
        from window_operator.runtime.settings import task_state_dir

        store = TaskStore(task_state_dir(state_dir, self.config.job, task))
        try:
            return self.operator(store, **options)
        except BaseException:  # a state it refuses: let go of the store
            store.close()
            raise

    def operator(self, store: TaskStore, **options: int) -> JoinOperator:
        """The join operator over ``store`` (restored from it); ``state.cache_mb`` is its
        cache budget unless ``options`` say otherwise."""
        options = {"cache_mb": self.config.state.cache_mb, **options}
        return JoinOperator(self.spec, store, decoders=self.decoders, **options)


def build_join_runtime(config: JoinJobConfig, *, source: str | None = None) -> JoinRuntime:
    """Derive the operator settings and decoders of a join job.

    Raises :class:`ConfigError` when ``join.store`` names a time layout for a rows join.
    """
    if not isinstance(config, JoinJobConfig):
        raise TypeError(
            f"build_join_runtime takes a join job's JoinJobConfig (load_join_config), got "
            f"{type(config).__name__}: build a window job with window_operator.job.build_runtime"
        )
    j = config.join
    try:
        layout = choose_layout(j)
    except ValueError as exc:
        raise ConfigError(source, [ConfigProblem("join.store", str(exc))]) from exc
    lo, hi = j.bounds or (0, 0)
    spec = JoinSpec(
        left=j.left.name,
        right=j.right.name,
        on=tuple(j.on),
        kind=j.kind,
        lo=lo,
        hi=hi,
        rows=j.rows,
        layout=layout,
        retention=config.retention.time,
        allowed_lateness=config.watermark.allowed_lateness,
        idle_timeout=config.watermark.idle_timeout,
        max_future=config.watermark.max_future,
        left_topic=j.left.topic_name,
        right_topic=j.right.topic_name,
    )
    decoders = (JoinDecoder(j.left, j.on, LEFT), JoinDecoder(j.right, j.on, RIGHT))
    return JoinRuntime(config, spec, decoders)
