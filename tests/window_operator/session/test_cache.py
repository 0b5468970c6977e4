"""The session cache: merges applied to slots, and the bookkeeping of merged sessions."""

from __future__ import annotations

import numpy as np
from sessionkit import session_runtime

from window_operator.session.cache import SessionCache
from window_operator.session.merge import BatchSessions, cut_batch, merge

AGGS = session_runtime(aggregations=[{"name": "n", "op": "count"}]).aggregations
GAP = 10


def add(cache: SessionCache, key: str, times: list[int]) -> np.ndarray:
    """Merge events of ``key`` at ``times`` into the cache (as the operator does)."""
    kids = cache.keys.ids([key] * len(times), np.zeros(len(times), dtype=np.int64))
    ts = np.array(times, dtype=np.int64)
    cut = cut_batch(kids, ts, GAP)
    partial = AGGS.accumulate({}, ts, cut.groups, len(cut))
    plan = merge(
        cache.sessions(cache.of_keys(cut.kid)), BatchSessions(cut, partial, None), GAP, AGGS
    )
    surv = cache.apply(plan)
    cache.settle(surv, np.zeros(len(surv), dtype=np.bool_), late_on=True)
    return surv


def bounds(cache: SessionCache) -> list[tuple[int, int, int]]:
    sl = cache.slots
    return sorted((int(sl.start[s]), int(sl.last[s]), int(sl.acc[s, 0])) for s in cache.live())


# gap 10:
#
#   a@0 -> [0, 0], a@15 -> [15, 15]; both emitted ([0, 10), [15, 25), seq 0 -> 1) and
#   written to the store; a@16 then extends [15, 15] -> [15, 16] (seq 1 -> 2)
#   a@8 bridges them (8 <= 0 + 10, 8 + 10 >= 15): one session [0, 16] in the earliest
#   slot, which now carries both emitted identities (to retract), the larger update_seq,
#   and the record of the absorbed session is to be deleted at the next flush
def test_a_merge_keeps_the_bookkeeping_of_the_sessions_it_absorbs() -> None:
    cache = SessionCache(AGGS, per_partition=False)
    first, second = add(cache, "a", [0, 15]).tolist()
    sl = cache.slots
    both = np.array([first, second])
    cache.emitted(both, sl.start[both], sl.last[both] + GAP, [], dirty=True)
    cache.written(both)
    add(cache, "a", [16])
    cache.emitted(np.array([second]), np.array([15]), np.array([26]), [], dirty=True)
    assert bounds(cache) == [(0, 0, 1), (15, 16, 2)]
    (survivor,) = add(cache, "a", [8]).tolist()
    assert survivor == first
    assert bounds(cache) == [(0, 16, 4)]
    assert sl.emitted_bounds(survivor) == [(0, 10), (15, 26)]
    assert int(sl.seq[survivor]) == 2
    assert cache.superseded == {(0, 15): False}
    assert bool(sl.dirty[survivor]) and bool(sl.early[survivor])


def test_firing_closes_without_a_write_and_ended_sessions_are_taken_out() -> None:
    cache = SessionCache(AGGS, per_partition=True)
    slots = add(cache, "a", [0, 30])
    cache.written(slots)
    cache.fired(slots[:1])
    sl = cache.slots
    assert sl.closed[slots].tolist() == [True, False]
    assert not sl.dirty[slots].any()  # a firing is known from the record (see the trigger)
    assert cache.open_slots().tolist() == [int(slots[1])]
    assert cache.take_ended().tolist() == [int(slots[0])]
    cache.release(slots[:1])
    assert cache.live().tolist() == [int(slots[1])]
