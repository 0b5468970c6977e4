"""The in-memory message cache: (key, time) codes, sorted inserts, eviction, and the
vectorized range matching against a brute-force oracle."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from window_operator.join.cache import Codec, SideCache, expand, fit_codec, range_join

INT = np.int64


def arr(*values: int) -> np.ndarray:
    return np.array(values, dtype=INT)


def test_codes_sort_by_key_then_time_and_ranges_bound_them() -> None:
    codec = Codec(base=100, bits=8)
    assert codec.fits(kid_max=3, ts_min=100, ts_max=355)
    assert not codec.fits(kid_max=3, ts_min=99, ts_max=200)
    codes = codec.codes(arr(1, 0, 1), arr(100, 300, 101))
    assert codes.tolist() == [256, 200, 257]
    start, end = codec.range_codes(arr(1), arr(50), arr(100))  # clipped at the base
    assert (start.tolist(), end.tolist()) == ([256], [257])


def test_inserts_keep_the_cache_sorted_and_eviction_raises_the_horizon() -> None:
    codec = Codec(base=0, bits=16)
    cache = SideCache()
    for kids, ts in ((arr(1, 0), arr(5, 9)), (arr(0, 1), arr(1, 2))):
        recs = np.array([b"r"] * 2, dtype=object)
        cache.insert(codec.codes(kids, ts), kids, ts, ts * 10, recs)
    assert (cache.kid.tolist(), cache.ts.tolist()) == ([0, 0, 1, 1], [1, 9, 2, 5])
    cache.evict(target=3, max_rows=10)
    assert cache.horizon == 3 and len(cache) == 4  # stale rows stay until a bulk compaction
    # the cap wins: the horizon rises past all but the latest message (ts 5 < 6 <= 9)
    cache.evict(target=0, max_rows=1)
    assert cache.horizon == 6 and cache.ts.tolist() == [9]


def test_fit_codec_covers_the_cache_or_says_what_to_do() -> None:
    cache = SideCache()
    cache.insert(arr(0), arr(0), arr(-(2**40)), arr(0), np.array([b"r"], dtype=object))
    codec = fit_codec([cache], n_keys=4, kid_max=3, ts_min=0, ts_max=10)
    assert codec.fits(3, -(2**40), 10)
    assert cache.code.tolist() == codec.codes(arr(0), arr(-(2**40))).tolist()
    with pytest.raises(RuntimeError, match="cache_max_rows"):
        fit_codec([cache], n_keys=2**30, kid_max=2**30, ts_min=0, ts_max=2**60)


def test_expand_flattens_ranges() -> None:
    probe, slot = expand(arr(2, 5, 0), arr(4, 5, 1))
    assert (probe.tolist(), slot.tolist()) == ([0, 0, 2], [2, 3, 0])


@given(
    cands=st.lists(st.tuples(st.integers(0, 3), st.integers(-50, 50)), max_size=20),
    queries=st.lists(
        st.tuples(st.integers(0, 4), st.integers(-60, 60), st.integers(0, 30)), max_size=10
    ),
    extreme=st.booleans(),
)
def test_range_join_finds_every_pair_once(
    cands: list[tuple[int, int]], queries: list[tuple[int, int, int]], extreme: bool
) -> None:
    # extreme: times far apart take the per-key path instead of one code space
    far = 2**61 if extreme else 0
    c_kid = np.array([k for k, _ in cands], dtype=INT)
    c_ts = np.array([t for _, t in cands], dtype=INT) + np.where(c_kid == 3, far, 0)
    q_kid = np.array([k for k, _, _ in queries], dtype=INT)
    q_lo = np.array([lo for _, lo, _ in queries], dtype=INT)
    q_hi = q_lo + np.array([w for _, _, w in queries], dtype=INT)
    qi, ci = range_join(c_kid, c_ts, q_kid, q_lo, q_hi)
    got = sorted(zip(qi.tolist(), ci.tolist(), strict=True))
    want = sorted(
        (q, c)
        for q in range(len(queries))
        for c in range(len(cands))
        if c_kid[c] == q_kid[q] and q_lo[q] <= c_ts[c] <= q_hi[q]
    )
    assert got == want
