"""The exchange between workers: delivery in order, credit-based throttling, a worker
that goes away with and without its END, and a held-back worker's word."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest

from window_operator.kernel import InputPosition
from window_operator.runtime.exchange import InputRange, MapReport, Rows
from window_operator.runtime.longrun.held import HeldBack
from window_operator.runtime.longrun.mesh import Mesh
from window_operator.runtime.longrun.wire import Chunk, End, Held, Kind, PeerLostError


class Inbox:
    def __init__(self) -> None:
        self.got: dict[int, list[object]] = defaultdict(list)
        self.bytes: dict[int, int] = defaultdict(int)
        self.lock = threading.Lock()

    def __call__(self, sender: int, kind: Kind, message: object, nbytes: int) -> None:
        with self.lock:
            self.got[sender].append(message)
            self.bytes[sender] += nbytes


def chunk(partition: int, start: int, payload: bytes = b"x") -> Chunk:
    report = MapReport(InputRange(0, "t", partition, start, start + 1), 1, start)
    return Chunk(report, {0: Rows(0, payload)})


def meshes(n: int, **options: float) -> tuple[list[Mesh], list[Inbox]]:
    inboxes = [Inbox() for _ in range(n)]
    ms = [Mesh(i, n, "token", inboxes[i], timeout_s=10.0, **options) for i in range(n)]
    addresses = [m.listen() for m in ms]
    threads = [threading.Thread(target=m.join, args=(addresses,)) for m in ms]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return ms, inboxes


def wait_for(cond: object, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def failed(m: Mesh) -> bool:
    try:
        m.check()
    except PeerLostError:
        return True
    return False


def test_every_worker_gets_every_sender_s_messages_in_order() -> None:
    ms, inboxes = meshes(3)
    for sender, m in enumerate(ms):
        for i in range(50):
            for w in range(3):
                m.send(w, Kind.CHUNK, chunk(sender, i))
        for w in range(3):
            m.send(w, Kind.END, End(sender))
    for inbox in inboxes:
        wait_for(lambda inbox=inbox: all(len(inbox.got[s]) == 51 for s in range(3)))
        for sender in range(3):
            starts = [c.report.range.start for c in inbox.got[sender][:-1]]
            assert starts == list(range(50))
            assert inbox.got[sender][-1] == End(sender)
    assert inboxes[0].bytes[0] == 0  # its own chunks never touch a socket
    for m in ms:
        m.check()
        m.close()


def test_a_sender_is_throttled_until_its_chunks_are_taken() -> None:
    ms, inboxes = meshes(2, max_unacked=10_000)
    ms[0].send(1, Kind.CHUNK, chunk(0, 0, b"y" * 20_000))
    assert ms[0].throttled
    wait_for(lambda: inboxes[1].bytes[0] > 0)
    ms[1].acknowledge(0, inboxes[1].bytes[0])
    wait_for(lambda: not ms[0].throttled)
    for m in ms:
        m.close()


def test_a_worker_that_goes_away_without_its_end_is_an_error_after_it_is_not() -> None:
    ms, _ = meshes(2)
    ms[1].close()
    wait_for(lambda: failed(ms[0]))
    with pytest.raises(PeerLostError, match="worker 1"):
        ms[0].check()
    ms[0].close()

    ms, _ = meshes(2)
    for w in (0, 1):
        ms[1].send(w, Kind.END, End(1))
    time.sleep(0.2)
    ms[1].close()  # finished: it sent its END first
    time.sleep(0.3)
    ms[0].check()
    ms[0].close()


# -- a held-back worker's word (HeldBack) ---------------------------------------------

P0, P1 = InputPosition(0, 0), InputPosition(0, 1)


def test_a_throttled_worker_tells_every_worker_that_its_partitions_are_held() -> None:
    ms, inboxes = meshes(2, max_unacked=10_000)
    held = HeldBack.of(ms[0], idle_timeout_ms=2_000, epoch_ms=1_000)
    assert held.every_s == 0.5  # a quarter of the idle timeout, below the epoch
    ms[0].send(1, Kind.CHUNK, chunk(0, 0, b"y" * 20_000))
    assert ms[0].throttled
    assert held.tell({P1, P0}, now=100.0)
    assert not held.tell({P0, P1}, now=100.4)  # told 0.4 s ago
    assert held.tell({P0}, now=100.5)
    wait_for(lambda: len(inboxes[1].got[0]) == 3)
    assert inboxes[1].got[0][1:] == [Held((P0, P1)), Held((P0,))]
    assert inboxes[0].got[0] == [Held((P0, P1)), Held((P0,))]  # its own tasks too
    # a held word is no chunk: it takes no credit, and needs none
    assert inboxes[1].bytes[0] > 20_000
    ms[1].acknowledge(0, 20_000 + 100)
    wait_for(lambda: not ms[0].throttled)
    for m in ms:
        m.close()


def test_no_word_without_an_idle_timeout_or_without_partitions() -> None:
    ms, inboxes = meshes(1)
    never = HeldBack.of(ms[0], idle_timeout_ms=None, epoch_ms=1_000)
    assert never.every_s is None
    assert not never.tell({P0}, now=1.0)
    slow = HeldBack.of(ms[0], idle_timeout_ms=60_000, epoch_ms=1_000)
    assert slow.every_s == 1.0  # at least once per epoch
    assert not slow.tell(set(), now=1.0)
    assert inboxes[0].got[0] == []
    ms[0].close()
