"""Synthetic click streams with out-of-order and late events (demo, tests, benchmarks)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["ClickStream", "click_stream"]


@dataclass(frozen=True, slots=True)
class ClickStream:
    """Columns of a click stream, in arrival order."""

    keys: list[str]
    ts: npt.NDArray[np.int64]
    latency_ms: npt.NDArray[np.float64]

    def __len__(self) -> int:
        return len(self.keys)

    def records(self) -> list[dict[str, object]]:
        """The events as JSON-ready dicts ``{"page", "ts", "latency_ms"}``."""
        ts = self.ts.tolist()
        lat = self.latency_ms.tolist()
        return [{"page": k, "ts": ts[i], "latency_ms": lat[i]} for i, k in enumerate(self.keys)]


def click_stream(
    n: int,
    *,
    n_keys: int = 100,
    start_ms: int = 1_700_000_000_000,
    events_per_second: float = 10_000.0,
    out_of_order: float = 0.1,
    max_delay_ms: int = 10_000,
    seed: int = 0,
) -> ClickStream:
    """``n`` click events: event time advances at ``events_per_second``.

    A fraction ``out_of_order`` of events arrive late, their event time pushed back by
    up to ``max_delay_ms`` (so with a smaller allowed lateness some of them are late).
    Keys are ``/page/<i>`` with a skewed (Zipf-like) popularity.
    """
    rng = np.random.default_rng(seed)
    ts = start_ms + (np.arange(n, dtype=np.float64) * (1000.0 / events_per_second)).astype(np.int64)
    delayed = rng.random(n) < out_of_order
    ts[delayed] -= rng.integers(1, max_delay_ms + 1, size=int(delayed.sum()))
    weights = 1.0 / np.arange(1, n_keys + 1) ** 0.8
    weights /= weights.sum()
    key_idx = rng.choice(n_keys, size=n, p=weights)
    names = [f"/page/{i}" for i in range(n_keys)]
    keys = [names[i] for i in key_idx.tolist()]
    latency = np.round(rng.lognormal(mean=3.5, sigma=0.6, size=n), 1)
    return ClickStream(keys=keys, ts=ts, latency_ms=latency)
