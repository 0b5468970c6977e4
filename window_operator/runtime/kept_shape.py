"""The shape of the job's state, kept in the checkpoint directory and compared at start.

A task refuses a store written with another shape (window, aggregations) when it opens
it (:func:`~window_operator.kernel.checkpoint.read_checkpoint`). On Spark that happens
in the executors: each task was tried four times, over a minute and a thousand lines of
tracebacks, before the run's last line said why. So the driver keeps the shape beside
the start file (:data:`SHAPE_FILE`), once every state task committed a batch with it
(:class:`ShapeKeeper`: a store that has committed nothing accepts any shape), and
refuses a config of another shape at the next start (:func:`check_kept_shape`), with
one line, before Spark runs anything. A job started afresh under another name or with
another checkpoint directory is not compared.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from stores.rocks import TaskStore
from window_operator.errors import AFRESH, IncompatibleStateError
from window_operator.files import write_atomically
from window_operator.kernel.checkpoint import JsonValue, shape_change, stored_state
from window_operator.runtime.plans import plan_for
from window_operator.runtime.settings import TaskSettings

__all__ = ["SHAPE_FILE", "ShapeKeeper", "check_kept_shape", "kept_shape", "state_shape"]

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
        stored = stored_state(shape, kept)
        raise IncompatibleStateError(
            f"job {job!r} keeps its state in another shape ({change}; kept in "
            f"{checkpoint_dir / SHAPE_FILE}): its stored {stored} cannot be "
            "continued. Go back to the config that wrote them, or start the job afresh "
            f"({AFRESH})"
        )


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
