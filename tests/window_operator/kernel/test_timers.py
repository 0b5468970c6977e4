"""Wall-clock emission timers: the first reading starts a period, the next due one fires."""

from __future__ import annotations

from window_operator.kernel import TimerAction, Timers, due
from window_operator.policies import EmitPolicy, LateMode


def test_late_updates_go_out_once_per_period() -> None:
    policy = EmitPolicy(late_mode=LateMode.PERIOD, late_period=10)
    timers = Timers()
    assert due(policy, timers, 100, late_pending=True) is TimerAction.NONE  # starts
    assert due(policy, timers, 105, late_pending=True) is TimerAction.NONE
    assert due(policy, timers, 110, late_pending=True) is TimerAction.LATE
    timers.late_flushed()
    assert due(policy, timers, 111, late_pending=False) is TimerAction.NONE


def test_early_results_every_period_and_checkpointed_readings() -> None:
    policy = EmitPolicy(early_period=5)
    timers = Timers()
    assert due(policy, timers, 0, late_pending=False) is TimerAction.NONE
    assert due(policy, timers, 5, late_pending=False) is TimerAction.EARLY
    restored = Timers()
    restored.load_json(timers.to_json())
    assert restored == timers


def test_a_run_that_stops_ends_the_late_period_at_the_next_reading() -> None:
    policy = EmitPolicy(late_mode=LateMode.PERIOD, late_period=10)
    timers = Timers()
    timers.late_now = True  # nothing pending: the flag is only spent
    assert due(policy, timers, 100, late_pending=False) is TimerAction.NONE
    assert due(policy, timers, 100, late_pending=True) is TimerAction.NONE  # starts
    timers.late_now = True
    assert due(policy, timers, 101, late_pending=True) is TimerAction.LATE
    assert not timers.late_now and "late_now" not in timers.to_json()


def test_a_period_ends_when_nothing_is_pending_though_nothing_was_flushed() -> None:
    """A pending late session that merges into one still open leaves nothing pending
    without a flush. Before, its period ran on, and the next late session went out at
    the next reading instead of a period after it was marked."""
    policy = EmitPolicy(late_mode=LateMode.PERIOD, late_period=20)
    timers = Timers()
    timers.late_marked(policy, 47)
    assert due(policy, timers, 60, late_pending=False) is TimerAction.NONE
    assert timers.late_since is None
    timers.late_marked(policy, 62)
    assert due(policy, timers, 76, late_pending=True) is TimerAction.NONE
    assert due(policy, timers, 82, late_pending=True) is TimerAction.LATE
