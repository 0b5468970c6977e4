"""The task stores this process has open for writing, so that a second open of one is
refused at once: RocksDB's file lock would make it wait for its own process, then blame
another one."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import Protocol

from stores.errors import StoreLockedError

__all__ = ["claim_path", "opened"]


class _Store(Protocol):
    path: Path

    @property
    def closed(self) -> bool: ...


#: Open writers by resolved path (weak: a store dropped unclosed lets go of its path).
_OPEN_STORES: weakref.WeakValueDictionary[Path, _Store] = weakref.WeakValueDictionary()
#: Paths a store of this process is opening now (it reads as closed until it is open).
_OPENING: set[Path] = set()
_OPEN_LOCK = threading.Lock()


def claim_path(store: _Store) -> None:
    """Note ``store`` as this process's writer of its path, opening it; raises
    :class:`StoreLockedError` if a store of this process has it open or is opening it. Call
    :func:`opened` once the open succeeded or failed."""
    key = store.path.resolve()
    for attempt in range(2):
        with _OPEN_LOCK:
            other = _OPEN_STORES.get(key)
            if other is None or (key not in _OPENING and other.closed):
                _OPEN_STORES[key] = store
                _OPENING.add(key)
                return
            if attempt or key in _OPENING:
                raise StoreLockedError(
                    f"the task store {store.path} is already open in this process: close "
                    "the operator (or store) that has it before opening it again"
                )
        gc.collect()  # (not under the lock) one no longer referenced, in a reference cycle


def opened(store: _Store, ok: bool) -> None:
    """The open :func:`claim_path` noted ended: ``ok``, the store holds its path until
    closed; else it lets go of it."""
    key = store.path.resolve()
    with _OPEN_LOCK:
        _OPENING.discard(key)
        if not ok and _OPEN_STORES.get(key) is store:
            del _OPEN_STORES[key]
