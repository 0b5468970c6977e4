"""Compatibility names: frame state lives in :mod:`window_operator.timewindows`."""

from window_operator.keytable import KeyTable
from window_operator.timewindows.frame_store import PendingMessage

__all__ = ["KeyTable", "PendingMessage"]
