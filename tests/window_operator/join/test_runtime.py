"""Join jobs at runtime: decoders by name and index, and task operators over RocksDB."""

from __future__ import annotations

from pathlib import Path

import pytest
from joinkit import join_runtime

from window_operator.errors import IncompatibleStateError
from window_operator.join import LEFT, RIGHT, UnknownSourceError


def test_decoders_are_found_by_name_and_know_their_source_index() -> None:
    runtime = join_runtime({"range": "5s"})
    assert [(d.name, d.source) for d in runtime.decoders] == [("L", LEFT), ("R", RIGHT)]
    assert runtime.decoder("R") is runtime.decoders[RIGHT]
    with pytest.raises(UnknownSourceError, match="'X'"):
        runtime.decoder("X")


def test_tasks_open_their_own_store_and_options(tmp_path: Path) -> None:
    runtime = join_runtime({"range": "5s"})
    op = runtime.open_task(tmp_path, task=3, cache_max_rows=0)
    try:
        assert op.store.path == tmp_path / "join-test" / "task-3"
        assert op.matcher.max_rows == 0 and op.batches == 0
        op.flush()
        assert op.batches == 1
    finally:
        op.close()
    reopened = runtime.open_task(tmp_path, task=3)
    assert reopened.batches == 2  # closing flushed once more
    reopened.close()


def test_a_join_state_refuses_another_input_topic(tmp_path: Path) -> None:
    """A join's positions are offsets of its two topics: a side read from another topic
    cannot continue them (the aggregations' case: ``test_job.py``)."""
    runtime = join_runtime({"range": "5s"})
    op = runtime.open_task(tmp_path)
    op.add_records("L", [{"k": 1, "ts": 5}], partition=0, offsets=[3])
    op.close()
    moved = join_runtime({"range": "5s", "right": {"name": "R", "timestamp": "ts", "topic": "r2"}})
    with pytest.raises(
        IncompatibleStateError,
        match=r'read input topics \["L","R"\], where this config reads \["L","r2"\]',
    ):
        moved.open_task(tmp_path)
    runtime.open_task(tmp_path).close()
