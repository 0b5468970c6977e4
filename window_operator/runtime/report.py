"""What a state task did in one batch: the report it sends back to the driver, which the
log line, the metrics and ``status`` are made of."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["TaskReport"]


@dataclass
class TaskReport:
    """What a task did in one micro-batch (sent back to the driver)."""

    task: int
    batch_id: int = -1
    rows: int = 0
    applied: int = 0
    replayed: int = 0
    rejected: int = 0
    late: int = 0
    results: int = 0
    restored_records: int = 0
    compensated: int = 0
    changelog_records: int = 0
    #: passes committed (to Kafka and the store): one that changed nothing but the wall
    #: clock commits nothing (see :meth:`~window_operator.runtime.commit.TaskState.unchanged_by`)
    commits: int = 0
    watermark: int = 0
    attempts: int = 0
    seconds: float = 0.0
    seconds_restore: float = 0.0
    seconds_operator: float = 0.0
    seconds_commit: float = 0.0
    location: str = ""
    # -- observability (window_operator.observe): what the metrics need per task
    rejected_by_code: dict[str, int] = field(default_factory=dict)
    results_by_kind: dict[str, int] = field(default_factory=dict)
    #: window results not written, sent to the error topic as ``RESULT_ERROR`` (a user
    #: ``finish`` raised, or the output format refused a value): not input records
    result_errors: int = 0
    seconds_outputs: float = 0.0
    seconds_changelog: float = 0.0
    seconds_local_commit: float = 0.0
    store_bytes: int = 0
    #: -1: the operator does not tell (joins)
    live_keys: int = -1
    live_windows: int = -1
    #: messages each input holds in the Message Store (joins; see JoinOperator.live_state)
    held_messages: dict[str, int] = field(default_factory=dict)
    #: LATE updates wait for the end of an ``emit.late`` period (a run that ends sends them)
    late_pending: bool = False

    def as_dict(self) -> dict[str, object]:
        """JSON-ready fields."""
        return asdict(self)
