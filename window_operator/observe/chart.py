"""The demo's chart: window results over time, one line per key, late updates marked."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["ResultPoint", "latest_windows", "write_results_chart"]


@dataclass(frozen=True, slots=True)
class ResultPoint:
    """One window result as the chart needs it."""

    key: str
    window_start: int
    kind: str
    value: float
    #: the window's end (a session that grows or merges is a new window, often with the
    #: same start; a RETRACT withdraws only the window of its bounds)
    window_end: int | None = None


def latest_windows(
    points: list[ResultPoint],
) -> tuple[dict[str, dict[int, float]], dict[str, list[tuple[int, float]]]]:
    """The latest value of every window still current, per key and window start, and
    the LATE updates per key. Windows are told apart by both bounds: a session that
    grows or merges is a new window, often with the same start, and a RETRACT removes
    only the window it names (a consumer of several output partitions may read the
    result that replaced a session before or after the retraction of the old one, and
    older results of that start after newer ones)."""
    held: dict[str, dict[tuple[int, int | None], float]] = defaultdict(dict)
    late: dict[str, list[tuple[int, float]]] = defaultdict(list)
    retracted: set[tuple[str, int, int | None]] = set()
    for p in points:
        bounds = (p.window_start, p.window_end)
        if p.kind == "RETRACT":
            held[p.key].pop(bounds, None)
            retracted.add((p.key, *bounds))
            continue
        if (p.key, *bounds) in retracted:
            continue  # read after its retraction (another partition): superseded
        held[p.key][bounds] = p.value
        if p.kind == "LATE":
            late[p.key].append((p.window_start, p.value))
    latest = {k: {w: v for (w, _), v in ws.items()} for k, ws in held.items() if ws}
    return latest, late


def write_results_chart(points: list[ResultPoint], path: Path, value_name: str) -> Path:
    """Plot ``value_name`` per window start, a line per key; returns ``path``.

    The line of a key goes through the latest value of each of its windows; every LATE
    update is marked with a cross where it moved the window to.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    def when(starts: list[int]) -> Any:
        stamps = [datetime.fromtimestamp(ms / 1000, UTC) for ms in starts]
        return mdates.date2num(stamps)  # type: ignore[no-untyped-call]

    latest, late = latest_windows(points)
    fig, ax = plt.subplots(figsize=(10, 5), dpi=100)
    for key in sorted(latest):
        windows = sorted(latest[key].items())
        (line,) = ax.plot(
            when([w for w, _ in windows]), [v for _, v in windows], marker=".", label=key
        )
        if late[key]:
            ax.scatter(
                when([w for w, _ in late[key]]),
                [v for _, v in late[key]],
                marker="x",
                s=60,
                color=line.get_color(),
                zorder=3,
            )
    ax.scatter([], [], marker="x", color="black", label="LATE update")
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))  # type: ignore[no-untyped-call]
    ax.set_xlabel("window start (UTC)")
    ax.set_ylabel(value_name)
    ax.set_title(f"{value_name} per window, latest result of each window")
    ax.legend(loc="upper left", fontsize="small", ncol=2)
    ax.grid(True, alpha=0.3)
    fig.autofmt_xdate()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
