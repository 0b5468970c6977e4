"""The driver's coordinator and a worker's control client, over loopback TCP."""

from __future__ import annotations

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
