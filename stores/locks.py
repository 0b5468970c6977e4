"""The task stores this process has open for writing, so that a second open of one is
refused at once: RocksDB's file lock would make it wait for its own process, then blame
another one."""

from __future__ import annotations

import gc
import threading
import weakref
from pathlib import Path
from typing import Protocol

__all__ = ["claim_path"]


class _Store(Protocol):
    path: Path

    @property
    def closed(self) -> bool: ...


#: Open writers by resolved path (weak: a store dropped unclosed lets go of its path).
_OPEN_STORES: weakref.WeakValueDictionary[Path, _Store] = weakref.WeakValueDictionary()
_OPEN_LOCK = threading.Lock()


def claim_path(store: _Store, locked: type[Exception]) -> None:
    """Note ``store`` as this process's writer of its path; raises ``locked`` if an
    open store of this process has it."""
    key = store.path.resolve()
    with _OPEN_LOCK:
        other = _OPEN_STORES.get(key)
        if other is not None and not other.closed:
            gc.collect()  # one no longer referenced, waiting in a reference cycle
            other = _OPEN_STORES.get(key)
        if other is not None and not other.closed:
            raise locked(
                f"the task store {store.path} is already open in this process: close "
                "the operator (or store) that has it before opening it again"
            )
        _OPEN_STORES[key] = store
