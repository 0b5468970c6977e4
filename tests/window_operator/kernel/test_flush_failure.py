"""A flush that fails leaves the operator unable to write: its memory may be ahead of the
store (staged writes taken, state dropped), so a later flush, or the one ``close`` runs,
would commit input offsets without their state. A user walkthrough lost a join's
messages that way: the failed flush, then ``close``, committed the offsets alone, and
the reopened task took the records again as replays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import runtime_for
from joinkit import join_runtime

from window_operator.errors import OperatorFailedError

S = 1_000
BASE = 1_700_000_000_000
WINDOWS: dict[str, dict[str, Any]] = {
    "tumbling": {"type": "tumbling", "size": "10s"},
    "session": {"type": "session", "gap": "10s"},
    "count": {"type": "count", "size": 3},
}


@pytest.mark.parametrize("shape", sorted(WINDOWS))
def test_after_a_failed_flush_nothing_more_is_written(tmp_path: Path, shape: str) -> None:
    runtime = runtime_for(
        window=WINDOWS[shape],
        aggregations=[{"name": "s", "op": "udf_example:TextDumpsOverHundredOp", "field": "v"}],
    )
    op = runtime.open_task(tmp_path)
    op.add_message({"k": "a", "ts": BASE, "v": 1.0}, offset=0)
    op.flush()  # committed: offset 0 and its window
    op.add_message({"k": "a", "ts": BASE + S, "v": 500.0}, offset=1)
    with pytest.raises(TypeError, match="dumps must return bytes"):
        op.flush()
    with pytest.raises(OperatorFailedError, match="a flush of this task failed"):
        op.flush()
    op.close()  # closes the store as the last commit left it, writing nothing
    op.close()  # a second call does nothing

    # the store's lock is released, and it holds offset 0 with its window, not offset 1
    op = runtime.open_task(tmp_path)
    assert list(op.offsets.values()) == [0]
    stats = op.add_message({"k": "a", "ts": BASE + S, "v": 5.0}, offset=1)
    assert (stats.applied, stats.replayed) == (1, 0)  # taken again, not a replay
    op.timeout(2**62)
    assert [r.values["s"] for r in op.get_result()] == [6.0]
    op.close()


def test_a_close_whose_flush_fails_releases_the_store(tmp_path: Path) -> None:
    runtime = runtime_for(
        aggregations=[{"name": "s", "op": "udf_example:TextDumpsOverHundredOp", "field": "v"}]
    )
    op = runtime.open_task(tmp_path)
    op.add_message({"k": "a", "ts": BASE, "v": 500.0}, offset=0)
    with pytest.raises(TypeError, match="dumps must return bytes"):
        op.close()
    op = runtime.open_task(tmp_path)  # did not wait for a lock: nothing was committed
    assert op.offsets == {}
    op.close()


def test_a_join_whose_flush_failed_commits_nothing_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case of the walkthrough: a join's flush takes its staged messages before it
    writes; when the write fails (here the disk, injected), ``close`` must not commit the
    offsets without them. The reopened task takes the record again and joins it."""
    runtime = join_runtime({"rows": 1}, retention="1d")
    op = runtime.open_task(tmp_path)
    op.add_message("L", {"k": 1, "ts": BASE, "n": 0}, offset=0)
    op.flush()
    op.add_message("L", {"k": 1, "ts": BASE + S, "n": 1}, offset=1)

    def disk_full(*_: object) -> None:
        raise OSError("No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(op.kernel.store, "commit", disk_full)
        with pytest.raises(OSError, match="No space left"):
            op.flush()
    with pytest.raises(OperatorFailedError):
        op.flush()
    op.close()
    op = runtime.open_task(tmp_path)
    assert list(op.offsets.values()) == [0]
    assert op.add_message("L", {"k": 1, "ts": BASE + S, "n": 1}, offset=1).applied == 1
    op.add_message("R", {"k": 1, "ts": BASE + 2 * S, "n": 9}, offset=0)
    assert [(r.left["n"], r.right["n"]) for r in op.get_result() if r.left and r.right] == [(1, 9)]
    op.close()
