"""Rows joins (ROWS n PRECEDING): the left window keeps the n latest rows of a key, and
retained partners expire with retention."""

from __future__ import annotations

from collections.abc import Callable

from joinkit import S, join_runtime

from window_operator.join import JoinOperator


def test_rows_window_keeps_only_the_n_latest_left_rows(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"rows": 2}), cache_max_rows=0)
    op.add_records("L", [{"k": 1, "ts": t * S, "n": t} for t in range(5)])
    op.flush()
    op.add_message("R", {"k": 1, "ts": 10 * S, "n": 100})
    assert sorted(r.left["n"] for r in op.get_result() if r.left) == [3, 4]
    # a later left row still joins every stored right row of its key
    op.add_message("L", {"k": 1, "ts": 0, "n": 5})
    assert [(r.left, r.right) for r in op.get_result()] == [
        ({"k": 1, "ts": 0, "n": 5}, {"k": 1, "ts": 10 * S, "n": 100})
    ]
    assert len(op.get_messages("L", -(2**62), 0, 2**62, 2**62)) == 2  # trimmed to 2


def test_rows_join_partners_expire_with_retention(
    open_join: Callable[..., JoinOperator],
) -> None:
    op = open_join(join_runtime({"rows": 3}, retention="1m"))
    op.add_message("L", {"k": 1, "ts": 0, "n": 0})
    op.add_message("L", {"k": 9, "ts": 200 * S, "n": 1})
    op.add_message("R", {"k": 9, "ts": 200 * S, "n": 2})
    assert op.watermark == 200 * S and len(op.get_result()) == 1
    # left row 0 is 200 s behind the watermark: past retention, even before a flush
    op.add_message("R", {"k": 1, "ts": 190 * S, "n": 3})
    assert op.get_result() == []
    op.flush()
    assert [m.record["n"] for m in op.get_messages("L", -(2**62), 0, 2**62, 2**62)] == [1]


def test_rows_windows_are_restored_from_the_store(
    open_join: Callable[..., JoinOperator],
) -> None:
    runtime = join_runtime({"rows": 2})
    op = open_join(runtime, "s")
    op.add_records("L", [{"k": 1, "ts": t * S, "n": t} for t in range(3)])
    op.close()
    op = open_join(runtime, "s")
    # the trimmed window (rows 1 and 2) and the arrival order survive the restart
    op.add_message("R", {"k": 1, "ts": 9 * S, "n": 9})
    assert sorted(r.left["n"] for r in op.get_result() if r.left) == [1, 2]
    op.add_message("L", {"k": 1, "ts": 3 * S, "n": 3})
    op.add_message("R", {"k": 1, "ts": 9 * S, "n": 10})
    assert sorted(r.left["n"] for r in op.get_result() if r.left and r.right["n"] == 10) == [2, 3]


def _promotion_case(op: JoinOperator, *, flush_between: bool) -> list[int]:
    """Lefts a (late in time, first by arrival) and b (early in time, second): once the
    watermark passes b's retention, a third left c makes the 2 latest by arrival b and
    c, of which only c is still retained."""
    op.add_message("L", {"k": 1, "ts": 100 * S, "n": 0})  # a
    op.add_message("L", {"k": 1, "ts": 10 * S, "n": 1})  # b
    op.add_message("L", {"k": 9, "ts": 150 * S, "n": 9})  # moves the watermark on
    op.add_message("R", {"k": 9, "ts": 150 * S, "n": 99})  # (of both inputs)
    if flush_between:
        op.flush()  # the retention sweep: b is past retention (150 s - 1 min)
    op.add_message("L", {"k": 1, "ts": 150 * S, "n": 2})  # c
    op.add_message("R", {"k": 1, "ts": 150 * S, "n": 100})
    pairs = [(r.left, r.right) for r in op.get_result() if r.left and r.right]
    return sorted(left["n"] for left, right in pairs if right["n"] == 100)


def test_rows_window_counts_expired_rows_however_the_sweep_was_timed(
    open_join: Callable[..., JoinOperator],
) -> None:
    # ROWS 2 PRECEDING, then retention: a's place among the 2 latest is taken by c even
    # when b, between them, expired and was swept; a must not join again.
    runtime = join_runtime({"rows": 2}, retention="1m")
    for flush_between in (False, True):
        op = open_join(runtime, f"s{flush_between}")
        assert _promotion_case(op, flush_between=flush_between) == [2], flush_between
