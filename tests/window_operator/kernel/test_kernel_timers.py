"""The kernel's timers: checkpointed ahead of a timed operator's own fields, restored in place."""

from __future__ import annotations

from pathlib import Path

import orjson

from stores.rocks import ColumnFamily, StoreBatch, TaskStore
from window_operator.kernel import CHECKPOINT_KEY, OperatorKernel, TimerAction
from window_operator.policies import EmitPolicy, LateMode

POLICY = EmitPolicy(late_mode=LateMode.PERIOD, late_period=10, early_period=5)


def flush(kernel: OperatorKernel[object], fields: dict[str, object]) -> None:
    batch = StoreBatch()
    kernel.write_checkpoint(batch, fields)
    kernel.commit(batch, commit=True)


def test_timers_survive_a_restart_of_a_timed_operator(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "s") as store:
        kernel: OperatorKernel[object] = OperatorKernel(
            store, shape={"type": "t"}, policy=POLICY, timed=True
        )
        kernel.clock.note_now(100)
        assert kernel.timers_due(late_pending=True) is TimerAction.NONE  # both periods start
        flush(kernel, {"own": 1})
        stored = orjson.loads(store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY) or b"")
        assert list(stored["operator"]) == ["late_since", "last_early", "own"]
    with TaskStore(tmp_path / "s") as store:
        again: OperatorKernel[object] = OperatorKernel(
            store, shape={"type": "t"}, policy=POLICY, timed=True
        )
        held = again.timers  # collaborators keep the object: restore fills it in place
        assert again.restore() == {"late_since": 100, "last_early": 100, "own": 1}
        assert again.timers is held
        again.clock.note_now(110)
        assert again.timers_due(late_pending=True) == TimerAction.LATE | TimerAction.EARLY


def test_an_untimed_operator_keeps_only_its_own_fields(tmp_path: Path) -> None:
    with TaskStore(tmp_path / "s") as store:
        kernel: OperatorKernel[object] = OperatorKernel(store, shape={"type": "t"}, policy=POLICY)
        flush(kernel, {"own": 1})
        assert kernel.restore() == {"own": 1}
