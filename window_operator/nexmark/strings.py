"""Random strings for the Nexmark records, many at a time.

All strings are ASCII lowercase letters and spaces, so they need no escaping in JSON.
Each column is drawn as one block of random bytes and cut into its strings.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from window_operator.arrays import IntArray

__all__ = ["MIN_LENGTH", "letters", "padding", "pick", "words"]

#: The shortest string :func:`words` draws (before trimming its spaces).
MIN_LENGTH = 3
#: One character in this many is a space in :func:`words`.
_SPACE_ONE_IN = 13


def _cut(text: str, lengths: IntArray) -> list[str]:
    ends = np.cumsum(lengths)
    starts = (ends - lengths).tolist()
    return [text[a:b] for a, b in zip(starts, ends.tolist(), strict=True)]


def _draw(rng: np.random.Generator, total: int, spaces: bool) -> str:
    codes = rng.integers(ord("a"), ord("z") + 1, total, dtype=np.uint8)
    if spaces:
        codes[rng.integers(0, _SPACE_ONE_IN, total) == 0] = ord(" ")
    return codes.tobytes().decode("ascii")


def words(rng: np.random.Generator, max_length: int, count: int) -> list[str]:
    """``count`` strings of ``MIN_LENGTH .. max_length - 1`` characters, about one in 13 a
    space, with leading and trailing spaces trimmed (names and descriptions)."""
    lengths = MIN_LENGTH + rng.integers(0, max_length - MIN_LENGTH, count)
    text = _draw(rng, int(lengths.sum()), spaces=True)
    return [s.strip() for s in _cut(text, lengths)]


def letters(rng: np.random.Generator, lengths: IntArray) -> list[str]:
    """One string of lowercase letters of each length."""
    return _cut(_draw(rng, int(lengths.sum()), spaces=False), lengths)


def padding(rng: np.random.Generator, sizes: IntArray, average: int) -> list[str]:
    """The ``extra`` field: letters bringing records of ``sizes`` to ``average`` bytes on
    average (uniform within +-20 % of what is missing; empty when a record is already
    larger)."""
    missing = np.maximum(average - sizes, 0)
    spread = np.floor(missing * 0.2 + 0.5).astype(np.int64)
    lengths = missing - spread + rng.integers(0, np.maximum(2 * spread, 1))
    return letters(rng, lengths)


def pick(rng: np.random.Generator, choices: Sequence[str], count: int) -> list[str]:
    """``count`` values drawn uniformly from ``choices``."""
    return [choices[i] for i in rng.integers(0, len(choices), count).tolist()]
