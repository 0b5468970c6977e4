"""Session results: RETRACTs of superseded identities before the result that replaces them."""

from __future__ import annotations

from typing import Any

from sessionkit import OpenAgg, S, Window, apply, ev, session_runtime, windows

from window_operator.results import Kind


# A late event extends a session that was already emitted: its old identity is
# retracted before the new result.
#
#   a@1 a@4  -> [1, 14]     x@30 moves the watermark to 30: ON_TIME [1, 14]
#   a@12 (late)  -> [1, 22] RETRACT [1, 14], LATE [1, 22]
def test_late_extension_retracts_the_emitted_identity(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 1), ev("a", 4), ev("x", 30)])
    (on_time,) = [r for r in agg.get_result() if r.key == "a"]
    assert (on_time.kind, on_time.window_end, on_time.update_seq) == (Kind.ON_TIME, 14 * S, 0)
    stats = agg.add_message(ev("a", 12))
    assert stats.late == 1
    retract, late = agg.get_result()
    assert (retract.kind, retract.window_start, retract.window_end) == (Kind.RETRACT, S, 14 * S)
    assert retract.values == {} and retract.update_seq == 1
    assert (late.kind, late.window_start, late.window_end, late.update_seq) == (
        Kind.LATE, S, 22 * S, 1
    )  # fmt: skip
    assert late.values["n"] == 3 and late.values["vals"] == [1, 4, 12]


# Two emitted sessions merged by a late event: both identities are retracted, then the
# merged session is emitted once.
#
#   a@0 -> [0, 10]   a@15 -> [15, 25]   x@60: both fire
#   a@8 (late) bridges them (8 <= 10, 8 + 10 >= 15) -> [0, 25]
def test_late_merge_of_two_emitted_sessions(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 0), ev("a", 15), ev("x", 60)])
    view: dict[Window, dict[str, Any]] = {}
    apply(view, agg.get_result())
    assert windows(view) == {("a", 0, 10 * S): 1, ("a", 15 * S, 25 * S): 1}
    agg.add_message(ev("a", 8))
    results = agg.get_result()
    assert [r.kind for r in results] == [Kind.RETRACT, Kind.RETRACT, Kind.LATE]
    apply(view, results)
    assert windows(view) == {("a", 0, 25 * S): 3}
    assert view[("a", 0, 25 * S)]["median"] == 8.0
    assert results[-1].update_seq == 1


def test_early_results_retract_when_the_session_grows(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(emit={"early": "2s", "late": "per_arrival"}))
    agg.add_message(ev("a", 1), wall_ms=100 * S)
    agg.timeout(100 * S)  # starts the early clock
    agg.timeout(102 * S)
    (early,) = agg.get_result()
    assert (early.kind, early.window_end, early.update_seq) == (Kind.EARLY, 11 * S, 0)
    agg.timeout(104 * S)
    assert agg.get_result() == []  # nothing changed
    agg.add_message(ev("a", 3), wall_ms=105 * S)
    agg.timeout(106 * S)
    retract, early2 = agg.get_result()
    assert (retract.kind, retract.window_end) == (Kind.RETRACT, 11 * S)
    assert (early2.kind, early2.window_end, early2.update_seq, early2.values["n"]) == (
        Kind.EARLY, 13 * S, 1, 2
    )  # fmt: skip
    agg.add_message(ev("x", 40), wall_ms=107 * S)
    (on_time,) = [r for r in agg.get_result() if r.key == "a"]
    assert (on_time.kind, on_time.update_seq) == (Kind.ON_TIME, 2)
