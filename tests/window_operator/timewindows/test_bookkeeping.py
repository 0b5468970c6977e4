"""Window bookkeeping: update sequences, pending LATE updates, write-back, restore,
eviction and key renumbering, against a plain dict model of the same rules."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stores.rocks import StoreBatch, TaskStore
from window_operator.keytable import KeyTable
from window_operator.results import Kind
from window_operator.timewindows.bookkeeping import WindowBook

SIZE = 30


def arrays(windows: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    kids = np.array([k for k, _ in windows], dtype=np.int64)
    starts = np.array([w for _, w in windows], dtype=np.int64)
    return kids, starts


def book_over(path: Path, keys: KeyTable[str]) -> WindowBook:
    return WindowBook(TaskStore(path), keys)


def commit(book: WindowBook) -> None:
    batch = StoreBatch()
    book.persist(batch)
    book.store.commit(batch)


def test_sequences_count_every_emission_and_survive_a_restore(tmp_path: Path) -> None:
    keys: KeyTable[str] = KeyTable()
    a, b = keys.id_of("a"), keys.id_of("b")
    book = book_over(tmp_path / "s", keys)
    kids, starts = arrays([(a, 0), (b, 0), (a, 10)])
    assert book.seqs(Kind.ON_TIME, kids, starts).tolist() == [0, 0, 0], "no history: seq 0"
    assert len(book) == 0, "an ON_TIME result of a window without history keeps nothing"
    assert book.seqs(Kind.EARLY, kids, starts).tolist() == [0, 0, 0]
    assert book.seqs(Kind.EARLY, kids[:2], starts[:2]).tolist() == [1, 1]
    book.mark_late((b, 10), lambda: True, emit=True)  # fired ON_TIME before: next is 1
    commit(book)
    book.store.close()

    again = book_over(tmp_path / "s", keys)
    again.restore(wm=5, size=SIZE)  # every window open at 5, and (b, 10) pending
    assert len(again) == 4 and list(again.pending) == [(b, 10)]
    assert again.take_pending() == [(b, 10)]
    kids, starts = arrays([(a, 0), (b, 0), (a, 10), (b, 10)])
    assert again.seqs(Kind.ON_TIME, kids, starts).tolist() == [2, 2, 1, 1]
    again.store.close()


def test_fired_windows_without_a_pending_update_are_evicted_and_expire(tmp_path: Path) -> None:
    keys: KeyTable[str] = KeyTable()
    a = keys.id_of("a")
    book = book_over(tmp_path / "s", keys)
    kids, starts = arrays([(a, 0), (a, 10), (a, 20)])
    book.seqs(Kind.EARLY, kids, starts)
    book.mark_late((a, 0), lambda: True, emit=True)
    commit(book)
    book.evict(wm=40, size=SIZE)  # (a, 0) and (a, 10) fired; (a, 0) has a LATE pending
    assert sorted(book.slot_of) == [(a, 0), (a, 20)]
    assert book.live_kids().tolist() == [a, a]
    batch = StoreBatch()
    book.expire(batch, cutoff=0)
    book.store.commit(batch)
    assert sorted(book.slot_of) == [(a, 20)]
    book.store.close()


def test_renumbered_keys_keep_their_windows(tmp_path: Path) -> None:
    keys: KeyTable[str] = KeyTable()
    keys.id_of("gone")
    kept = keys.id_of("kept")
    book = book_over(tmp_path / "s", keys)
    book.seqs(Kind.EARLY, *arrays([(kept, 0), (kept, 10)]))
    book.mark_late((kept, 0), lambda: False, emit=True)
    remap = keys.compact(np.array([kept], dtype=np.int64))
    book.renumber_keys(remap)
    new = int(remap[kept])
    assert (kept, new) == (1, 0), "the forgotten key's id went to the kept one"
    assert sorted(book.slot_of) == [(new, 0), (new, 10)] and list(book.pending) == [(new, 0)]
    assert book.seqs(Kind.ON_TIME, *arrays([(new, 0), (new, 10)])).tolist() == [1, 1]
    book.store.close()


Op = tuple[str, int, int]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["early", "on_time", "late", "take"]), st.integers(0, 3),
                  st.integers(0, 4)),
        max_size=40,
    )
)  # fmt: skip
def test_sequences_match_a_dict_model(tmp_path_factory: object, ops: list[Op]) -> None:
    """Random emissions and late marks (many windows growing the arrays): the sequence
    of every emission is the model's."""
    path = Path(str(tmp_path_factory.mktemp("book")))  # type: ignore[attr-defined]
    keys: KeyTable[str] = KeyTable()
    for k in range(4):
        keys.id_of(f"k{k}")
    book = book_over(path, keys)
    seq: dict[tuple[int, int], int] = {}
    pending: dict[tuple[int, int], None] = {}
    # 1,100 EARLY windows at first: the arrays grow past their first 1,024 slots
    many = [(k, 100 + i) for k in range(4) for i in range(275)]
    book.seqs(Kind.EARLY, *arrays(many))
    seq.update({w: 1 for w in many})
    for op, k, i in ops:
        w = (k, i * 10)
        if op == "take":
            want = sorted(pending, key=lambda x: (x[1], x[0]))
            pending.clear()
            assert book.take_pending() == want
            continue
        if op == "late":
            seq.setdefault(w, 1)  # it fired ON_TIME before: its next result is 1
            book.mark_late(w, lambda: True, emit=True)
            pending[w] = None
            continue
        kind = Kind.EARLY if op == "early" else Kind.ON_TIME
        if kind is Kind.EARLY or w in seq:
            want_seq = seq.get(w, 0)
            seq[w] = want_seq + 1
        else:
            want_seq = 0
        assert book.seqs(kind, *arrays([w])).tolist() == [want_seq]
    book.store.close()
