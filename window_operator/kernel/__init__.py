"""The operator kernel: what every window operator composes (see :mod:`.kernel`)."""

from window_operator.kernel.checkpoint import CHECKPOINT_KEY, Checkpoint, read_checkpoint
from window_operator.kernel.clock import ClockState, EventClock
from window_operator.kernel.kernel import Decoded, OperatorKernel, SingleDecoder
from window_operator.kernel.outputs import OutputBuffer
from window_operator.kernel.positions import InputPosition, Positions
from window_operator.kernel.protocol import StoredWindow, WindowOperator
from window_operator.kernel.records import (
    Admission,
    LiveState,
    StepStats,
    retention_error,
)
from window_operator.kernel.timers import TimerAction, Timers, due

__all__ = [
    "CHECKPOINT_KEY",
    "Admission",
    "Checkpoint",
    "ClockState",
    "Decoded",
    "EventClock",
    "InputPosition",
    "LiveState",
    "OperatorKernel",
    "OutputBuffer",
    "Positions",
    "SingleDecoder",
    "StepStats",
    "StoredWindow",
    "TimerAction",
    "Timers",
    "WindowOperator",
    "due",
    "read_checkpoint",
    "retention_error",
]
