"""The settings of a join operator: inputs, condition, layout, retention and lateness,
and what follows from them (each side's reach, deadlines, expiry cut-offs, frame and
expiry-bucket lengths).
"""

from __future__ import annotations

from dataclasses import dataclass

from window_operator.join.common import LEFT, RIGHT
from window_operator.join.layouts import StoreLayout
from window_operator.kernel.checkpoint import JsonValue
from window_operator.policies import EmitPolicy

__all__ = ["MIN_FRAME_MS", "MIN_SWEEP_MS", "ROWS_FRAME_MS", "JoinSpec"]

#: Expiry buckets of key-first layouts are at least this long: each join key gets one
#: range delete per bucket, which keeps range tombstones few.
MIN_SWEEP_MS = 600_000
#: Window frames (Window Meta Store) are never shorter than this.
MIN_FRAME_MS = 1_000
#: Frame length of rows joins (their windows are in rows, frames only describe time).
ROWS_FRAME_MS = 60_000


@dataclass(frozen=True, slots=True)
class JoinSpec:
    """The settings of a join operator (all times in ms)."""

    left: str
    right: str
    on: tuple[str, ...] = ()
    kind: str = "inner"
    lo: int = 0
    hi: int = 0
    rows: int | None = None
    layout: StoreLayout = StoreLayout.TS_OFFSET
    retention: int = 3_600_000
    allowed_lateness: int = 0
    idle_timeout: int | None = None
    max_future: int | None = None
    left_topic: str | None = None
    right_topic: str | None = None

    def __post_init__(self) -> None:
        if self.left == self.right:
            raise ValueError("the two inputs need different names")
        if self.kind not in ("inner", "left", "full"):
            raise ValueError(f"kind must be inner, left or full (got {self.kind!r})")
        if self.rows is not None:
            if self.rows < 1:
                raise ValueError("rows must be >= 1")
            if self.kind != "inner":
                raise ValueError("rows joins are inner joins")
            if self.layout is not StoreLayout.FIELDS_OFFSET:
                raise ValueError("rows joins use the fields_offset layout")
        elif self.layout is StoreLayout.FIELDS_OFFSET:
            raise ValueError("the fields_offset layout is for rows joins")
        if self.lo > self.hi:
            raise ValueError("lo must not exceed hi")
        if self.retention < 0 or self.allowed_lateness < 0:
            raise ValueError("retention and allowed_lateness must be >= 0")

    @property
    def names(self) -> tuple[str, str]:
        """``(left name, right name)``."""
        return (self.left, self.right)

    @property
    def shape(self) -> dict[str, JsonValue]:
        """What the stored state depends on (a store is only continued by the same shape)."""
        return {
            "type": "join",
            "layout": self.layout.value,
            "on": list(self.on),
            "kind": self.kind,
            "lo": self.lo,
            "hi": self.hi,
            "rows": self.rows,
        }

    @property
    def inputs(self) -> tuple[str, ...]:
        """The two input topics, whose offsets the state's positions are (empty unless
        both are known)."""
        left, right = self.left_topic, self.right_topic
        return () if left is None or right is None else (left, right)

    @property
    def policy(self) -> EmitPolicy:
        """The watermark and retention settings, as the operator kernel takes them.

        Joins emit as soon as results are known: the emission settings do not apply.
        """
        return EmitPolicy(
            allowed_lateness=self.allowed_lateness,
            idle_timeout=self.idle_timeout,
            retention=self.retention,
            max_future=self.max_future,
        )

    def outer(self, side: int) -> bool:
        """Whether unmatched rows of ``side`` are emitted."""
        return self.kind == "full" or (self.kind == "left" and side == LEFT)

    def reach(self, side: int) -> tuple[int, int]:
        """``(a, b)``: a message at ``t`` of the other side matches ``side`` in ``[t+a, t+b]``."""
        if side == RIGHT:
            return (self.lo, self.hi)
        return (-self.hi, -self.lo)

    def deadline(self, side: int, ts: int) -> int:
        """Once the watermark passes this, no on-time message can match a ``side`` row."""
        return ts + self.hi if side == LEFT else ts - self.lo

    def cutoff(self, side: int, watermark: int) -> int:
        """Messages of ``side`` with ``ts`` below this have expired."""
        if self.rows is not None:
            return watermark - self.retention
        if side == LEFT:
            return watermark - self.hi - self.retention
        return watermark + self.lo - self.retention

    @property
    def frame_ms(self) -> int:
        """The length of a window frame in the Window Meta Store."""
        if self.rows is not None:
            return ROWS_FRAME_MS
        return max(self.hi - self.lo, MIN_FRAME_MS)

    @property
    def sweep_ms(self) -> int:
        """The bucket length of the per-prefix expiry index.

        Expired messages of a key-first store linger for up to one bucket; in exchange
        the index holds one entry, and expiry issues one range delete, per join key and
        bucket.
        """
        return max(MIN_SWEEP_MS, self.hi - self.lo, self.retention // 2)
