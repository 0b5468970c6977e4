"""The driver's coordinator and a worker's control client, over loopback TCP."""

from __future__ import annotations

import pytest

from window_operator.runtime.longrun.control import ControlClient, Coordinator


def test_stopped_workers_and_late_comers_stop_until_the_coordinator_resumes() -> None:
    coordinator = Coordinator("secret", 1, lambda _report: None)
    address = coordinator.start()
    try:
        first = ControlClient(address, "secret", 0)
        coordinator.stop_workers()
        assert first.stop_requested.wait(10), "a running worker is told to stop"
        first.close()
        late = ControlClient(address, "secret", 0)
        assert late.stop_requested.wait(10), "one connecting after the stop too"
        late.close()
        # the next start of the workers (after partitions were added) runs
        coordinator.resume()
        again = ControlClient(address, "secret", 0)
        assert again.gather("r1", "hello", 10) == ["hello"]
        assert not again.stop_requested.is_set()
        coordinator.stop_workers()
        assert again.stop_requested.wait(10)
        again.close()
    finally:
        coordinator.close()


def test_only_a_driver_that_went_away_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    """A worker closing its own connection ends its reader without a word, even when the
    close comes between two frames (the next read fails on the closed socket); a
    connection that fails otherwise is the driver lost: a warning, and a stop. Before,
    the worker's own close could log "lost the driver" (after a test ended: a logging
    error on a closed stream)."""
    coordinator = Coordinator("secret", 1, lambda _report: None)
    address = coordinator.start()
    try:
        client = ControlClient(address, "secret", 0)
        client.close()
        client._reader.join(10)
        client._read()  # a read after the close, as when it came between two frames
        assert client.stop_requested.is_set()
        assert "lost the driver" not in caplog.text
        failing = ControlClient(address, "secret", 0)
        failing.conn.sock.close()  # fails under the reader: not the worker's close
        failing._read()
        assert failing.stop_requested.is_set()
        assert "lost the driver" in caplog.text
        failing.close()
    finally:
        coordinator.close()
    # the reader thread of ``failing`` ends now at the latest (it may also have read
    # the closed socket first, and warned): while this test still captures the log, not
    # after it, when its warning went to a closed stream in CI's output
    failing._reader.join(10)
    assert not failing._reader.is_alive()


def test_a_worker_connecting_as_the_coordinator_closes_is_not_left_waiting() -> None:
    """The coordinator closes while a worker introduces itself: that worker's connection
    is closed too (it stops), instead of staying open, unanswered, until the process
    ends."""
    for _ in range(20):  # the close lands before, during or after the introduction
        coordinator = Coordinator("secret", 2, lambda _report: None)
        address = coordinator.start()
        client = ControlClient(address, "secret", 0)
        coordinator.close()
        assert client.stop_requested.wait(10), "the worker was left waiting"
        client.close()
