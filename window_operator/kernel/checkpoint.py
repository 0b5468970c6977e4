"""The task checkpoint: one versioned record, one codec, one store key.

An operator's progress is written in the same WriteBatch as the state it describes (so
state and offsets never disagree) and is the changelog's commit marker. It holds what
every operator has (the shape of the state, the input positions, the clock's event
times, wall clock and watermark, the number of flushes) plus the operator's own small
fields.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from stores.errors import StateCorruptError
from stores.rocks import ColumnFamily, TaskStore
from window_operator.errors import AFRESH, IncompatibleStateError
from window_operator.kernel.positions import InputPosition

__all__ = [
    "CHECKPOINT_KEY",
    "Checkpoint",
    "JsonValue",
    "read_checkpoint",
    "shape_change",
    "stored_state",
]

#: The checkpoint's key in the checkpoint column family.
CHECKPOINT_KEY = b"checkpoint"
_VERSION = 2

JsonValue = Any
"""A JSON-native value (the operator's own checkpoint fields)."""


@dataclass(slots=True)
class Checkpoint:
    """An operator's progress at a flush.

    ``shape`` names the state layout (window type and the settings that define it); a
    store is only ever continued by an operator of the same shape.
    """

    shape: dict[str, JsonValue]
    offsets: dict[InputPosition, int] = field(default_factory=dict)
    max_ts: dict[InputPosition, int] = field(default_factory=dict)
    watermark: int = 0
    batches: int = 0
    operator: dict[str, JsonValue] = field(default_factory=dict)
    #: the clock's wall clock (a checkpoint written before it was kept has none)
    now: int | None = None
    #: the clock's wall clock of each partition's last activity, and of its start: which
    #: partitions are idle (a checkpoint written before they were kept has neither)
    last_active: dict[InputPosition, int] = field(default_factory=dict)
    first_wall: int | None = None
    #: the input topic of each source, whose offsets the positions are (``None``: not
    #: known, as in a checkpoint of an earlier version or of an operator built without
    #: them); a field of its own, not part of ``shape``, so that an earlier version, which
    #: compares every part of a shape it keeps, still opens the state
    inputs: list[str] | None = None

    def encode(self) -> bytes:
        """The stored bytes (JSON)."""
        return orjson.dumps(
            {
                "v": _VERSION,
                "shape": self.shape,
                "offsets": [[s, p, o] for (s, p), o in sorted(self.offsets.items())],
                "max_ts": [[s, p, t] for (s, p), t in sorted(self.max_ts.items())],
                "watermark": self.watermark,
                "batches": self.batches,
                "operator": self.operator,
                "now": self.now,
                "last_active": [[s, p, t] for (s, p), t in sorted(self.last_active.items())],
                "first_wall": self.first_wall,
                "inputs": self.inputs,
            }
        )

    def moves_only_the_wall_clock(self, before: Checkpoint) -> bool:
        """Whether this checkpoint differs from ``before`` in nothing but the wall clock
        (``now``) and the flush count: what a pass that took no record, fired nothing
        and changed no timer writes (see :mod:`~window_operator.runtime.commit`)."""
        return replace(self, now=None, batches=0) == replace(before, now=None, batches=0)

    @classmethod
    def decode(cls, data: bytes, where: str = "the store") -> Checkpoint:
        """Parse stored bytes; :class:`StateCorruptError` when they are not a checkpoint."""
        try:
            doc = orjson.loads(data)
            if doc.get("v") != _VERSION:
                raise StateCorruptError(
                    f"the checkpoint in {where} has version {doc.get('v')!r}, not {_VERSION}: "
                    "it was written by another version; rebuild the state from scratch"
                )
            return cls(
                shape=dict(doc["shape"]),
                offsets={InputPosition(int(s), int(p)): int(o) for s, p, o in doc["offsets"]},
                max_ts={InputPosition(int(s), int(p)): int(t) for s, p, t in doc["max_ts"]},
                watermark=int(doc["watermark"]),
                batches=int(doc["batches"]),
                operator=dict(doc["operator"]),
                now=None if doc.get("now") is None else int(doc["now"]),
                last_active={
                    InputPosition(int(s), int(p)): int(t) for s, p, t in doc.get("last_active", ())
                },
                first_wall=None if doc.get("first_wall") is None else int(doc["first_wall"]),
                inputs=None if doc.get("inputs") is None else [str(t) for t in doc["inputs"]],
            )
        except StateCorruptError:
            raise
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
            raise StateCorruptError(f"the checkpoint in {where} does not decode: {exc}") from exc


#: Parts of a shape that checkpoints of earlier versions do not have.
_ADDED_LATER = frozenset({"aggregations"})


def read_checkpoint(
    store: TaskStore, shape: dict[str, JsonValue], inputs: Sequence[str] = ()
) -> Checkpoint | None:
    """The store's checkpoint (None for a fresh store); it must be of ``shape``, and of
    the input topics ``inputs`` where both it and the caller name them.

    A part of ``shape`` kept only since a later version (:data:`_ADDED_LATER`) is not
    compared with a checkpoint written before: the store's next checkpoint has it.
    """
    data = store.get(ColumnFamily.CHECKPOINT, CHECKPOINT_KEY)
    if data is None:
        return None
    cp = Checkpoint.decode(data, str(store.path))
    if change := shape_change(cp.shape, shape):
        raise IncompatibleStateError(
            f"the state in {store.path} was written by another job shape ({change}): its "
            f"stored {stored_state(shape)} cannot be continued. Go back to the config "
            "that wrote it, or run this config on an empty state directory (a job on "
            f"Kafka: start it afresh, with {AFRESH})"
        )
    if moved := inputs_change(cp.inputs, inputs):
        raise IncompatibleStateError(
            f"the state in {store.path} {moved}. Go back to the topics it read, or run "
            f"this config on an empty state directory (a job on Kafka: start it afresh, "
            f"with {AFRESH})"
        )
    return cp


def inputs_change(was: Sequence[str] | None, now: Sequence[str]) -> str | None:
    """How input topics ``now`` differ from those a state read (None: they do not, or
    either is not known), as ``read input topics [...], where this config reads [...]:
    its positions ...``."""
    if was is None or not now or list(was) == list(now):
        return None
    return (
        f"read input topics {orjson.dumps(list(was)).decode()}, where this config reads "
        f"{orjson.dumps(list(now)).decode()}: its positions are offsets of those topics "
        "(another topic's records below them would be taken for replays)"
    )


def stored_state(shape: Mapping[str, JsonValue]) -> str:
    """What a state of ``shape`` stores, as a refusal to continue it names it: a join
    keeps messages, every other operator accumulators."""
    return "messages" if shape.get("type") == "join" else "accumulators"


def shape_change(was: Mapping[str, JsonValue], now: Mapping[str, JsonValue]) -> str | None:
    """How state shape ``now`` differs from ``was`` (None: it can continue it), as
    ``window {...}; this config has window {...}``. A part kept only since a later
    version (:data:`_ADDED_LATER`) and missing from ``was`` is not compared."""
    keys = [k for k in {**was, **now} if k in was or k not in _ADDED_LATER]
    differ = [k for k in keys if was.get(k) != now.get(k)]
    if not differ:
        return None
    said = f"{_described(was, differ)}; this config has {_described(now, differ)}"
    aggs = was.get("aggregations"), now.get("aggregations")
    if "aggregations" in differ and all(isinstance(a, list) for a in aggs):
        if sorted(map(repr, aggs[0] or [])) == sorted(map(repr, aggs[1] or [])):
            said += " (the same operations in another order)"
    return said


#: How a refusal names the parts of a join's shape that are not config fields.
_SHOWN_AS = {
    "lo": "time condition's lower bound (ms)",
    "hi": "time condition's upper bound (ms)",
}


def _described(shape: Mapping[str, JsonValue], keys: list[str]) -> str:
    """The parts ``keys`` of ``shape``; one it lacks as ``no <part>`` (not an empty
    text)."""
    return ", ".join(
        f"{_SHOWN_AS.get(k, k)} {orjson.dumps(shape[k]).decode()}"
        if k in shape
        else f"no {_SHOWN_AS.get(k, k)}"
        for k in keys
    )
