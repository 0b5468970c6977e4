"""The shape of the job's state, kept in the checkpoint directory and compared at start.

A task refuses a store written with another shape (window, aggregations) when it opens
it (:func:`~window_operator.kernel.checkpoint.read_checkpoint`). On Spark that happens
in the executors: each task was tried four times, over a minute and a thousand lines of
tracebacks, before the run's last line said why. So the driver keeps the shape beside
the start file (:data:`SHAPE_FILE`), once every state task committed a batch with it
(:class:`ShapeKeeper`: a store that has committed nothing accepts any shape), and
refuses a config of another shape at the next start (:func:`check_kept_shape`), with
one line, before Spark runs anything. A checkpoint directory that kept no shape (a new
one, or an earlier version's) over a changelog that holds a state has the shape of the
state's last checkpoint in the changelog compared instead (:func:`check_changelog_shape`):
another state directory and checkpoint directory restore that state, they do not start
the job afresh. A job started afresh under another name is not compared.
"""

from __future__ import annotations

import json
import logging
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stores.changelog import ChangelogError, last_marker
from stores.errors import StateCorruptError
from stores.rocks import TaskStore
from window_operator.errors import AFRESH, IncompatibleStateError
from window_operator.files import write_atomically
from window_operator.kernel.checkpoint import (
    Checkpoint,
    JsonValue,
    inputs_change,
    shape_change,
    stored_state,
)
from window_operator.runtime.longrun.progress import PROGRESS_FILE
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings
from window_operator.runtime.starts import START_FILE

__all__ = [
    "SHAPE_FILE",
    "ShapeKeeper",
    "check_changelog_shape",
    "check_kept_shape",
    "kept_shape",
    "state_shape",
]

log = logging.getLogger(__name__)

#: The file in the checkpoint directory that keeps the shape of the job's state.
SHAPE_FILE = "window-operator-state-shape.json"

Shape = Mapping[str, JsonValue]


def state_shape(settings: TaskSettings) -> dict[str, JsonValue]:
    """The shape of the state the settings' config keeps (its operator's, built over
    an empty store), as the JSON a checkpoint keeps it in."""
    with tempfile.TemporaryDirectory(prefix="window-operator-shape-") as tmp:
        store = TaskStore(Path(tmp) / "store")
        try:
            shape = plan_for(settings).operator(store).state_shape
        finally:
            store.close()
    kept: dict[str, JsonValue] = json.loads(json.dumps(shape))
    return kept


def kept_shape(checkpoint_dir: Path, job: str) -> Shape | None:
    """The shape job ``job`` kept in ``checkpoint_dir`` (None: none kept, a file that
    does not read, or one of another job)."""
    try:
        doc = json.loads((checkpoint_dir / SHAPE_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("job") != job or not isinstance(doc.get("shape"), dict):
        return None
    shape: Shape = doc["shape"]
    return shape


def check_kept_shape(checkpoint_dir: Path, job: str, shape: Shape) -> None:
    """Raise :class:`IncompatibleStateError` when job ``job`` kept another shape in
    ``checkpoint_dir`` than ``shape`` (the config's)."""
    kept = kept_shape(checkpoint_dir, job)
    if kept is not None and (change := shape_change(kept, shape)) is not None:
        stored = stored_state(shape)
        raise IncompatibleStateError(
            f"job {job!r} keeps its state in another shape ({change}; kept in "
            f"{checkpoint_dir / SHAPE_FILE}): its stored {stored} cannot be "
            "continued. Go back to the config that wrote them, or start the job afresh "
            f"({AFRESH})"
        )


def check_changelog_shape(settings: TaskSettings, checkpoint_dir: Path, shape: Shape) -> None:
    """Where ``checkpoint_dir`` kept no shape, raise :class:`IncompatibleStateError` when
    the last checkpoint of a state task's changelog partition is of another shape than
    ``shape`` (the config's); and warn when a new checkpoint directory continues a state
    that the changelog holds. A partition whose last records hold no checkpoint, or that
    cannot be read now, is left to its task (which refuses such a state itself)."""
    from confluent_kafka import KafkaException

    if kept_shape(checkpoint_dir, settings.job) is not None:
        return
    held = False
    topic = settings.changelog_topic
    inputs = [name for _, name in settings.config.input_topic_fields()]
    for task in range(settings.tasks):
        try:
            raw = last_marker(settings.consumer_config(), topic, task)
        except (ChangelogError, KafkaException) as exc:
            # the broker (or this partition's leader) does not answer now: each further
            # partition would wait as long again (10 s or more each), so the rest is
            # left to the tasks, as this one is
            log.info("job %r: %s[%d] not read before the start (%s): its tasks compare "
                     "their state themselves", settings.job, topic, task, exc)  # fmt: skip
            break
        try:
            cp = None if raw is None else Checkpoint.decode(raw, f"{topic}[{task}]")
        except StateCorruptError:
            continue
        if cp is None:
            continue
        held = True
        if (change := shape_change(cp.shape, shape)) is not None:
            raise IncompatibleStateError(
                f"job {settings.job!r}'s changelog {topic} holds a state of another shape "
                f"({change}; the last checkpoint of task {task}): its stored "
                f"{stored_state(shape)} cannot be continued (another state.dir "
                "and spark.checkpoint_dir restore it). Go back to the config that wrote "
                f"them, or start the job afresh ({AFRESH})"
            )
        if (moved := inputs_change(cp.inputs, inputs)) is not None:
            raise IncompatibleStateError(
                f"job {settings.job!r}'s changelog {topic} holds a state that {moved} "
                f"(the last checkpoint of task {task}; another state.dir and "
                "spark.checkpoint_dir restore it). Go back to the topics it read, or start "
                f"the job afresh ({AFRESH})"
            )
    if held and not _ran_before(checkpoint_dir):
        log.warning(
            "job %r: its changelog %s holds the state of an earlier run, which this run "
            "continues (its checkpoint directory %s is new); to start afresh: %s",
            settings.job,
            topic,
            checkpoint_dir,
            AFRESH,
        )


#: What a checkpoint directory holds once a job ran in it: the start file, and (for a
#: job that ran under a version before the start file) Spark's offset log, the clock log
#: of micro-batches or the progress of long-running workers.
_RAN_MARKS = (START_FILE, "offsets", "window-operator-clock", PROGRESS_FILE)


def _ran_before(checkpoint_dir: Path) -> bool:
    """Whether a job ran with ``checkpoint_dir`` (it is not new)."""
    return any((checkpoint_dir / mark).exists() for mark in _RAN_MARKS)


@dataclass
class ShapeKeeper:
    """Keeps ``shape`` as job ``job``'s in ``checkpoint_dir`` once each of its ``tasks``
    state tasks committed a batch with it (see module doc)."""

    checkpoint_dir: Path
    job: str
    shape: Shape
    tasks: int
    committed: set[int] = field(default_factory=set)
    kept: bool = False

    def committed_by(self, tasks: Iterable[int]) -> None:
        """State tasks ``tasks`` committed a batch (opened their stores with the shape)."""
        if self.kept:
            return
        self.committed.update(tasks)
        if len(self.committed) < self.tasks:
            return
        if kept_shape(self.checkpoint_dir, self.job) != self.shape:
            doc = {"job": self.job, "shape": self.shape}
            write_atomically(self.checkpoint_dir / SHAPE_FILE, json.dumps(doc).encode())
        self.kept = True  # after the write: one that failed is tried at the next report
