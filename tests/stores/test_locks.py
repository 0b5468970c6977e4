"""The registry of the stores this process has open for writing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from stores.errors import StoreLockedError
from stores.locks import claim_path, opened


@dataclass
class FakeStore:
    path: Path
    closed: bool = True  # as a TaskStore reads while it opens


def test_a_path_being_opened_is_refused_and_a_failed_open_lets_go(tmp_path: Path) -> None:
    """Two threads opening one path at once: the second is refused at once (before, it
    got past, waited the whole lock wait, and then the registry named the wrong store)."""
    first = FakeStore(tmp_path / "t")
    claim_path(first)
    with pytest.raises(StoreLockedError, match="already open in this process"):
        claim_path(FakeStore(tmp_path / "t"))  # still opening
    opened(first, ok=False)  # its open failed: the path is free
    second = FakeStore(tmp_path / "t")
    claim_path(second)
    opened(second, ok=True)
    second.closed = False
    with pytest.raises(StoreLockedError):
        claim_path(FakeStore(tmp_path / "." / "t"))  # open: refused
    second.closed = True
    third = FakeStore(tmp_path / "t")
    claim_path(third)  # closed: free again
    opened(third, ok=True)
