"""Small files the job keeps beside its state: the clock log, the long-running progress
and starting offsets, the heartbeat. Each is replaced whole."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["write_atomically"]


def write_atomically(path: Path, data: bytes, *, durable: bool = False) -> None:
    """Replace ``path`` with ``data``: a reader finds the old content or the new one, never
    a part (a hidden temporary file beside it, renamed over it; the folder is made if
    missing). ``durable``: fsync before the rename, for what must survive a crash of the
    machine, not only of the process."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
