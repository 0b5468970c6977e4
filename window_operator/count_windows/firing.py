"""When count windows fire and which frames stay open: pure decisions over message counts.

The model is Flink's count ``Trigger``: no state of its own, answers from the keys'
message counts before and after a batch (and the settings). A key's window starting at
frame ``s`` (message ``s * step``) holds the key's messages ``[s * step, s * step +
size)``, i.e. frames ``s .. s + k - 1`` with ``k = size // step``:

* it fires ON_TIME the moment it holds ``size`` messages (the count passes its end);
* at count ``c`` the open windows start at frames ``c // step - k + 1 .. (c - 1) // step``
  (those holding messages), so only those frames are kept;
* a key whose count is a multiple of ``step`` starts an empty frame.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from window_operator.arrays import BoolArray, IntArray
from window_operator.count_windows.numbering import Numbered
from window_operator.count_windows.ragged import ragged_arange

__all__ = ["CountTrigger", "FullFrames", "FullWindows", "KeptFrames", "OpenWindows"]


@dataclass(frozen=True, slots=True)
class FullFrames:
    """Tumbling windows (one frame each) that became full: their groups in the batch."""

    groups: IntArray
    kids: IntArray
    frames: IntArray
    #: the window held messages before the batch (its update_seq is in the ring)
    existed: BoolArray


@dataclass(frozen=True, slots=True)
class FullWindows:
    """Hopping windows that became full in a batch.

    Per firing key (``keys``: indices into the batch's touched keys): the first frame
    of its first firing window (``first``) and how many windows fire (``n_win``). Per
    window: its place in its key's run, key id, start frame and whether it held messages
    before the batch.
    """

    keys: IntArray
    first: IntArray
    n_win: IntArray
    index: IntArray
    kids: IntArray
    frames: IntArray
    existed: BoolArray


@dataclass(frozen=True, slots=True)
class KeptFrames:
    """The batch's groups whose frame stays open, and which of those are new frames."""

    groups: IntArray
    born: BoolArray


@dataclass(frozen=True, slots=True)
class OpenWindows:
    """Open windows holding messages: key id, start frame, last frame with messages."""

    kids: IntArray
    starts: IntArray
    last: IntArray

    def __len__(self) -> int:
        return len(self.kids)

    def select(self, idx: IntArray) -> OpenWindows:
        """The windows at ``idx``."""
        return OpenWindows(self.kids[idx], self.starts[idx], self.last[idx])


class CountTrigger:
    """Fire and keep decisions of tumbling / hopping count windows (see module doc)."""

    def __init__(self, size: int, step: int) -> None:
        self.size = size
        self.step = step
        self.k = size // step

    def full_frames(self, num: Numbered) -> FullFrames:
        """Tumbling: a key's frames below ``c1 // step`` are full windows."""
        f1 = num.c1 // self.step
        groups = np.flatnonzero(num.g_frame < f1[num.g_key])
        frames = num.g_frame[groups]
        existed = frames == (num.c0 // self.step)[num.g_key[groups]]
        return FullFrames(groups, num.g_kid[groups], frames, existed)

    def full_windows(self, num: Numbered) -> FullWindows | None:
        """Hopping: windows whose end (in frames) is in ``(f0, f1]`` and ``>= k``."""
        k = self.k
        f0 = num.c0 // self.step
        f1 = num.c1 // self.step
        r_lo = np.maximum(f0 - k + 1, 0)
        n_win = np.maximum(f1 - np.maximum(f0 + 1, k) + 1, 0)
        keys = np.flatnonzero(n_win > 0)
        if not len(keys):
            return None
        nw = n_win[keys]
        w_off = ragged_arange(nw)
        frames = np.repeat(r_lo[keys], nw) + w_off
        return FullWindows(
            keys=keys,
            first=r_lo[keys],
            n_win=nw,
            index=w_off,
            kids=np.repeat(num.ukid[keys], nw),
            frames=frames,
            existed=frames <= np.repeat(f0[keys], nw),
        )

    def kept(self, num: Numbered) -> KeptFrames:
        """Groups whose frame still belongs to an open window after the batch."""
        f1 = num.c1 // self.step
        groups = np.flatnonzero(num.g_frame >= f1[num.g_key] - self.k + 1)
        born = num.g_frame[groups] > (num.c0 // self.step)[num.g_key[groups]]
        return KeptFrames(groups, born)

    def frame_completed(self, num: Numbered) -> BoolArray:
        """Touched keys whose count ends a frame (their next frame starts empty)."""
        done: BoolArray = num.c1 % self.step == 0
        return done

    def _open_frames(self, counts: IntArray) -> tuple[IntArray, IntArray]:
        """Per key with message ``counts``: the first and the last start frame of its open
        windows holding messages (``last < first``: none)."""
        last = (counts - 1) // self.step  # -1 for a key without messages
        first = np.maximum(counts // self.step - self.k + 1, 0)
        return first, last

    def open_counts(self, counts: IntArray) -> IntArray:
        """How many open windows hold messages of keys with message ``counts``."""
        first, last = self._open_frames(counts)
        n_open: IntArray = np.maximum(last - first + 1, 0)
        return n_open

    def open_windows(self, kids: IntArray, counts: IntArray) -> OpenWindows:
        """Every open window holding messages of keys with message ``counts``."""
        lo, last = self._open_frames(counts)
        n_open = np.maximum(last - lo + 1, 0)
        off = ragged_arange(n_open)
        return OpenWindows(
            np.repeat(kids, n_open), np.repeat(lo, n_open) + off, np.repeat(last, n_open)
        )

    def overlapping(self, wins: OpenWindows, start: int, end: int) -> OpenWindows:
        """The windows holding messages ``[start, end)`` (message indices)."""
        first = wins.starts * self.step
        return wins.select(np.flatnonzero((first < end) & (first + self.size > start)))
