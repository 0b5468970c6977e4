"""The driver's log of the job clock, one entry per micro-batch, in the checkpoint dir.

A state task sees only its keys of every input partition, so the watermark (the minimum
over all input partitions of their largest event time, minus the allowed lateness) is
the driver's to compute: from the map side's reports of batch ``b`` it folds the clock
that batch ``b + 1`` uses, and writes it here *before* batch ``b + 1`` runs. A replayed
batch (Spark re-runs a batch its commit log does not list) reads its entry back, so it
decides lateness and retention exactly as the first run did.

Entry ``<dir>/<batch id>.json``: the clock before the batch (max event time and last
activity per input partition, the wall clock ``now`` the batch runs at, the watermark).
An entry is *prepared* when the previous batch ends (its clock after that batch) and
*final* once its batch began at a wall clock; a final entry is never rewritten. A final
entry also keeps where the batch began reading every input partition read before it
(``starts``): the recent batches' entries go to the tasks with every batch
(:class:`~window_operator.runtime.exchange.BatchStart`), and a task whose state lost
several batches runs each again as it first ran.

``<dir>/origin.json``: the job's first offset of every input partition (the start of the
first range read of it), written when the job's first batch ends (empty if it read
nothing) and when a batch that read a partition for the first time ends (a checkpoint
begun before there was an origin gets none). A task whose state lost batches (a broker
that lost acknowledged writes) reads back from there what it never consumed.
``<dir>/ends.json``: every input partition's last range read, written when a batch
ends; a timer pass checks the states against it (the first one runs before the query
starts again), so a state that lost the last batch reads it back even when no batch
follows.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from window_operator.files import write_atomically
from window_operator.kernel import ClockState, InputPosition
from window_operator.runtime.exchange import BatchStart, InputRange

__all__ = ["ClockLog"]

_ENTRY = re.compile(r"^(\d+)\.json$")
#: Entries kept behind the newest (Spark keeps 100 batches of its own logs by default).
_KEEP = 100
_ORIGIN = "origin.json"
#: The clock log's directory in a job's checkpoint directory.
CLOCK_DIR = "window-operator-clock"
_ENDS = "ends.json"


def _encode(
    state: ClockState, final: bool, starts: Mapping[InputPosition, int] | None = None
) -> bytes:
    return orjson.dumps(
        {
            "final": final,
            "starts": None
            if starts is None
            else [[p.source, p.partition, o] for p, o in sorted(starts.items())],
            "max_ts": [[p.source, p.partition, t] for p, t in sorted(state.max_ts.items())],
            "last_active": [
                [p.source, p.partition, t] for p, t in sorted(state.last_active.items())
            ],
            "now": state.now,
            "first_wall": state.first_wall,
            "watermark": state.watermark,
        }
    )


@dataclass(frozen=True, slots=True)
class _Entry:
    """A decoded entry (``starts`` None: written before starts were kept, or prepared)."""

    state: ClockState
    final: bool
    starts: dict[InputPosition, int] | None


def _decode(data: bytes) -> _Entry:
    doc = orjson.loads(data)
    found = doc.get("starts")  # absent from entries written before starts were kept
    starts = None if found is None else {InputPosition(s, p): o for s, p, o in found}
    state = ClockState(
        max_ts={InputPosition(s, p): t for s, p, t in doc["max_ts"]},
        last_active={InputPosition(s, p): t for s, p, t in doc["last_active"]},
        now=int(doc["now"]),
        first_wall=doc["first_wall"],
        watermark=int(doc["watermark"]),
    )
    return _Entry(state, bool(doc["final"]), starts)


class ClockLog:
    """Clock entries per batch id under ``directory`` (a local or shared file system path)."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)

    def _path(self, batch_id: int) -> Path:
        return self.directory / f"{batch_id}.json"

    def read(self, batch_id: int) -> tuple[ClockState, bool] | None:
        """The entry of ``batch_id`` and whether it is final (None: no entry)."""
        found = self._read(batch_id)
        return None if found is None else (found.state, found.final)

    def _read(self, batch_id: int) -> _Entry | None:
        try:
            return _decode(self._path(batch_id).read_bytes())
        except FileNotFoundError:
            return None

    def begin(
        self,
        batch_id: int,
        now: int,
        advance: Callable[[ClockState, int], ClockState],
        starts: Mapping[InputPosition, int] | None = None,
    ) -> ClockState:
        """The clock batch ``batch_id`` runs with: its final entry, or one made final now.

        A replayed batch gets its final entry back unchanged. Otherwise the prepared entry
        (or the newest earlier one, or an empty clock) is moved to ``now`` by ``advance``
        (idle partitions may stop holding the watermark back) and written final, with
        ``starts`` (where the batch begins reading every partition read before it).
        """
        found = self.read(batch_id)
        if found is not None and found[1]:
            return found[0]
        if found is None:
            earlier = [i for i in self._ids() if i < batch_id]
            prior = self.read(max(earlier)) if earlier else None
            found = prior if prior is not None else (ClockState(), False)
        state = advance(found[0], now)
        self.write(batch_id, state, final=True, starts=starts)
        return state

    def history(self, before: int | None, most: int) -> tuple[BatchStart, ...]:
        """How the batches before ``before`` (None: every batch that began) began, oldest
        first: the newest ``most`` final entries with starts, of consecutive batches."""
        ids = set(self._ids())
        last = (max(ids, default=-1) if before is None else before - 1) + 1
        out: list[BatchStart] = []
        for batch_id in range(last - 1, last - 1 - most, -1):
            found = self._read(batch_id) if batch_id in ids else None
            if found is None or not found.final or found.starts is None:
                if out or before is not None:
                    break
                continue  # the newest entry may be a prepared one
            out.append(BatchStart(batch_id, found.state, found.starts))
        return tuple(reversed(out))

    def newest(self) -> tuple[int, ClockState, bool] | None:
        """The newest entry's batch id, clock and whether it is final (None: no entry):
        the clock a restarted driver goes on from (prepared: after the last batch or
        timer pass; final: the clock of a batch that began, which runs again unless it
        was committed)."""
        for batch_id in sorted(self._ids(), reverse=True):
            found = self._read(batch_id)
            if found is not None:
                return batch_id, found.state, found.final
        return None

    def prepare(self, batch_id: int, state: ClockState) -> None:
        """Write the clock a coming batch starts from (unless that batch already began)."""
        found = self.read(batch_id)
        if found is None or not found[1]:
            self.write(batch_id, state, final=False)

    def write(
        self,
        batch_id: int,
        state: ClockState,
        *,
        final: bool,
        starts: Mapping[InputPosition, int] | None = None,
    ) -> None:
        """Write the entry of ``batch_id`` atomically (write, fsync, rename)."""
        write_atomically(self._path(batch_id), _encode(state, final, starts), durable=True)
        for old in self._ids():
            if old < batch_id - _KEEP:
                self._path(old).unlink(missing_ok=True)

    def origin(self) -> dict[InputPosition, int] | None:
        """The job's first offset of every input partition read so far (None: never
        recorded)."""
        try:
            doc = orjson.loads((self.directory / _ORIGIN).read_bytes())
        except FileNotFoundError:
            return None
        return {InputPosition(s, p): int(o) for s, p, o in doc}

    def write_origin(self, origin: Mapping[InputPosition, int]) -> None:
        """Record ``origin`` (atomically)."""
        doc = [[p.source, p.partition, o] for p, o in sorted(origin.items())]
        write_atomically(self.directory / _ORIGIN, orjson.dumps(doc), durable=True)

    def ends(self) -> dict[InputPosition, InputRange]:
        """Every input partition's last range read (by the newest batch that read it)."""
        try:
            doc = orjson.loads((self.directory / _ENDS).read_bytes())
        except FileNotFoundError:
            return {}
        ranges = [InputRange(s, t, p, a, b) for s, t, p, a, b in doc]
        return {r.position: r for r in ranges}

    def write_ends(self, ends: Mapping[InputPosition, InputRange]) -> None:
        """Record ``ends`` (atomically)."""
        doc = [[r.source, r.topic, r.partition, r.start, r.end] for _, r in sorted(ends.items())]
        write_atomically(self.directory / _ENDS, orjson.dumps(doc), durable=True)

    def _ids(self) -> list[int]:
        if not self.directory.is_dir():
            return []
        return [int(m.group(1)) for f in os.listdir(self.directory) if (m := _ENTRY.match(f))]
