"""The job's Ctrl-C and SIGTERM handler (``run_observed``): a first signal lets the
running work finish, a second stops at once."""

from __future__ import annotations

import logging
import threading

import pytest

from window_operator.observe.attach import _interrupt


def test_a_second_interrupt_stops_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """A start-up pass can wait minutes for a broker, and the first signal is only
    looked at once it ended: before, a second Ctrl-C or SIGTERM did nothing more, and a
    user could not stop the job short of SIGKILL."""
    interrupted = threading.Event()
    with caplog.at_level(logging.INFO, logger="window_operator.observe.attach"):
        _interrupt(interrupted)
        assert interrupted.is_set()
        assert "Ctrl-C again to stop at once" in caplog.text
        with pytest.raises(KeyboardInterrupt):
            _interrupt(interrupted)
    assert "interrupted again: stopping now" in caplog.text
