"""Keys that come and go: memory and store stay bounded by the live sessions (issue: churn).

Timeline (time sessions, gap 10 s, retention 1 min, lateness 0): every batch brings 40
new keys, 100 s of event time after the previous one, 3 events each one second apart,
so after a batch every session of the batch before is past retention::

    batch     0            1            2           ...
    time      0..2 s       100..102 s   200..202 s
    keys      k0-0..k0-39  k1-0..       k2-0..      (each: one session [t, t + 12 s))

Tuple sessions (``max_idle_messages``) delete a session as soon as it ends, and with it
its key once nothing else refers to it.
"""

from __future__ import annotations

from pathlib import Path

from churnkit import three_each
from helpers import runtime_for
from sessionkit import AGGS

from stores.keyspace import GroupKeyLayout, encode_key
from stores.rocks import ColumnFamily, TaskStore
from window_operator.policies import END_OF_TIME
from window_operator.results import Kind, WindowResult
from window_operator.session import SessionAggregator
from window_operator.session.state import INDEX, PENDING, SESSIONS

S = 1000


def open_agg(path: Path, window: dict[str, object]) -> SessionAggregator:
    rt = runtime_for(window=window, aggregations=AGGS, retention={"time": "1m"})
    assert isinstance(window, dict)
    return SessionAggregator(
        window=rt.config.window,  # type: ignore[arg-type]
        aggregations=rt.aggregations,
        policy=rt.policy,
        store=TaskStore(path),
        decoder=rt.decoder,
        key_slack=0,
    )


def stored_keys(agg: SessionAggregator, *, per_partition: bool = False) -> set[str]:
    """The grouping keys of every session record, index entry, marker and message."""
    layout = GroupKeyLayout(per_partition)
    found = set()
    for k, _ in agg.store.scan_range(SESSIONS.all()):
        found.add(layout.parse(SESSIONS.parse(k).key).key)
    for k, _ in agg.store.scan_range(PENDING.all()):
        found.add(layout.parse(PENDING.parse(k).key).key)
    for k, _ in agg.store.scan_range(INDEX.since(-(2**62))):
        found.add(layout.parse(INDEX.parse(k).key).key)
    messages = [k for k, _ in agg.store.scan(ColumnFamily.MESSAGES, b"")]
    for name in found:
        messages = [k for k in messages if not k.startswith(encode_key(name))]
    assert messages == [], "messages of keys without a session"
    return found


def step(agg: SessionAggregator, keys: list[str], t0: int) -> list[WindowResult]:
    """One micro-batch as a task runs it; its results."""
    agg.add_batch(three_each(keys, t0))
    agg.timeout(t0)
    results = agg.get_result()
    agg.flush()
    return results


def test_expired_keys_are_released_from_memory_and_store(tmp_path: Path) -> None:
    agg = open_agg(tmp_path / "s", {"type": "session", "gap": "10s"})
    try:
        for b in range(6):
            step(agg, [f"k{b}-{i}" for i in range(40)], b * 100 * S)
        # only the last batch's sessions are within retention (open, in the cache): the
        # key table holds at most twice their keys, the store only theirs
        assert len(agg.cache.keys) <= 2 * 40
        assert len(agg.cache.slots) == 40
        assert stored_keys(agg) == {f"k5-{i}" for i in range(40)}
        # the watermark passes the retention of every key
        step(agg, ["later"], 1000 * S)
        step(agg, ["latest"], 2000 * S)
        # "later"'s session is past retention too; the table may keep it until it holds
        # more than twice the live keys
        assert set(agg.cache.keys.name) <= {"later", "latest"}
        assert len(agg.cache.slots) == 1 and not agg.cache.superseded
        assert stored_keys(agg) <= {"latest"}
        # a key that comes back is counted from zero
        agg.add_batch(three_each(["k0-0"], 3000 * S))
        agg.timeout(END_OF_TIME)
        results = [r for r in agg.get_result() if r.key == "k0-0"]
        assert [(r.kind, r.window_start, r.values["n"]) for r in results] == [
            (Kind.ON_TIME, 3000 * S, 3)
        ]
    finally:
        agg.close()


def test_a_kept_key_keeps_its_stored_sessions_through_a_compaction(tmp_path: Path) -> None:
    # sessions [0, 12 s) of 60 keys, k's [30 s, 42 s), [40 s, 52 s) of 40 more: at
    # watermark 82 s the 60 are past retention (released), k and the 40 are not, but
    # their sessions closed and left the cache; a late event of k must still find its
    # stored session after the key ids were renumbered
    agg = open_agg(tmp_path / "s", {"type": "session", "gap": "10s"})
    try:
        step(agg, [f"early{i}" for i in range(60)], 0)
        step(agg, ["k"], 30 * S)
        step(agg, [f"middle{i}" for i in range(40)], 40 * S)
        step(agg, ["f"], 80 * S)
        assert set(agg.cache.keys.name) == {"k", "f"} | {f"middle{i}" for i in range(40)}
        cached = agg.cache.slots.kid[agg.cache.live()].tolist()
        assert [agg.cache.keys.name[kid] for kid in cached] == ["f"]
        late = step(agg, ["k"], 35 * S)
        # the stored session is extended (its old identity retracted), not a new one
        assert [(r.kind, r.window_start, r.window_end) for r in late] == [
            (Kind.RETRACT, 30 * S, 42 * S),
            (Kind.LATE, 30 * S, 47 * S),
        ]
        assert late[-1].values["n"] == 6
    finally:
        agg.close()


def test_release_survives_a_restore(tmp_path: Path) -> None:
    window = {"type": "session", "gap": "10s"}
    agg = open_agg(tmp_path / "s", window)
    for b in range(3):
        step(agg, [f"k{b}-{i}" for i in range(20)], b * 100 * S)
    agg.close()
    again = open_agg(tmp_path / "s", window)
    try:
        # a late event of a live key after the restore still extends its session
        again.add_batch(three_each(["k2-0"], 205 * S))
        again.timeout(END_OF_TIME)
        latest = {r.key: r for r in again.get_result() if r.kind is not Kind.RETRACT}
        assert (latest["k2-0"].window_start, latest["k2-0"].values["n"]) == (200 * S, 6)
    finally:
        again.close()


def test_ended_tuple_sessions_release_their_keys(tmp_path: Path) -> None:
    agg = open_agg(tmp_path / "s", {"type": "session", "max_idle_messages": 5})
    try:
        for b in range(6):
            step(agg, [f"k{b}-{i}" for i in range(10)], b * 100 * S)
        # a key's session ends 5 offsets after its last message: only the last two keys
        # of the last batch are still open
        assert len(agg.cache.slots) == 2
        assert len(agg.cache.keys) <= 2 * 2
        assert stored_keys(agg, per_partition=True) <= {"k5-8", "k5-9"}
        step(agg, [f"f{i}" for i in range(10)], 600 * S)
        assert not any(name.startswith("k") for name in agg.cache.keys.name)
        assert stored_keys(agg, per_partition=True) <= {"f8", "f9"}
        # a key that comes back is counted from zero
        results = step(agg, ["k0-0"], 700 * S) + step(agg, ["g0", "g1"], 800 * S)
        assert [(r.kind, r.values["n"]) for r in results if r.key == "k0-0"] == [(Kind.ON_TIME, 3)]
    finally:
        agg.close()
