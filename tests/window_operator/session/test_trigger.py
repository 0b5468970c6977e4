"""When sessions fire, become late and leave retention: through the operator, then the
pure decisions of :class:`~window_operator.session.trigger.SessionTrigger`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from sessionkit import OpenAgg, S, Window, apply, ev, session_runtime, tuple_runtime, windows

from window_operator.arrays import IntArray
from window_operator.policies import END_OF_TIME, NO_WATERMARK
from window_operator.results import ErrorCode, Kind
from window_operator.session.trigger import SessionTrigger

# --------------------------------------------------------------------------- emission


def test_on_time_when_the_watermark_reaches_the_end(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(watermark={"allowed_lateness": "5s"}))
    agg.add_batch([ev("a", 1), ev("a", 4), ev("b", 2)])
    agg.add_message(ev("x", 18))  # watermark 13: a ends at 14, b at 12
    assert [(r.key, r.window_end) for r in agg.get_result()] == [("b", 12 * S)]
    agg.add_message(ev("x", 19))  # watermark 14
    (r,) = agg.get_result()
    assert (r.kind, r.key, r.window_start, r.window_end, r.values["n"]) == (
        Kind.ON_TIME, "a", 1 * S, 14 * S, 2
    )  # fmt: skip


def test_late_updates_are_batched_per_period_and_survive_restore(tmp_path: Path) -> None:
    runtime = session_runtime(emit={"late": "10s"})
    agg = runtime.open_task(tmp_path)
    agg.add_batch([ev("a", 0), ev("a", 15), ev("x", 60)])
    agg.timeout(60 * S)
    view: dict[Window, dict[str, Any]] = {}
    apply(view, agg.get_result())
    agg.add_message(ev("a", 8), wall_ms=61 * S)
    agg.add_message(ev("a", 20), wall_ms=62 * S)  # extends the merged session
    agg.timeout(62 * S)
    assert agg.get_result() == []  # pending, waiting for the period
    agg.close()
    agg = runtime.open_task(tmp_path)  # the pending update survives a restore
    agg.timeout(65 * S)
    assert agg.get_result() == []
    agg.timeout(80 * S)
    results = agg.get_result()
    assert [r.kind for r in results] == [Kind.RETRACT, Kind.RETRACT, Kind.LATE]
    apply(view, results)
    assert windows(view) == {("a", 0, 30 * S): 4}
    agg.close()


def test_late_off_updates_state_but_emits_nothing(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(emit={"late": "off"}))
    agg.add_batch([ev("a", 0), ev("x", 60)])
    assert [r.key for r in agg.get_result()] == ["a"]
    agg.add_message(ev("a", 5))
    assert agg.get_result() == []
    (w,) = agg.get_windows("a", 0, 100 * S)
    assert (w.window_end, w.values["n"], w.fired) == (15 * S, 2, True)


# A session that fired can be extended past the watermark by a late event: it is open
# again and fires ON_TIME once more when the watermark reaches its new end.
#
#   a@0 -> [0, 10]; x@12: wm 12, ON_TIME [0, 10]
#   a@9 (9 < wm) -> [0, 19], open again (19 > 12); x@25: RETRACT [0, 10], ON_TIME [0, 19]
def test_a_reopened_session_fires_again_with_a_retraction(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime())
    agg.add_batch([ev("a", 0), ev("x", 12)])
    assert [(r.key, r.kind) for r in agg.get_result()] == [("a", Kind.ON_TIME)]
    stats = agg.add_message(ev("a", 9))
    assert stats.late == 0 and agg.get_result() == []
    agg.flush()  # the reopened session is persisted, then fires from the cache
    agg.add_message(ev("x", 25))
    results = [r for r in agg.get_result() if r.key == "a"]
    assert [(r.kind, r.window_start, r.window_end, r.update_seq) for r in results] == [
        (Kind.RETRACT, 0, 10 * S, 1),
        (Kind.ON_TIME, 0, 19 * S, 1),
    ]


# --------------------------------------------------------------------------- retention


def test_out_of_retention_events_go_to_errors(open_agg: OpenAgg) -> None:
    agg = open_agg(session_runtime(retention={"time": "20s"}))
    agg.add_message(ev("a", 100))  # watermark 100
    agg.add_message(ev("b", 65))  # its session would end at 75: 25 s before the watermark
    agg.add_message(ev("b", 71))  # ends at 81, within 20 s: kept (LATE)
    (err,) = agg.get_errors()
    assert err.code is ErrorCode.OUT_OF_RETENTION and err.offset == 1
    assert "out of retention" in err.reason
    # c: one long session [150, 222] (events 8 s apart), open at watermark 230
    agg.add_batch([ev("c", t) for t in range(150, 223, 8)] + [ev("x", 230)])
    # far behind (own end 165 <= 230 - 20) but inside the retained session's span: kept
    assert agg.add_message(ev("c", 155)).applied == 1 and agg.get_errors() == []
    # far behind and outside every retained session: it would move a session's start
    # back over time whose sessions may be forgotten already
    assert agg.add_message(ev("c", 145)).rejected == 1
    assert [e.code for e in agg.get_errors()] == [ErrorCode.OUT_OF_RETENTION]
    (w,) = agg.get_windows("c", 0, 300 * S)
    assert (w.window_start, w.window_end, w.values["n"]) == (150 * S, 232 * S, 11)


# max_idle_messages 2, one partition; offsets 0..7:
#
#   offset  0  1  2  3  4  5  6  7
#   key     a  b  b  a  x  x  a  x
#
# a: 0, then 3 (2 messages without a in between: 3 - 0 = 3 > 2) -> a new session;
# a@3 and a@6: 6 - 3 = 3 > 2 -> new sessions. b: 1, 2 -> one session [1, 3), ended
# once offset 4 (= 2 + 2) has been reached.
def test_tuple_sessions_end_after_n_messages_without_the_key(open_agg: OpenAgg) -> None:
    agg = open_agg(tuple_runtime(2))
    keys = "abbaxxax"
    emitted: list[tuple[int, str, int, int]] = []
    for off, k in enumerate(keys):
        agg.add_message({"k": k, "ts": 1000 - off, "v": off})  # event time is not used
        emitted += [(off, r.key, r.window_start, r.window_end) for r in agg.get_result()]
    assert all(r for r in emitted)
    assert emitted == [
        (2, "a", 0, 1),  # offset 2: a has been absent for 2 messages
        (4, "b", 1, 3),
        (5, "a", 3, 4),
    ]
    agg.timeout(END_OF_TIME)  # x: 4, 5, 7 (7 - 5 = 2) is still open, and so is a@6
    assert {(r.key, r.window_start, r.window_end) for r in agg.get_result()} == {
        ("a", 6, 7),
        ("x", 4, 8),
    }


# --------------------------------------------------------------------------- through a restore


# A firing does not rewrite the stored record: a record still "open" whose close the
# watermark has passed is known to have fired, also after a restore.
#
#   gap 10 s, allowed lateness 0
#   a@0   -> [0, 10], flushed while open
#   x@20  -> watermark 20: ON_TIME a [0, 10] (seq 0); the record still says open
#   ---- snapshot, restore: a's record is not loaded (it closed before the watermark)
#   a@5 (late) loads it back as fired: RETRACT [0, 10], LATE [0, 15] with seq 1, and no
#   second ON_TIME of [0, 10]
def test_a_session_stored_open_fires_once_across_a_restore(tmp_path: Path) -> None:
    runtime = session_runtime(watermark={"allowed_lateness": 0})
    agg = runtime.open_task(tmp_path)
    agg.add_message(ev("a", 0))
    agg.flush()
    agg.add_message(ev("x", 20))
    (fired,) = [r for r in agg.get_result() if r.key == "a"]
    assert (fired.kind, fired.window_end, fired.update_seq) == (Kind.ON_TIME, 10 * S, 0)
    agg.close()
    agg = runtime.open_task(tmp_path)
    assert agg.add_message(ev("a", 5)).late == 1
    results = [r for r in agg.get_result() if r.key == "a"]
    assert [(r.kind, r.window_start, r.window_end, r.update_seq) for r in results] == [
        (Kind.RETRACT, 0, 10 * S, 1),
        (Kind.LATE, 0, 15 * S, 1),
    ]
    agg.timeout(END_OF_TIME)
    assert [r.key for r in agg.get_result()] == ["x"]
    agg.close()


# --------------------------------------------------------------------------- pure decisions

TIME = SessionTrigger(gap=10, by_offsets=False, retention=20)
TUPLE = SessionTrigger(gap=2, by_offsets=True, retention=20)


def arr(*xs: int) -> IntArray:
    return np.array(xs, dtype=np.int64)


# gap 10, sessions with last events at 0, 5, 10: they close at 10, 15, 20
#
#   watermark 15:  [..0]====)10  [..5]====)15  [..10]====)20
#                  fires         fires (inclusive)  open
def test_time_sessions_fire_when_the_watermark_reaches_their_close() -> None:
    assert TIME.on_time(arr(0, 5, 10), 15).tolist() == [True, True, False]
    assert TIME.pad == 10 and TUPLE.pad == 1  # reported end: last + gap / last offset + 1
    # closed before the batch: a merged session whose close the watermark had passed
    assert TIME.closed_before(arr(0, 5, 10), 15).tolist() == [True, True, False]


# max_idle_messages 2; partition 0 has reached offset 5, partition 1 offset 6:
#
#   p0: last offset 3 -> ends at 3 + 2 = 5 <= 5: ended
#   p1: last offset 5 -> ends at 7 > 6: open;  p1: last 4 -> 6 <= 6: ended
def test_tuple_sessions_end_by_the_offsets_of_their_partition() -> None:
    offsets = {0: 5, 1: 6}
    assert TUPLE.ended(arr(3, 5, 4), arr(0, 1, 1), offsets.__getitem__).tolist() == [
        True,
        False,
        True,
    ]
    assert TUPLE.closed_before(arr(0, 1), 10**9).tolist() == [False, False]  # never late
    assert TUPLE.cutoff(10**9) == NO_WATERMARK  # nor past retention


def test_a_record_stored_open_fired_once_the_watermark_passed_its_close() -> None:
    closed = np.array([False, False, True])
    assert TIME.fired_while_stored(closed, arr(0, 30, 0), 20).tolist() == [True, False, False]


# Results of one step: ordered by (end, start, key code), whatever the slots' order.
#
#   end    25 10 25 10          -> 10 (start 0), 10 (start 5), 25 (code 1), 25 (code 7)
#   start   0  5  0  0
#   code    7  1  1  3
def test_emission_order_does_not_depend_on_memory_layout() -> None:
    order = SessionTrigger.emission_order(arr(7, 1, 1, 3), arr(0, 5, 0, 0), arr(25, 10, 25, 10))
    assert order.tolist() == [3, 1, 2, 0]


# A session emitted as [0, 10) and merged with one emitted as [15, 25) is now [0, 25):
# both identities are retracted; one emitted as [0, 25) already retracts nothing.
def test_superseded_identities_are_retracted() -> None:
    stale = SessionTrigger.stale(
        np.array([True, True, False]), arr(0, 0, 0), arr(10, 25, 0), arr(0, 0, 3), arr(25, 25, 13)
    )
    assert stale.tolist() == [True, False, False]
    assert SessionTrigger.retracted([(0, 10), (15, 25)], 0, 25) == [(0, 10), (15, 25)]
    assert SessionTrigger.retracted([(0, 25)], 0, 25) == []


# gap 10, retention 20, watermark 100: cutoff 80.
#
#   time        55   60   65   70   75   80   85
#   session s1  [55 58]===)68                           past retention (68 <= 80)
#   session s2       [62 .......... 78]=====)88         retained (88 > 80)
#   events       56   61   66    71
#
# t = 71 closes at 81 > 80: kept; t = 66 closes at 76 but lies inside s2's span
# [62, 78]: kept (it joins s2 without moving its bounds); t = 61 would move s2's start
# back: rejected; t = 56 lies only in s1, past retention: rejected.
def test_retention_of_sessions_and_events() -> None:
    cutoff = TIME.cutoff(100)
    assert cutoff == 80
    assert TIME.retained(arr(78, 58), cutoff).tolist() == [True, False]
    assert TIME.event_retained(arr(71, 66, 61, 56), cutoff).tolist() == [True] + [False] * 3
    assert TIME.event_retained_one(71, cutoff) and not TIME.event_retained_one(70, cutoff)
    inside = SessionTrigger.inside(arr(0, 0, 0), arr(66, 61, 56), arr(0), arr(62), arr(78))
    assert inside.tolist() == [True, False, False]
    # a pending LATE update goes out once its session leaves retention
    assert TIME.leaving_retention(arr(70, 71), 100).tolist() == [True, False]


def test_expiry_deletes_whole_index_buckets_past_retention() -> None:
    # watermark 1000, retention 20: sessions closing before 980 are past it; buckets of
    # 100 ms: bucket 8 ([800, 900)) is the last one wholly past retention
    assert TIME.expiry_bucket(1000, 100) == 8
    assert TIME.bucket_of(arr(879, 889), 100).tolist() == [8, 8]
    assert TIME.bucket_of_one(890, 100) == 9
    assert TIME.expiry_bucket(NO_WATERMARK, 100) is None
    assert TIME.expiry_bucket(END_OF_TIME, 100) is None  # the end of the input keeps all
    assert TUPLE.expiry_bucket(1000, 100) is None  # ended tuple sessions are dropped
