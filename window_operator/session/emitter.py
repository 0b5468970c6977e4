"""Result batches of sessions: RETRACTs of superseded identities, then the results.

A result is identified by ``(key, window_start, window_end)`` (and the partition, for
tuple sessions, whose bounds are that partition's offsets). A session emitted under
bounds that differ from an identity emitted for it (or for the sessions merged into it)
before is preceded, in the same step, by a RETRACT with empty ``values`` for each such
identity, carrying the ``update_seq`` of the result that replaces it. Within a step
results are ordered by ``(window_end, window_start, key hash)``.
"""

from __future__ import annotations

import numpy as np

from window_operator.arrays import IntArray
from window_operator.kernel import OutputBuffer
from window_operator.results import Kind, ResultBatch
from window_operator.session.cache import SessionCache
from window_operator.session.trigger import SessionTrigger

__all__ = ["SessionEmitter"]


class SessionEmitter:
    """Emits cached sessions (reads the cache; records the emission through it)."""

    def __init__(
        self, cache: SessionCache, trigger: SessionTrigger, outputs: OutputBuffer[ResultBatch]
    ) -> None:
        self.cache = cache
        self.trigger = trigger
        self.outputs = outputs

    def emit(self, kind: Kind, slots: IntArray, *, dirty: bool = True) -> None:
        """Emit the sessions in ``slots`` as ``kind`` (RETRACTs first, see module doc).

        ``dirty``: the emission must be written back (an ON_TIME firing need not be).
        """
        cache, trigger = self.cache, self.trigger
        sl, keys = cache.slots, cache.keys
        kids = sl.kid[slots]
        starts = sl.start[slots]
        ends = sl.last[slots] + trigger.pad
        order = trigger.emission_order(keys.code[kids], starts, ends)
        slots, kids, starts, ends = slots[order], kids[order], starts[order], ends[order]
        seqs = sl.seq[slots].copy()
        stale = trigger.stale(sl.emitted[slots], sl.em_start[slots], sl.em_end[slots], starts, ends)
        if sl.extra:
            stale |= np.isin(slots, list(sl.extra))
        names = keys.name
        r_kids: list[int] = []
        r_keys: list[str] = []
        r_start: list[int] = []
        r_end: list[int] = []
        r_seq: list[int] = []
        retracted: list[int] = []
        for j in np.flatnonzero(stale).tolist():
            s = int(slots[j])
            for a, b in trigger.retracted(sl.emitted_bounds(s), int(starts[j]), int(ends[j])):
                r_kids.append(int(kids[j]))
                r_keys.append(names[int(kids[j])])
                r_start.append(a)
                r_end.append(b)
                r_seq.append(int(seqs[j]))
            retracted.append(s)
        if r_keys:
            self.outputs.emit(
                ResultBatch(
                    kind=Kind.RETRACT,
                    keys=r_keys,
                    window_start=np.asarray(r_start, dtype=np.int64),
                    window_end=np.asarray(r_end, dtype=np.int64),
                    update_seq=np.asarray(r_seq, dtype=np.int64),
                    values={},
                    partition=self._partitions(np.asarray(r_kids, dtype=np.int64)),
                )
            )
        self.outputs.emit(
            ResultBatch(
                kind=kind,
                keys=[names[k] for k in kids.tolist()],
                window_start=starts.copy(),
                window_end=ends,
                update_seq=seqs,
                values=cache.aggs.finish(sl.acc[slots], cache.objs_of(slots)),
                partition=self._partitions(kids),
            )
        )
        cache.emitted(slots, starts, ends, retracted, dirty)

    def _partitions(self, kids: IntArray) -> IntArray | None:
        """The partition of each session key (tuple sessions; ``None`` for time sessions)."""
        keys = self.cache.keys
        return keys.part_arr[kids] if keys.per_partition else None
